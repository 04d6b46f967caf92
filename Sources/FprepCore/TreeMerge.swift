import FoundationEssentials
import FprepGit
import Glibc

/// A conflict a merge resolved by keeping both versions.
public struct Conflict: Sendable, Codable, Equatable {
    /// The item that keeps its name (the remote's version).
    public let path: String
    /// Where the local version was kept.
    public let copy: String
    public let reason: String
}

/// Three-way merge of two trees at the level of paths, as fprep defines it
/// so that nothing anyone wrote is lost: the remote's tree is the start and
/// the local changes are replayed on it.
///
/// - a file changed on one side only takes that change;
/// - changed on both sides: a text file that merges cleanly is merged;
///   otherwise the remote's version keeps the name and the local one is kept
///   beside it as `NAME (conflict DEVICE DATE).EXT`;
/// - edit against delete keeps the edited file;
/// - rename against edit puts the edit at the new name;
/// - two new files at one path both survive (the local one as a copy).
///
/// Renames are exact (same blob id), found without reading content; only
/// files changed on both sides need content, fetched in one request.
struct TreeMerge {
    let replica: Replica
    let device: String
    let date: String

    struct Result {
        let tree: ObjectID
        var conflicts: [Conflict] = []
    }

    func merge(base: ObjectID, ours: ObjectID, theirs: ObjectID) throws -> Result {
        let repository = replica.repository
        let baseTree = try repository.commit(base).treeID
        let ourTree = try repository.commit(ours).treeID
        let theirTree = try repository.commit(theirs).treeID
        let mine = try ChangeSet.between(repository, from: baseTree, to: ourTree)
        let their = try ChangeSet.between(repository, from: baseTree, to: theirTree)

        var theirUpdated: [RepoPath: TreeEntry] = [:]
        for update in their.updated { theirUpdated[update.path] = update.new }
        var theirDeleted = Set(their.deleted.map(\.path))
        var theirMoved: [RepoPath: (RepoPath, TreeEntry)] = [:]
        for move in their.moved where !move.isFolder { theirMoved[move.from] = (move.to, move.entry) }
        for folder in their.deletedFolders { theirDeleted.insert(folder.path) }
        let theirTreeEntries = try entries(of: theirTree, at: Set(mine.updated.map(\.path) + mine.moved.map(\.to)))

        var edits: [[UInt8]: TreeEditor.Edit] = [:]
        var conflicts: [Conflict] = []
        var takenNames = Set<RepoPath>()
        var needContent: [(path: RepoPath, base: ObjectID, ours: TreeEntry, theirs: TreeEntry)] = []

        func keepBoth(_ path: RepoPath, ours: TreeEntry, reason: String) {
            let copy = conflictName(for: path, taken: &takenNames, existing: theirTreeEntries)
            edits[copy.bytes] = .put(ours.id, ours.mode)
            conflicts.append(Conflict(path: path.description, copy: copy.description, reason: reason))
        }

        // Local updates (new and changed items).
        for update in mine.updated {
            let path = update.path
            if let (to, _) = theirMoved[path] {
                edits[to.bytes] = .put(update.new.id, update.new.mode)  // the edit goes to the new name
            } else if let theirs = theirUpdated[path] {
                if theirs.id == update.new.id && theirs.mode == update.new.mode { continue }
                if let old = update.old, old.mode.isFile, update.new.mode.isFile, theirs.mode.isFile {
                    needContent.append((path, old.id, update.new, theirs))
                } else {
                    keepBoth(path, ours: update.new, reason: update.old == nil ? "created on both devices" : "changed on both devices")
                }
            } else if theirDeleted.contains(path) || theirDeleted.contains(where: { path.isWithin($0) }) {
                edits[path.bytes] = .put(update.new.id, update.new.mode)  // edit against delete keeps the edit
            } else if let existing = theirTreeEntries[path], existing.id != update.new.id, update.old == nil {
                keepBoth(path, ours: update.new, reason: "created on both devices")
            } else {
                edits[path.bytes] = .put(update.new.id, update.new.mode)
            }
        }
        // Local deletions: only of what the remote left as it was.
        for (path, _) in mine.deleted where theirUpdated[path] == nil && theirMoved[path] == nil && !theirDeleted.contains(path) {
            edits[path.bytes] = .remove
        }
        // Local renames.
        for move in mine.moved where !move.isFolder {
            if let (theirTo, _) = theirMoved[move.from] {
                _ = theirTo  // renamed on both devices: the remote's name stands
                continue
            }
            let content = theirUpdated[move.from] ?? move.entry  // rename against edit: the edit at the new name
            if !theirDeleted.contains(move.from) || theirUpdated[move.from] != nil { edits[move.from.bytes] = .remove }
            if let existing = theirTreeEntries[move.to], existing.id != content.id {
                keepBoth(move.to, ours: content, reason: "renamed here onto a file new on the remote")
            } else {
                edits[move.to.bytes] = .put(content.id, content.mode)
            }
        }

        // Files changed on both sides: merge text, else keep both.
        if !needContent.isEmpty {
            let odb = try repository.objectDatabase()
            let wanted = Set(needContent.flatMap { [$0.base, $0.theirs.id, $0.ours.id] }).filter { !odb.contains($0) }
            let quarantine = replica.stateFolder + "/fetch-merge"
            if !wanted.isEmpty {
                try Transport.fetchObjects(Array(wanted), gitDirectory: replica.gitDirectory, quarantine: quarantine)
                if FileManager.default.fileExists(atPath: quarantine) { try odb.addAlternate(quarantine) }
            }
            for item in needContent {
                let base = try repository.blob(item.base).withContent { Array($0) }
                let ours = try repository.blob(item.ours.id).withContent { Array($0) }
                let theirs = try repository.blob(item.theirs.id).withContent { Array($0) }
                if Self.isText(base), Self.isText(ours), Self.isText(theirs),
                   let merged = try? FileMerge.merge(base: base, ours: ours, theirs: theirs), merged.clean {
                    let id = try merged.content.withUnsafeBytes { try repository.writeBlob($0) }
                    edits[item.path.bytes] = .put(id, item.theirs.mode)
                    try replica.store.recordBlobInfo([(id, BlobInfo(size: Int64(merged.content.count), mtime: Int64(Date().timeIntervalSince1970)))])
                } else {
                    keepBoth(item.path, ours: item.ours, reason: "changed on both devices")
                }
            }
        }
        let tree = try TreeEditor(repository).apply(edits, to: theirTree)
        return Result(tree: tree, conflicts: conflicts)
    }

