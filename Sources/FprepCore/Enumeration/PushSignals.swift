import FprepGit

/// The containers a push affects, for the push service (DESIGN "Push"): the
/// parent of every item that was added, changed or deleted, and both the old
/// and the new parent of a move; the root is
/// `NSFileProviderRootContainerItemIdentifier`. Unlike a replica's signal
/// pass there is no working-set filter here: the server does not know a
/// device's working set, so the service adds the working set to every push.
public enum PushSignals {
    /// The affected containers between two commits of `repository`, root
    /// first, then by path; `old` nil (or the zero id) for a new branch.
    public static func containers(_ repository: Repository, from old: ObjectID?, to new: ObjectID) throws -> [String] {
        let oldTree = try old.flatMap { $0.isZero ? nil : try repository.commit($0).treeID }
        let newTree = try repository.commit(new).treeID
        let changes = try ChangeSet.between(repository, from: oldTree, to: newTree)
        var parents = Set<RepoPath>()
        for update in changes.updated { parents.insert(update.path.parent) }
        for deletion in changes.deleted { parents.insert(deletion.path.parent) }
        for folder in changes.addedFolders { parents.insert(folder.path.parent) }
        for folder in changes.deletedFolders { parents.insert(folder.path.parent) }
        for move in changes.moved {
            parents.insert(move.from.parent)
            parents.insert(move.to.parent)
        }
        // The root sorts first: its path is empty.
        return parents.sorted().map(ContainerIdentifier.of)
    }
}
