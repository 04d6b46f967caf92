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
}