    /// `NAME (conflict DEVICE DATE).EXT`, numbered when taken.
    private func conflictName(for path: RepoPath, taken: inout Set<RepoPath>, existing: [RepoPath: TreeEntry]) -> RepoPath {
        var counter = 1
        while true {
            let candidate = path.parent.appending(Self.conflictFileName(path.name, device: device, date: date, counter: counter))
            if !taken.contains(candidate) && existing[candidate] == nil {
                taken.insert(candidate)
                return candidate
            }
            counter += 1
        }
    }

    /// The name a conflict copy of `name` gets: `NAME (conflict DEVICE
    /// DATE).EXT`, with ` N` after the date from the second one on. Bytes
    /// throughout (a name need not be UTF-8); a name too long for the
    /// result to fit in NAME_MAX keeps its extension and a shortened stem.
    static func conflictFileName(_ name: [UInt8], device: String, date: String, counter: Int) -> [UInt8] {
        var stem = name[...], ext: ArraySlice<UInt8> = []
        if let dot = name.lastIndex(of: 0x2E), dot != name.startIndex {
            stem = name[..<dot]
            ext = name[dot...]
        }
        let number = counter == 1 ? "" : " \(counter)"
        let mark = Array(" (conflict \(device) \(date)\(number))".utf8)
        // An extension too long to leave room for a stem is part of the stem.
        if mark.count + ext.count + 40 > EntryNameCheck.maxNameLength {
            stem = name[...]
            ext = []
        }
        return DerivedName.fitting(stem: Array(stem), suffix: mark + ext, whole: name)
    }

    /// The entries of `tree` at the given paths (those that exist there).
    private func entries(of tree: ObjectID, at paths: Set<RepoPath>) throws -> [RepoPath: TreeEntry] {
        let lookup = TreeLookup(repository: replica.repository, tree: tree)
        var result: [RepoPath: TreeEntry] = [:]
        for path in paths { if let entry = try lookup.entry(at: path) { result[path] = entry } }
        return result
    }

    /// Text as git judges it: no NUL byte in the first 8000 bytes.
    static func isText(_ bytes: [UInt8]) -> Bool { !bytes.prefix(8000).contains(0) }
}
