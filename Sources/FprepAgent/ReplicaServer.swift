import CFprepSys
import FprepCore
import Glibc
import Synchronization

/// One replica served: its fanotify group with a mark on every
/// placeholder, the keeper that fails the accesses held if the agent is
/// killed, the event loop, and the worker that does everything in the
/// replica as its owner (`WorkerClient`). `init` returns once every placeholder is
/// watched, or throws the one line that says why the replica cannot be
/// served; `run` serves until `stop` (or a signal).
final class ReplicaServer: @unchecked Sendable {
    let root: String
    private let log: AgentLog
    private let namesRoot: Bool
    private let status: AgentStatusFile
    private let worker: WorkerClient
    private let rootFD: OwnedFD
    private let group: FanotifyGroup
    private let keeper: OwnedFD
    private let wake: (read: Int32, write: Int32)
    private let ownedWake: [OwnedFD]
    private let watchlist: Watchlist
    private let rescans: IndexWatcher
    private let loop: EventLoop
    private let stopping = Atomic<Bool>(false)
    /// Why serving ended on its own (the replica went away).
    private var gone: String?
    private var lastPresenceCheck = monotonicNow()

    /// Placeholders with a mark now.
    var watched: Int { watchlist.count }

    /// `wake`: the pipe to wait on besides the group (nil: one of its own);
    /// `namesRoot`: log lines give files with the replica's root (one agent, several replicas).
    init(replicaAt path: String, timeout: Double, log: AgentLog, counters: ReplicaCounters,
         wake: (read: Int32, write: Int32)?, namesRoot: Bool) throws {
        let started = monotonicNow()
        guard let root = Replica.findRoot(from: path) else { throw FprepError.notAReplica(path) }
        self.root = root
        self.log = log
        self.namesRoot = namesRoot
        try FanotifyGroup.probe(root + "/.fprep/state.db", replica: root)

        // From here on, nothing of the replica's is touched as root but
        // through the marks: its lock, journal, state and git are the
        // worker's, which runs as the replica's owner (and settles what a
        // killed agent journaled before listing the placeholders).
        let owner = try ReplicaOwner.of(root: root)
        // Not through a symlink, and the owner's still: the folder every
        // mark is made under.
        let fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw FprepError("cannot open the replica '\(root)': \(String(cString: strerror(errno)))") }
        rootFD = OwnedFD(fd)
        guard owner.owns(fd) else { throw FprepError("the replica '\(root)' changed owner while the agent started; try again") }
        let reclaimed = owner.reclaim(rootFD: fd)
        if reclaimed > 0 {
            log.write(.info, "gave \(reclaimed) file\(reclaimed == 1 ? "" : "s") of \(root) that an agent running as root had left root's back to its owner (\(ReplicaOwner.userName(Int64(owner.uid))))")
        }
        let (worker, placeholders, status, settings) = try WorkerClient.start(root: root, owner: owner)
        self.worker = worker
        self.status = status

