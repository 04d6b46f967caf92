import CFprepSys
import FoundationEssentials
import Glibc
import FprepGit

/// What `sync` did.
public struct SyncReport: Sendable, Encodable {
    public var from: String?
    public var to: String?
    public var added = 0
    public var changed = 0
    public var deleted = 0
    public var moved = 0
    public var bytesFetched: Int64 = 0
    /// Items whose local changes the sync kept instead of applying the
    /// remote's change (left for reconcile).
    public var keptLocal: [Skipped] = []
    /// Changed files left for a later sync because a program still has
    /// them open for writing (`deferOpenForWriting`; also in `keptLocal`).
    public var waitingForWriters: [String] = []
    /// Items whose old version (replaced or removed by a sync) a program
    /// still has open for writing: it waits aside until the program closes
    /// it, then goes, or becomes a conflict copy if the program wrote into
    /// it (see `HeldFile`).
    public var heldOpen: [String] = []
    /// Files under a pin that this sync brought as placeholders and then
    /// materialized (see `PinSet`).
    public var pinnedMaterialized: [String] = []
    public var signals: [Signal] = []
    /// Local changes this sync committed.
    public var localChanges: [LocalChange] = []
    /// Files both sides changed that could not be merged: both kept.
    public var conflicts: [Conflict] = []
    /// The commit pushed to the remote, if any.
    public var pushed: String?
    /// Why the sizes of the pushed files are not in the remote's size
    /// manifest, when the remote refused them (the push itself went through).
    public var sizesNotPublished: String?
    /// A commit that could not be pushed (remote unreachable); the next sync pushes it.
    public var waitingToPush: String?
    /// The ref that keeps the replica's old anchor when the remote's
    /// history was rewritten under it (a force-push), or the branch git
    /// moved away from the anchor (`git reset`).
    public var backup: String?
    /// Commits made with git on the followed branch that this sync took in
    /// as local work (and pushed).
    public var gitCommitsTaken = 0
    /// The ref that keeps commits made with git on a branch git moved away
    /// from the anchor.
    public var gitBackup: String?
    /// Files that commits made with git took from placeholders (their
    /// zeros, not their content): those commits were set aside (`gitBackup`).
    public var gitReadPlaceholders: [String] = []
    /// Content git fetched by itself that the sync gave back, once it
    /// passed `fprep.gcThreshold` (as `fprep gc` does).
    public var fetchedContentCollected: GarbageReport?
}

extension SyncReport {
    /// Paths this sync committed, kept beside or left waiting: the next
    /// journal scan looks at them again (see `JournalRecord`).
    var journalPaths: [[UInt8]] {
        var paths: [String] = []
        for change in localChanges { paths.append(change.path); if let from = change.from { paths.append(from) } }
        for conflict in conflicts { paths += [conflict.path, conflict.copy] }
        paths += waitingForWriters + pinnedMaterialized
        paths += keptLocal.map(\.path).filter { !$0.isEmpty }
        return paths.map { Array($0.utf8) }
    }
}

/// The journal payload of a sync: the two anchors it moves between.
struct SyncJournal: Codable {
    var from: String?
    var to: String
    /// Conflicts the merge resolved; they are signalled with the rest.
    var conflicts: [Conflict]? = nil
    /// The token of the sync's temporary files (`.NAME.fprep-TOKEN`), so
    /// that recovery removes those and never a user's file of that shape;
    /// nil in journals of versions that did not record it.
    var token: String? = ContentOperations.newToken()

    func encoded() -> [UInt8] { Array((try? JSONEncoder().encode(self)) ?? Data()) }
    static func decode(_ bytes: [UInt8]) -> SyncJournal? { try? JSONDecoder().decode(Self.self, from: Data(bytes)) }
}

extension Replica {
    /// Commits the local changes, fetches the followed branch (commits and
    /// trees), merges, and moves the replica from its anchor to the result:
    /// the tree diff between the two is applied to the placeholders and
    /// materialized files, and the affected containers are signalled; then
    /// pushes. Journaled: a killed sync is finished by the next command.
    ///
    /// `incoming` brings only the remote's changes in, at a cost that follows
    /// their size: no scan of the tree, no new local commit (a commit that
    /// already waits to be pushed is still merged and pushed). Each path the
    /// remote changes is still checked on disk, so a file the user changed
    /// there steps aside as a conflict copy instead of being overwritten;
    /// other local changes stay where they are for the next full sync.
    ///
    /// `deferOpenForWriting` (the agent's syncs) leaves a changed file that
    /// a program still has open for writing to a later sync, reported in
    /// `keptLocal`: a half-written save is never pushed.
    public func sync(incoming: Bool = false, deferOpenForWriting: Bool = false) throws -> SyncReport {
        TestGate.sync.pass()
        Trace.mark("start")
        // Read while the fetch waits on the remote: the index (a both-ways
        // sync reads it at once, for its scan), and the packs of commits and
        // trees, where the diff reads old trees all over.
        ReadAhead.start(choosing: { [gitDirectory] in
            (incoming ? Index.readAheadFiles(gitDirectory + "/index") : []) + ReadAhead.historyPacks(gitDirectory: gitDirectory)
        })
        var report = SyncReport()
        let startAnchor = anchor
        let garbageThreshold = try garbageThreshold()
        // Fetched content is never kept past the command: a sync that
        // fails (a full disk, most of all) leaves no quarantine or
        // half-written pack taking space; a resumed sync fetches again.
        var finished = false
        defer {
            if !finished {
                removeFetchQuarantines()
                StorageFailure.removeGitTemporaries(gitDirectory: gitDirectory)
            }
        }

        // Refused before the fetch starts: it says so at once, even when the
        // remote is slow to answer.
        let head = try gitHeadState()
        if head.otherBranch != nil, let elsewhere = head.elsewhere {
            throw FprepError(.usage, "\(elsewhere); run 'git switch \(branch)' in the replica, then 'fprep sync' (nothing was changed)")
        }

        // The remote's tip this replica last took in (or pushed), read
        // before any fetch: a tip that is not in the remote's history any
        // more means the remote rewrote it (a force-push). Kept in the
        // store, not read from the tracking ref, which a fetch moves even
        // when the sync then fails.
        func lastRemoteTip() throws -> ObjectID? {
            try store.meta(Self.remoteTipKey).flatMap(ObjectID.init(hex:)) ?? repository.referenceTarget("refs/remotes/origin/" + branch)
        }
        let lastRemoteAtStart = try lastRemoteTip()
        // The first fetch runs while this replica's own side is taken in
        // (git's commits, the scan, the local commit): it only moves the
        // tracking refs and adds objects, which none of that reads, so they
        // cost no time beyond the remote's answer. Waited for before the
        // clean-up above (defers run last first), and always, so no git
        // process outlives the command.
        var earlyFetch: BackgroundWork? = BackgroundWork { [gitDirectory, branch] in
            try Transport.fetchTrees(gitDirectory: gitDirectory, branch: branch)
        }
        defer { try? earlyFetch?.wait() }

        // The moment the scan began, once what it found is committed: kept
        // as the sync ends, whether it succeeds or not (an offline sync
        // still moves it). Not at once: as the command's first write to the
        // store it waited for SQLite to sync its log (up to 47 ms in
        // `fprep-bench sync --agent`), where the sync's own first record
        // pays that once anyway; lost to a power cut, it only makes the next
        // scan look at more files.
        var checkedPlaceholders: (seconds: Int64, nanoseconds: Int64)?
        defer { if let checkedPlaceholders { try? PlaceholderCheck.record(checkedPlaceholders, in: store) } }

        // 1. What git did here (commits on the branch, an index it wrote)
        //    is taken in; then the local changes become a commit on top
        //    of the anchor.
        if head.elsewhere != nil, let tip = try repository.referenceTarget("refs/heads/" + branch),
           let anchor, try !repository.isAncestor(tip, of: anchor) {
            // Commits made with git on a history that left the anchor (a
            // reset, then commits): the sync puts the branch back at the
            // anchor, and they stay reachable (their files' changes on
            // disk are synced as local changes).
            report.gitBackup = try keepBackup(of: tip, reason: "fprep: commits made with git away from the anchor")
        }
        if let backup = try setAsideCommitsReadingPlaceholders(head) {
            report.gitBackup = backup
            report.gitReadPlaceholders = head.readPlaceholders
        } else {
            report.gitCommitsTaken = try adoptGitCommits(head)
        }
        // Old versions programs held open at earlier syncs: what they
        // became (conflict copies of bytes a program wrote) is committed by
        // this sync.
        let heldCopies = settleHeldFiles()
        if incoming {
            // An incoming sync commits nothing of this device's: say where they wait.
            report.keptLocal += heldCopies.map {
                Skipped(path: $0.description, reason: "a program wrote into the old version it held open after the remote changed it: kept here as this conflict copy for the next full 'fprep sync' (an incoming one pushes nothing)")
            }
        }
        var index: Index?
        // The scan's journal point, for the record this sync leaves (see
        // `JournalRecord`); an incoming sync carries the last record over.
        var journalScanner: LocalScanner?
        // Whether the scan looked at every file (not the agent's journal).
        var scannedEverything = false
        let indexBefore = incoming ? Index.checksumOnDisk(gitDirectory + "/index") : nil
        Trace.mark("git's state")
        if !incoming {
            var scanned = try repository.index()
            Trace.mark("index to scan")
            try realignIndexGitWrote(scanned)
            var scanner = LocalScanner(replica: self, index: scanned)
            scanner.countsItems = false
            // A copy made just now may not be in the agent's journal yet.
            var scan = try scanner.scan(usingJournal: heldCopies.isEmpty)
            journalScanner = scanner
            if !scanner.ignoreRules.unread.isEmpty, materializeRuleFiles(scanner.ignoreRules.unread) {
                // Rules fprep could not read (a `.gitignore` still a
                // placeholder): with their content here (and in the index
                // on disk, which is read again), the scan applies them.
                scanned = try repository.index()
                scanner = LocalScanner(replica: self, index: scanned)
                scan = try scanner.scan()
                journalScanner = nil
            }
            index = scanned
            if !scanner.strays.paths.isEmpty {
                settleStrayTemporaries(scanner.strays.paths)
                // What they became (conflict copies of bytes a program
                // wrote) is committed by this sync, not the next one.
                scan = try LocalScanner(replica: self, index: scanned).scan()
                journalScanner = nil
            }
            report.keptLocal += scan.skipped
            if deferOpenForWriting {
                let deferred = scan.deferFilesOpenForWriting(root: root)
                report.keptLocal += deferred
                report.waitingForWriters = deferred.map(\.path)
            }
            scannedEverything = !scan.fromJournal
            Trace.mark("scan")
            if let committed = try LocalCommitter(replica: self).commit(scan, index: scanned) {
                report.localChanges = committed.changes
                report.conflicts += committed.conflicts
            }
            // Every placeholder the scan passed was one when it began, and
            // what it found changed is committed now: recorded as the sync
            // ends (see `checkedPlaceholders`).
            checkedPlaceholders = scanner.started
            Trace.mark("local commit")
        } else {
            // Read while the fetch waits on the remote, where it would
            // otherwise wait for the fetch (45–76 ms cold at 10^6 files, a
            // third of git's whole floor). An index that cannot be read is
            // read again where it is needed, and fails the sync only if
            // the remote brought a change.
            index = try? repository.index()
            Trace.mark("index, during the fetch")
        }

        // 2. Fetch, then merge, lay out and push until the push lands.
        for attempt in 1...5 {
            let lastRemote = attempt == 1 ? lastRemoteAtStart : try lastRemoteTip()
            do {
                if let early = earlyFetch {
                    earlyFetch = nil
                    try early.wait()
                } else {
                    try Transport.fetchTrees(gitDirectory: gitDirectory, branch: branch)
                }
            } catch is Transport.BranchNotFound {
                guard lastRemote == nil else {
                    throw FprepError("the branch '\(branch)' no longer exists on the remote '\(remoteURL)'; the replica is unchanged")
                }
                // The remote is empty (no commit on the branch yet): this
                // replica's first commit starts it.
                guard let ours = anchor else { break }
                if case .rejected = try push(ours, report: &report) { continue }  // another device started it: fetch and merge
                break
            } catch let error as GitCommandError {
                if let full = FprepError.storage(error, root: root) {
                    StorageFailure.removeGitTemporaries(gitDirectory: gitDirectory)
                    throw full
                }
                let waiting = try store.meta(Replica.unpushedKey).flatMap { $0.isEmpty ? nil : $0 }
                if waiting != nil { try? store.setMeta(Replica.pushWaitsKey, "could not reach the remote: \(error.reason)") }
                let kept = waiting.map { " \(report.localChanges.isEmpty ? "Local changes" : counted(report.localChanges.count, "local change")) \(report.localChanges.count == 1 ? "is" : "are") committed (\($0.prefix(12))) and \(report.localChanges.count == 1 ? "waits" : "wait") to be pushed." } ?? " The replica is unchanged."
                throw FprepError("cannot reach remote '\(remoteURL)': \(error.reason).\(kept) Run 'fprep sync' again when the remote is back",
                                 detail: error.standardError)
            }
            Trace.mark("fetch")
            guard let theirs = try repository.referenceTarget("refs/remotes/origin/" + branch) else {
                throw FprepError("the branch '\(branch)' no longer exists on the remote '\(remoteURL)'; the replica is unchanged")
            }
            // A fast-forward's change is diffed meanwhile, and the new
            // content of few materialized files asked for (see `ChangesAhead`).
            var ahead: ChangesAhead?
            if let ours = anchor, ours != theirs, try repository.isAncestor(ours, of: theirs) {
                ahead = ChangesAhead(root: root, folder: rootFolder, from: try repository.commit(ours).treeID,
                                     to: try repository.commit(theirs).treeID,
                                     content: (SyncContentFetch(replica: self, token: ContentOperations.newToken()), store.database.path))
            }
            defer { ahead?.finish() }
            guard let ours = anchor else {
                // An empty replica: take the remote as it is.
                let journal = SyncJournal(from: nil, to: theirs.hex)
                merge(&report, try applySync(journal, operation: try store.beginOperation("sync", payload: journal.encoded()), index: index,
                                             unflushedObjects: false))
                try ingestManifest()  // the apply's read failed if this one does: its error
                try store.setMeta(Self.remoteTipKey, theirs.hex)
                break
            }
            let target: ObjectID
            do {
                target = try reconcile(ours: ours, theirs: theirs, lastRemote: lastRemote, report: &report)
            } catch let error as FprepError {
                throw refusedSync(error)
            }
            Trace.mark("merge")
            if target != ours {
                let journal = SyncJournal(from: ours.hex, to: target.hex, conflicts: report.conflicts)
                let operation = try store.beginOperation("sync", payload: journal.encoded())
                merge(&report, try applySync(journal, operation: operation, index: index, unflushedObjects: false, ahead: ahead))
            }
            // Taken in by the apply when there was a change; here when not
            // (the sizes of files laid out earlier may be in it), or when
            // the apply's read failed (its error, now that nothing is half done).
            try ingestManifest()
            // Neither waits for the disk (see `CommitDurability`): a power
            // cut that loses them leaves an older tip of the remote's own
            // history, and a commit the remote has that the next sync finds
            // there again. A push below makes them durable with its record.
            let remoteHasTarget = try repository.isAncestor(target, of: theirs)
            try store.transaction(durability: .whenWrittenOut) {
                try store.setMeta(Self.remoteTipKey, theirs.hex)
                if remoteHasTarget { try store.setMeta(Replica.unpushedKey, "") }
            }
            // Push what the remote does not have yet.
            guard !remoteHasTarget else { break }
            guard case .rejected(let reason) = try push(target, report: &report) else { break }
            // Someone pushed first: fetch their work and merge again.
            if attempt == 5 {
                throw FprepError("the remote kept moving while this replica pushed (\(reason)); your changes are committed locally, run 'fprep sync' again")
            }
        }
        // Placeholders laid out before their size was known get it.
        try layOutLearnedSizes(lookWithoutNote: scannedEverything)
        // What the sync brought or moved under a pin gets its content.
        report.pinnedMaterialized = materializePinned()
        // Tags and favorites of every device, merged.
        try SharedMetadata(replica: self).synchronize()
        Trace.mark("shared metadata")
        // Content `git log -p` or `git show` fetched into .git, given back
        // once it takes more than the threshold (never what the sync needs:
        // it fetched into a quarantine and wrote the files).
        report.fetchedContentCollected = try collectGarbage(above: garbageThreshold)
        report.from = startAnchor?.hex
        report.to = anchor?.hex
        report.heldOpen = ((try? store.heldFiles()) ?? []).map(\.item.description)
        leaveJournalRecord(scanner: journalScanner, indexBefore: indexBefore, report: report)
        finished = true
        return report
    }

