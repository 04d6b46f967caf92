import CFprepSys
import FprepGit

/// What git did in the replica since fprep last looked: commits made with
/// `git commit` (or `git pull`, `git merge`) on the followed branch, and an
/// index git wrote (`git add`, `git rm`, `git reset`, `git checkout`,
/// `git stash`, `git commit`).
///
/// fprep's view of the replica is its anchor and an index that describes
/// the anchor's tree plus what fprep recorded of the disk. Git moves both
/// under it; were that ignored, a sync dropped a `git commit` (the index
/// already matched the disk, so no change was seen) and moved the branch
/// back. So, before every scan: commits git added on top of the anchor are
/// local work (the anchor moves to them, and they wait to be pushed), and
/// an index git wrote is brought back to the anchor's tree without touching
/// the disk, so that the disk tells what changed, as for any other program.
extension Replica {
    /// Where git's branch and HEAD stand against fprep's anchor.
    public struct GitHeadState: Sendable, Encodable, Equatable {
        /// Commits on the followed branch beyond the anchor that fprep has
        /// not taken in yet (the next sync pushes them).
        public var commitsAhead = 0
        /// The branch or HEAD is somewhere the anchor does not lead to
        /// (`git reset` to an older commit, another branch checked out):
        /// the next sync puts the branch back at the anchor, and the
        /// files git changed are local changes.
        public var elsewhere: String?
        /// The branch HEAD is on, when it is not the followed one (sync
        /// refuses then).
        public var otherBranch: String?
        /// Files those commits took from placeholders (see
        /// `placeholdersGitRead`): the next sync sets them aside instead.
        public var readPlaceholders: [String] = []
    }

    /// Reads where git's HEAD is, for `status`; nothing is changed.
    public func gitHeadState() throws -> GitHeadState {
        var state = GitHeadState()
        guard let anchor else { return state }
        let followed = "refs/heads/" + branch
        if let head = try repository.symbolicTarget("HEAD"), head != followed {
            let other = head.hasPrefix("refs/heads/") ? String(head.dropFirst(11)) : head
            state.otherBranch = other
            state.elsewhere = "HEAD is on '\(other)', not the followed branch '\(branch)'"
            return state
        }
        guard let tip = try repository.referenceTarget(followed), tip != anchor else { return state }
        if try repository.isAncestor(anchor, of: tip) {
            state.commitsAhead = try commitsBetween(anchor, tip)
            state.readPlaceholders = try placeholdersGitRead(from: anchor, to: tip).map(\.description)
        } else {
            state.elsewhere = "the branch '\(branch)' is at \(tip.hex.prefix(12)), which does not contain fprep's anchor \(anchor.hex.prefix(12))"
        }
        return state
    }

    /// Takes the commits `head` found made with git on top of the anchor as
    /// local work: the anchor moves to the branch's tip, which waits to be
    /// pushed. Returns how many commits were taken.
    func adoptGitCommits(_ head: GitHeadState) throws -> Int {
        guard head.commitsAhead > 0, let anchor, let tip = try repository.referenceTarget("refs/heads/" + branch) else { return 0 }
        // Their trees obey the rules every tree fprep lays out obeys.
        try TreeEntryRules.check(ChangeSet.between(repository, from: repository.commit(anchor).treeID,
                                                   to: repository.commit(tip).treeID))
        // git wrote them loose and did not flush them (its default): durable
        // before the store names the tip.
        guard fprep_syncfs(rootFolder.fd) == 0 else { throw SystemError("syncfs", root) }
        try store.transaction {
            try store.setMeta("anchor", tip.hex)
            try store.setMeta(Replica.unpushedKey, tip.hex)
        }
        self.anchor = tip
        return head.commitsAhead
    }

    /// Brings an index that another program (git) wrote back to the
    /// anchor's tree: an entry git changed takes the anchor's version with
    /// no stat data (so the file on disk is read and compared), an entry
    /// git added goes (the file on disk is then new), an entry git removed
    /// comes back. Nothing on disk changes. A placeholder stays one: a
    /// file that carries placeholder marks for the entry's blob and holds
    /// no data is never read as content. Returns how many entries changed.
    /// The store's flag for an index a local commit had not written yet
    /// when its anchor moved (a crash between the two).
    static let indexBehindKey = "index_behind_anchor"

