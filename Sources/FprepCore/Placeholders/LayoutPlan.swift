import FprepGit

/// Everything one anchor's tree asks to be on disk, checked before anything
/// is written: folders (parents first) and leaf entries in index order.
struct LayoutPlan {
    enum Kind: Equatable {
        case file(executable: Bool)
        case symlink
        case submodule
    }

    struct Entry {
        let path: RepoPath
        /// Index into `folders` of the containing folder; -1 for the root.
        let folder: Int32
        let name: [UInt8]
        let kind: Kind
        let id: ObjectID
        /// -1 when no size is known (a remote without fprep's manifest).
        var size: Int64
        var mtime: Int64

        var gitMode: UInt32 {
            switch kind {
            case .file(let executable): executable ? 0o100755 : 0o100644
            case .symlink: 0o120000
            case .submodule: 0o160000
            }
        }
    }

    var folders: [RepoPath] = []
    var entries: [Entry] = []
    var submodules: [RepoPath] { entries.filter { $0.kind == .submodule }.map(\.path) }
    var fileCount: Int { entries.count { if case .file = $0.kind { true } else { false } } }
    /// What the files hold (symlinks and submodules not counted).
    var logicalSize: Int64 {
        entries.reduce(0) { total, entry in
            if case .file = entry.kind { return total + max(entry.size, 0) }
            return total
        }
    }
    var unknownSizes: Int { entries.count { if case .file = $0.kind { $0.size < 0 } else { false } } }

    /// Walks `tree` and refuses any entry that could escape the replica,
    /// write into `.git`/`.fprep`, or collide with another entry.
    static func scan(_ repository: Repository, tree: ObjectID, defaultTime: Int64,
                     sizes: (ObjectID) throws -> BlobInfo?) throws -> LayoutPlan {
        var plan = LayoutPlan()
        try scan(repository, tree: tree, at: .root, folder: -1, into: &plan, defaultTime: defaultTime, sizes: sizes)
        return plan
    }

    private static func scan(_ repository: Repository, tree id: ObjectID, at path: RepoPath, folder: Int32,
                             into plan: inout LayoutPlan, defaultTime: Int64,
                             sizes: (ObjectID) throws -> BlobInfo?) throws {
        let tree: Tree
        do {
            tree = try repository.tree(id)
        } catch {
            throw FprepError("the remote tree '\(path.isRoot ? "/" : path.description)' (\(id)) is missing from the clone; run the command again")
        }
        var names = Set<[UInt8]>()
        for entry in tree.entries {
            let child = path.appending(entry.name)
            // Checked before a folder is entered: the path limit bounds the
            // depth of this walk.
            try TreeEntryRules.check(name: entry.name, mode: entry.mode, path: child)
            guard names.insert(entry.name).inserted else {
                throw FprepError.unsafeEntry(child.description, "two entries share this name (a symlink and a folder, say)")
            }
            switch entry.mode {
            case .tree:
                plan.folders.append(child)
                let index = Int32(plan.folders.count - 1)
                try scan(repository, tree: entry.id, at: child, folder: index, into: &plan,
                         defaultTime: defaultTime, sizes: sizes)
            case .blob, .executable:
                let info = try sizes(entry.id)
                plan.entries.append(Entry(path: child, folder: folder, name: entry.name,
                                          kind: .file(executable: entry.mode == .executable), id: entry.id,
                                          size: info?.size ?? -1, mtime: info?.mtime ?? defaultTime))
            case .symlink:
                let info = try sizes(entry.id)
                plan.entries.append(Entry(path: child, folder: folder, name: entry.name, kind: .symlink,
                                          id: entry.id, size: info?.size ?? -1, mtime: info?.mtime ?? defaultTime))
            case .submodule:
                // Shown as an empty folder; its content is another repository.
                plan.folders.append(child)
                plan.entries.append(Entry(path: child, folder: folder, name: entry.name, kind: .submodule,
                                          id: entry.id, size: -1, mtime: defaultTime))
            case .unknown:
                break  // refused above
            }
        }
    }
}
