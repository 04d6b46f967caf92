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
        // Not what exists again at the anchor.
        let atAnchor = TreeLookup(repository: repository, tree: current)
        return try found.values.filter { item in
            try item.commit == nil || atAnchor.entry(at: RepoPath(identifier: item.identifier)) == nil
        }.sorted { $0.identifier < $1.identifier }
    }

    /// Brings a deleted item back as a file (content from the object store,
    /// or fetched); the next sync commits it like any new file.
    public func restore(_ userPath: String, relativeTo directory: String) throws -> String {
        let path = try itemPath(for: userPath, relativeTo: directory)
        guard let item = try trash().first(where: { $0.identifier == path.description }), let id = ObjectID(hex: item.contentVersion) else {
            throw FprepError(.usage, "'\(userPath)' is not in the trash (see 'fprep trash')")
        }
        guard rootFolder.stat(path) == nil else {
            throw FprepError(.usage, "'\(userPath)' exists; move it away first to restore the deleted version")
        }
        let odb = try repository.objectDatabase()
        if !odb.contains(id) {
            let quarantine = stateFolder + "/fetch-restore"
            do {
                try Transport.fetchObjects([id], gitDirectory: gitDirectory, quarantine: quarantine)
            } catch let error as GitCommandError {
                throw FprepError("cannot fetch the content of '\(userPath)' from '\(remoteURL)': \(error.reason) (try again when the remote is reachable)")
            }
            try odb.addAlternate(quarantine)
        }
        defer { removeFetchQuarantines() }
        let bytes = try repository.blob(id).withContent { Array($0) }
        var current = RepoPath.root
        for name in path.parent.components {
            let parent = try rootFolder.folder(current)
            current = current.appending(name)
            if mkdirat(parent.fd, cPath(name), 0o777) != 0 && errno != EEXIST { throw SystemError("mkdir", current.description) }
        }
        let folder = try rootFolder.folder(path.parent)
        // Written whole under a temporary name first: a crash never leaves a
        // part of the file at its name (which the next sync would take for
        // the user's content), and a file that appeared there meanwhile is
        // never replaced.
        let temporary = ContentOperations.temporaryName(for: path.name, token: ContentOperations.newToken())
        if item.kind == "symlink" {
            guard symlinkat(cPath(bytes), folder.fd, cPath(temporary)) == 0 else { throw SystemError("symlink", path.description) }
        } else {
            let fd = openat(folder.fd, cPath(temporary), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                            FileMode(raw: item.mode) == .executable ? 0o777 : 0o666)
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
        guard fprep_rename_noreplace(folder.fd, cPath(temporary), cPath(path.name)) == 0 else {
            let code = errno
            unlinkat(folder.fd, cPath(temporary), 0)
            if code == EEXIST { throw FprepError(.usage, "'\(userPath)' exists; move it away first to restore the deleted version") }
            throw SystemError("restore", path.description, code)
        }
        _ = fsync(folder.fd)
        return root + "/" + path.description
    }
}

