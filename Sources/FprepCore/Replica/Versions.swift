import FoundationEssentials
import FprepGit

/// One version of an item in the replica's history (as Dropbox's version
/// history or NSFileVersion list them): the commit that made it, when, by
/// whom, and its content.
public struct FileVersion: Sendable, Encodable {
    public let commit: String
    /// When the change was made (the author's date), ISO 8601.
    public let date: String
    public let author: String
    /// The commit message's first line.
    public let summary: String
    /// "file", "executable", "symlink", or "deleted" (no content).
    public let kind: String
    /// nil when deleted, or when the size is not known here.
    public let size: Int64?
    /// The blob id; nil when deleted.
    public let contentVersion: String?
}

extension Replica {
    /// The versions of the item at `userPath`, newest first: each commit on
    /// the anchor's first-parent line that changed what the path holds
    /// (the changes merged from another device show at their merge), at
    /// most `limit`. The history is local (a partial clone holds every
    /// commit and tree), so this needs no network.
    public func versions(_ userPath: String, relativeTo directory: String, limit: Int = 20) throws -> [FileVersion] {
        let path = try itemPath(for: userPath, relativeTo: directory)
        guard let tip = anchor else { return [] }
        var current = tip
        let sizes = try store.blobInfoLookup()
        var versions: [FileVersion] = []
        var commit = try repository.commit(current)
        var entry = try TreeLookup(repository: repository, tree: commit.treeID).entry(at: path)
        var walked = 0
        while versions.count < limit, walked < 100_000 {
            walked += 1
            let parentID = commit.parentIDs.first
            let parent = try parentID.map { try repository.commit($0) }
            let before = try parent.map { try TreeLookup(repository: repository, tree: $0.treeID).entry(at: path) } ?? nil
            if before?.id != entry?.id || before?.mode != entry?.mode {
                if entry != nil || before != nil { versions.append(try version(of: commit, entry, sizes: sizes)) }
            }
            guard let parentID, let parent else { break }
            current = parentID
            commit = parent
            entry = before
        }
        if versions.isEmpty, try TreeLookup(repository: repository, tree: repository.commit(tip).treeID).entry(at: path) == nil {
            throw FprepError(.usage, "'\(userPath)' has no history in this replica (see 'fprep ls' or 'fprep trash')")
        }
        return versions
    }

    private func version(of commit: Commit, _ entry: TreeEntry?, sizes: (ObjectID) throws -> BlobInfo?) throws -> FileVersion {
        let kind: String
        switch entry?.mode {
        case nil: kind = "deleted"
        case .symlink?: kind = "symlink"
        case .executable?: kind = "executable"
        case .tree?: kind = "folder"
        default: kind = "file"
        }
        var size: Int64?
        if let entry, entry.mode.isFile || entry.mode == .symlink {
            size = try sizes(entry.id)?.size
            if size == nil, let odb = try? repository.objectDatabase(), let known = try? odb.size(of: entry.id) { size = Int64(known) }
        }
        let summary = commit.message.split(separator: "\n", maxSplits: 1).first.map(String.init) ?? ""
        return FileVersion(commit: commit.id.hex, date: Self.isoDate(commit.authorTime), author: commit.author, summary: summary,
                           kind: kind, size: size, contentVersion: entry.map { $0.mode == .tree ? nil : $0.id.hex } ?? nil)
    }
}
