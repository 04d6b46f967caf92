import FprepGit

extension Replica {
    /// Whether the remote's branch is somewhere this replica has not taken
    /// in, asked with `git ls-remote` (no objects move): the cheap question
    /// a poll asks before it pays for a sync. A remote without the branch
    /// counts as moved, so the sync says what happened.
    public func remoteMoved() throws -> Bool {
        let tip = try Transport.remoteTip(gitDirectory: gitDirectory, branch: branch)
        guard let tip else { return true }
        let known = try store.meta(Self.remoteTipKey).flatMap(ObjectID.init(hex:))
            ?? repository.referenceTarget("refs/remotes/origin/" + branch)
        return tip != known
    }

    /// Whether a poll finds work for a sync: the remote moved, or a local
    /// commit made while the remote was away waits to be pushed and the
    /// remote answers again (nothing else would push it: no change here,
    /// none there). Throws when the remote cannot be reached.
    public func pollFindsWork() throws -> Bool {
        if try remoteMoved() { return true }
        return !(try store.meta(Self.unpushedKey) ?? "").isEmpty
    }
}
