import FprepGit

/// One anchor's tree as a layout walks it: folders (each before what it
/// holds) and leaf entries, in index order, every entry checked. The walk
/// holds one folder's listing per level, never the whole tree, so a clone
/// of 10^6 files costs the memory of its deepest path, not of its size.
/// A layout walks twice: once to check and count (`LayoutPlan.scan`, before
/// anything is written), once to write.
struct TreeWalk {
    enum Kind: Equatable {
        case file(executable: Bool)
        case symlink
        case submodule
    }

    struct Entry {
        let path: RepoPath
        let kind: Kind
        let id: ObjectID
        /// -1 when no size is known (a remote without fprep's manifest).
        let size: Int64
        let mtime: Int64

        var name: [UInt8] { path.name }

        var gitMode: UInt32 {
            switch kind {
            case .file(let executable): executable ? 0o100755 : 0o100644
            case .symlink: 0o120000
            case .submodule: 0o160000
            }
        }
    }

    enum Step {
        /// A folder to make (a submodule's too: it is shown as an empty one).
        case folder(RepoPath)
        case entry(Entry)
    }

    let repository: Repository
    let tree: ObjectID
    let defaultTime: Int64
    let sizes: (ObjectID) throws -> BlobInfo?
    /// Trees read on another thread ahead of the walk (`TreeReadAhead`):
    /// for a walk that does little else (the scan), not for one that
    /// shares the machine's cores with its writers (the layout).
    var readsAhead = false

    /// Visits every step in index order. Refuses any entry that could escape
    /// the replica, write into `.git`/`.fprep`, collide with another entry,
    /// or break the index's order (a tree git itself would not write).
    func run(_ visit: (Step) throws -> Void) throws {
        var previous: RepoPath?
        let ahead = readsAhead ? TreeReadAhead(gitDirectory: repository.gitDirectory, root: tree) : nil
        defer { ahead?.stop() }
        try walk(tree, at: .root, previous: &previous, ahead: ahead, visit)
    }

    private func walk(_ id: ObjectID, at path: RepoPath, previous: inout RepoPath?, ahead: TreeReadAhead?,
                      _ visit: (Step) throws -> Void) throws {
        let entries: [TreeEntry]
        do {
            entries = try ahead?.entries(of: id) ?? repository.tree(id).entries
        } catch {
            throw FprepError("the remote tree '\(path.isRoot ? "/" : path.description)' (\(id)) is missing from the clone; run the command again")
        }
        var names = RepeatedNames()
        for i in entries.indices {
            let entry = entries[i]
            let child = path.appending(entry.name)
            // Checked before a folder is entered: the path limit bounds the
            // depth of this walk.
            try TreeEntryRules.check(name: entry.name, mode: entry.mode, path: child)
            guard !names.isRepeated(entries, at: i) else {
                throw FprepError.unsafeEntry(child.description, "two entries share this name (a symlink and a folder, say)")
            }
            func leaf(_ kind: Kind, size: Int64, mtime: Int64) throws {
                if let last = previous, !last.bytes.lexicographicallyPrecedes(child.bytes) {
                    throw FprepError.unsafeEntry(child.description, "the remote's tree lists it out of git's order")
                }
                previous = child
                try visit(.entry(Entry(path: child, kind: kind, id: entry.id, size: size, mtime: mtime)))
            }
            switch entry.mode {
            case .tree:
                try visit(.folder(child))
                try walk(entry.id, at: child, previous: &previous, ahead: ahead, visit)
            case .blob, .executable, .symlink:
                let info = try sizes(entry.id)
                let kind: Kind = entry.mode == .symlink ? .symlink : .file(executable: entry.mode == .executable)
                try leaf(kind, size: info?.size ?? -1, mtime: info?.mtime ?? defaultTime)
            case .submodule:
                // Shown as an empty folder; its content is another repository.
                try visit(.folder(child))
                try leaf(.submodule, size: -1, mtime: defaultTime)
            case .unknown:
                break  // refused above
            }
        }
    }
}

/// Whether an entry of a tree has the name of an earlier one, without
/// hashing every name (a set of the names was a third of a clone's scan of
/// 10^5 files). In a tree in git's order (by name, a folder's as if it
/// ended in '/'; see `precedes`) a name can come twice only as a folder
/// and a non-folder (file, symlink, submodule) before it, with nothing
/// between them but names that start with that name and a byte before
/// '/': a folder's entry looks back over those. A tree out of that order
/// (git never writes one), or where a folder would look back over more than
/// `lookBackLimit` names, is checked with a set of its names from there on.
struct RepeatedNames {
    private var ordered = true
    private var names: Set<[UInt8]> = []
    /// Entries a folder's entry looks back over at most.
    static let lookBackLimit = 64

