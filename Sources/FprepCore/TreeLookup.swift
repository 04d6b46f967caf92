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
