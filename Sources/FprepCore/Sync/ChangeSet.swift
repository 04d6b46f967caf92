import FprepGit

/// The changes between two anchors, found from a tree diff and passed
/// through a rename pass, as git's diffcore does: raw deltas → exact
/// renames (same blob id) and folder renames (same tree id) → the rest.
struct ChangeSet {
    /// An item that is new or whose content, mode or kind changed.
    struct Update {
        let path: RepoPath
        let new: TreeEntry
        /// nil when the item is new at this path.
        let old: TreeEntry?
    }

    /// An item whose identifier changed from `from` to `to` with the same
    /// content. A folder move carries its descendants' moves too.
    struct Move {
        let from: RepoPath
        let to: RepoPath
        let entry: TreeEntry
        let isFolder: Bool
    }

    var updated: [Update] = []
    var deleted: [(path: RepoPath, old: TreeEntry)] = []
    var moved: [Move] = []
    /// Folders that appear or vanish as a whole (not by a move).
    var addedFolders: [(path: RepoPath, id: ObjectID)] = []
    var deletedFolders: [(path: RepoPath, id: ObjectID)] = []

    var isEmpty: Bool { updated.isEmpty && deleted.isEmpty && moved.isEmpty && addedFolders.isEmpty && deletedFolders.isEmpty }

    /// Every identifier the change touches, for counting.
    var count: Int { updated.count + deleted.count + moved.count + addedFolders.count + deletedFolders.count }

    /// Every path whose item goes, comes or changes (a move's two ends),
    /// which a sync looks up on disk and in the index.
    var touchedPaths: [RepoPath] {
        deleted.map(\.path) + moved.flatMap { [$0.from, $0.to] } + updated.map(\.path)
    }

    /// `marksTrace`: false on a thread of its own beside the command's
    /// (the trace's phases follow one thread).
    static func between(_ repository: Repository, from oldTree: ObjectID?, to newTree: ObjectID?,
                        marksTrace: Bool = true) throws -> ChangeSet {
        let raw: TreeDiffResult
        do {
            raw = try TreeDiff(repository).diff(from: oldTree, to: newTree)
        } catch let error as DuplicateTreeEntry {
            throw FprepError.unsafeEntry(RepoPath(bytes: error.path).description, "two entries share this name (a symlink and a folder, say)")
        } catch let error as TreePathTooLong {
            throw FprepError.unsafeEntry(TreeEntryRules.shown(RepoPath(bytes: error.path)), TreeEntryRules.pathTooLong)
        }
        if marksTrace { Trace.mark("tree diff") }
        var set = ChangeSet()

        // Folder renames: a folder gone and a folder come with the same tree id.
        var addedByID: [ObjectID: [FolderDelta]] = [:]
        for folder in raw.addedFolders { addedByID[folder.id, default: []].append(folder) }
        var movedFrom: [RepoPath] = []
        var movedTo: [RepoPath] = []
        for folder in raw.deletedFolders {
            let from = RepoPath(bytes: folder.path)
            if movedFrom.contains(where: { from.isWithin($0) }) { continue }
            guard var candidates = addedByID[folder.id], !candidates.isEmpty else { continue }
            let target = candidates.removeFirst()
            addedByID[folder.id] = candidates
            let to = RepoPath(bytes: target.path)
            if movedTo.contains(where: { to.isWithin($0) }) { continue }
            movedFrom.append(from)
            movedTo.append(to)
            set.moved.append(Move(from: from, to: to, entry: TreeEntry(name: to.name, id: folder.id, mode: .tree), isFolder: true))
        }
        func underMovedFrom(_ path: RepoPath) -> Int? { movedFrom.firstIndex { path.isWithin($0) } }
        func underMovedTo(_ path: RepoPath) -> Bool { movedTo.contains { path.isWithin($0) } }

        // Leaves: those under a moved folder move with it; the rest pair up
        // as exact renames or stay updates and deletions.
        var deletions: [(RepoPath, TreeEntry)] = []
        var additions: [(RepoPath, TreeEntry)] = []
        for delta in raw.deltas {
            let path = RepoPath(bytes: delta.path)
            if let old = delta.old, delta.new == nil {
                if let folder = underMovedFrom(path) {
                    let relative = Array(path.bytes.dropFirst(movedFrom[folder].bytes.count))
                    let to = RepoPath(bytes: movedTo[folder].bytes + relative)
                    set.moved.append(Move(from: path, to: to, entry: old, isFolder: false))
                } else {
                    deletions.append((path, old))
                }
            } else if let new = delta.new, delta.old == nil {
                if !underMovedTo(path) { additions.append((path, new)) }
            } else if let new = delta.new {
                set.updated.append(Update(path: path, new: new, old: delta.old))
            }
        }
        struct Key: Hashable { let id: ObjectID; let mode: UInt32 }
        var addedByKey: [Key: [(RepoPath, TreeEntry)]] = [:]
        for addition in additions { addedByKey[Key(id: addition.1.id, mode: addition.1.mode.raw), default: []].append(addition) }
        var paired = Set<RepoPath>()
        for (path, old) in deletions {
            let key = Key(id: old.id, mode: old.mode.raw)
            if var candidates = addedByKey[key], !candidates.isEmpty, old.mode != .submodule {
                let (to, entry) = candidates.removeFirst()
                addedByKey[key] = candidates
                paired.insert(to)
                set.moved.append(Move(from: path, to: to, entry: entry, isFolder: false))
            } else {
                set.deleted.append((path, old))
            }
        }
        for (path, entry) in additions where !paired.contains(path) {
            set.updated.append(Update(path: path, new: entry, old: nil))
        }
        set.updated.sort { $0.path < $1.path }
        set.moved.sort { $0.to < $1.to }
        for folder in raw.addedFolders {
            let path = RepoPath(bytes: folder.path)
            if !movedTo.contains(path) && !underMovedTo(path) { set.addedFolders.append((path, folder.id)) }
        }
        for folder in raw.deletedFolders {
            let path = RepoPath(bytes: folder.path)
            if underMovedFrom(path) == nil { set.deletedFolders.append((path, folder.id)) }
        }
        return set
    }
}
