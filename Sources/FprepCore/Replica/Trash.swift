import CFprepSys
import FoundationEssentials
import FprepGit
import Glibc

/// An item deleted recently, locally or on the remote.
public struct TrashItem: Sendable, Encodable {
    public let identifier: String
    public let contentVersion: String
    public let kind: String
    public let size: Int64?
    /// When it was deleted (the commit's date, or now for a local deletion not synced yet).
    public let deleted: String
    /// The commit that deleted it; nil for a local deletion not synced yet.
    public let commit: String?
    /// Its git mode (a restore brings the execute bit back).
    let mode: UInt32

    private enum CodingKeys: String, CodingKey {
        case identifier, contentVersion, kind, size, deleted, commit
    }
}

extension Replica {
    /// Items deleted in the last `days` days: by commits in the replica's
    /// history (its own synced deletions and the remote's), and local
    /// deletions not synced yet. An item that exists again is not listed.
    public func trash(days: Int = 30) throws -> [TrashItem] {
        let since = Int64(Date().timeIntervalSince1970) - Int64(days) * 24 * 3600
        let sizes = try store.blobInfoLookup()
        var found: [RepoPath: TrashItem] = [:]
        let index = try repository.index()
        // Local deletions not synced yet.
        for change in try LocalScanner(replica: self, index: index).scan().changes where change.kind == .deleted {
            let path = RepoPath(identifier: change.path)
            guard let entry = index.entry(path: path.bytes) else { continue }
            found[path] = TrashItem(identifier: change.path, contentVersion: entry.id.hex,
                                    kind: FileMode(raw: entry.mode) == .symlink ? "symlink" : "file",
                                    size: try sizes(entry.id)?.size, deleted: Self.isoDate(Int64(Date().timeIntervalSince1970)), commit: nil,
                                    mode: entry.mode)
        }
        // Deletions in history, newest first, back to the window's start.
        guard let anchor else { return found.values.sorted { $0.identifier < $1.identifier } }
        let current = try repository.commit(anchor).treeID
        var queue = [anchor]
        var seen = Set<ObjectID>()
        while let id = queue.popLast() {
            guard seen.insert(id).inserted else { continue }
            let commit = try repository.commit(id)
            guard commit.time >= since else { continue }
            let parents = commit.parentIDs
            queue += parents
            guard let parent = parents.first else { continue }
            let changes = try ChangeSet.between(repository, from: try repository.commit(parent).treeID, to: commit.treeID)
            for (path, old) in changes.deleted where found[path] == nil || found[path]?.commit != nil {
                if let existing = found[path], existing.deleted >= Self.isoDate(commit.time) { continue }
                found[path] = TrashItem(identifier: path.description, contentVersion: old.id.hex,
                                        kind: old.mode == .symlink ? "symlink" : "file", size: try sizes(old.id)?.size,
                                        deleted: Self.isoDate(commit.time), commit: id.hex, mode: old.mode.raw)
            }
        }
        // Not what exists again: at the anchor, or on disk (restored, not
        // synced yet).
        let atAnchor = TreeLookup(repository: repository, tree: current)
        return try found.values.filter { item in
            let path = RepoPath(identifier: item.identifier)
            return try item.commit == nil || (atAnchor.entry(at: path) == nil && rootFolder.stat(path) == nil)
        }.sorted { $0.identifier < $1.identifier }
    }

    /// Brings deleted items back as files (content from the object store,
    /// or fetched); the next sync commits them like any new file. A folder
    /// brings back every deleted item the trash lists under it.
    public func restore(_ userPath: String, relativeTo directory: String) throws -> [String] {
        let path = try itemPath(for: userPath, relativeTo: directory)
        let items = try trash().filter { item in
            let itemPath = RepoPath(identifier: item.identifier)
            return itemPath == path || itemPath.isWithin(path) || path.isRoot
        }
        guard !items.isEmpty else { throw FprepError(.usage, "'\(userPath)' is not in the trash (see 'fprep trash')") }
        var restored: [String] = []
        for item in items {
            let itemPath = RepoPath(identifier: item.identifier)
            guard let id = ObjectID(hex: item.contentVersion) else { continue }
            guard rootFolder.stat(itemPath) == nil else {
                throw FprepError(.usage, "'\(itemPath)' exists; move it away first to restore the deleted version")
            }
            try bringBack(itemPath, id: id, mode: FileMode(raw: item.mode), over: nil)
            restored.append(root + "/" + itemPath.description)
        }
        return restored
    }