    /// What the next scan starts from: the point this sync's scan began
    /// at, against the index as the sync leaves it, with the paths the scan
    /// found changed and what the sync itself changed, to look at again
    /// (what it laid out on disk is in the journal already).
    private func leaveJournalRecord(scanner: LocalScanner?, indexBefore: [UInt8]?, report: SyncReport) {
        let after = Index.checksumOnDisk(gitDirectory + "/index")
        guard !after.isEmpty else { return }
        if let indexBefore {
            JournalRecord.carry(self, from: indexBefore, to: after, paths: report.journalPaths)
            return
        }
        guard let scanner, var record = scanner.journal.record else {
            JournalRecord.remove(self)
            return
        }
        record.index = after
        record.paths += report.journalPaths
        record.save(self)
    }

    private enum PushOutcome {
        /// Pushed, or waiting for the next sync (the remote unreachable).
        case done
        /// Someone pushed first.
        case rejected(String)
    }

    /// Pushes `target` to the followed branch, marked as waiting until the
    /// remote has it.
    private func push(_ target: ObjectID, report: inout SyncReport) throws -> PushOutcome {
        try store.setMeta(Replica.unpushedKey, target.hex)
        do {
            report.sizesNotPublished = try pushPublishingSizes(target)
        } catch Transport.PushRefusal.rejected(let reason) {
            return .rejected(reason)
        } catch Transport.PushRefusal.failed(let error) {
            report.waitingToPush = target.hex
            report.keptLocal.append(Skipped(path: "", reason: "could not push (\(error.reason))"))
            try? store.setMeta(Replica.pushWaitsKey, "could not push: \(error.reason)")
            return .done
        }
        try store.setMeta(Replica.unpushedKey, "")
        try store.setMeta(Self.remoteTipKey, target.hex)
        report.pushed = target.hex
        Trace.mark("push")
        return .done
    }

    /// The commit the replica moves to, from its anchor `ours` and the
    /// remote's tip `theirs`:
    /// - the remote's tip when it holds `ours` (a fast-forward);
    /// - with nothing waiting to be pushed, the remote's tip too: what
    ///   `ours` has beyond it was pushed before and the remote dropped it
    ///   (a force-push), so the remote owner's rewind wins, and the old
    ///   anchor is kept under a backup ref rather than pushed back;
    /// - with local work waiting and the remote moving forward, `ours`
    ///   (to push) or a merge of both;
    /// - with local work waiting and the remote's history rewritten under
    ///   it, the local work replayed onto the remote's tip (conflict copies
    ///   where both changed a file), never the dropped commits; the old
    ///   anchor is kept under a backup ref.
    private func reconcile(ours: ObjectID, theirs: ObjectID, lastRemote: ObjectID?, report: inout SyncReport) throws -> ObjectID {
        if try theirs == ours || repository.isAncestor(ours, of: theirs) { return theirs }
        let unpushed = try store.meta(Replica.unpushedKey).flatMap { $0.isEmpty ? nil : $0 }
        guard unpushed != nil else {
            report.backup = try keepBackup(of: ours)
            return theirs
        }
        let rewritten = try lastRemote.map { try !repository.isAncestor($0, of: theirs) } ?? false
        if !rewritten {
            if try repository.isAncestor(theirs, of: ours) { return ours }
            if let base = try repository.mergeBase(ours, theirs) {
                return try commitMerge(base: base, ours: ours, theirs: theirs, parents: [ours, theirs],
                                       message: "fprep: merge remote changes into \(DeviceName.current)\n", report: &report)
            }
        }
        // The local work is what `ours` has beyond the last commit both
        // sides had: the last remote tip, else the parent of the anchor.
        var base = try lastRemote.flatMap { try repository.mergeBase(ours, $0) }
        if base == ours {
            // The remote had all of `ours` (the waiting mark outlived its
            // push): nothing here is new, so the remote's rewrite wins.
            try store.setMeta(Replica.unpushedKey, "")
            report.backup = try keepBackup(of: ours)
            return theirs
        }
        if base == nil { base = try repository.commit(ours).parentIDs.first }
        guard let base else {
            throw FprepError("the remote's history was rewritten and this replica's anchor \(ours.hex.prefix(12)) has no parent to tell its own changes by; the replica is unchanged (clone the remote into a new folder and copy your files over)")
        }
        report.backup = try keepBackup(of: ours)
        return try commitMerge(base: base, ours: ours, theirs: theirs, parents: [theirs],
                               message: "fprep: local changes of \(DeviceName.current) replayed onto the rewritten remote\n", report: &report)
    }

    /// Merges `ours` and `theirs` from `base` and commits the result with `parents`.
    private func commitMerge(base: ObjectID, ours: ObjectID, theirs: ObjectID, parents: [ObjectID], message: String,
                             report: inout SyncReport) throws -> ObjectID {
        let merged = try TreeMerge(replica: self, device: DeviceName.current, date: Self.conflictDate())
            .merge(base: base, ours: ours, theirs: theirs)
        let identity = Identity.current()
        let signature = Signature(name: identity.name, email: identity.email, time: Int64(Date().timeIntervalSince1970))
        report.conflicts += merged.conflicts
        let commit = try repository.writeCommit(tree: merged.tree, parents: parents, message: message,
                                                author: signature, committer: signature)
        // Durable before the sync's journal names it.
        try flushWrittenObjects()
        return commit
    }

    /// Keeps `commit` reachable under `refs/fprep/backup/DATE-ID` of the
    /// replica's git directory (never pushed: fprep pushes only its branch);
    /// returns the ref's name.
    func keepBackup(of commit: ObjectID, reason: String = "fprep: the remote dropped this history") throws -> String {
        let stamp = Self.isoDate(Int64(Date().timeIntervalSince1970)).replacingAll(":", with: "-")
        let name = "refs/fprep/backup/\(stamp)-\(commit.hex.prefix(12))"
        try repository.setReference(name, to: commit, message: reason)
        return name
    }

    /// The store's key for the remote's tip the replica last took in or pushed.
    static let remoteTipKey = "remote_tip"
    /// The store's key for the local commit that waits to be pushed (empty: none).
    static let unpushedKey = "unpushed"
    /// The store's key for why it waits: the last sync's failure to reach
    /// the remote or to push (shown by `status` while a commit waits).
    static let pushWaitsKey = "push_waits"

    /// A refused remote tree said as a sync's error: the entry, why, and
    /// that the replica stays at its anchor (other errors pass through).
    func refusedSync(_ error: FprepError) -> FprepError {
        guard let refusal = error.refusal else { return error }
        let stays = anchor.map { "the replica stays at \($0.hex.prefix(12))" } ?? "the replica stays empty"
        var refused = FprepError("refusing remote tree entry '\(refusal.path)': \(refusal.reason); \(stays) (fix that entry on the remote, then run 'fprep sync' again)")
        refused.refusal = refusal
        return refused
    }

