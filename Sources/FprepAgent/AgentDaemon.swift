import FoundationEssentials
import FprepCore
import Glibc
import Synchronization

/// `fprep agent run`: serves every replica registered in the state folder
/// (`AgentRegistry`) in one process, each on a thread of its own with its
/// own fanotify group (removing a replica closes its group, and every
/// mark goes with it). Follows the registry while it runs: the state
/// folder is watched with inotify, so `fprep agent add` and `remove` take
/// effect at once, without a restart. A replica that cannot be served
/// (gone, not a replica, on tmpfs, served by another agent) is logged and
/// tried again every 30 s; it never stops the others.
public enum AgentDaemon {
    static let pidFileName = "agent.pid"

    /// Serves until SIGTERM or SIGINT, then stops every replica (failing
    /// the accesses still waiting with EIO).
    public static func run(registry: AgentRegistry, timeout: Double) throws {
        let log = AgentLog()
        try FanotifyGroup.probe(nil, replica: registry.folder, rerun: "fprep agent run")
        try registry.makeFolder()
        let pidPath = registry.folder + "/" + pidFileName
        let holder = AgentStatusFile.holder(pidPath).map { " (pid \($0))" } ?? ""
        let lock = try AgentStatusFile(path: pidPath, busy: "an agent already runs with the state folder '\(registry.folder)'\(holder); stop it first")
        let wake = try SignalPipe.install()
        let notify = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard notify >= 0 else { throw FprepError("cannot start the agent: inotify: \(String(cString: strerror(errno)))") }
        defer { close(notify) }
        let events = UInt32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE)
        guard inotify_add_watch(notify, registry.folder, events) >= 0 else {
            throw FprepError("cannot watch the agent's state folder '\(registry.folder)': \(String(cString: strerror(errno)))")
        }

        let supervisor = Supervisor(registry: registry, timeout: timeout, log: log)
        log.write(.info, "agent started (pid \(getpid())): serving the replicas registered in \(registry.folder)")
        // Its status is published before its pid: whoever sees the pid finds it.
        supervisor.step()
        try lock.ready()
        while !SignalPipe.stopRequested {
            var fds = [pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0), pollfd(fd: notify, events: Int16(POLLIN), revents: 0)]
            _ = poll(&fds, 2, 500)
            drain(wake.read)
            drain(notify)
            supervisor.step()
        }
        supervisor.stopAll()
        log.write(.info, "agent stopped")
    }

    private static func drain(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while Glibc.read(fd, &buffer, buffer.count) > 0 {}
    }
}

/// The daemon's bookkeeping, on its main thread only: which registered
/// replica is served by which slot, which failed and when to try again,
/// and the status it publishes.
private final class Supervisor {
    /// How long a replica that cannot be served waits before it is tried
    /// again (tests shorten it: `FPREP_TEST_AGENT_RETRY_SECONDS`).
    static let retrySeconds: Double = getenv("FPREP_TEST_AGENT_RETRY_SECONDS").flatMap { Double(String(cString: $0)) } ?? 30

    private let registry: AgentRegistry
    private let timeout: Double
    private let log: AgentLog
    private let started = AgentLog.timestamp()
    private var registered: [String] = []
    private var registryError: String?
    private var slots: [String: ReplicaSlot] = [:]
    private var counters: [String: ReplicaCounters] = [:]
    /// Replicas that could not be served: why (logged once per reason) and when to try again.
    private var failures: [String: (message: String, retryAt: Double)] = [:]
    private var published: AgentDaemonStatus?

    init(registry: AgentRegistry, timeout: Double, log: AgentLog) {
        self.registry = registry
        self.timeout = timeout
        self.log = log
    }

    /// Reads the registry and brings the slots in line with it.
    func step() {
        do {
            registered = try registry.read()
            registryError = nil
        } catch {
            // The last list read stays served.
            let message = describe(error)
            if registryError != message { log.write(.error, message) }
            registryError = message
        }
        let now = monotonicNow()
        for (path, slot) in slots where slot.finished {
            slot.join()
            slots[path] = nil
            if let why = slot.failure {
                if failures[path]?.message != why { log.write(.error, "cannot serve \(path): \(why)") }
                counters[path]?.refused(why)
                failures[path] = (why, now + Self.retrySeconds)
            }
        }
        for (path, slot) in slots where !registered.contains(path) && !slot.stopRequested {
            log.write(.info, "no longer serving \(path): removed from the registry")
            slot.stop()
        }
        failures = failures.filter { registered.contains($0.key) }
        counters = counters.filter { registered.contains($0.key) || slots[$0.key] != nil }
        for path in registered where slots[path] == nil {
            if let failure = failures[path], failure.retryAt > now { continue }
            let counters = self.counters[path] ?? ReplicaCounters()
            self.counters[path] = counters
            slots[path] = ReplicaSlot(path: path, timeout: timeout, log: log, counters: counters)
        }
        for (path, slot) in slots where slot.isServing { failures[path] = nil }
        publish()
    }

