import FprepGit

/// What `fprep sync --dry-run` finds: the local changes a sync would commit
/// and the remote's changes since the anchor it would bring in. Nothing in
/// the replica changes (the fetch moves only git's tracking refs, which
/// sync does not trust: it keeps the remote's tip it took in its store).
/// Conflicts are worked out by the sync itself, from both lists.
public struct SyncPreview: Sendable, Encodable {
    public struct Incoming: Sendable, Encodable {
        /// "added", "changed", "deleted" or "moved".
        public let kind: String
        public let path: String
        public let from: String?
    }

    public var anchor: String?
    /// The remote's tip as just fetched (nil: the branch is empty).
    public var remote: String?
    public var localChanges: [LocalChange] = []
    /// Commits made with git on the branch that the sync would push.
    public var gitCommitsWaiting = 0
    public var incoming: [Incoming] = []
    /// The remote's history no longer contains the anchor (a force-push).
    public var remoteRewritten = false
}

extension Replica {
    public func syncPreview() throws -> SyncPreview {
        var preview = SyncPreview(anchor: anchor?.hex)
        let index = try repository.index()
        let head = try gitHeadState()
        preview.gitCommitsWaiting = head.commitsAhead
        if head.commitsAhead == 0 { try realignIndexGitWrote(index, write: false) }
        preview.localChanges = try LocalScanner(replica: self, index: index).scan().changes
        do {
            try Transport.fetchTrees(gitDirectory: gitDirectory, branch: branch)
        } catch is Transport.BranchNotFound {
            return preview
        } catch let error as GitCommandError {
            throw FprepError.remoteUnreachable(remoteURL, error, root: root)
        }
        guard let theirs = try repository.referenceTarget("refs/remotes/origin/" + branch) else { return preview }
        preview.remote = theirs.hex
        guard theirs != anchor else { return preview }
        if let last = try store.meta(Self.remoteTipKey).flatMap(ObjectID.init(hex:)), try !repository.isAncestor(last, of: theirs) {
            preview.remoteRewritten = true
        }
        // What the remote did since the histories parted (the anchor may
        // be ahead with local commits not pushed yet).
        let base = try anchor.flatMap { try repository.mergeBase($0, theirs) }.map { try repository.commit($0).treeID }
        let changes = try ChangeSet.between(repository, from: base, to: repository.commit(theirs).treeID)
        for update in changes.updated {
            preview.incoming.append(.init(kind: update.old == nil ? "added" : "changed", path: update.path.description, from: nil))
        }
        for (path, _) in changes.deleted { preview.incoming.append(.init(kind: "deleted", path: path.description, from: nil)) }
        for move in changes.moved {
            preview.incoming.append(.init(kind: "moved", path: move.to.description, from: move.from.description))
        }
        preview.incoming.sort { ($0.path, $0.kind) < ($1.path, $1.kind) }
        return preview
    }
}
