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
        try status.ready()

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
