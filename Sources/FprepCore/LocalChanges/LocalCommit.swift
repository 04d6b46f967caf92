import CFprepSys
import FoundationEssentials
import FprepGit
import Glibc

/// Turns the local changes into a commit on top of the replica's anchor:
/// each changed file's content becomes a blob, the anchor's tree is edited
/// along the changed paths only, and the index takes the new entries, so
/// the files count as clean again.
struct LocalCommitter {
    let replica: Replica

    /// What a local commit did.
    struct Committed {
        /// The commit made; nil when the tree already held every change (a
        /// run after a crash between the commit and the index).
        let commit: ObjectID?
        let changes: [LocalChange]
        /// Bytes written into placeholders, kept as conflict copies.
        let conflicts: [Conflict]
    }

    /// The commit made, and the changes it holds; nil when nothing changed.
    func commit(_ scan: LocalChangeSet, index: Index) throws -> Committed? {
        guard !scan.isEmpty else { return nil }
        let repository = replica.repository
        // A replica of an empty remote has no anchor yet: its first commit
        // starts the branch.
        let anchor = replica.anchor
        let baseTree = try anchor.map { try repository.commit($0).treeID }
        let lookup = baseTree.map { TreeLookup(repository: repository, tree: $0) }
        var takenNames = Set<RepoPath>()
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
                // Maybe written loose by git (`git add`), unflushed.
                if !write.placeholder { repository.noteForFlush(known) }
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
        // Bytes written into placeholders go beside them, as conflict
        // copies; the names keep the remote's versions.
        var copies: [WrittenPlaceholder] = []
        for entry in scan.writtenPlaceholders {
            guard let copy = try WrittenPlaceholder.capture(entry, replica: replica, inTree: { try lookup?.entry(at: $0) },
                                                            taken: &takenNames) else { continue }
            edits[copy.copy.bytes] = .put(copy.blob, copy.mode)
            sizes.append((copy.blob, BlobInfo(size: copy.stat.size, mtime: copy.stat.mtime.0)))
            copies.append(copy)
        }
        let tree = try TreeEditor(repository).apply(edits, to: baseTree)
        guard tree != baseTree else {
            // The anchor already holds these changes (a commit whose index
            // a crash did not write): only the disk and the index follow.
            for path in scan.removed { try? index.remove(path: path.bytes) }
            for entry in entries { try index.add(entry) }
            try settle(copies, index: index)
            try index.write()
            return nil
        }
        let identity = Identity.current()
        let signature = Signature(name: identity.name, email: identity.email, time: now)
        let summary = scan.changes.prefix(20).map { "\($0.kind.rawValue) \($0.from.map { "\($0) -> " } ?? "")\($0.path)" }
        let more = scan.changes.count > 20 ? ["… and \(scan.changes.count - 20) more"] : []
        let message = "fprep: \(scan.changes.count) local change\(scan.changes.count == 1 ? "" : "s") from \(DeviceName.current)\n\n"
            + (summary + more).joined(separator: "\n") + "\n"
        let commit = try repository.writeCommit(tree: tree, parents: anchor.map { [$0] } ?? [], message: message,
                                                author: signature, committer: signature)
        // Its objects (and the blobs of the changes) durable before the store names it.
        try replica.flushWrittenObjects()
        Trace.mark("commit objects durable")
        // The commit is the anchor from here on, recorded before the index
        // says the files are clean: a crash in between finds the changes
        // again and commits nothing new (same tree), never loses them. The
        // store's anchor moves before the branch: a branch ahead of the
        // anchor is commits made with git (see GitNeighbour), which this
        // commit must never pass for.
        let deletedHere = scan.changes.filter { $0.kind == .deleted }.compactMap { change -> TrashRecord? in
            let path = RepoPath(identifier: change.path)
            guard let entry = index.entry(path: path.bytes) else { return nil }
            return TrashRecord(path: path, blob: entry.id, mode: entry.mode, deletedAt: now, anchor: commit.hex)
        }
        try replica.store.transaction {
            try replica.store.setMeta("anchor", commit.hex)
            try replica.store.setMeta(Replica.unpushedKey, commit.hex)
            // Until the index below is written it describes the old anchor:
            // a crash meanwhile has the next sync realign it (GitNeighbour).
            try replica.store.setMeta(Replica.indexBehindKey, "1")
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
        try repository.setReference("refs/heads/" + replica.branch, to: commit, message: "fprep: local changes")
        for path in scan.removed { try? index.remove(path: path.bytes) }
        for entry in entries { try index.add(entry) }
        let conflicts = try settle(copies, index: index)
        try index.write()
        try replica.store.setMeta(Replica.indexBehindKey, "")
        return Committed(commit: commit, changes: scan.changes, conflicts: conflicts)
    }

    /// Puts the written placeholders' bytes at their copies' names and the
    /// placeholders back, and records both in the index and the store.
    @discardableResult
    private func settle(_ copies: [WrittenPlaceholder], index: Index) throws -> [Conflict] {
        guard !copies.isEmpty else { return [] }
        let sizes = try replica.store.blobInfoLookup()
        var conflicts: [Conflict] = []
        var materialized: [(RepoPath, ObjectID)] = []
        // Journaled like a materialize: a crash leaves at most a temporary
        // placeholder beside a name, which the next command removes (and
        // finishes a placeholder already put back).
        let journal = ContentJournal(token: ContentOperations.newToken(), paths: copies.map { Data($0.path.bytes) })
        let operation = try replica.store.beginOperation("conflict-copy", payload: journal.encoded())
        for copy in copies {
            let size = try sizes(copy.entry.id)?.size ?? Int64(copy.entry.stat.fileSize)
            guard try copy.settleOnDisk(replica, size: size, token: journal.token) else { continue }
            var placeholder = copy.entry
            placeholder.stat = .placeholder(size: size, mtime: Int64(copy.entry.stat.mtimeSeconds))
            try index.add(placeholder)
            try index.add(copy.copyEntry)
            materialized.append((copy.copy, copy.blob))
            conflicts.append(Conflict(path: copy.path.description, copy: copy.copy.description,
                                      reason: "written while dataless (its content was not on disk)"))
        }
        // The copies and the placeholders put back, durable before the index says so.
        var durable = DurableChanges(changes: copies.count * 2)
        for copy in copies {
            durable.put(copy.path)
            durable.put(copy.copy)
        }
        try durable.flush(root: replica.rootFolder, shown: replica.root)
        try replica.store.transaction {
            try replica.store.recordMaterialized(materialized, at: Int64(Date().timeIntervalSince1970))
            try replica.store.endOperation(operation)
        }
        return conflicts
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
