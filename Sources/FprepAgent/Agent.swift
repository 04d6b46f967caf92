import FprepCore

/// `fprep agent -C DIR`: hydration on access for one replica, in the
/// foreground. Marks every placeholder with a fanotify inode mark, then
/// fills each one the first time a program reads, writes, maps or runs
/// it. Stops on SIGTERM or SIGINT, failing whatever still waits with EIO.
/// (`fprep agent run` serves every registered replica: `AgentDaemon`.)
public enum Agent {
    /// Serves the replica holding `path` until a signal stops it.
    /// `timeout`: the most an access waits before it fails with EIO.
    public static func serve(replicaAt path: String, timeout: Double) throws {
        try FanotifyGroup.probe(nil, replica: path)
        let wake = try SignalPipe.install()
        let server = try ReplicaServer(replicaAt: path, timeout: timeout, log: AgentLog(), counters: ReplicaCounters(),
                                       wake: wake, namesRoot: false)
        try server.run()
    }
}
