import FprepGit

/// Looks up entries of one tree by path, reading only the trees on the way.
struct TreeLookup {
    let repository: Repository
    let tree: ObjectID

    func entry(at path: RepoPath) throws -> TreeEntry? {
        var current = try repository.tree(tree)
        let names = path.components
        for (i, name) in names.enumerated() {
            guard let entry = current.entry(named: name) else { return nil }
            if i == names.count - 1 { return entry }
            guard entry.mode == .tree else { return nil }
            current = try repository.tree(entry.id)
        }
        return nil
    }
}

extension TreeLookup {
    /// Every entry below `tree` that is not a folder, by full path (a walk
    /// of the whole tree: for the rare commands that compare one).
    static func allEntries(of tree: ObjectID, in repository: Repository) throws -> [[UInt8]: TreeEntry] {
        var result: [[UInt8]: TreeEntry] = [:]
        var pending: [([UInt8], ObjectID)] = [([], tree)]
        while let (prefix, id) = pending.popLast() {
            for entry in try repository.tree(id).entries {
                let path = prefix.isEmpty ? entry.name : prefix + [0x2F] + entry.name
                if entry.mode == .tree { pending.append((path, entry.id)) } else { result[path] = entry }
            }
        }
        return result
    }
}
