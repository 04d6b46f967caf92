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
/// - rename against edit puts the edit at the new name (a file moved the
///   same way here, with a new file made at its old name, is not an edit:
///   the new file keeps the old name); a file renamed differently on both
///   devices is kept at both names;
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
        // Names this device's own changes put in the tree (its conflict
        // copies of writes into placeholders among them): a conflict copy the
        // merge makes never takes one.
        var takenNames = Set(mine.updated.map(\.path) + mine.moved.map(\.to))
        var needContent: [(path: RepoPath, base: TreeEntry, ours: TreeEntry, theirs: TreeEntry)] = []

        // What the remote's tree holds at a path, looked up once per path.
        let theirLookup = TreeLookup(repository: repository, tree: theirTree)
        var theirEntryCache: [RepoPath: TreeEntry?] = [:]
        func theirEntry(_ path: RepoPath) throws -> TreeEntry? {
            if let known = theirEntryCache[path] { return known }
            let found = try theirLookup.entry(at: path)
            theirEntryCache[path] = found
            return found
        }
        // Items the remote added or changed, to tell a folder it filled from
        // one it only kept.
        let theirNewItems = their.updated.map(\.path) + their.moved.map(\.to)
        func theirAdded(within folder: RepoPath) -> Bool {
            theirNewItems.contains { $0 != folder && $0.isWithin(folder) }
        }
        func removed(_ path: RepoPath) -> Bool {
            if case .remove = edits[path.bytes] { return true }
            return false
        }

        // Local removals first (only of what the remote left as it was, and
        // the old names of local renames), so a put below sees what stays.
        for (path, _) in mine.deleted where theirUpdated[path] == nil && theirMoved[path] == nil && !theirDeleted.contains(path) {
            edits[path.bytes] = .remove
        }
        for move in mine.moved where !move.isFolder && theirMoved[move.from] == nil {
            if !theirDeleted.contains(move.from) || theirUpdated[move.from] != nil { edits[move.from.bytes] = .remove }
        }

        // A folder of this device's whose name the remote gave to a file (or
        // symlink) that stays: its items go to a conflict-named folder beside
        // it, one per folder, so neither side's items are lost.
        var relocated: [RepoPath: RepoPath] = [:]
        func resolvedFolder(_ folder: RepoPath) throws -> RepoPath {
            var prefix = RepoPath.root
            for name in folder.components {
                prefix = prefix.appending(name)
                let rest = folder.bytes.dropFirst(prefix.bytes.count)
                if let copy = relocated[prefix] { return RepoPath(bytes: copy.bytes + rest) }
                if let standing = try theirEntry(prefix), standing.mode != .tree, !removed(prefix) {
                    let copy = try conflictName(for: prefix, taken: &takenNames, existing: [:], lookup: theirEntry)
                    relocated[prefix] = copy
                    conflicts.append(Conflict(path: prefix.description, copy: copy.description,
                                              reason: "a file on the remote, a folder with items here"))
                    return RepoPath(bytes: copy.bytes + rest)
                }
            }
            return folder
        }

        func keepBoth(_ path: RepoPath, ours: TreeEntry, reason: String) throws {
            let folder = try resolvedFolder(path.parent)
            let copy = try conflictName(for: folder.appending(path.name), taken: &takenNames, existing: theirTreeEntries, lookup: theirEntry)
            edits[copy.bytes] = .put(ours.id, ours.mode)
            conflicts.append(Conflict(path: path.description, copy: copy.description, reason: reason))
        }

        // Puts a local item into the result; a collision with what the
        // remote made of the same place keeps both. `replacing` is the
        // remote's item this one legitimately supersedes (the remote's
        // renamed copy of a file edited here).
        let baseLookup = TreeLookup(repository: repository, tree: baseTree)
        func place(_ wanted: RepoPath, _ entry: TreeEntry, clash: String, replacing: TreeEntry? = nil) throws {
            let path = try resolvedFolder(wanted.parent).appending(wanted.name)
            if path == wanted, entry.mode != .tree, let standing = try theirEntry(path) {
                if standing.mode == .tree {
                    if theirAdded(within: path) {
                        // The remote filled a folder at this name: it keeps the name.
                        try keepBoth(path, ours: entry, reason: clash)
                        return
                    }
                } else if standing.mode != .submodule, standing.id != entry.id || standing.mode != entry.mode,
                          standing.id != replacing?.id, !removed(path),
                          try baseLookup.entry(at: path).map({ $0.id != standing.id || $0.mode != standing.mode }) ?? true {
                    // The remote put another item at this name (a new file,
                    // one renamed onto it): it keeps the name, and this
                    // device's item goes beside it; replacing it lost it.
                    try keepBoth(path, ours: entry, reason: clash)
                    return
                }
            }
            // Another of this device's items was already put here in this
            // merge: replacing it would lose it without a word.
            if case .put(let id, let mode) = edits[path.bytes], id != entry.id || mode != entry.mode {
                try keepBoth(path, ours: entry, reason: clash)
                return
            }
            edits[path.bytes] = .put(entry.id, entry.mode)
        }

        // What this device's own tree holds at the paths its changes name.
        var ourNew: [RepoPath: TreeEntry] = [:]
        for update in mine.updated { ourNew[update.path] = update.new }
        for move in mine.moved where !move.isFolder { ourNew[move.to] = move.entry }

        // Local updates (new and changed items).
        for update in mine.updated {
            let path = update.path
            if let (to, moved) = theirMoved[path] {
                if ourNew[to]?.id == moved.id, ourNew[to]?.mode == moved.mode {
                    // Moved the same way here too, and a new item made at the
                    // old name: not an edit of the moved file, which is at its
                    // new name on both sides; the new item keeps its own name.
                    try place(path, update.new, clash: "made here at a name the file that was there left on both devices")
                } else {
                    try place(to, update.new, clash: "moved on the remote onto a folder, changed here", replacing: moved)  // the edit goes to the new name
                }
            } else if let theirs = theirUpdated[path] {
                if theirs.id == update.new.id && theirs.mode == update.new.mode { continue }
                if let old = update.old, old.mode.isFile, update.new.mode.isFile, theirs.mode.isFile {
                    // A side that changed only the mode takes the other's
                    // content: nothing to merge.
                    let mode = update.new.mode != old.mode ? update.new.mode : theirs.mode
                    if update.new.id == old.id {
                        edits[path.bytes] = .put(theirs.id, mode)
                    } else if theirs.id == old.id {
                        edits[path.bytes] = .put(update.new.id, mode)
                    } else {
                        needContent.append((path, old, update.new, theirs))
                    }
                } else {
                    try keepBoth(path, ours: update.new, reason: update.old == nil ? "created on both devices" : "changed on both devices")
                }
            } else if theirDeleted.contains(path) || theirDeleted.contains(where: { path.isWithin($0) }) {
                // Edit against delete keeps the edit (beside whatever the
                // remote put at its name since).
                try place(path, update.new, clash: "changed here; the remote deleted it or put another item at its name")
            } else if let existing = theirTreeEntries[path], existing.id != update.new.id || existing.mode != update.new.mode,
                      update.old == nil {
                try keepBoth(path, ours: update.new, reason: "created on both devices")
            } else {
                try place(path, update.new, clash: "a file here, a folder on the remote")
            }
        }
        // Renamed on both devices to different names: the remote's name
        // stands (its old name went above), and this device's is kept too,
        // with the remote's version, so neither device's choice is lost
        // without a word (as git keeps both names).
        for move in mine.moved where !move.isFolder {
            guard let (theirName, theirVersion) = theirMoved[move.from], theirName != move.to else { continue }
            let before = conflicts.count
            if let existing = theirTreeEntries[move.to], existing.id != theirVersion.id {
                try keepBoth(move.to, ours: theirVersion, reason: "renamed on both devices, here onto a file new on the remote")
            } else {
                try place(move.to, theirVersion, clash: "renamed on both devices, here onto a folder new on the remote")
            }
            if conflicts.count == before {
                conflicts.append(Conflict(path: theirName.description, copy: move.to.description,
                                          reason: "renamed on both devices: the remote's name and this device's both hold it"))
            }
        }
        // Local renames.
        for move in mine.moved where !move.isFolder && theirMoved[move.from] == nil {
            let content = theirUpdated[move.from] ?? move.entry  // rename against edit: the edit at the new name
            if let existing = theirTreeEntries[move.to], existing.id != content.id {
                try keepBoth(move.to, ours: content, reason: "renamed here onto a file new on the remote")
            } else {
                try place(move.to, content, clash: "renamed here onto a folder new on the remote")
            }
        }

        // Files changed on both sides: merge text, else keep both.
        if !needContent.isEmpty {
            let odb = try repository.objectDatabase()
            let wanted = Set(needContent.flatMap { [$0.base.id, $0.theirs.id, $0.ours.id] }).filter { !odb.contains($0) }
            let quarantine = replica.stateFolder + "/fetch-merge"
            if !wanted.isEmpty {
                try Transport.fetchObjects(Array(wanted), gitDirectory: replica.gitDirectory, quarantine: quarantine)
                if FileManager.default.fileExists(atPath: quarantine) { try odb.addAlternate(quarantine) }
            }
            for item in needContent {
                let base = try repository.blob(item.base.id).withContent { Array($0) }
                let ours = try repository.blob(item.ours.id).withContent { Array($0) }
                let theirs = try repository.blob(item.theirs.id).withContent { Array($0) }
                if Self.isText(base), Self.isText(ours), Self.isText(theirs),
                   let merged = try? FileMerge.merge(base: base, ours: ours, theirs: theirs), merged.clean {
                    let id = try merged.content.withUnsafeBytes { try repository.writeBlob($0) }
                    let mode = item.ours.mode != item.base.mode ? item.ours.mode : item.theirs.mode
                    edits[item.path.bytes] = .put(id, mode)
                    try replica.store.recordBlobInfo([(id, BlobInfo(size: Int64(merged.content.count), mtime: Int64(Date().timeIntervalSince1970)))])
                } else {
                    try keepBoth(item.path, ours: item.ours, reason: "changed on both devices")
                }
            }
        }
        let tree = try TreeEditor(repository).apply(edits, to: theirTree)
        return Result(tree: tree, conflicts: conflicts)
    }

    /// `NAME (conflict DEVICE DATE).EXT`, numbered when taken (in this
    /// merge, or in the remote's tree).
    private func conflictName(for path: RepoPath, taken: inout Set<RepoPath>, existing: [RepoPath: TreeEntry],
                              lookup: (RepoPath) throws -> TreeEntry?) throws -> RepoPath {
        var counter = 1
        while true {
            let candidate = path.parent.appending(Self.conflictFileName(path.name, device: device, date: date, counter: counter))
            if !taken.contains(candidate), existing[candidate] == nil, try lookup(candidate) == nil {
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
