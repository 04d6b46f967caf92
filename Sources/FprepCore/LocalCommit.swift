import FoundationEssentials
import FprepGit
import Glibc

/// Turns the local changes into a commit on top of the replica's anchor:
/// each changed file's content becomes a blob, the anchor's tree is edited
/// along the changed paths only, and the index takes the new entries, so
/// the files count as clean again.
struct LocalCommitter {
    let replica: Replica

    /// The commit made, and the changes it holds; nil when nothing changed.
    func commit(_ scan: LocalChangeSet, index: Index) throws -> (ObjectID, [LocalChange])? {
        guard !scan.isEmpty, let anchor = replica.anchor else { return nil }
        let repository = replica.repository
        let baseTree = try repository.commit(anchor).treeID
        var edits: [[UInt8]: TreeEditor.Edit] = [:]
        var entries: [IndexEntry] = []
        var sizes: [(ObjectID, BlobInfo)] = []
        let now = Int64(Date().timeIntervalSince1970)
        for path in scan.removed { edits[path.bytes] = .remove }
        for write in scan.written {
            guard let stat = replica.rootFolder.stat(write.path) else { continue }  // gone again since the scan
            let id: ObjectID
            if let known = write.id, write.placeholder || (try? repository.objectDatabase().contains(known)) == true {
                id = known
            } else if stat.isSymlink {
                id = try replica.rootFolder.readLink(write.path).withUnsafeBytes { try repository.writeBlob($0) }
            } else {
                id = try replica.rootFolder.readFile(write.path).withUnsafeBytes { try repository.writeBlob($0) }
            }
            edits[write.path.bytes] = .put(id, write.mode)
            if !write.placeholder { sizes.append((id, BlobInfo(size: stat.size, mtime: stat.mtime.0))) }
            // The index takes what is on disk now, so the file is clean; a
            // moved placeholder stays a placeholder.
            let recorded = write.placeholder ? StatData.placeholder(size: stat.size, mtime: stat.mtime.0) : StatData(stat)
            entries.append(IndexEntry(path: write.path.bytes, id: id, mode: write.mode.raw, stat: recorded,
                                      skipWorktree: write.placeholder))
        }
        let tree = try TreeEditor(repository).apply(edits, to: baseTree)
        guard tree != baseTree else { return nil }
        let identity = Identity.current()
        let signature = Signature(name: identity.name, email: identity.email, time: now)
        let summary = scan.changes.prefix(20).map { "\($0.kind.rawValue) \($0.from.map { "\($0) -> " } ?? "")\($0.path)" }
        let more = scan.changes.count > 20 ? ["… and \(scan.changes.count - 20) more"] : []
        let message = "fprep: \(scan.changes.count) local change\(scan.changes.count == 1 ? "" : "s") from \(DeviceName.current)\n\n"
            + (summary + more).joined(separator: "\n") + "\n"
        let commit = try repository.writeCommit(tree: tree, parents: [anchor], message: message,
                                                author: signature, committer: signature)
        // The commit is the anchor from here on, recorded before the index
        // says the files are clean: a crash in between finds the changes
        // again and commits nothing new (same tree), never loses them.
        try repository.setReference("refs/heads/" + replica.branch, to: commit, message: "fprep: local changes")
        let deletedHere = scan.changes.filter { $0.kind == .deleted }.compactMap { change -> TrashRecord? in
            let path = RepoPath(identifier: change.path)
            guard let entry = index.entry(path: path.bytes) else { return nil }
            return TrashRecord(path: path, blob: entry.id, mode: entry.mode, deletedAt: now, anchor: commit.hex)
        }
        try replica.store.transaction {
            try replica.store.setMeta("anchor", commit.hex)
            try replica.store.setMeta("unpushed", commit.hex)
            try replica.store.recordBlobInfo(sizes)
            try replica.store.recordTrash(deletedHere)
            // A moved item keeps its tags and favorites, here and, through
            // the shared log, on every device.
            for change in scan.changes where change.kind == .moved {
                guard let from = change.from else { continue }
                let old = RepoPath(identifier: from), new = RepoPath(identifier: change.path)
                let carriesMetadata = try replica.store.hasSharedMetadata(atOrUnder: old)
                try replica.store.moveRecords(from: old, to: new)
                if carriesMetadata {
                    try SharedMetadata.record(MetadataOperation(kind: .move, path: from, name: nil, to: change.path,
                                                                time: now, device: DeviceName.current), in: replica.store)
                }
            }
        }
        replica.anchor = commit
        for path in scan.removed { try? index.remove(path: path.bytes) }
        for entry in entries { try index.add(entry) }
        try index.write()
        return (commit, scan.changes)
    }
}

/// The name this device goes by in conflict copies: `fprep.device` of the
/// replica's git config, else the host name.
enum DeviceName {
    static var current: String {
        var buffer = [CChar](repeating: 0, count: 256)
        let host = gethostname(&buffer, buffer.count) == 0
            ? String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "device"
        return host.isEmpty ? "device" : host
    }
}