    /// Folds the report of one applied step into the sync's report.
    private func merge(_ report: inout SyncReport, _ step: SyncReport) {
        report.added += step.added
        report.changed += step.changed
        report.deleted += step.deleted
        report.moved += step.moved
        report.bytesFetched += step.bytesFetched
        report.keptLocal += step.keptLocal
        report.signals += step.signals
    }

    /// The date in conflict copies' names: YYYY-MM-DD, UTC.
    static func conflictDate() -> String {
        String(isoDate(Int64(Date().timeIntervalSince1970)).prefix(10))
    }

    /// Reads the size manifest commits fetched since the last read.
    func ingestManifest() throws {
        guard let tip = try repository.referenceTarget(SizeManifest.trackingReference) else { return }
        let known = try store.meta("manifest_tip").flatMap(ObjectID.init(hex:))
        guard tip != known else { return }
        let entries = try SizeManifest.entries(repository, from: tip, stoppingAt: known)
        store.warmBlobInfo(entries.map(\.0))
        // Not waited for: lost to a power cut with its tip, the same
        // entries are read again; a record that waits (the sync's journal
        // record, next) makes it durable too.
        try store.transaction(durability: .whenWrittenOut) {
            try store.recordBlobInfo(entries)
            try store.setMeta("manifest_tip", tip.hex)
        }
    }

    /// Applies the change from `journal.from` to `journal.to`. Every step
    /// checks what is already on disk, so running it again after a crash
    /// finishes the same sync.
    /// `unflushedObjects`: `journal.to` may name objects nobody flushed (a
    /// resumed sync cannot tell), so the barrier before the index flushes
    /// the whole filesystem (one syncfs, at the end or while the new
    /// content is fetched; see `SyncApplier.apply`). A fetch's packs git flushes itself, fprep its
    /// own objects as it writes them, and commits made with git here are
    /// flushed as they are taken in (see `DurableChanges`).
    /// `ahead`: the change, when it was diffed while the sync did other work.
    func applySync(_ journal: SyncJournal, operation: Int64, resuming: Bool = false, index: Index? = nil,
                   unflushedObjects: Bool = true, ahead: ChangesAhead? = nil) throws -> SyncReport {
        guard let target = ObjectID(hex: journal.to) else {
            try store.endOperation(operation)
            throw FprepError("the journal of an interrupted sync is unreadable; run 'fprep sync' again")
        }
        let source = journal.from.flatMap(ObjectID.init(hex:))
        let fromTree = try source.map { try repository.commit($0).treeID }
        let toCommit = try repository.commit(target)
        // A tree fprep refuses (FprepError.unsafeEntry) ends the sync before
        // anything is written, and its journal record with it: the next
        // command must not retry it. Other errors leave the record, so a
        // sync that already wrote is finished later.
        let changes: ChangeSet
        // Whether the paths' lookups on disk were started with the diff.
        var lookedUpAhead = false
        do {
            if let early = try ahead?.changes(from: fromTree, to: toCommit.treeID) {
                changes = early
                lookedUpAhead = true
                Trace.mark("tree diff, done ahead")
            } else {
                changes = try ChangeSet.between(repository, from: fromTree, to: toCommit.treeID)
            }
            try TreeEntryRules.check(changes)
        } catch let error as FprepError {
            try store.endOperation(operation)
            throw refusedSync(error)
        }
        Trace.mark("diff")
        // The content of changed materialized files is asked for now (what
        // was not asked for with the diff ahead), so its round trip
        // overlaps everything up to the writing of it.
        let contentAhead = lookedUpAhead ? ahead?.content : nil
        removeFetchQuarantines(keeping: contentAhead?.quarantine)
        let token = journal.token ?? ContentOperations.newToken()
        let contentFetch = contentAhead ?? SyncContentFetch(replica: self, token: token)
        // Also when a step below throws: no fetch outlives the sync or
        // writes into a quarantine being removed.
        defer { contentFetch.finish() }
        contentFetch.request(try SyncContentFetch.guess(changes, store: store, odb: repository.objectDatabase()))
        // The sizes of the files that go away come from pages of the state
        // database nothing else reads now: looked up on another connection
        // while the disk work goes on.
        let oldSizes = OldSizes(databasePath: store.database.path,
                                ids: changes.deleted.filter { $0.old.mode.isFile }.map(\.old.id)
                                    + changes.updated.compactMap { $0.old }.filter { $0.mode.isFile }.map(\.id))
        // The changed paths are looked up on several threads while this
        // one works through them in order: on a cold disk each lookup
        // waits for reads of its own, and the later ones are mostly done
        // when the steps below reach them.
        let folder = rootFolder
        let touched = changes.touchedPaths
        let lookups = touched.count > 1 && !lookedUpAhead ? BackgroundWork { folder.prefetch(touched, foldersChange: true) } : nil
        // Also when a step below throws: no lookup outlives the sync.
        defer { try? lookups?.wait() }
        Trace.mark("prefetch")
        // The sizes of the new files, needed from the layout on: taken in
        // while the content's request and the lookups are under way, not
        // before them (its inserts wait on cold pages of the database).
        // Not fatal here, where the sync's journal record is open: sizes
        // it could not give are noted as unknown and learned later, and the
        // sync's own read after the apply reports the failure.
        try? ingestManifest()
        Trace.mark("sizes manifest")
        let now = Int64(Date().timeIntervalSince1970)
        // Asked before the changes are recorded: what was in the working set.
        let workingSet = WorkingSetMembership(store, now: now)
        let workingSetBefore = try SignalPass(workingSet: workingSet).signals(for: changes)
        Trace.mark("working set")
        var applier = try SyncApplier(replica: self, changes: changes, commitTime: toCommit.time, anchor: target.hex,
                                      index: index ?? repository.index(), token: token, contentFetch: contentFetch)
        applier.flushWholeFilesystem = unflushedObjects
        applier.index.willLookUp(touched.map(\.bytes))
        applier.resuming = resuming
        if resuming, journal.token != nil { applier.removeStaleTemporaries() }
        Trace.mark("read index")
        var report: SyncReport
        do {
            report = try applier.apply()
        } catch let error where FprepError.storage(error, root: root)?.isDiskFull == true {
            // What this run wrote half goes now, so space is not held until
            // the sync is finished; the journal keeps the sync for later.
            applier.removeStaleTemporaries()
            contentFetch.finish()
            removeFetchQuarantines()
            StorageFailure.removeGitTemporaries(gitDirectory: gitDirectory)
            throw FprepError.storage(error, root: root) ?? error
        }
        report.from = journal.from
        report.to = journal.to
        Trace.mark("apply")
        var signals = workingSetBefore
        for conflict in journal.conflicts ?? [] {
            let container = ContainerIdentifier.of(RepoPath(identifier: conflict.copy).parent)
            if !signals.contains(where: { $0.container == container && $0.reason.contains("conflict") }) {
                signals.insert((container, "conflict"), at: 0)
            }
        }
        if !(journal.conflicts ?? []).isEmpty, !signals.contains(where: { $0.container == ContainerIdentifier.workingSet }) {
            signals.append((ContainerIdentifier.workingSet, "conflict"))
        }
        // The branch first: git's view of the replica (HEAD against the
        // index) is right from here on; the store's anchor follows, and a
        // crash between the two only repeats this already finished sync.
        // For the same reason the record does not wait for the disk (its
        // commit would wait for the whole new index to be written out, 25 ms
        // at 10^5 files): a power cut that loses it leaves the journal's
        // record of this sync, and the next command finishes it again; the
        // disk has what the index names (flushed before the index write).
        try repository.setReference("refs/heads/" + branch, to: target, message: "fprep: sync")
        report.signals = try store.transaction(durability: .whenWrittenOut) {
            try store.setMeta("anchor", target.hex)
            try noteUnknownSizes(changes)
            let delta = applier.sizeDelta - oldSizes.total()
            try store.setMeta("logical_size", String(max(0, (Int64(try store.meta("logical_size") ?? "0") ?? 0) + delta)))
            try store.recordTrash(applier.trashed)
            try store.forgetMaterialized(applier.dematerialized)
            try store.recordMaterialized(applier.rematerialized, at: now)
            for move in SyncApplier.appliedMoves(changes.moved) {
                // Tags and favorites are rebuilt from the shared log, so a move
                // that carries some goes into it (nothing to push otherwise).
                let carriesMetadata = try store.hasSharedMetadata(atOrUnder: move.from)
                try store.moveRecords(from: move.from, to: move.to)
                if carriesMetadata {
                    try SharedMetadata.record(MetadataOperation(kind: .move, path: move.from.description, name: nil,
                                                                to: move.to.description, time: now, device: DeviceName.current), in: store)
                }
            }
            let recorded = try store.appendSignals(signals, domain: domain, anchor: target.hex, at: now)
            try store.endOperation(operation)
            return recorded
        }
        anchor = target
        // Emptied by the moves; it goes only now that no run of this sync can
        // resume (a later scan removes it if a kill came between).
        rootFolder.removeEmptyFolder(SyncApplier.cycleFolderName(token: token, ready: true))
        // For `fprep changes` from the anchor this sync left behind; once
        // the sync is done, so it takes no space the sync needed.
        RecordedChanges.write(changes, stateFolder, from: fromTree, to: toCommit.treeID)
        Trace.mark("record")
        return report
    }
}

/// Makes the disk and the index go from one anchor's tree to the next.
struct SyncApplier {
    let replica: Replica
    let changes: ChangeSet
    let commitTime: Int64
    let anchor: String
    let index: Index
    let classifier: StateClassifier
    let sizes: (ObjectID) throws -> BlobInfo?
    let token: String
    let contentFetch: SyncContentFetch

    /// Records for the store once the disk is done. `sizeDelta` counts the
    /// new files' sizes; the old ones' are looked up meanwhile (`OldSizes`).
    var trashed: [TrashRecord] = []
    var dematerialized: [RepoPath] = []
    var rematerialized: [(RepoPath, ObjectID)] = []
    var sizeDelta: Int64 = 0
    /// Items of the user's that stood where the remote put a folder.
    var steppedAside: [Skipped] = []
    /// Raised when an item of the user's was set aside or held (see the
    /// barrier in `apply`); a reference, as those steps do not mutate.
    let userItemsMoved = Flag()
    /// The barrier before the index write flushes the whole filesystem, not
    /// the changed items alone (see `applySync`'s `unflushedObjects`).
    var flushWholeFilesystem = true
    /// Whether an earlier run of this sync was killed (its journal record
    /// was found): only then may what stands at a move's new name be that
    /// run's doing.
    var resuming = false
    /// Placeholders made while the deletions and moves go on, for the
    /// batches below to claim (see `EarlyPlaceholders`).
    private(set) var early: EarlyPlaceholders?

