import CFprepSys
import FoundationEssentials
import FprepGit
import Glibc

/// What `fprep revert` did, or would do with `--dry-run`.
public struct RevertReport: Sendable, Encodable {
    /// Items put back to the anchor's version (dataless), or removed when
    /// the anchor does not have them.
    public var reverted: [String] = []
    /// Local content that was discarded, stored nowhere else (`--force`).
    public var discarded: [String] = []
    /// Items left as they were, with why (a program had them open, or
    /// wrote into them meanwhile); non-empty means exit status 2.
    public var refused: [Skipped] = []
    /// Bytes a program wrote while the item was put back, kept as a copy.
    public var keptAsCopies: [String] = []
}

/// Local changes under the paths asked, with the content they would lose.
public struct RevertRefusal: Error, Sendable {
    /// Items whose local content is stored nowhere else.
    public let wouldLose: [String]
}

extension Replica {
    /// Discards the local changes under `userPaths`: each item goes back to
    /// the anchor's version as a placeholder (its content comes again on
    /// access or `materialize`), and what the anchor does not have goes.
    /// Content stored nowhere else (not in the object store: an edit, a new
    /// file, bytes written into a placeholder) is discarded only with
    /// `force`; without it nothing changes and `RevertRefusal` names it.
    ///
    /// The index changes first, then the disk (through `SafeReplace`, so a
    /// program that writes an item meanwhile keeps its bytes as a copy): a
    /// crash in between leaves entries that say "placeholder" over the
    /// user's bytes, which the next sync keeps as a conflict copy, as it
    /// keeps any bytes written into a placeholder. Nothing is lost either
    /// way, and no zeros are ever taken for content.
    public func revert(_ userPaths: [String], relativeTo directory: String, force: Bool, dryRun: Bool) throws -> RevertReport {
        let asked = try userPaths.map { try itemPath(for: $0, relativeTo: directory) }
        let index = try repository.index()
        let scan = try LocalScanner(replica: self, index: index).scan()
        func wanted(_ path: RepoPath) -> Bool { asked.contains { path == $0 || path.isWithin($0) || $0.isRoot } }

        // The paths to put back (the anchor has them) and to remove (it
        // does not), from the changes under what was asked; a move is both.
        let tree = try anchor.map { try repository.commit($0).treeID }
        let atAnchor = tree.map { TreeLookup(repository: repository, tree: $0) }
        var touched: [RepoPath] = []
        for change in scan.changes {
            let path = RepoPath(identifier: change.path)
            let from = change.from.map { RepoPath(identifier: $0) }
            guard wanted(path) || from.map(wanted) == true else { continue }
            touched.append(path)
            if let from { touched.append(from) }
        }
        guard !touched.isEmpty else {
            // The whole replica ('.') is always there, with nothing to put back.
            for path in asked where try !path.isRoot && atAnchor?.entry(at: path) == nil && rootFolder.stat(path) == nil {
                throw FprepError(.usage, "'\(path)' is not in the replica")
            }
            return RevertReport()
        }
        touched = Array(Set(touched)).sorted { $0.bytes.lexicographicallyPrecedes($1.bytes) }

        // What would be lost: content on disk that neither the store nor
        // the anchor has (a moved or copied file's content is the anchor's
        // at another path; materialized content need not be in the store).
        let odb = try repository.objectDatabase()
        var knownBlobs: Set<ObjectID>?
        func anchorBlobs() -> Set<ObjectID> {
            if let knownBlobs { return knownBlobs }
            var ids = Set<ObjectID>()
            for i in 0..<index.count { if let entry = index.entry(at: i) { ids.insert(entry.id) } }
            knownBlobs = ids
            return ids
        }
        var lossy: [RepoPath] = []
        var onDisk: [RepoPath: FileStat] = [:]
        for path in touched {
            guard let stat = rootFolder.stat(path) else { continue }
            onDisk[path] = stat
            if stat.isDirectory { continue }
            let target = try atAnchor?.entry(at: path)
            if let target, let entry = index.entry(path: path.bytes), entry.skipWorktree, entry.id == target.id,
               StateClassifier(root: rootFolder, index: index).holdsNoUserBytes(entry, stat: stat) { continue }
            let bytes: [UInt8]?
            if stat.isSymlink { bytes = try? rootFolder.readLink(path) }
            else if stat.isRegular { bytes = try? rootFolder.readFile(path) }
            else { bytes = nil }
            guard let bytes, let id = try? bytes.withUnsafeBytes({ try ObjectDatabase.blobID(of: $0) }) else { continue }
            if id == target?.id || odb.contains(id) || anchorBlobs().contains(id) { continue }
            lossy.append(path)
        }
        if !lossy.isEmpty && !force { throw RevertRefusal(wouldLose: lossy.map(\.description)) }

        var report = RevertReport()
        report.discarded = lossy.map(\.description)
        if dryRun {
            report.reverted = touched.map(\.description)
            return report
        }

        let sizes = try store.blobInfoLookup()
        let token = ContentOperations.newToken()
        let journal = ContentJournal(token: token, paths: touched.map { Data($0.bytes) })
        let operation = try store.beginOperation("revert", payload: journal.encoded())

        // 1. The index: every touched path as the anchor has it.
        var restore: [(RepoPath, TreeEntry, BlobInfo?)] = []
        var previous: [RepoPath: IndexEntry] = [:]
        for path in touched {
            previous[path] = index.entry(path: path.bytes)
            if let target = try atAnchor?.entry(at: path), target.mode.isFile || target.mode == .symlink {
                let info = try sizes(target.id)
                restore.append((path, target, info))
                if target.mode == .symlink {
                    try index.add(IndexEntry(path: path.bytes, id: target.id, mode: target.mode.raw, stat: StatData(), skipWorktree: false))
                } else {
                    try index.add(IndexEntry(path: path.bytes, id: target.id, mode: target.mode.raw,
                                             stat: .placeholder(size: info?.size ?? 0, mtime: info?.mtime ?? 0), skipWorktree: true))
                }
            } else if index.entry(path: path.bytes) != nil {
                try index.remove(path: path.bytes)
            }
        }
        try index.write()

        // 2. The disk: what the anchor does not have goes (deepest first,
        //    folders it emptied too), then the anchor's items come back.
        for path in touched.reversed() where try atAnchor?.entry(at: path) == nil {
            // A folder goes with its last item (`removeEmptiedFolders`).
            guard let stat = onDisk[path], !stat.isDirectory else { continue }
            if try remove(path, stat, token: token, report: &report) { report.reverted.append(path.description) }
        }
        for path in touched.reversed() { try removeEmptiedFolders(above: path, atAnchor: atAnchor) }
        for (path, target, info) in restore {
            if try putBack(path, target, info, stat: rootFolder.stat(path), token: token, report: &report) {
                report.reverted.append(path.description)
            }
        }
        // An item a program held keeps its entry: it was not put back.
        if !report.refused.isEmpty {
            for refused in report.refused {
                let path = RepoPath(identifier: refused.path)
                if let entry = previous[path] { try index.add(entry) } else { try index.remove(path: path.bytes) }
            }
            try index.write()
        }
        try store.endOperation(operation)
        report.reverted = Array(Set(report.reverted)).sorted()
        return report
    }

