import FoundationEssentials
import FprepGit
import Glibc
import Synchronization

/// What the running `fprep agent run` publishes for `fprep agent status`:
/// `status.json` in its state folder, replaced whole whenever it changes.
public struct AgentDaemonStatus: Codable, Sendable, Equatable {
    public var pid: Int32
    /// When the agent started (UTC, ISO 8601).
    public var started: String
    public var stateFolder: String
    /// Every registered replica, registry order.
    public var replicas: [ReplicaStatus]

    public init(pid: Int32, started: String, stateFolder: String, replicas: [ReplicaStatus]) {
        self.pid = pid
        self.started = started
        self.stateFolder = stateFolder
        self.replicas = replicas
    }
}

/// One registered replica, as the agent serves it.
public struct ReplicaStatus: Codable, Sendable, Equatable {
    public enum State: String, Codable, Sendable {
        /// Listing and marking its placeholders.
        case starting
        case serving
        /// Cannot be served (the reason is `lastError`); tried again every 30 s.
        case failed
        /// Registered, but no agent runs (said by `fprep agent status`, never published).
        case notServed = "not served"
    }

    public var path: String
    public var state: State
    /// Placeholders with a mark (0 unless serving).
    public var placeholders: Int
    /// Files hydrated since the agent started.
    public var hydrated: Int
    /// Hydrations that failed, and accesses failed at the bound (each an error line in the log).
    public var failed: Int
    public var lastError: String?
    /// When `lastError` happened (UTC, ISO 8601).
    public var lastErrorAt: String?
    /// The process id of another agent serving it (`fprep agent -C`), when
    /// this one does not (said by `fprep agent status`, never published).
    public var servedBy: Int32?
    /// The agent's own syncs (`fprep.agent.sync`): how many ran, when the
    /// last ended (UTC, ISO 8601) and what it did or why it failed, and
    /// local changes it left for later (files still open for writing).
    public var syncs: Int?
    public var lastSync: String?
    public var lastSyncResult: String?
    public var lastSyncFailed: Bool?
    public var waitingToSync: Int?
    /// Batches of changes the agent saw that were all to items the ignore
    /// rules leave out (swap files, build output): no sync started for them.
    public var changesIgnored: Int?
    /// How the agent hears of remote changes (its syncs on only): the push
    /// service it follows, if the replica has one, and the poll's interval.
    public var remoteChanges: RemoteChangesStatus?

    public init(path: String, state: State, placeholders: Int = 0, hydrated: Int = 0, failed: Int = 0,
                lastError: String? = nil, lastErrorAt: String? = nil) {
        self.path = path
        self.state = state
        self.placeholders = placeholders
        self.hydrated = hydrated
        self.failed = failed
        self.lastError = lastError
        self.lastErrorAt = lastErrorAt
    }
}

/// How a serving agent hears that the remote moved: the push service's
/// stream (`fprep watch --service URL` recorded it) and the `git ls-remote`
/// poll (`fprep.agent.pollSeconds`, 0: never).
public struct RemoteChangesStatus: Codable, Sendable, Equatable {
    /// The push service's address; nil when the replica has none recorded.
    public var service: String?
    /// Whether its event stream is open now.
    public var connected: Bool
    /// When it last connected or was lost (UTC, ISO 8601).
    public var since: String?
    /// Why the stream was lost or could not open (nil while connected).
    public var lost: String?
    public var pollSeconds: Double

    public init(service: String?, connected: Bool, since: String? = nil, lost: String? = nil, pollSeconds: Double) {
        self.service = service
        self.connected = connected
        self.since = since
        self.lost = lost
        self.pollSeconds = pollSeconds
    }
}

extension AgentDaemonStatus {
    static let fileName = "status.json"

    /// What the agent running with `stateFolder` published, or nil when no
    /// agent runs there (its lock on `agent.pid` is free).
    public static func current(stateFolder: String) -> AgentDaemonStatus? {
        guard let pid = AgentStatusFile.holder(stateFolder + "/" + AgentDaemon.pidFileName) else { return nil }
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: stateFolder + "/" + fileName)),
              let status = try? JSONDecoder().decode(AgentDaemonStatus.self, from: data), status.pid == pid else {
            // Running, but it has not published yet.
            return AgentDaemonStatus(pid: pid, started: "", stateFolder: stateFolder, replicas: [])
        }
        return status
    }

    /// Replaces the published status (a temporary renamed over it: a reader
    /// never sees half of it).
    func publish() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = try encoder.encode(self)
        let path = stateFolder + "/" + Self.fileName
        guard CacheFile.replace(path, with: Array(data)) else {
            throw AgentRefusal(description: "fprep: cannot publish the agent's status in '\(path)': \(String(cString: strerror(errno)))")
        }
    }
}

/// What one replica's agent did, counted by its event loop and read by
/// the daemon's status (kept across restarts of the replica's serving).
final class ReplicaCounters: Sendable {
    struct Snapshot: Sendable, Equatable {
        var hydrated = 0
        var failed = 0
        var lastError: String?
        var lastErrorAt: String?
        var syncs = 0
        var lastSync: String?
        var lastSyncResult: String?
        var lastSyncFailed = false
        var waitingToSync = 0
        var changesIgnored = 0
        var remoteChanges: RemoteChangesStatus?
    }

    private let state = Mutex(Snapshot())

    var snapshot: Snapshot { state.withLock { $0 } }

    func hydrated() { state.withLock { $0.hydrated += 1 } }

    /// A hydration failed, or an access failed at the bound.
    func failed(_ message: String) {
        let now = AgentLog.timestamp()
        state.withLock {
            $0.failed += 1
            $0.lastError = message
            $0.lastErrorAt = now
        }
    }

    /// The worker synced (or tried to).
    func synced(_ outcome: SyncScheduler.Outcome) {
        let now = AgentLog.timestamp()
        state.withLock {
            $0.syncs += 1
            $0.lastSync = now
            $0.lastSyncResult = outcome.summary
            $0.lastSyncFailed = !outcome.succeeded
            $0.waitingToSync = outcome.waiting
            if !outcome.succeeded {
                $0.lastError = "sync: " + outcome.summary
                $0.lastErrorAt = now
            }
        }
    }

    /// The change watch left a batch of changes out (all ignored); returns
    /// how many so far.
    func leftOut(_ count: Int) -> Int { state.withLock { $0.changesIgnored += count; return $0.changesIgnored } }

    /// How the worker hears of remote changes now (the push service
    /// connected or lost, or none); dated here.
    func remoteChanges(_ update: RemoteChangesStatus) {
        let now = AgentLog.timestamp()
        state.withLock {
            var update = update
            update.since = update.service == nil ? nil : now
            $0.remoteChanges = update
        }
    }

    /// The replica cannot be served (counted nowhere, but shown).
    func refused(_ message: String) {
        let now = AgentLog.timestamp()
        state.withLock {
            $0.lastError = message
            $0.lastErrorAt = now
        }
    }
}
