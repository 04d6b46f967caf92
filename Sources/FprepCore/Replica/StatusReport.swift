import FoundationEssentials
import Glibc
import FprepGit

/// What `fprep status` reports about a replica.
public struct StatusReport: Sendable, Encodable {
    public let root: String
    public let domain: String
    public let remote: String
    public let branch: String
    public let anchor: String?
    /// Files and symlinks of the anchor.
    public let items: Int
    public let folders: Int
    public let dataless: Int
    public let materialized: Int
    public let modified: Int
    public let deleted: Int
    /// Sum of the sizes of every file at the anchor, as the remote knows them.
    public let logicalSize: Int64
    /// Disk space the replica takes: its tree, `.git` and `.fprep`, as `du` counts.
    public let bytesOnDisk: Int64
    /// What `.git` takes (commits, trees, local content, and content git
    /// fetched by itself, which `fprep gc` gives back); part of `bytesOnDisk`.
    public var gitBytes: Int64 = 0
    /// Local changes not yet synced (modified, added, deleted, moved), path order.
    public let changes: [LocalChange]
    /// A local commit that waits to be pushed (the remote was unreachable), if any.
    public let waitingToPush: String?
    /// Why it waits: the last sync's failure (the remote unreachable, or
    /// its refusal of the push, in its own words), when one was recorded.
    public var waitingBecause: String? = nil
    /// Why an interrupted operation still waits to be finished (the disk is full), if one does.
    public var unfinished: String? = nil
    /// The process id of the `fprep agent` serving the replica, if one runs.
    public var agent: Int32? = nil
    /// Where git's branch stands against the anchor (commits made with git
    /// that the next sync pushes, or a branch git moved elsewhere).
    public var git: Replica.GitHeadState? = nil
    /// Placeholders whose size the remote did not say (0 bytes on disk,
    /// not counted in `logicalSize`); see `UnknownSizes`.
    public var sizeUnknown: Int = 0
    /// `.gitignore` files whose rules were not applied because their content
    /// is not on disk (see `IgnoreRules`); `fprep sync` brings it.
    public var ignoreFilesNotRead: [String] = []
    /// Untracked items the ignore rules leave out (a folder with a trailing
    /// `/`); only when asked for (`status --ignored`).
    public var ignored: [String]? = nil
    /// Items found that a sync leaves here, with why: a FIFO, socket or
    /// device, a name the remote would refuse (see `TreeEntryRules`).
    public var notSynced: [Skipped] = []
    /// The paths pinned to this device ("." for the whole replica).
    public var pins: [String] = []
    /// Items whose old version a sync swapped out while a program had it
    /// open for writing: it waits aside until closed (see `HeldFile`).
    public var heldOpen: [String] = []
    /// The disk budget, when one is set: where the replica stands against
    /// it (`evicted` is what `evict --to-budget` would evict now).
    public var budget: BudgetReport? = nil
    /// Why the budget settings could not be read, when they cannot.
    public var budgetProblem: String? = nil
    /// How local changes were found: "journal" (what the agent's change
    /// journal named since the last scan; folder count and sizes are the
    /// last full scan's) or "full" (every item looked at).
    public var scan: String = "full"
}

extension Replica {
    /// Scans every item with `lstat` (content is read only for materialized
    /// files whose stat changed, and for new files that may be moves) and
    /// sums up the replica.
    /// `fullScan` looks at every item even when the agent's change journal
    /// could say what changed (listing ignored items always does).
    public func status(listingIgnored: Bool = false, fullScan: Bool = false) throws -> StatusReport {
        let index = try repository.index()
        Trace.mark("read index")
        // What git staged, reset or checked out shows as the change it is
        // (in memory: status writes nothing).
        let head = try gitHeadState()
        if head.commitsAhead == 0 { try realignIndexGitWrote(index, write: false) }
        let scan = try LocalScanner(replica: self, index: index).scan(usingJournal: !listingIgnored && !fullScan)
        Trace.mark("scan")
        defer { Trace.mark("disk use") }
        let pending = try store.meta(Replica.unpushedKey).flatMap { $0.isEmpty ? nil : $0 }
        let gitBytes = diskUsage(of: gitDirectory)
        var report = StatusReport(root: root, domain: domain, remote: remoteURL, branch: branch, anchor: anchor?.hex,
                            items: scan.items, folders: scan.folderCount, dataless: scan.counts[.dataless] ?? 0,
                            materialized: scan.counts[.materialized] ?? 0, modified: scan.counts[.modified] ?? 0,
                            deleted: scan.counts[.deleted] ?? 0,
                            logicalSize: Int64(try store.meta("logical_size") ?? "0") ?? 0,
                            bytesOnDisk: scan.treeBytes + gitBytes + diskUsage(of: stateFolder) + rootBlocks(),
                            changes: scan.changes, waitingToPush: pending, unfinished: unfinished,
                            agent: InPlaceHydration.servingAgent(replicaRoot: root),
                            git: head == GitHeadState() ? nil : head, sizeUnknown: try unknownSizeCount(index))
        report.gitBytes = gitBytes
        report.ignoreFilesNotRead = scan.unreadIgnoreFiles
        report.notSynced = scan.skipped
        if pending != nil { report.waitingBecause = try store.meta(Replica.pushWaitsKey).flatMap { $0.isEmpty ? nil : $0 } }
        report.pins = try pins()
        report.heldOpen = try store.heldFiles().map(\.item.description)
        do {
            let budget = try DiskBudget.load(self)
            if budget.isSet { report.budget = try enforceBudget(budget, dryRun: true) }
        } catch let error as FprepError where error.kind == .usage {
            report.budgetProblem = error.message
        }
        if listingIgnored { report.ignored = scan.ignored }
        report.scan = scan.fromJournal ? "journal" : "full"
        return report
    }
}

extension Replica {
    /// The root folder's own blocks, as `du` counts them.
    func rootBlocks() -> Int64 {
        var info = stat()
        return lstat(root, &info) == 0 ? Int64(info.st_blocks) * 512 : 0
    }
}