    @discardableResult
    func realignIndexGitWrote(_ index: Index, write: Bool = true) throws -> Int {
        let behind = try store.meta(Self.indexBehindKey) == "1"
        guard behind || !index.lastWrittenByFprep() else { return 0 }
        guard let anchor else { return 0 }
        let tree = try repository.commit(anchor).treeID
        let wanted = try TreeLookup.allEntries(of: tree, in: repository)
        var changed = 0
        var seen = Set<[UInt8]>()
        var removals: [[UInt8]] = []
        for i in 0..<index.count {
            guard let entry = index.entry(at: i) else { continue }
            seen.insert(entry.path)
            guard let target = wanted[entry.path] else {
                removals.append(entry.path)
                continue
            }
            if target.id == entry.id && target.mode.raw == entry.mode { continue }
            try index.add(realigned(entry.path, target))
            changed += 1
        }
        for path in removals { try index.remove(path: path) }
        changed += removals.count
        for (path, target) in wanted where !seen.contains(path) {
            try index.add(realigned(path, target))
            changed += 1
        }
        // Written either way: the index is fprep's again, so the next
        // command need not compare. (`status` only reads: its copy is
        // realigned in memory.)
        if write {
            try index.write()
            if behind { try store.setMeta(Self.indexBehindKey, "") }
        }
        return changed
    }

    /// The entry for `path` at the anchor's version `target`, as fprep
    /// records an item it has not looked at yet.
    private func realigned(_ path: [UInt8], _ target: TreeEntry) -> IndexEntry {
        let item = RepoPath(bytes: path)
        if target.mode.isFile, let stat = rootFolder.stat(item), stat.isRegular,
           ContentOperations.placeholderBlob(rootFolder, item) == target.id,
           ContentOperations.isMarkedDataless(rootFolder, item),
           ContentOperations.holdsNoData(rootFolder, item, stat) {
            return IndexEntry(path: path, id: target.id, mode: target.mode.raw,
                              stat: .placeholder(size: stat.size, mtime: stat.mtime.0), skipWorktree: true)
        }
        if target.mode == .submodule {
            return IndexEntry(path: path, id: target.id, mode: target.mode.raw, skipWorktree: true)
        }
        return IndexEntry(path: path, id: target.id, mode: target.mode.raw, stat: StatData(), skipWorktree: false)
    }

    /// Paths where a commit made with git between `anchor` and `tip`
    /// (first parents) gives a file content while the file on disk still
    /// carries placeholder marks: git read what a placeholder reads as
    /// (zeros, and whatever a program wrote over them), not the file's
    /// content. That takes a deliberate step (`git update-index
    /// --no-skip-worktree`: git leaves skip-worktree entries alone), but such a commit, pushed,
    /// would put zeros nobody wrote over the file on every device.
    func placeholdersGitRead(from anchor: ObjectID, to tip: ObjectID) throws -> [RepoPath] {
        var found: [RepoPath] = []
        var current = tip
        var walked = 0
        while current != anchor, walked < 10_000 {
            walked += 1
            let commit = try repository.commit(current)
            guard let parent = commit.parentIDs.first else { break }
            let changes = try ChangeSet.between(repository, from: repository.commit(parent).treeID, to: commit.treeID)
            for update in changes.updated where update.new.mode.isFile && !found.contains(update.path) {
                guard let stat = rootFolder.stat(update.path), stat.isRegular,
                      ContentOperations.isMarkedDataless(rootFolder, update.path) else { continue }
                found.append(update.path)
            }
            current = parent
        }
        return found
    }

    /// Commits made with git that read placeholders are not taken in: the
    /// branch goes back to the anchor and they are kept under a backup ref
    /// (as when the branch left the anchor), and what is on disk is synced
    /// as local changes, with the rule for bytes written into a placeholder
    /// (a conflict copy; the name keeps the remote's content). Returns the
    /// backup ref, or nil when no such commit is waiting.
    func setAsideCommitsReadingPlaceholders(_ head: GitHeadState) throws -> String? {
        guard !head.readPlaceholders.isEmpty, let anchor, let tip = try repository.referenceTarget("refs/heads/" + branch) else { return nil }
        let backup = try keepBackup(of: tip, reason: "fprep: commits made with git that read placeholders")
        try repository.setReference("refs/heads/" + branch, to: anchor, message: "fprep: back to the anchor (commits made with git read placeholders)")
        return backup
    }

    /// How many commits `tip` has that `base` does not (first parents).
    private func commitsBetween(_ base: ObjectID, _ tip: ObjectID) throws -> Int {
        var count = 0
        var current = tip
        while current != base, count < 10_000 {
            count += 1
            guard let parent = try repository.commit(current).parentIDs.first else { break }
            current = parent
        }
        return count
    }
}