        group = try FanotifyGroup()
        // Killed with -9, the agent could not fail the accesses it holds;
        // its keeper does (they would read zeros otherwise).
        let keeperFD = fprep_fanotify_start_keeper(group.fd)
        guard keeperFD >= 0 else { throw FprepError("cannot start the agent: fork: \(String(cString: strerror(errno)))") }
        keeper = OwnedFD(keeperFD)
        if let wake {
            self.wake = wake
            ownedWake = []
        } else {
            let made = try SignalPipe.makePipe()
            self.wake = made
            ownedWake = [OwnedFD(made.read), OwnedFD(made.write)]
        }
        let prefix = namesRoot ? root + "/" : ""
        watchlist = Watchlist(group: group, rootFD: rootFD.fd, log: log, prefix: prefix, owner: owner)
        let rescans = IndexWatcher(root: root, list: { worker.list() }, ownWritesUnderWay: { worker.fillsUnderWay })
        self.rescans = rescans
        let hydrator = Hydrator(root: root, indexWritten: { rescans.acknowledge(before: $0, after: $1) }, worker: worker)
        loop = EventLoop(group: group, watchlist: watchlist, hydrator: hydrator, timeout: timeout, log: log,
                         wake: self.wake, counters: counters, prefix: prefix)
        if settings.readAheadBytes > 0 {
            loop.readAhead = ReadAhead(budget: settings.readAheadBytes, worker: worker, rootFD: rootFD.fd, log: log, prefix: prefix)
        }
        loop.refused = settings.refused
        // The worker fills files read ahead through descriptors of its own.
        loop.ownProcesses.insert(worker.pid)
        let lockFile = Replica.lockFile(replicaRoot: root)
        loop.holdsReplicaLock = { pid in
            let fd = open(lockFile, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
            guard fd >= 0 else { return false }
            defer { close(fd) }
            return fprep_holds_flock(pid, fd) == 1
        }
        watchlist.watch(placeholders, complete: true)
        let suffix = namesRoot ? " of \(root)" : ""
        worker.onNote { line in log.write(.info, line + suffix) }
        // Files the disk budget evicts are watched before they are placeholders.
        let watched = watchlist
        worker.onWatchFirst { files, requester in watched.watch(files, complete: false, exempting: requester) }
        if settings.syncs {
            worker.onLeftOut { count in
                // Said once: a swap file written every few seconds is no news.
                if counters.leftOut(count) == count {
                    log.write(.info, "changes only to items the ignore rules leave out\(suffix) start no sync (counted by 'fprep agent status')")
                }
            }
            worker.onRemoteChanges { counters.remoteChanges($0) }
            worker.onSynced { outcome in
                counters.synced(outcome)
                if outcome.succeeded {
                    if outcome.summary != SyncScheduler.nothing { log.write(.info, "synced\(suffix): \(outcome.summary)") }
                } else {
                    log.write(.error, "sync\(suffix) failed: \(outcome.summary)")
                }
            }
        }
        let milliseconds = Int(((monotonicNow() - started) * 1000).rounded())
        log.write(.info, "serving \(root): \(watchlist.count) placeholder\(watchlist.count == 1 ? "" : "s") watched (started in \(milliseconds) ms)")
        try status.ready()
    }

    /// Serves until `stop` or a signal; throws when the replica went away meanwhile.
    func run() throws {
        let suffix = namesRoot ? " in \(root)" : ""
        try loop.run(tick: { [self] in
            // A sync, clone or evict made new placeholders: watch them too
            // (on the rescan's thread; the loop goes on serving).
            rescans.poll { [watchlist, log] changes in
                let marked = watchlist.apply(changes)
                if marked > 0 { log.write(.info, "watching \(marked) new placeholder\(marked == 1 ? "" : "s")\(suffix) (\(watchlist.count) in all)") }
            }
            checkPresence()
            checkWorker()
        }, shouldStop: { [self] in SignalPipe.stopRequested || stopping.load(ordering: .acquiring) })
        // The worker (and the replica's lock it may hold) ends before the
        // daemon may serve the replica again; agent.pid goes with this server.
        let ended = worker.stop()
        if gone == Self.workerEnded {
            gone = "the replica's worker process (pid \(worker.pid)) ended (\(ended)); serving it stopped, start the agent again"
        }
        if let gone { throw FprepError(gone) }
        log.write(.info, "stopped serving \(root)")
    }

    /// Asks `run` to return (from any thread).
    func stop() {
        stopping.store(true, ordering: .releasing)
        var byte: UInt8 = 1
        _ = Glibc.write(wake.write, &byte, 1)
    }

    private static let workerEnded = "worker ended"

    /// Stops serving when the worker is gone (killed by its owner, say):
    /// nothing could fill a file any more.
    private func checkWorker() {
        guard gone == nil, !worker.isRunning else { return }
        gone = Self.workerEnded
        stopping.store(true, ordering: .releasing)
    }

    /// Stops serving when the replica is no longer at its path (moved or
    /// deleted): its files are nobody's to fill any more.
    private func checkPresence() {
        let now = monotonicNow()
        guard now - lastPresenceCheck >= 2 else { return }
        lastPresenceCheck = now
        var opened = fprep_stat(), named = fprep_stat()
        let same = fprep_fstat(rootFD.fd, &opened) == 0 && fprep_lstat_at(AT_FDCWD, root, &named) == 0
            && opened.dev == named.dev && opened.ino == named.ino
        guard !same || access(root + "/.fprep/state.db", F_OK) != 0 else { return }
        gone = "the replica '\(root)' is gone (moved or deleted); serving it stopped"
        stopping.store(true, ordering: .releasing)
    }
}

/// A descriptor closed with its owner.
final class OwnedFD: Sendable {
    let fd: Int32
    init(_ fd: Int32) { self.fd = fd }
    deinit { close(fd) }
}