    /// Whether `entries[i]` repeats the name of an entry before it; asked
    /// of each entry in turn, from the first. Names are checked
    /// (`TreeEntryRules.check`: not empty, no '/') before they come here.
    mutating func isRepeated(_ entries: [TreeEntry], at i: Int) -> Bool {
        let entry = entries[i]
        if ordered {
            if i == 0 || Self.precedes(entries[i - 1], entry) {
                guard entry.mode == .tree else { return false }
                let name = entry.name
                var j = i - 1
                while j >= 0, i - j <= Self.lookBackLimit, Self.sortsBetween(entries[j].name, name) { j -= 1 }
                if i - j <= Self.lookBackLimit { return j >= 0 && entries[j].name == name }
                // Many names between (folders 'a', 'a!', 'a!!', … beside a
                // million files 'a!!…-n' would make looking back cost each
                // folder the files): a set from here on, as for disorder.
            }
            // No name repeats before `i`: the order held until here.
            ordered = false
            names.reserveCapacity(entries.count)
            for earlier in entries[..<i] { names.insert(earlier.name) }
        }
        return !names.insert(entry.name).inserted
    }

    /// git's order of one tree's entries, strict (`TreeOrder`).
    static func precedes(_ a: TreeEntry, _ b: TreeEntry) -> Bool {
        a.name.withUnsafeBufferPointer { x in
            b.name.withUnsafeBufferPointer { y in TreeOrder.compare(x, folder: a.mode == .tree, y, folder: b.mode == .tree) < 0 }
        }
    }

    private static func sortsBetween(_ other: [UInt8], _ name: [UInt8]) -> Bool {
        other.withUnsafeBufferPointer { x in name.withUnsafeBufferPointer { y in TreeOrder.sortsBetween(x, fileAndFolderNamed: y) } }
    }
}

/// What one anchor's tree asks to be on disk, checked and counted before
/// anything is written: the counts a clone reports and the index's header
/// needs, and the few entries later steps want by name (symlinks, whose
/// targets are fetched; ignore-rule files, materialized; submodules).
struct LayoutPlan {
    /// The walk that counted this, which the layout runs again to write
    /// (nil for an empty remote).
    var walk: TreeWalk?
    var files = 0
    /// Folders, submodules' empty folders included.
    var folders = 0
    var symlinks = 0
    var submodules: [RepoPath] = []
    /// What the files hold (symlinks and submodules not counted).
    var logicalSize: Int64 = 0
    /// Files whose size no source knew (laid out at 0 bytes).
    var unknownSizes = 0
    var symlinkIDs: Set<ObjectID> = []
    var ruleFiles: [RepoPath] = []
    /// Every folder, in the walk's order (each after its parent), which
    /// the layout makes before any file (see `PlaceholderLayout`).
    var folderPaths = FolderList()

    /// The index entries the layout writes.
    var entryCount: Int { files + symlinks + submodules.count }

    /// Walks `tree` once, checking every entry (see `TreeWalk.run`).
    /// `listFolders`: keep the folders' paths for the layout (a scan that
    /// only counts does without).
    static func scan(_ repository: Repository, tree: ObjectID, defaultTime: Int64, listFolders: Bool = true,
                     sizes: @escaping (ObjectID) throws -> BlobInfo?) throws -> LayoutPlan {
        try scan(TreeWalk(repository: repository, tree: tree, defaultTime: defaultTime, sizes: sizes), listFolders: listFolders)
    }

    static func scan(_ walk: TreeWalk, listFolders: Bool = true) throws -> LayoutPlan {
        var plan = LayoutPlan(walk: walk)
        plan.folderPaths.isKept = listFolders
        var scanning = walk
        scanning.readsAhead = true
        try scanning.run { step in
            switch step {
            case .folder(let path):
                plan.folders += 1
                plan.folderPaths.append(path)
            case .entry(let entry):
                switch entry.kind {
                case .file:
                    plan.files += 1
                    if entry.size < 0 { plan.unknownSizes += 1 } else { plan.logicalSize += entry.size }
                    if IgnoreRules.isRuleFile(entry.path) { plan.ruleFiles.append(entry.path) }
                case .symlink:
                    plan.symlinks += 1
                    plan.symlinkIDs.insert(entry.id)
                case .submodule:
                    plan.submodules.append(entry.path)
                }
            }
        }
        return plan
    }
}

/// Folder paths held in one buffer: a tree's folders are a tenth of its
/// files or fewer (94,000 at 10^6 files: some 3 MB here, where an array of
/// paths would hold an allocation per folder). Past `byteBudget` of paths
/// (a tree of many deep folders with long names) the list is dropped and
/// stays empty: the layout then makes each folder as its walk comes to
/// it, in the memory of one path, as the walk promises.
struct FolderList: Sequence {
    private var bytes: [UInt8] = []
    private var ends: [Int32] = []
    /// Whether paths are still kept (false once over the budget, or when
    /// the scan was told not to keep them).
    var isKept = true

    static let byteBudget = 64 << 20

    var count: Int { ends.count }

    mutating func append(_ path: RepoPath) {
        guard isKept else { return }
        guard bytes.count + path.bytes.count <= Self.byteBudget else {
            isKept = false
            bytes = []
            ends = []
            return
        }
        bytes += path.bytes
        ends.append(Int32(bytes.count))
    }

    func makeIterator() -> AnyIterator<RepoPath> {
        var i = 0
        return AnyIterator {
            guard i < ends.count else { return nil }
            let start = i == 0 ? 0 : Int(ends[i - 1])
            defer { i += 1 }
            return RepoPath(bytes: Array(bytes[start..<Int(ends[i])]))
        }
    }
}
