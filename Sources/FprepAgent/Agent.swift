import CFprepSys
import Dispatch
import FoundationEssentials
import FprepCore
import Glibc
import Synchronization

/// `fprep agent`: hydration on access for one replica, in the foreground.
/// Marks every placeholder with a fanotify inode mark, then fills each one
/// the first time a program reads, writes, maps or runs it. Stops on
/// SIGTERM or SIGINT, failing whatever still waits with EIO.
public enum Agent {
    /// Serves the replica holding `path` until a signal stops it.
    /// `timeout`: the most an access waits before it fails with EIO.
    public static func serve(replicaAt path: String, timeout: Double) throws {
        let log = AgentLog()
        let started = monotonicNow()
        try FanotifyGroup.probe(nil, replica: path)
        guard let root = Replica.findRoot(from: path) else { throw FprepError.notAReplica(path) }
        try FanotifyGroup.probe(root + "/.fprep/state.db", replica: root)

        // First, so a second agent touches nothing of the first one's.
        let status = try AgentStatusFile(root: root)
        // Whatever a killed agent (or command) journaled is settled here,
        // before anything is watched: its quarantines are no longer needed.
        let placeholders: [WatchedPlaceholder]
        do {
            let replica = try Replica.open(containing: root, access: Replica.Access(command: "agent", exclusive: true))
            InPlaceHydration.removeAllQuarantines(replicaRoot: root)
            placeholders = try replica.watchablePlaceholders()
        }
        let rootFD = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard rootFD >= 0 else { throw FprepError("cannot open the replica '\(root)': \(String(cString: strerror(errno)))") }
        defer { close(rootFD) }

        let group = try FanotifyGroup()
        // Killed with -9, the agent could not fail the accesses it holds;
        // its keeper does (they would read zeros otherwise).
        let keeper = fprep_fanotify_start_keeper(group.fd)
        guard keeper >= 0 else { throw FprepError("cannot start the agent: fork: \(String(cString: strerror(errno)))") }
        defer { close(keeper) }
        let wake = try SignalPipe.install()
        let watchlist = Watchlist(group: group, rootFD: rootFD, log: log)
        let rescans = IndexWatcher(root: root)
        let hydrator = Hydrator(root: root, indexWritten: { rescans.acknowledge(before: $0, after: $1) })
        let loop = EventLoop(group: group, watchlist: watchlist, hydrator: hydrator, timeout: timeout, log: log, wake: wake)
        watchlist.watch(placeholders, complete: true)
        let milliseconds = Int(((monotonicNow() - started) * 1000).rounded())
        log.write(.info, "serving \(root): \(watchlist.count) placeholder\(watchlist.count == 1 ? "" : "s") watched (started in \(milliseconds) ms)")
        try status.ready(watching: watchlist.count)

        try loop.run(tick: {
            // A sync, clone or evict made new placeholders: watch them too
            // (on the rescan's thread; the loop goes on serving).
            rescans.poll { placeholders in
                let marked = watchlist.watch(placeholders, complete: true)
                if marked > 0 { log.write(.info, "watching \(marked) new placeholder\(marked == 1 ? "" : "s") (\(watchlist.count) in all)") }
            }
        }, shouldStop: { SignalPipe.stopRequested })
        log.write(.info, "stopped serving \(root)")
    }
}

/// SIGTERM and SIGINT ask the loop to stop: the handler writes a byte to
/// the pipe the loop waits on.
enum SignalPipe {
    nonisolated(unsafe) private static var writeFD: Int32 = -1
    nonisolated(unsafe) private(set) static var stopRequested = false

    static func install() throws -> (read: Int32, write: Int32) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            throw FprepError("cannot start the agent: pipe: \(String(cString: strerror(errno)))")
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        writeFD = fds[1]
        for number in [SIGTERM, SIGINT] {
            signal(number) { _ in
                SignalPipe.stopRequested = true
                var byte: UInt8 = 0
                _ = Glibc.write(SignalPipe.writeFD, &byte, 1)
            }
        }
        return (fds[0], fds[1])
    }
}

/// Notices that the index changed (a sync, clone, materialize or evict
/// wrote it) and lists the placeholders again, off the loop's thread,
/// with the replica's lock shared and never waited for (a busy replica is
/// looked at on a later tick).
final class IndexWatcher: @unchecked Sendable {
    private let root: String
    private let seen: Mutex<fprep_stat>
    private let busy = Mutex(false)
    private let queue = DispatchQueue(label: "fprep.agent.rescan")

    init(root: String) {
        self.root = root
        seen = Mutex(Self.stat(root))
    }

    /// The agent wrote the index itself (`before` → `after`): nothing to
    /// look for, unless someone else wrote it since the last look.
    func acknowledge(before: fprep_stat, after: fprep_stat) {
        seen.withLock { seen in
            if Self.same(seen, before) { seen = after }
        }
    }

    func poll(_ deliver: @escaping @Sendable ([WatchedPlaceholder]) -> Void) {
        let now = Self.stat(root)
        let changed = seen.withLock { !Self.same($0, now) }
        guard changed else { return }
        guard busy.withLock({ value -> Bool in defer { value = true }; return !value }) else { return }
        let root = self.root
        queue.async { [self] in
            defer { busy.withLock { $0 = false } }
            guard let replica = try? Replica.open(containing: root, access: Replica.Access(command: "agent", exclusive: false, wait: false)),
                  let placeholders = try? replica.watchablePlaceholders() else { return }
            seen.withLock { $0 = now }
            deliver(placeholders)
        }
    }

    /// The stat of the replica's index file.
    static func stat(_ root: String) -> fprep_stat {
        var raw = fprep_stat()
        _ = fprep_lstat_at(AT_FDCWD, root + "/.git/index", &raw)
        return raw
    }

    private static func same(_ a: fprep_stat, _ b: fprep_stat) -> Bool {
        a.ino == b.ino && a.size == b.size && a.mtime_sec == b.mtime_sec && a.mtime_nsec == b.mtime_nsec && a.ctime_nsec == b.ctime_nsec
    }
}

/// `.fprep/agent.pid`: the agent's process id, under a lock held for as
/// long as it runs, so `fprep status` can tell whether an agent serves the
/// replica (a killed agent's lock goes with it).
final class AgentStatusFile {
    private let fd: Int32

    init(root: String) throws {
        let path = InPlaceHydration.agentFile(replicaRoot: root)
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw FprepError("cannot start the agent: open '\(path)': \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw FprepError("an agent already serves '\(root)'; stop it first (its process id is in '\(path)')")
        }
    }

    func ready(watching count: Int) throws {
        let note = "\(getpid())\n"
        _ = ftruncate(fd, 0)
        _ = note.withCString { pwrite(fd, $0, strlen($0), 0) }
    }

    deinit {
        _ = ftruncate(fd, 0)
        close(fd)
    }
}