    /// Stops every slot and waits for each.
    func stopAll() {
        for slot in slots.values { slot.stop() }
        for slot in slots.values { slot.join() }
        slots = [:]
    }

    private func publish() {
        let replicas = registered.map { path -> ReplicaStatus in
            let counted = counters[path]?.snapshot ?? ReplicaCounters.Snapshot()
            var state = ReplicaStatus.State.starting
            var watched = 0
            if let slot = slots[path] {
                if let count = slot.watched { state = .serving; watched = count }
            } else if failures[path] != nil {
                state = .failed
            }
            var status = ReplicaStatus(path: path, state: state, placeholders: watched, hydrated: counted.hydrated, failed: counted.failed,
                                       lastError: counted.lastError, lastErrorAt: counted.lastErrorAt)
            if counted.syncs > 0 {
                status.syncs = counted.syncs
                status.lastSync = counted.lastSync
                status.lastSyncResult = counted.lastSyncResult
                status.lastSyncFailed = counted.lastSyncFailed
                status.waitingToSync = counted.waitingToSync
            }
            if counted.changesIgnored > 0 { status.changesIgnored = counted.changesIgnored }
            if state == .serving { status.remoteChanges = counted.remoteChanges }
            return status
        }
        let status = AgentDaemonStatus(pid: getpid(), started: started, stateFolder: registry.folder, replicas: replicas)
        guard status != published else { return }
        do {
            try status.publish()
            published = status
        } catch {
            log.write(.warning, describe(error))
        }
    }
}

/// One registered replica served by the daemon: a thread that starts a
/// `ReplicaServer` and runs it until stopped, or fails saying why.
private final class ReplicaSlot: @unchecked Sendable {
    private struct State {
        var server: ReplicaServer?
        var finished = false
        var failure: String?
        var stopRequested = false
    }

    private let state = Mutex(State())
    private var thread: BlockingThread?

    init(path: String, timeout: Double, log: AgentLog, counters: ReplicaCounters) {
        do {
            thread = try BlockingThread { [self] in
                serve(path: path, timeout: timeout, log: log, counters: counters)
            }
        } catch {
            state.withLock {
                $0.failure = describe(error)
                $0.finished = true
            }
        }
    }

    private func serve(path: String, timeout: Double, log: AgentLog, counters: ReplicaCounters) {
        var failure: String?
        do {
            // Released before `finished`: its group, keeper and the
            // replica's lock are gone by the time the daemon may start it again.
            let server = try ReplicaServer(replicaAt: path, timeout: timeout, log: log, counters: counters, wake: nil, namesRoot: true)
            let proceed = state.withLock { state -> Bool in
                guard !state.stopRequested else { return false }
                state.server = server
                return true
            }
            if proceed { try server.run() }
        } catch {
            failure = describe(error)
        }
        state.withLock {
            $0.server = nil
            $0.failure = failure
            $0.finished = true
        }
        SignalPipe.poke()
    }

    var finished: Bool { state.withLock { $0.finished } }
    var failure: String? { state.withLock { $0.failure } }
    var stopRequested: Bool { state.withLock { $0.stopRequested } }
    var isServing: Bool { state.withLock { $0.server != nil } }
    /// Placeholders watched, once serving (nil while it starts).
    var watched: Int? { state.withLock { $0.server?.watched } }

    func stop() {
        let server = state.withLock { state -> ReplicaServer? in
            state.stopRequested = true
            return state.server
        }
        server?.stop()
    }

    func join() {
        thread?.join()
        thread = nil
    }
}

/// An error as the text after "cannot serve ROOT: ": its message, without
/// the "fprep: cannot start the agent: " of a refusal.
func describe(_ error: any Error) -> String {
    var text = (error as? FprepError)?.message ?? "\(error)"
    for prefix in ["fprep: ", "cannot start the agent: "] where text.hasPrefix(prefix) { text = String(text.dropFirst(prefix.count)) }
    return text
}