    /// Brings the version of `userPath` that `commit` (a commit id or a
    /// unique prefix of one) has back to its name, as a local change the
    /// next sync commits. What stands there now is replaced only when its
    /// content is stored elsewhere (a placeholder, or the anchor's version):
    /// local changes are never overwritten.
    public func restore(_ userPath: String, relativeTo directory: String, version: String) throws -> String {
        let path = try itemPath(for: userPath, relativeTo: directory)
        let commitID: ObjectID?
        do {
            commitID = try repository.commitID(prefix: version)
        } catch let error as GitError where error.code == .ambiguous {
            throw FprepError(.usage, "'\(version)' names more than one commit; give more of its digits (see 'fprep versions \(userPath)')")
        }
        guard let commitID else {
            throw FprepError(.usage, "no commit '\(version)' in this replica's history (see 'fprep versions \(userPath)')")
        }
        guard let entry = try TreeLookup(repository: repository, tree: repository.commit(commitID).treeID).entry(at: path),
              entry.mode.isFile || entry.mode == .symlink else {
            throw FprepError(.usage, "'\(userPath)' is not a file in commit \(commitID.hex.prefix(12)) (see 'fprep versions \(userPath)')")
        }
        let index = try repository.index()
        let current = index.entry(path: path.bytes)
        if let stat = rootFolder.stat(path) {
            // Only over what nothing of the user's is in.
            let classifier = StateClassifier(root: rootFolder, index: index)
            guard let current, [.dataless, .materialized].contains(classifier.state(of: current, stat: stat)) else {
                throw FprepError(.usage, "'\(userPath)' has local changes; run 'fprep sync' to keep them or 'fprep revert' to discard them, then restore")
            }
            if current.id == entry.id && current.mode == entry.mode.raw {
                throw FprepError(.usage, "'\(userPath)' is already that version")
            }
            try bringBack(path, id: entry.id, mode: entry.mode, over: (stat, current, classifier))
        } else {
            try bringBack(path, id: entry.id, mode: entry.mode, over: nil)
        }
        return root + "/" + path.description
    }

    /// Writes the blob `id` at `path`: under a temporary name first (a crash
    /// never leaves a part of it at its name, which the next sync would take
    /// for the user's content), then into place. `over`: what stands at the
    /// name now, which is replaced only while unchanged (`SafeReplace`); a
    /// placeholder's entry then says the file has content to read.
    private func bringBack(_ path: RepoPath, id: ObjectID, mode: FileMode,
                           over existing: (stat: FileStat, entry: IndexEntry, classifier: StateClassifier)?) throws {
        let odb = try repository.objectDatabase()
        if !odb.contains(id) {
            let quarantine = stateFolder + "/fetch-restore"
            do {
                try Transport.fetchObjects([id], gitDirectory: gitDirectory, quarantine: quarantine)
            } catch let error as GitCommandError {
                throw FprepError("cannot fetch the content of '\(path)' from '\(remoteURL)': \(error.reason) (try again when the remote is reachable)")
            }
            try odb.addAlternate(quarantine)
        }
        defer { removeFetchQuarantines() }
        let bytes = try repository.blob(id).withContent { Array($0) }
        let folder = try rootFolder.makeFolder(path.parent)
        let temporary = ContentOperations.temporaryName(for: path.name, token: ContentOperations.newToken())
        if mode == .symlink {
            guard symlinkat(cPath(bytes), folder.fd, cPath(temporary)) == 0 else { throw SystemError("symlink", path.description) }
        } else {
            let fd = openat(folder.fd, cPath(temporary), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                            mode == .executable ? 0o777 : 0o666)
            guard fd >= 0 else { throw SystemError("create", path.description) }
            do {
                defer { close(fd) }
                try bytes.withUnsafeBytes { try writeAll(fd, $0, shown: path.description) }
                guard fsync(fd) == 0 else { throw SystemError("fsync", path.description) }
            } catch {
                unlinkat(folder.fd, cPath(temporary), 0)
                throw error
            }
        }
        if let existing {
            let replacement = SafeReplace(folder: folder, name: path.name, temporary: temporary, shown: path.description,
                                          expectsDataless: existing.entry.skipWorktree)
            switch try replacement.run(isUnchanged: { existing.classifier.state(of: existing.entry, stat: $0) != .modified }) {
            case .replaced:
                if existing.entry.skipWorktree {
                    // The entry stops being a placeholder's: the file has
                    // content now, which the scan reads and commits.
                    var updated = existing.entry
                    updated.skipWorktree = false
                    updated.stat = StatData()
                    let index = try repository.index()
                    try index.add(updated)
                    try index.write()
                }
                _ = fsync(folder.fd)
                return
            case .refused(let why):
                unlinkat(folder.fd, cPath(temporary), 0)
                throw FprepError("cannot restore '\(path)': \(why)")
            }
        }
        guard fprep_rename_noreplace(folder.fd, cPath(temporary), cPath(path.name)) == 0 else {
            let code = errno
            unlinkat(folder.fd, cPath(temporary), 0)
            if code == EEXIST { throw FprepError(.usage, "'\(path)' exists; move it away first to restore the deleted version") }
            throw SystemError("restore", path.description, code)
        }
        _ = fsync(folder.fd)
    }
}