    /// Removes the item at `path` (a file or symlink the anchor does not
    /// have there); false when a program held it (reported).
    private func remove(_ path: RepoPath, _ stat: FileStat, token: String, report: inout RevertReport) throws -> Bool {
        let folder = try rootFolder.folder(path.parent)
        guard stat.isRegular else {
            if stat.isSymlink { unlinkat(folder.fd, cPath(path.name), 0) }
            return stat.isSymlink
        }
        let replacement = SafeReplace(folder: folder, name: path.name, temporary: ContentOperations.temporaryName(for: path.name, token: token),
                                      shown: path.description, expectsDataless: false, removing: true)
        switch try replacement.run(isUnchanged: { $0.sameWrites(as: stat) }) {
        case .replaced(let kept):
            if let kept { report.keptAsCopies.append(path.parent.appending(kept).description) }
            return true
        case .refused(let why):
            report.refused.append(Skipped(path: path.description, reason: why))
            return false
        }
    }

    /// Removes the folders above `path` that the anchor does not have and
    /// that are empty now.
    private func removeEmptiedFolders(above path: RepoPath, atAnchor: TreeLookup?) throws {
        var folder = path
        while !folder.isRoot {
            if let stat = rootFolder.stat(folder), stat.isDirectory, try atAnchor?.entry(at: folder)?.mode != .tree,
               let parent = try? rootFolder.folder(folder.parent) {
                guard unlinkat(parent.fd, cPath(folder.name), AT_REMOVEDIR) == 0 else { return }
            }
            folder = folder.parent
        }
    }

    /// Puts the anchor's version of `path` in place: a placeholder (or the
    /// symlink), swapped for what stands there; false when a program held
    /// it (reported).
    private func putBack(_ path: RepoPath, _ target: TreeEntry, _ info: BlobInfo?, stat: FileStat?, token: String,
                         report: inout RevertReport) throws -> Bool {
        let folder = try rootFolder.makeFolder(path.parent)
        let temporary = ContentOperations.temporaryName(for: path.name, token: token)
        if target.mode == .symlink {
            let link = try repository.blob(target.id).withContent { Array($0) }
            guard symlinkat(cPath(link), folder.fd, cPath(temporary)) == 0 else { throw SystemError("symlink", path.description) }
        } else {
            let created = target.id.bytes.withUnsafeBufferPointer { id in
                fprep_create_placeholder(folder.fd, cPath(temporary), target.mode == .executable ? 0o777 : 0o666,
                                         off_t(max(info?.size ?? 0, 0)), id.baseAddress, id.count, info?.mtime ?? 0, 0, nil)
            }
            guard created == 0 else { throw SystemError("create placeholder", path.description) }
            letAgentWatch([WatchedPlaceholder(path: path, blob: target.id, markAt: path.parent.appending(temporary))])
            if info == nil { try store.setMeta(UnknownSizes.pendingKey, "1") }
        }
        guard let stat else {
            guard fprep_rename_noreplace(folder.fd, cPath(temporary), cPath(path.name)) == 0 else {
                let code = errno
                unlinkat(folder.fd, cPath(temporary), 0)
                throw SystemError("put back", path.description, code)
            }
            return true
        }
        if stat.isSymlink {
            // A symlink holds no bytes of a program's: exchanged, the old one goes.
            guard fprep_rename_exchange(folder.fd, cPath(temporary), cPath(path.name)) == 0 else { throw SystemError("put back", path.description) }
            unlinkat(folder.fd, cPath(temporary), 0)
            return true
        }
        let replacement = SafeReplace(folder: folder, name: path.name, temporary: temporary, shown: path.description, expectsDataless: false)
        switch try replacement.run(isUnchanged: { $0.sameWrites(as: stat) }) {
        case .replaced(let kept):
            if let kept { report.keptAsCopies.append(path.parent.appending(kept).description) }
            return true
        case .refused(let why):
            unlinkat(folder.fd, cPath(temporary), 0)
            report.refused.append(Skipped(path: path.description, reason: why))
            return false
        }
    }
}