    init(replica: Replica, changes: ChangeSet, commitTime: Int64, anchor: String, index: Index,
         token: String, contentFetch: SyncContentFetch) throws {
        self.replica = replica
        self.token = token
        self.contentFetch = contentFetch
        self.changes = changes
        self.commitTime = commitTime
        self.anchor = anchor
        self.index = index
        classifier = StateClassifier(root: replica.rootFolder, index: index)
        sizes = try replica.store.blobInfoLookup()
        incoming = Set(changes.updated.map(\.path) + changes.moved.map(\.to) + changes.addedFolders.map(\.path))
        var folders = Set(changes.addedFolders.map(\.path) + changes.moved.filter(\.isFolder).map(\.to))
        for path in incoming { folders.formUnion(path.ancestors) }
        incomingFolders = folders
        incomingMoves = Dictionary(changes.moved.map { ($0.to, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// Every path this change puts something at: a user's item set aside
    /// never takes one of these names (another device's conflict copy, say).
    let incoming: Set<RepoPath>

    /// Whether what stands at `path`, which the change deletes, is what the
    /// change itself brings there: a folder where a folder is moved or made
    /// (or where anything lands below it), or the item a move puts there.
    /// Only a resumed sync finds them before the moves; the first run finds
    /// the old item (or the user's).
    private func arrivedAlready(_ path: RepoPath) -> Bool {
        guard incomingFolders.contains(path) || incomingMoves[path] != nil,
              let stat = replica.rootFolder.stat(path) else { return false }
        if stat.isDirectory { return incomingFolders.contains(path) }
        guard let move = incomingMoves[path], !move.isFolder, case .alreadyNew = local(path, new: move.entry) else { return false }
        return true
    }

    /// The folders the change puts somewhere (moved, made, or holding
    /// something that lands), and the moves by where they land.
    private let incomingFolders: Set<RepoPath>
    private let incomingMoves: [RepoPath: ChangeSet.Move]

    /// Where a path stands on disk against the change.
    enum Local {
        case absent
        case old(ItemState)
        case alreadyNew(skipWorktree: Bool)
        case userChanged
    }

    func local(_ path: RepoPath, new: TreeEntry?) -> Local {
        guard let stat = replica.rootFolder.stat(path) else { return .absent }
        if let new, let state = matchesNew(path, new, stat) { return .alreadyNew(skipWorktree: state) }
        guard let entry = index.entry(path: path.bytes) else { return .userChanged }
        switch classifier.state(of: entry, stat: stat) {
        case .dataless: return .old(.dataless)
        case .materialized: return .old(.materialized)
        case .modified, .deleted: return .userChanged
        }
    }

    /// Whether the disk already holds `new` at `path` (a sync run again);
    /// the result is the skip-worktree bit the index entry gets.
    private func matchesNew(_ path: RepoPath, _ new: TreeEntry, _ stat: FileStat) -> Bool? {
        switch new.mode {
        case .blob, .executable:
            guard stat.isRegular else { return nil }
            // The index's old version with its stat data untouched is not the
            // new one: known without reading it (the read at the end is for a
            // file a sync killed after writing it did not record).
            if let entry = index.entry(path: path.bytes), entry.id != new.id, !entry.skipWorktree,
               classifier.state(of: entry, stat: stat) == .materialized { return nil }
            if ContentOperations.placeholderBlob(replica.rootFolder, path) == new.id,
               ContentOperations.holdsNoData(replica.rootFolder, path, stat) { return true }
            // The index already names the new blob (a sync killed after it
            // wrote the index): its stat data says whether the file is it.
            if let entry = index.entry(path: path.bytes), entry.id == new.id {
                switch classifier.state(of: entry, stat: stat) {
                case .dataless: return true
                case .materialized: return false
                default: break
                }
            }
            guard stat.blocks > 0, let bytes = try? replica.rootFolder.readFile(path),
                  (try? bytes.withUnsafeBytes { try ObjectDatabase.blobID(of: $0) }) == new.id else { return nil }
            return false
        case .symlink:
            guard stat.isSymlink, let target = try? replica.rootFolder.readLink(path),
                  (try? target.withUnsafeBytes { try ObjectDatabase.blobID(of: $0) }) == new.id else { return nil }
            return false
        case .submodule:
            return stat.isDirectory && index.entry(path: path.bytes)?.id == new.id ? true : nil
        default:
            return nil
        }
    }

    /// Removes what a killed run of this sync left half-written: the
    /// temporary files beside the changed and deleted items (an old
    /// placeholder a program wrote into, swapped out, stays as a conflict
    /// copy: see `SafeReplace.settleTemporary`).
    func removeStaleTemporaries() {
        // Per item: its entry before the sync (at its old path, for an item
        // a move took elsewhere) and the blobs it had or gets: a file whose
        // bytes are one of them is no one's only copy.
        var items: [RepoPath: (old: IndexEntry?, blobs: Set<ObjectID>)] = [:]
        let folderMoves = changes.moved.filter(\.isFolder)
        func entryBefore(_ path: RepoPath) -> IndexEntry? {
            if let entry = index.entry(path: path.bytes) { return entry }
            for move in folderMoves where path.isWithin(move.to) && path != move.to {
                let from = RepoPath(bytes: move.from.bytes + Array(path.bytes.dropFirst(move.to.bytes.count)))
                if let entry = index.entry(path: from.bytes) { return entry }
            }
            return nil
        }
        func note(_ path: RepoPath, _ blobs: [ObjectID?], before: IndexEntry? = nil) {
            let old = before ?? entryBefore(path)
            var known = items[path]?.blobs ?? []
            for blob in blobs + [old?.id] { if let blob { known.insert(blob) } }
            items[path] = (items[path]?.old ?? old, known)
        }
        for update in changes.updated { note(update.path, [update.new.id, update.old?.id]) }
        for move in changes.moved { note(move.to, [move.entry.id], before: index.entry(path: move.from.bytes)) }
        for (path, old) in changes.deleted { note(path, [old.id]) }
        let held = replica.heldLocations()
        for (path, item) in items {
            guard let folder = try? replica.rootFolder.folder(path.parent) else { continue }
            let temporary = ContentOperations.temporaryName(for: path.name, token: token)
            guard folder.stat(name: temporary) != nil, !held.contains(path.parent.appending(temporary)),
                  !(path.parent.isRoot && [true, false].contains(where: { temporary == Self.cycleFolderName(token: token, ready: $0) })) else { continue }
            var swapped = SafeReplace(folder: folder, name: path.name, temporary: temporary, shown: path.description,
                                      expectsDataless: true)
            let dataless = ContentOperations.isMarkedDataless(folder, RepoPath(bytes: temporary))
            if let old = item.old { swapped.whileWritten = .hold { try hold(path, at: temporary, blob: old.id, inode: $0, dataless: dataless) } }
            swapped.settleTemporary(old: item.old, knownBlobs: item.blobs)
        }
    }

    mutating func apply() throws -> SyncReport {
        var report = SyncReport()
        let root = replica.rootFolder
        let odb = try replica.repository.objectDatabase()
        // Not for a resumed sync, which may find the items of its killed run.
        if !resuming {
            early = EarlyPlaceholders(root: root, items: EarlyPlaceholders.items(for: changes, token: token, fetched: contentFetch.requested,
                                                                               contains: { odb.contains($0) }),
                                      databasePath: replica.store.database.path, commitTime: commitTime)
        }
        // Also when a step below throws: no creation outlives the sync.
        defer { early?.finish() }

        // 1. Deletions.
        for (path, old) in changes.deleted {
            // What a killed run of this sync brought here (a folder moved or
            // made at this name, an item moved onto it) is the remote's, not
            // the user's: the old item is as good as gone, nothing set aside.
            switch arrivedAlready(path) ? .absent : local(path, new: nil) {
            case .absent:
                try? index.remove(path: path.bytes)
                dematerialized.append(path)
            case .old(let state):
                if old.mode == .submodule { try root.folder(path.parent).removeEmptyFolder(path.name) }
                else if let kept = try removeUnchanged(path, state: state) { report.keptLocal.append(kept) }
                try? index.remove(path: path.bytes)
                if state == .materialized { dematerialized.append(path) }
            case .userChanged, .alreadyNew:
                let wasPlaceholder = index.entry(path: path.bytes)?.skipWorktree == true
                try? index.remove(path: path.bytes)
                if wasPlaceholder, let copy = try setAside(path) {
                    // Bytes written into a placeholder are not a version of
                    // the file: they go beside its name, as a conflict copy.
                    report.keptLocal.append(Skipped(path: path.description,
                                                    reason: "deleted on the remote; what was written into its placeholder is kept as '\(copy)'"))
                } else {
                    report.keptLocal.append(Skipped(path: path.description, reason: "deleted on the remote, changed here; your version is kept"))
                }
            }
            trashed.append(TrashRecord(path: path, blob: old.id, mode: old.mode.raw, deletedAt: Int64(Date().timeIntervalSince1970), anchor: anchor))
            report.deleted += 1
        }

        // 2. Moves: a folder as one rename, a single item otherwise (not
        //    the items of a moved folder: they go with it), each after the
        //    moves that take items away from where it lands.
        let (steppedOut, ordered) = Self.inDependencyOrder(changes.moved)
        try stepOut(steppedOut)
        let steppedOutSources = Set(steppedOut.map(\.from))
        for move in ordered {
            // A stepped-out item moves from where it waits (nothing there:
            // moved already by a killed run, or gone before the sync).
            let source = steppedOutSources.contains(move.from) ? steppedOutLocation(move) : move.from
            if move.isFolder {
                try moveFolder(move, source: source)
            } else if let kept = try moveItem(move, source: source) {
                report.keptLocal.append(kept)
            }
            report.moved += 1
        }
        report.keptLocal += try returnStepped(steppedOut)

        // 3. Folders that went away (emptied by the steps above) and folders that came.
        for folder in changes.deletedFolders.reversed() {
            if let parent = try? root.folder(folder.path.parent) {
                if unlinkat(parent.fd, cPath(folder.path.name), AT_REMOVEDIR) != 0 && errno == ENOTEMPTY {
                    let held = replica.heldLocations()
                    let onlyHeld = (try? root.folder(folder.path).entryNames())
                        .map { $0.allSatisfy { held.contains(folder.path.appending($0)) } } == true
                    report.keptLocal.append(Skipped(path: folder.path.description, reason: onlyHeld
                        ? "deleted on the remote; it goes once the programs holding old versions of its files open for writing close them"
                        : "deleted on the remote; it still holds files of yours, so it is kept"))
                }
            }
            report.deleted += 1
        }
        for folder in changes.addedFolders {
            try makeFolders(folder.path)
            report.added += 1
        }

        Trace.mark("deletions, moves")
        // 4. New and changed items: fetch what materialized files and
        //    symlinks need in one request, then write.
        var plans: [(ChangeSet.Update, Local)] = []
        var needed = Set<ObjectID>()
        for update in changes.updated {
            let state = local(update.path, new: update.new)
            plans.append((update, state))
            if case .old(.materialized) = state, update.new.mode.isFile, !odb.contains(update.new.id) { needed.insert(update.new.id) }
            if update.new.mode == .symlink, !odb.contains(update.new.id) { needed.insert(update.new.id) }
            if update.new.mode.isFile, IgnoreRules.isRuleFile(update.path), !odb.contains(update.new.id) {
                switch state {
                case .absent, .old: needed.insert(update.new.id)
                case .userChanged, .alreadyNew: break
                }
            }
        }
        Trace.mark("classify updates")
        // The new content is on its way (asked for after the diff) while
        // everything that does not need it is laid out.
        // Plain placeholders (the common case) are made together on several
        // threads; everything else one by one.
        var batch = PlaceholderBatch()
        var replacements = ReplacementBatch()
        var afterFetch: [(ChangeSet.Update, Local)] = []
        for (update, state) in plans {
            if update.old == nil { report.added += 1 } else { report.changed += 1 }
            if update.new.mode.isFile { sizeDelta += max(0, try sizes(update.new.id)?.size ?? 0) }
            if needed.contains(update.new.id) {
                early?.release(update.path)
                afterFetch.append((update, state))
            } else if try !batch.take(update, state, applier: &self), try !replacements.take(update, state, applier: &self) {
                early?.release(update.path)
                if let kept = try applyUpdate(update, state) { report.keptLocal.append(kept) }
            }
        }
        report.keptLocal += try replacements.run(applier: &self)
        Trace.mark("updates queued")
        for job in try batch.run(applier: &self) {
            // A file appeared where there was none: it steps aside.
            if let kept = try applyUpdate(ChangeSet.Update(path: job.path, new: job.entry, old: nil), .absent) { report.keptLocal.append(kept) }
        }
        early?.removeUnclaimed()
        Trace.mark("placeholders")
        let waitsForContent = contentFetch.started || !needed.isEmpty
        // When the flush below is sure to be a whole one (see there), what
        // is written so far is flushed while the new content is on its way
        // (6 ms of a 10^5-file sync's 100 changes), and the flush below
        // covers only what is written after this one began: the new
        // content (`afterFetch`), and whatever of the user's is set aside
        // meanwhile, which is in `keptLocal` or raises `userItemsMoved`
        // and makes that flush a whole one again. A step added after this
        // point that writes anything else must be flushed by name there.
        let earlyFlush = waitsForContent && (flushWholeFilesystem || changes.count > DurableChanges.itemLimit
                                             || !report.keptLocal.isEmpty || !steppedAside.isEmpty || userItemsMoved.raised)
            ? BackgroundWork { [root, shown = replica.root] in try DurableChanges.flushWholeFilesystem(root, shown: shown) } : nil
        // Also when a step below throws: no flush outlives the sync.
        defer { try? earlyFlush?.wait() }
        if waitsForContent {
            do {
                try contentFetch.complete(needing: needed)
                report.bytesFetched = try contentFetch.requested.reduce(0) { total, id in total + max(0, try sizes(id)?.size ?? 0) }
            } catch let error as GitCommandError {
                // A full disk is the disk's fault, not the remote's: it ends
                // the sync (its journal finishes it once there is room).
                if let full = FprepError.storage(error, root: replica.root), full.isDiskFull { throw full }
                // Symlinks cannot wait; materialized files can come back as
                // placeholders (materialize them again later).
                if afterFetch.contains(where: { $0.0.new.mode == .symlink }) {
                    throw FprepError("cannot fetch content from '\(replica.remoteURL)': \(error.reason); sync again when the remote is back (nothing is lost)",
                                     detail: error.standardError)
                }
                report.keptLocal.append(Skipped(path: "", reason: "the remote did not send new content (\(error.reason)); changed materialized files are placeholders now"))
            }
            if FileManager.default.fileExists(atPath: contentFetch.quarantine) { try odb.addAlternate(contentFetch.quarantine) }
            Trace.mark("content fetch")
        }
        for (update, state) in afterFetch {
            if let kept = try applyUpdate(update, state) { report.keptLocal.append(kept) }
        }
        Trace.mark("new content")
        report.keptLocal += steppedAside
        // Durable before the index names it. Every step above writes at a
        // name of the change set, or beside one in its folder: temporaries
        // and folders made on the way, which the folders' flush covers, and
        // items of the user's set aside (conflict copies, held old versions,
        // marks cleared), whose bytes a program wrote and which only a
        // whole flush makes durable; each of those is in `keptLocal`.
        let userItems = !report.keptLocal.isEmpty || userItemsMoved.raised
        var durable: DurableChanges
        if let earlyFlush {
            try earlyFlush.wait()
            // Everything before the new content is durable: the new content
            // is what is left (and, whole again, anything of the user's).
            durable = DurableChanges(changes: afterFetch.count, limit: DurableChanges.contentLimit, wholeFilesystem: userItems)
            for (update, _) in afterFetch { durable.put(update.path) }
        } else {
            durable = DurableChanges(changes: changes.count, wholeFilesystem: flushWholeFilesystem || userItems)
            for (path, _) in changes.deleted { durable.removed(path) }
            for move in changes.moved {
                durable.removed(move.from)
                durable.put(move.to)
            }
            for folder in changes.deletedFolders { durable.removed(folder.path) }
            for folder in changes.addedFolders { durable.put(folder.path) }
            for update in changes.updated { durable.put(update.path) }
        }
        try durable.flush(root: root, shown: replica.root)
        // The packs the fetch brought: git flushes their bytes, not the
        // folder it renamed them into.
        if !durable.wholeFilesystem { try DurableChanges.flushFolder(replica.gitDirectory + "/objects/pack") }
        Trace.mark((earlyFlush == nil ? "" : "after a syncfs, ") + (durable.wholeFilesystem ? "syncfs" : "fsync \(durable.fsyncCount)"))
        try index.write()
        Trace.mark("index write")
        replica.removeFetchQuarantines()
        return report
    }

    /// Removes a file the remote deleted, as it was classified (`state`):
    /// a program writing into it meanwhile keeps its bytes (the file stays,
    /// untracked, or steps aside as a conflict copy; see `SafeReplace`).
    private func removeUnchanged(_ path: RepoPath, state: ItemState) throws -> Skipped? {
        guard let entry = index.entry(path: path.bytes), FileMode(raw: entry.mode).isFile,
              replica.rootFolder.stat(path)?.isRegular == true else {
            try remove(path)
            return nil
        }
        var removal = SafeReplace(folder: try replica.rootFolder.folder(path.parent), name: path.name,
                                  temporary: ContentOperations.temporaryName(for: path.name, token: token),
                                  shown: path.description, expectsDataless: state == .dataless)
        removal.removing = true
        let temporary = removal.temporary
        removal.whileWritten = .hold { try hold(path, at: temporary, blob: entry.id, inode: $0, dataless: state == .dataless) }
        switch try removal.run(isUnchanged: { classifier.state(of: entry, stat: $0) == state }) {
        case .replaced(keptAs: nil):
            return nil
        case .replaced(keptAs: let copy?):
            return Skipped(path: path.description, reason: "deleted on the remote; a program wrote into it meanwhile, so its bytes are kept as '\(path.parent.appending(copy))'")
        case .refused(let reason):
            return Skipped(path: path.description, reason: "deleted on the remote, but kept here: \(reason)")
        }
    }

    /// Records the old version of `path`, swapped out to `temporary` while a
    /// program has it open for writing, as a `HeldFile`: the next syncs
    /// settle it once the program has closed it.
    private func hold(_ path: RepoPath, at temporary: [UInt8], blob: ObjectID, inode: Int64, dataless: Bool) throws {
        userItemsMoved.raise()
        // The file says what it is too: a record does not follow a folder
        // the user moves with it in it.
        if let folder = try? replica.rootFolder.folder(path.parent),
           let (fd, _) = try? folder.openRegular(RepoPath(bytes: temporary), flags: O_RDONLY) {
            _ = blob.bytes.withUnsafeBufferPointer { fprep_mark_held(fd, $0.baseAddress, $0.count, dataless ? 1 : 0) }
            close(fd)
        }
        try replica.store.recordHeld(HeldFile(location: path.parent.appending(temporary), item: path, blob: blob, inode: inode,
                                              dataless: dataless, since: Int64(Date().timeIntervalSince1970)))
        replica.excludeHeld(path.parent.appending(temporary))
    }

    /// Removes a file or symlink of the replica.
    private func remove(_ path: RepoPath) throws {
        let parent = try replica.rootFolder.folder(path.parent)
        guard unlinkat(parent.fd, cPath(path.name), 0) == 0 || errno == ENOENT else { throw SystemError("remove", path.description) }
    }

    /// Makes `path` and its missing parents as folders, never through a
    /// symlink. A file of the user's (or a symlink) where a folder goes
    /// steps aside under a conflict name, as a changed file does, so the
    /// sync can finish and nothing is lost.
    mutating func makeFolders(_ path: RepoPath) throws {
        // Nearly always there already, which one open tells (it follows no
        // symlink, so every component is a real folder); a component at a
        // time (an open, a mkdir and a stat each) only when it fails.
        if path.isRoot { return }
        let existing = fprep_open_beneath(replica.rootFolder.fd, cPath(path.bytes), O_RDONLY | O_DIRECTORY, 0)
        if existing >= 0 {
            close(existing)
            return
        }
        var current = RepoPath.root
        for name in path.components {
            let parent = try replica.rootFolder.folder(current)
            current = current.appending(name)
            if mkdirat(parent.fd, cPath(name), 0o777) != 0 {
                guard errno == EEXIST else { throw SystemError("make the folder", current.description) }
                if parent.stat(name: name)?.isDirectory == true { continue }
                guard let copy = try setAside(current) else {
                    throw FprepError("cannot make the folder '\(current)': something of yours is in the way and no conflict name is free; move it and sync again")
                }
                steppedAside.append(Skipped(path: current.description,
                                            reason: "a folder on the remote; your item that was here is now '\(copy)'"))
                guard mkdirat(parent.fd, cPath(name), 0o777) == 0 else { throw SystemError("make the folder", current.description) }
            }
        }
    }

    /// The moves a sync makes: every folder move, and the item moves that
    /// are not inside a moved folder (those items go with it).
    static func appliedMoves(_ moves: [ChangeSet.Move]) -> [ChangeSet.Move] {
        let movedFolders = Set(moves.filter(\.isFolder).map(\.from))
        return moves.filter { $0.isFolder || !$0.from.ancestors.contains(where: movedFolders.contains) }
    }

    /// The moves to apply, in an order where a move whose item leaves a
    /// place (`dir`, or anything below `dir`) comes before a move that lands
    /// there or below it: a remote that renames `é` to `dir` while this
    /// device's file `dir` becomes a conflict copy must find `dir` free
    /// (taken in the other order, the folder stayed where it was while the
    /// index moved it, and the next sync pushed a move nobody made).
    /// Items of a moved folder are left out: they go with it.
    ///
    /// A cycle has no such order: the remote made a folder `b` of a symlink
    /// `s` and the symlink of the folder (`s` → `b`, `b/f` → `s/f`), each
    /// landing where the other leaves. The cycle breaks at one of its moves,
    /// whose item steps out of the way first (`steppedOut`, to a temporary
    /// name) and moves from there in its turn. Taken in the order it had,
    /// the second move found its place taken and set fprep's own item aside
    /// as if it were the user's, the index recorded the merge, and the next
    /// sync pushed renames nobody made.
    static func inDependencyOrder(_ moves: [ChangeSet.Move]) -> (steppedOut: [ChangeSet.Move], ordered: [ChangeSet.Move]) {
        let applied = appliedMoves(moves)
        guard applied.count > 1 else { return ([], applied) }
        var bySource: [RepoPath: [Int]] = [:]
        for (i, move) in applied.enumerated() { bySource[move.from, default: []].append(i) }
        let sources = applied.indices.sorted { applied[$0].from < applied[$1].from }
        // The moves that take something away from where move `i` lands.
        func prerequisites(_ i: Int) -> [Int] {
            let target = applied[i].to
            var result: [Int] = []
            for place in [target] + target.ancestors { result += bySource[place] ?? [] }
            // Sources below the target, found by their common prefix in
            // the sorted sources.
            let prefix = target.bytes + [0x2F]
            var low = 0, high = sources.count
            while low < high {
                let middle = (low + high) / 2
                if applied[sources[middle]].from.bytes.lexicographicallyPrecedes(prefix) { low = middle + 1 } else { high = middle }
            }
            while low < sources.count, applied[sources[low]].from.bytes.starts(with: prefix) {
                result.append(sources[low])
                low += 1
            }
            return result.filter { $0 != i }
        }
        var state = [UInt8](repeating: 0, count: applied.count)   // 0 new, 1 on the stack, 2 done
        var steppedOut: [ChangeSet.Move] = []
        var ordered: [ChangeSet.Move] = []
        ordered.reserveCapacity(applied.count)
        for start in applied.indices where state[start] == 0 {
            // Depth first without recursion: a long chain of moves must not
            // exhaust the stack.
            var stack: [(Int, [Int])] = [(start, prerequisites(start))]
            state[start] = 1
            while let (i, rest) = stack.last {
                if let next = rest.first {
                    stack[stack.count - 1].1.removeFirst()
                    if state[next] == 0 {
                        state[next] = 1
                        stack.append((next, prerequisites(next)))
                    } else if state[next] == 1 {
                        // A cycle: `next` waits for `i`, which needs `next`'s
                        // item gone from its place. It steps out first.
                        state[next] = 3
                        steppedOut.append(applied[next])
                    }
                    continue
                }
                stack.removeLast()
                state[i] = 2
                ordered.append(applied[i])
            }
        }
        return (steppedOut, ordered)
    }

    /// The folder at the replica's root where a cycle's items wait (see
    /// `inDependencyOrder`): `.stepping-out~moves.fprep-TOKEN` while they step
    /// out, renamed `.stepped-out~moves.fprep-TOKEN` once all are out. The
    /// rename tells a resumed run of the sync whether moves may have begun:
    /// from then on, what stands at a stepped-out move's old place may be
    /// another move's item, never to be stepped out in its stead. At the
    /// root, as no move changes the root (beside its item, the folder could
    /// hold up the folder the other move needs gone).
    static func cycleFolderName(token: String, ready: Bool) -> [UInt8] {
        Array(".\(ready ? "stepped-out" : "stepping-out")~moves.fprep-\(token)".utf8)
    }

    /// Where a stepped-out move's item waits: named by a hash of its old path.
    func steppedOutLocation(_ move: ChangeSet.Move) -> RepoPath {
        RepoPath(bytes: Self.cycleFolderName(token: token, ready: true)).appending(DerivedName.hash(move.from.bytes))
    }

    /// Moves the items of `moves` out of the way (see `inDependencyOrder`),
    /// or nothing when a killed run of this sync did.
    private func stepOut(_ moves: [ChangeSet.Move]) throws {
        guard !moves.isEmpty else { return }
        let root = replica.rootFolder
        let ready = Self.cycleFolderName(token: token, ready: true)
        if root.stat(name: ready) != nil { return }
        let stepping = Self.cycleFolderName(token: token, ready: false)
        guard mkdirat(root.fd, cPath(stepping), 0o700) == 0 || errno == EEXIST else {
            throw SystemError("make the folder", RepoPath(bytes: stepping).description)
        }
        let folder = try root.folder(RepoPath(bytes: stepping))
        for move in moves {
            let slot = DerivedName.hash(move.from.bytes)
            guard let there = root.stat(move.from), folder.stat(name: slot) == nil, isTheMovesKind(there, move) else { continue }
            // Moved already (by the user, who made the remote's change here
            // too): nothing of this move's to step out; what is at its old
            // place is another item, which stays.
            if !move.isFolder, case .alreadyNew = local(move.to, new: move.entry) { continue }
            let from = try root.folder(move.from.parent)
            CrashPoint.reach()
            guard renameat(from.fd, cPath(move.from.name), folder.fd, cPath(slot)) == 0 else {
                throw SystemError("move", "\(move.from) out of the way of a move that needs its place")
            }
        }
        CrashPoint.reach()
        guard renameat(root.fd, cPath(stepping), root.fd, cPath(ready)) == 0 else {
            throw SystemError("rename", RepoPath(bytes: stepping).description)
        }
    }

    /// Whether `stat` is of the kind the move carries (a folder, a file, a
    /// symlink): anything else at its old place is not its item.
    private func isTheMovesKind(_ stat: FileStat, _ move: ChangeSet.Move) -> Bool {
        if move.isFolder { return stat.isDirectory }
        switch move.entry.mode {
        case .blob, .executable: return stat.isRegular
        case .symlink: return stat.isSymlink
        case .submodule: return stat.isDirectory
        default: return false
        }
    }

    /// What of a cycle's stepped-out items no move took (its move found
    /// the item already where it lands, or its place taken and no name
    /// free to set the other item aside) goes back to its old place, or
    /// beside it under a conflict name: never left in the hidden folder,
    /// where the next sync would take it as deleted.
    private mutating func returnStepped(_ moves: [ChangeSet.Move]) throws -> [Skipped] {
        let root = replica.rootFolder
        var kept: [Skipped] = []
        for move in moves {
            let slot = steppedOutLocation(move)
            guard root.stat(slot) != nil else { continue }
            try makeFolders(move.from.parent)
            let folder = try root.folder(move.from.parent), waiting = try root.folder(slot.parent)
            var name = move.from.name
            for counter in 0...100 {
                if counter > 0 {
                    name = TreeMerge.conflictFileName(move.from.name, device: DeviceName.current, date: Replica.conflictDate(), counter: counter)
                    if incoming.contains(move.from.parent.appending(name)) { continue }
                }
                CrashPoint.reach()
                if fprep_rename_noreplace_between(waiting.fd, cPath(slot.name), folder.fd, cPath(name)) == 0 { break }
                guard errno == EEXIST || errno == ENOTEMPTY, counter < 100 else {
                    throw SystemError("move back", "\(move.from), which a move of the remote's left where it waited")
                }
            }
            userItemsMoved.raise()
            let shown = move.from.parent.appending(name)
            kept.append(Skipped(path: shown.description,
                                reason: "moved on the remote to '\(move.to)', where something else already is; this item stays here"))
        }
        return kept
    }

    private mutating func moveFolder(_ move: ChangeSet.Move, source: RepoPath) throws {
        let root = replica.rootFolder
        var sourceThere = root.stat(source)?.isDirectory == true
        var targetThere = root.stat(move.to) != nil
        // Done here already (the user made the remote's move too): every
        // item the folder carries is where it lands. Nothing moves on disk;
        // what is left in the old folder is the user's and stays there.
        if sourceThere && targetThere, try root.folder(source.parent).removeFoldersOnly(source.name) || everyItemArrived(move) {
            sourceThere = false
        }
        if sourceThere && targetThere {
            // Something is where the folder lands: an empty folder goes;
            // anything else is the user's and steps aside.
            let parent = try root.folder(move.to.parent)
            if parent.removeFoldersOnly(move.to.name) {
                targetThere = false
            } else if let copy = try setAside(move.to) {
                steppedAside.append(Skipped(path: move.to.description,
                                            reason: "a folder moved here on the remote from '\(move.from)'; your item that was here is now '\(copy)'"))
                targetThere = false
            }
        }
        let movedHere = sourceThere && !targetThere
        if movedHere {
            try makeFolders(move.to.parent)
            let from = try root.folder(source.parent), to = try root.folder(move.to.parent)
            CrashPoint.reach()
            guard renameat(from.fd, cPath(source.name), to.fd, cPath(move.to.name)) == 0 else {
                throw SystemError("move", "\(move.from) → \(move.to)")
            }
        }
        // Held old versions went with the folder: their records follow (a
        // resumed sync comes here again, so a kill between is no gap).
        for location in try replica.store.moveHeld(from: move.from, to: move.to) { replica.excludeHeld(location) }
        // The index follows the folder: every entry below it changes path.
        for entry in index.entries(withPrefix: move.from.bytes + [0x2F]) {
            try index.remove(path: entry.path)
            var renamed = entry
            renamed.path = move.to.bytes + Array(entry.path.dropFirst(move.from.bytes.count))
            let path = RepoPath(bytes: renamed.path)
            let item = TreeEntry(name: path.name, id: entry.id, mode: FileMode(raw: entry.mode))
            if !movedHere, case .alreadyNew(let skip) = local(path, new: item) {
                // Not moved by this run: what is there is a killed run's
                // doing, or the user's (a copy with the blob's very bytes is
                // the file materialized, not bytes written into its
                // placeholder).
                try addIndexEntry(path, item, skipWorktree: skip)
                continue
            }
            try index.add(renamed)
        }
    }

    /// Whether every item the index has below the folder a move carries
    /// is already where the move puts it (see `moveFolder`).
    private func everyItemArrived(_ move: ChangeSet.Move) -> Bool {
        let entries = index.entries(withPrefix: move.from.bytes + [0x2F])
        for entry in entries {
            let path = RepoPath(bytes: move.to.bytes + Array(entry.path.dropFirst(move.from.bytes.count)))
            guard case .alreadyNew = local(path, new: TreeEntry(name: path.name, id: entry.id, mode: FileMode(raw: entry.mode))) else { return false }
        }
        return !entries.isEmpty
    }

    private mutating func moveItem(_ move: ChangeSet.Move, source: RepoPath) throws -> Skipped? {
        let root = replica.rootFolder
        let entry = index.entry(path: move.from.bytes)
        // Whether the file is as the index knows it before the move: only
        // then may its entry take the stat the rename gives it. A file the
        // user changed moves with its change, and its entry keeps saying so.
        let unchanged = entry.map { $0.skipWorktree || classifier.state(of: $0) == .materialized } ?? false
        var steppedOut: [UInt8]?
        // What stands at the old place is the move's item only when of its
        // kind: a folder the user made where the file was stays (and the
        // moved file is laid out anew), never carried off as the file.
        let sourceIsItem = root.stat(source).map { isTheMovesKind($0, move) } ?? false
        let leavesTarget = source == move.from && move.from != move.to && move.from.isWithin(move.to)
        if !leavesTarget, root.stat(move.to)?.isDirectory == true {
            // A folder where the item lands that holds no file (its files
            // deleted or moved away by this sync, the remote's folder gone;
            // its empty subfolders go in step 3, after the moves) holds
            // nothing of anyone's: it goes. Anything else steps aside below.
            try root.folder(move.to.parent).removeFoldersOnly(move.to.name)
        }
        if leavesTarget, root.stat(move.to)?.isDirectory == true, sourceIsItem {
            // Moved up onto a folder it was in (`A/x` → `A`): the item steps
            // out under a temporary name, the folder it leaves goes (empty;
            // what else is in it is the user's and steps aside), then the
            // item takes the name. Setting the folder aside with the item in
            // it made a conflict copy nobody wrote.
            let parent = try root.folder(move.to.parent), from = try root.folder(move.from.parent)
            let temporary = ContentOperations.temporaryName(for: move.to.name, token: token)
            CrashPoint.reach()
            guard renameat(from.fd, cPath(move.from.name), parent.fd, cPath(temporary)) == 0 else {
                throw SystemError("move", "\(move.from) → \(move.to)")
            }
            if !parent.removeFoldersOnly(move.to.name) {
                guard let copy = try setAside(move.to) else {
                    throw FprepError("cannot move '\(move.from)' to '\(move.to)': the folder there holds items of yours and no conflict name is free; move them and sync again")
                }
                steppedAside.append(Skipped(path: move.to.description,
                                            reason: "moved here on the remote from '\(move.from)'; what else was in the folder is now '\(copy)'"))
            }
            steppedOut = temporary
        }
        if steppedOut == nil, root.stat(move.to) != nil {
            if case .alreadyNew(let skip) = local(move.to, new: move.entry) {
                // Done by an earlier run of this sync, or by the user (a copy
                // made by hand): what is left at the old name as the index
                // knows it goes, as the move takes it away (anything else
                // there is the user's and stays).
                var kept: Skipped?
                if steppedOut == nil, source == move.from, case .old(let state) = local(move.from, new: nil) {
                    kept = try removeUnchanged(move.from, state: state)
                }
                try? index.remove(path: move.from.bytes)
                try addIndexEntry(move.to, move.entry, skipWorktree: skip)
                return kept
            }
            // The entry at the old name, or at the new one when that run
            // wrote the index too.
            let known = entry ?? index.entry(path: move.to.bytes).flatMap { $0.id == move.entry.id ? $0 : nil }
            if resuming, root.stat(source) == nil, let known, let there = root.stat(move.to), isTheMovesKind(there, move),
               known.stat.inode == UInt32(truncatingIfNeeded: there.inode), known.stat.device == UInt32(truncatingIfNeeded: there.device) {
                // Moved by an earlier run of this sync with a change of the
                // user's in it (the same file: its inode): the entry follows,
                // still saying the file was changed, as an uninterrupted run
                // leaves it. Set aside, the change became a conflict copy.
                try? index.remove(path: move.from.bytes)
                var moved = known
                moved.path = move.to.bytes
                try index.add(moved)
                return nil
            }
            // A file of the user's is in the way: it steps aside, then the move.
            guard let copy = try setAside(move.to) else {
                return Skipped(path: move.to.description, reason: "moved here on the remote from '\(move.from)', but a file of yours is in the way; both are kept")
            }
            if let kept = try moveItem(move, source: source) { return kept }
            return Skipped(path: move.to.description, reason: "moved here on the remote from '\(move.from)'; your file that was here is now '\(copy)'")
        }
        guard steppedOut != nil || sourceIsItem else {
            // Gone locally: lay out the moved item fresh at its new place.
            try? index.remove(path: move.from.bytes)
            return try applyUpdate(ChangeSet.Update(path: move.to, new: move.entry, old: nil), .absent)
        }
        let from = try steppedOut == nil ? root.folder(source.parent) : root.folder(move.to.parent)
        var sourceName = steppedOut ?? source.name
        if steppedOut == nil, source == move.from, move.to.isWithin(move.from) {
            // Moved below its own name (`a` → `a/b`): it steps out of the
            // way under a temporary name while the folder `a` is made.
            let temporary = ContentOperations.temporaryName(for: move.from.name, token: token)
            guard renameat(from.fd, cPath(move.from.name), from.fd, cPath(temporary)) == 0 else {
                throw SystemError("move", "\(move.from) → \(move.to)")
            }
            sourceName = temporary
        }
        try makeFolders(move.to.parent)
        let to = try root.folder(move.to.parent)
        guard renameat(from.fd, cPath(sourceName), to.fd, cPath(move.to.name)) == 0 else {
            throw SystemError("move", "\(move.from) → \(move.to)")
        }
        try? index.remove(path: move.from.bytes)
        if var entry {
            entry.path = move.to.bytes
            if unchanged, !entry.skipWorktree, let stat = root.stat(move.to), classifier.matches(entry.stat, stat) == false,
               entry.stat.inode == UInt32(truncatingIfNeeded: stat.inode) {
                // A rename changes only the ctime: keep the entry matching its unchanged file.
                entry.stat = StatData(stat)
            }
            try index.add(entry)
        } else {
            try addIndexEntry(move.to, move.entry, skipWorktree: true)
        }
        return nil
    }

    private mutating func applyUpdate(_ update: ChangeSet.Update, _ state: Local) throws -> Skipped? {
        let path = update.path
        let new = update.new
        switch state {
        case .alreadyNew(let skip):
            try addIndexEntry(path, new, skipWorktree: skip)
            return nil
        case .userChanged:
            // Both versions survive: the user's file steps aside under a
            // conflict name (a new file, which the next sync commits) and the
            // remote's version takes the name, so no index entry goes stale.
            guard let copy = try setAside(path) else {
                return Skipped(path: path.description, reason: "changed on the remote and here; your version is kept")
            }
            let kept = try applyUpdate(update, .absent)
            return kept ?? Skipped(path: path.description, reason: update.old == nil
                ? "added on the remote where a file of yours was; yours is now '\(copy)'"
                : "changed on the remote and here; yours is now '\(copy)'")
        case .absent, .old:
            break
        }
        try makeFolders(path.parent)
        let folder = try replica.rootFolder.folder(path.parent)
        let temporary = ContentOperations.temporaryName(for: path.name, token: token)
        let info = try sizes(new.id)
        let mtime = info?.mtime ?? commitTime
        var kept: Skipped?
        switch new.mode {
        case .blob, .executable:
            if writesContent(state, new.id, at: path), let blob = try? replica.repository.blob(new.id) {
                try blob.withContent { bytes in
                    guard ObjectDatabase.isBlob(bytes, id: new.id) else {
                        throw FprepError("the content fetched for '\(path)' does not match its id \(new.id); nothing was written")
                    }
                    let fd = fprep_create_marked_temporary(folder.fd, cPath(temporary), new.mode == .executable ? 0o777 : 0o666, token)
                    guard fd >= 0 else { throw SystemError("create", path.description) }
                    defer { close(fd) }
                    try writeAll(fd, bytes, shown: path.description)
                    _ = fprep_set_mtime(fd, mtime, 0)
                }
                kept = try renameInto(folder, temporary, path, replacing: state)
                guard let stat = folder.stat(name: path.name) else { throw SystemError("stat", path.description) }
                try index.add(IndexEntry(path: path.bytes, id: new.id, mode: new.mode.raw, stat: StatData(stat), skipWorktree: false))
                rematerialized.append((path, new.id))
            } else {
                let made = try makePlaceholder(update, state, in: folder, temporary: temporary, info: info)
                replica.letAgentWatch([made.watched])
                kept = try place(made)
            }
        case .symlink:
            let target = try replica.repository.blob(new.id).withContent { Array($0) }
            guard symlinkat(cPath(target), folder.fd, cPath(temporary)) == 0 else { throw SystemError("symlink", path.description) }
            kept = try renameInto(folder, temporary, path, replacing: state)
            guard let stat = folder.stat(name: path.name) else { throw SystemError("stat", path.description) }
            try index.add(IndexEntry(path: path.bytes, id: new.id, mode: new.mode.raw, stat: StatData(stat), skipWorktree: false))
        case .submodule:
            if folder.stat(name: path.name) != nil { try remove(path) }
            _ = mkdirat(folder.fd, cPath(path.name), 0o777)
            try index.add(IndexEntry(path: path.bytes, id: new.id, mode: new.mode.raw, skipWorktree: true))
        default:
            break
        }
        return kept
    }

    /// Placeholders to lay out together: new or changed files whose old
    /// version was absent, dataless or materialized (a materialized one with
    /// its new content not fetched goes back to a placeholder), never a
    /// path the user changed.
    struct PlaceholderBatch {
        struct Job {
            let path: RepoPath
            let entry: TreeEntry
            let folder: FolderHandle
            let temporary: [UInt8]
            let size: Int64
            let mtime: Int64
            let wasMaterialized: Bool
        }
        var jobs: [Job] = []

        /// Queues `update` when it is a plain placeholder; false otherwise.
        mutating func take(_ update: ChangeSet.Update, _ state: Local, applier: inout SyncApplier) throws -> Bool {
            let new = update.new
            guard new.mode == .blob || new.mode == .executable else { return false }
            // Only where nothing was: replacing a user's file goes one by
            // one through `SafeReplace`, so no write into it is lost.
            guard case .absent = state else { return false }
            if applier.writesContent(state, new.id, at: update.path) { return false }
            try applier.makeFolders(update.path.parent)
            let folder = try applier.replica.rootFolder.folder(update.path.parent)
            let info = try applier.sizes(new.id)
            var wasMaterialized = false
            if case .old(.materialized) = state { wasMaterialized = true }
            jobs.append(Job(path: update.path, entry: new, folder: folder,
                            temporary: ContentOperations.temporaryName(for: update.path.name, token: applier.token),
                            size: max(info?.size ?? 0, 0), mtime: info?.mtime ?? applier.commitTime, wasMaterialized: wasMaterialized))
            return true
        }

        /// Makes every queued placeholder, then records them in the index;
        /// returns the jobs where a file appeared meanwhile (nothing made).
        func run(applier: inout SyncApplier) throws -> [Job] {
            guard !jobs.isEmpty else { return [] }
            let made = TemporaryPlaceholders(jobs.map {
                TemporaryPlaceholders.Item(folder: $0.folder, temporary: $0.temporary, name: $0.path.name, mode: $0.entry.mode,
                                           size: $0.size, blob: $0.entry.id, mtime: $0.mtime,
                                           alreadyMade: applier.early?.claim($0.path, in: $0.folder, temporary: $0.temporary, mode: $0.entry.mode,
                                                                             size: $0.size, blob: $0.entry.id, mtime: $0.mtime) == true)
            })
            made.create()
            // Watched by the agent (if one serves) before any program can open them by name.
            applier.replica.letAgentWatch(zip(jobs, made.errors).compactMap { job, error in
                error == 0 ? WatchedPlaceholder(path: job.path, blob: job.entry.id, markAt: job.path.parent.appending(job.temporary)) : nil
            })
            made.renameIntoPlace()
            let errors = made.errors
            if let failed = errors.firstIndex(where: { $0 != 0 && $0 != EEXIST }) {
                throw SystemError("create placeholder", jobs[failed].path.description, errors[failed])
            }
            var inTheWay: [Job] = []
            for (job, error) in zip(jobs, errors) {
                if error == EEXIST {
                    inTheWay.append(job)
                    continue
                }
                try applier.index.add(IndexEntry(path: job.path.bytes, id: job.entry.id, mode: job.entry.mode.raw,
                                                 stat: .placeholder(size: job.size, mtime: job.mtime), skipWorktree: true))
                if job.wasMaterialized { applier.dematerialized.append(job.path) }
            }
            return inTheWay
        }
    }

    /// Renames the user's file at `path` to `NAME (conflict DEVICE DATE).EXT`
    /// in the same folder; returns the new identifier (nil when no free name).
    func setAside(_ path: RepoPath) throws -> String? {
        userItemsMoved.raise()
        let folder = try replica.rootFolder.folder(path.parent)
        let leftOut = replica.rulesLeaveOut(path)
        for counter in 1...100 {
            let candidate = TreeMerge.conflictFileName(path.name, device: DeviceName.current, date: Replica.conflictDate(),
                                                       counter: counter)
            let copy = path.parent.appending(candidate)
            if folder.stat(name: candidate) != nil || incoming.contains(copy) { continue }
            // An item the ignore rules left out stays left out under its new
            // name (a rule naming `secret.env` does not name its conflict
            // copy): excluded in this replica before it takes the name.
            if leftOut {
                try IgnoreRules.excludeHere(copy, in: replica,
                                            why: "'\(path)', which the ignore rules left out, set aside by a sync on \(Replica.conflictDate())")
            }
            // Never over a file that took the name since the look above.
            guard fprep_rename_noreplace(folder.fd, cPath(path.name), cPath(candidate)) == 0 else {
                if errno == EEXIST { continue }
                throw SystemError("rename", path.description)
            }
            releasePlaceholderMarks(copy)
            return copy.description
        }
        return nil
    }

    /// A placeholder a program wrote into that leaves the index (set aside,
    /// or kept where the remote deleted it) is the user's bytes now, not a
    /// placeholder: without its marks the next scan takes it as a new file,
    /// never as the blob it once stood for.
    func releasePlaceholderMarks(_ path: RepoPath) {
        guard let stat = replica.rootFolder.stat(path), stat.isRegular,
              !ContentOperations.holdsNoData(replica.rootFolder, path, stat) else { return }
        guard let (fd, _) = try? replica.rootFolder.openRegular(path, flags: O_RDONLY) else { return }
        _ = fprep_clear_placeholder_marks(fd)
        close(fd)
    }

    /// Whether an item gets its content rather than a placeholder: it was
    /// materialized, or it is new here and its content is already in the
    /// local store (a conflict copy of the user's own version, a merge), or
    /// it is a file of ignore rules (which the scan reads; its content was
    /// fetched with the materialized files').
    func writesContent(_ state: Local, _ id: ObjectID, at path: RepoPath) -> Bool {
        switch state {
        case .old(.materialized): return true
        case .absent: return (try? replica.repository.objectDatabase().contains(id)) == true
        case .old(.dataless) where IgnoreRules.isRuleFile(path):
            return (try? replica.repository.objectDatabase().contains(id)) == true
        default: return false
        }
    }

    /// A placeholder made under its temporary name, to be watched by the
    /// agent (if one serves) and then put in place (`place`).
    struct MadePlaceholder {
        let update: ChangeSet.Update
        let state: Local
        let folder: FolderHandle
        let temporary: [UInt8]
        let size: Int64
        let mtime: Int64

        /// Its size and date from the blob's known ones (none known: 0
        /// bytes, the commit's time).
        init(_ update: ChangeSet.Update, _ state: Local, in folder: FolderHandle, temporary: [UInt8], info: BlobInfo?, commitTime: Int64) {
            self.update = update
            self.state = state
            self.folder = folder
            self.temporary = temporary
            size = max(info?.size ?? 0, 0)
            mtime = info?.mtime ?? commitTime
        }

        var watched: WatchedPlaceholder {
            WatchedPlaceholder(path: update.path, blob: update.new.id, markAt: update.path.parent.appending(temporary))
        }

        /// What `TemporaryPlaceholders` makes of it.
        var item: TemporaryPlaceholders.Item {
            TemporaryPlaceholders.Item(folder: folder, temporary: temporary, name: update.path.name, mode: update.new.mode,
                                       size: size, blob: update.new.id, mtime: mtime)
        }
    }

    /// Makes the placeholder of `update` under `temporary` in `folder`.
    private func makePlaceholder(_ update: ChangeSet.Update, _ state: Local, in folder: FolderHandle, temporary: [UInt8],
                                 info: BlobInfo?) throws -> MadePlaceholder {
        let made = MadePlaceholder(update, state, in: folder, temporary: temporary, info: info, commitTime: commitTime)
        let created = update.new.id.bytes.withUnsafeBufferPointer { id in
            fprep_create_placeholder(folder.fd, cPath(temporary), update.new.mode == .executable ? 0o777 : 0o666,
                                     off_t(made.size), id.baseAddress, id.count, made.mtime, 0, nil)
        }
        guard created == 0 else { throw SystemError("create placeholder", update.path.description) }
        return made
    }

    /// Puts a placeholder the agent watches in place of the old item, and
    /// records it.
    private mutating func place(_ made: MadePlaceholder) throws -> Skipped? {
        let path = made.update.path
        let kept = try renameInto(made.folder, made.temporary, path, replacing: made.state)
        try index.add(IndexEntry(path: path.bytes, id: made.update.new.id, mode: made.update.new.mode.raw,
                                 stat: .placeholder(size: made.size, mtime: made.mtime), skipWorktree: true))
        if case .old(.materialized) = made.state { dematerialized.append(path) }
        return kept
    }

    /// Placeholders that replace the old placeholders of changed files: all
    /// are made first, together (`TemporaryPlaceholders`), the agent is
    /// asked once to watch them all (a request per file cost a round trip
    /// through its worker each: 40 changed files, 40–90 ms), then each goes
    /// in place through `SafeReplace`, one by one.
    struct ReplacementBatch {
        var queued: [MadePlaceholder] = []

        /// Queues the placeholder of `update` when its old version is a
        /// placeholder to be replaced by one; false otherwise.
        mutating func take(_ update: ChangeSet.Update, _ state: Local, applier: inout SyncApplier) throws -> Bool {
            guard case .old(.dataless) = state, update.new.mode == .blob || update.new.mode == .executable,
                  !applier.writesContent(state, update.new.id, at: update.path) else { return false }
            try applier.makeFolders(update.path.parent)
            let folder = try applier.replica.rootFolder.folder(update.path.parent)
            queued.append(MadePlaceholder(update, state, in: folder,
                                          temporary: ContentOperations.temporaryName(for: update.path.name, token: applier.token),
                                          info: try applier.sizes(update.new.id), commitTime: applier.commitTime))
            return true
        }

        /// Makes them, has the agent watch them, then puts each in place.
        func run(applier: inout SyncApplier) throws -> [Skipped] {
            guard !queued.isEmpty else { return [] }
            let made = TemporaryPlaceholders(queued.map { placeholder in
                var item = placeholder.item
                item.alreadyMade = applier.early?.claim(placeholder.update.path, in: placeholder.folder, temporary: placeholder.temporary,
                                                        mode: item.mode, size: item.size, blob: item.blob, mtime: item.mtime) == true
                return item
            })
            made.create()
            let errors = made.errors
            if let failed = errors.firstIndex(where: { $0 != 0 }) {
                made.removeMade()
                throw SystemError("create placeholder", queued[failed].update.path.description, errors[failed])
            }
            Trace.mark("replacements made")
            applier.replica.letAgentWatch(queued.map(\.watched))
            Trace.mark("replacements watched")
            var kept: [Skipped] = []
            for placeholder in queued {
                if let skipped = try applier.place(placeholder) { kept.append(skipped) }
            }
            return kept
        }
    }

    /// Renames a written temporary file over `path`; a folder in the way
    /// (the old item was a folder) was emptied by the deletions before. A
    /// file fprep classified as `state` is replaced through `SafeReplace`,
    /// so a program writing it meanwhile keeps its bytes; where nothing was,
    /// a file that appeared meanwhile is never overwritten: it steps aside.
    private func renameInto(_ folder: FolderHandle, _ temporary: [UInt8], _ path: RepoPath, replacing state: Local) throws -> Skipped? {
        CrashPoint.reach()
        if case .old(let old) = state, let entry = index.entry(path: path.bytes), FileMode(raw: entry.mode).isFile,
           folder.stat(name: path.name)?.isRegular == true {
            var replacement = SafeReplace(folder: folder, name: path.name, temporary: temporary, shown: path.description,
                                          expectsDataless: old == .dataless)
            replacement.whileWritten = .hold { try hold(path, at: temporary, blob: entry.id, inode: $0, dataless: old == .dataless) }
            switch try replacement.run(isUnchanged: { classifier.state(of: entry, stat: $0) == old }) {
            case .replaced(keptAs: nil):
                return nil
            case .replaced(keptAs: let copy?):
                return Skipped(path: path.description, reason: "changed on the remote; a program wrote into it meanwhile, so its bytes are kept as '\(path.parent.appending(copy))'")
            case .refused:
                // Changed since it was looked at, or open in a program: it
                // steps aside like any file changed on both sides (a program
                // writing it goes on writing into the copy).
                return try setAsideAndRename(folder, temporary, path)
            }
        }
        if fprep_rename_noreplace(folder.fd, cPath(temporary), cPath(path.name)) == 0 { return nil }
        let code = errno
        if code == EEXIST, case .absent = state, folder.stat(name: path.name)?.isDirectory == false {
            return try setAsideAndRename(folder, temporary, path)
        }
        if (code == EEXIST || code == EINVAL || code == ENOSYS), renameat(folder.fd, cPath(temporary), folder.fd, cPath(path.name)) == 0 {
            // What fprep replaces knowingly (a symlink, an emptied folder), or
            // a filesystem without RENAME_NOREPLACE.
            return nil
        }
        let failure = errno
        unlinkat(folder.fd, cPath(temporary), 0)
        throw SystemError("rename", path.description, code == EEXIST ? failure : code)
    }

    /// The user's file at `path` steps aside as a conflict copy, then the
    /// temporary takes the name.
    private func setAsideAndRename(_ folder: FolderHandle, _ temporary: [UInt8], _ path: RepoPath) throws -> Skipped {
        guard let copy = try setAside(path) else {
            unlinkat(folder.fd, cPath(temporary), 0)
            throw FprepError("'\(path)' changed here while the remote's version was written, and no conflict name is free beside it; move it away and sync again")
        }
        guard renameat(folder.fd, cPath(temporary), folder.fd, cPath(path.name)) == 0 else {
            let code = errno
            unlinkat(folder.fd, cPath(temporary), 0)
            throw SystemError("rename", path.description, code)
        }
        return Skipped(path: path.description, reason: "changed on the remote and here; yours is now '\(copy)'")
    }

    /// Gives the file at `path` the execute bit of `entry`. A file with
    /// other hard links (names a user linked, in the replica or outside)
    /// gets an inode of its own first: a chmod would change every name, and
    /// the next sync would commit a change of mode nobody made to the others.
    private func applyMode(_ path: RepoPath, _ entry: TreeEntry, skipWorktree: Bool) throws {
        let executable = entry.mode == .executable
        guard let stat = replica.rootFolder.stat(path), stat.isRegular, stat.isExecutable != executable else { return }
        guard stat.links > 1 else { return try replica.rootFolder.setExecutable(path, executable) }
        let folder = try replica.rootFolder.folder(path.parent)
        // Closed before the swap: the swap's lease is refused while any
        // other open of the file exists, this process's own included.
        let opened = try writeOwnCopy(of: path, entry, in: folder, executable: executable, skipWorktree: skipWorktree)
        let temporary = ContentOperations.temporaryName(for: path.name, token: token)
        var swap = SafeReplace(folder: folder, name: path.name, temporary: temporary, shown: path.description,
                               expectsDataless: skipWorktree)
        swap.whileWritten = .hold { try hold(path, at: temporary, blob: entry.id, inode: $0, dataless: skipWorktree) }
        if case .refused(let reason) = try swap.run(isUnchanged: { $0.sameWrites(as: opened) }) {
            unlinkat(folder.fd, cPath(temporary), 0)
            throw FprepError("cannot change the mode of '\(path)' (it has other hard links, so it gets a copy of its own): \(reason)")
        }
    }

    /// Writes beside `path` a copy of its file (a placeholder of the same
    /// blob, or the same bytes) with the execute bit `executable`; returns
    /// the stat of the file copied.
    private func writeOwnCopy(of path: RepoPath, _ entry: TreeEntry, in folder: FolderHandle, executable: Bool,
                              skipWorktree: Bool) throws -> FileStat {
        let (fd, opened) = try folder.openRegular(RepoPath(bytes: path.name), flags: O_RDONLY)
        defer { close(fd) }
        let bits = mode_t(truncatingIfNeeded: opened.mode) & 0o7777
        let mode = executable ? bits | ((bits & 0o444) >> 2) : bits & ~0o111
        let temporary = ContentOperations.temporaryName(for: path.name, token: token)
        if skipWorktree {
            let size = try sizes(entry.id)?.size ?? opened.size
            let created = entry.id.bytes.withUnsafeBufferPointer { id in
                fprep_create_placeholder(folder.fd, cPath(temporary), mode, off_t(max(size, 0)), id.baseAddress, id.count,
                                         opened.mtime.0, Int(opened.mtime.1), nil)
            }
            guard created == 0 else { throw SystemError("create placeholder", path.description) }
            replica.letAgentWatch([WatchedPlaceholder(path: path, blob: entry.id, markAt: path.parent.appending(temporary))])
        } else {
            let out = fprep_create_marked_temporary(folder.fd, cPath(temporary), mode, token)
            guard out >= 0 else { throw SystemError("create", path.description) }
            defer { close(out) }
            _ = fchmod(out, mode)  // exactly, whatever the umask
            try copyContent(from: fd, to: out, size: opened.size, shown: path.description)
            _ = fprep_set_mtime(out, opened.mtime.0, Int(opened.mtime.1))
        }
        return opened
    }

    /// Records an item whose content is already on disk; its execute bit
    /// follows the entry's mode first (a change of mode alone arrives here).
    private func addIndexEntry(_ path: RepoPath, _ entry: TreeEntry, skipWorktree: Bool) throws {
        if entry.mode.isFile { try applyMode(path, entry, skipWorktree: skipWorktree) }
        var stat = StatData()
        if !skipWorktree, let onDisk = replica.rootFolder.stat(path) { stat = StatData(onDisk) }
        else if let info = try sizes(entry.id) { stat = .placeholder(size: info.size, mtime: info.mtime) }
        try index.add(IndexEntry(path: path.bytes, id: entry.id, mode: entry.mode.raw, stat: stat, skipWorktree: skipWorktree))
    }
}

/// The summed sizes of blobs, looked up on a connection of its own on
/// another thread; 0 for what cannot be read (the size is a display figure,
/// recomputed by 'fprep repair').
private final class OldSizes: @unchecked Sendable {
    private let work: BackgroundWork

    init(databasePath: String, ids: [ObjectID]) {
        let box = SumBox()
        work = BackgroundWork {
            guard !ids.isEmpty else { return }
            let database = try Database(path: databasePath)
            let statement = try database.prepare("SELECT size FROM blob_info WHERE oid = ?1")
            for id in ids.sorted() {
                try statement.bind(.blob(id.bytes))
                if try statement.step() { box.total += max(0, statement.int(0)) }
            }
        }
        self.box = box
    }

    private let box: SumBox

    func total() -> Int64 {
        (try? work.wait()) == nil ? 0 : box.total
    }

    private final class SumBox: @unchecked Sendable {
        var total: Int64 = 0
    }
}

/// A one-way switch a non-mutating step can raise.
final class Flag {
    private(set) var raised = false
    func raise() { raised = true }
}
