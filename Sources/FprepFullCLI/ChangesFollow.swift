import FoundationEssentials
import FprepCLI
import FprepCore
import FprepPush
import FprepServer
import Glibc

/// `fprep changes --follow`: prints a batch of changes each time a sync
/// moves the replica, until interrupted. While it runs it tells the push
/// service (when 'fprep watch' registered the replica) that an enumerator
/// of its container is open, so that container's pushes reach the device.
struct ChangesFollower {
    let replica: ReplicaLocation
    let from: String
    let container: String?
    let show: (ChangeBatch) throws -> Void

    /// How often the anchor is looked at, and how long an enumerator lease lasts.
    private let pollInterval: useconds_t = 200_000
    private let leaseSeconds: Int64 = 300

    func run() throws {
        let stop = StopRequest.install()
        // The enumerator is registered before the first batch is printed, so
        // a reader who has seen that batch knows later pushes will reach it.
        let lease = EnumeratorLease(replica: replica, container: container ?? ContainerIdentifier.root, seconds: leaseSeconds)
        lease.open()
        defer { lease.close() }
        var anchor = try step(from: from)
        while !stop.requested {
            usleep(pollInterval)
            lease.renewIfDue()
            // A sync holds the replica: skip this look and try again.
            guard let current = try? currentAnchor(), current != anchor else { continue }
            anchor = try step(from: anchor)
        }
    }

    /// Prints the changes since `start` (every page of them) and returns the anchor reached.
    private func step(from start: String) throws -> String {
        var next = start
        while true {
            let opened = try replica.open("changes", exclusive: false)
            let batch = try opened.changes(from: next, to: nil, container: container, limit: 1000)
            if !batch.updated.isEmpty || !batch.deleted.isEmpty || !batch.moved.isEmpty || next == start {
                try show(batch)
                fflush(nil)  // every stdio stream: the batch reaches a pipe now
            }
            next = batch.anchor
            if !batch.moreComing { return next }
        }
    }

    private func currentAnchor() throws -> String {
        try Replica.open(containing: replica.baseDirectory, access: Replica.Access(command: "changes", exclusive: false, wait: false))
            .currentAnchor()
    }
}

/// An enumerator registered with the push service for as long as it runs,
/// renewed before its lease ends. Every call is best-effort: without a
/// service (or with one that is down) changes are still followed locally,
/// and a registration that failed (the service busy or not yet known to the
/// replica) is tried again a second later, then less and less often.
private final class EnumeratorLease {
    private let replica: ReplicaLocation
    private var client: DeviceClient?
    private var token: String?
    private let container: String
    private let seconds: Int64
    /// When the service last took the enumerator; nil while it does not hold it.
    private var registered: Double?
    private var nextTry = 0.0
    private var pause = 1.0

    init(replica: ReplicaLocation, container: String, seconds: Int64) {
        self.replica = replica
        self.container = container
        self.seconds = seconds
    }

    func open() { register() }

    func renewIfDue() {
        if let registered {
            if now() - registered > Double(seconds) / 2 { register() }
        } else if now() >= nextTry {
            register()
        }
    }

    func close() {
        guard registered != nil else { return }
        _ = send(active: false)
    }

    private func register() {
        if send(active: true) {
            registered = now()
            pause = 1
        } else {
            registered = nil
            nextTry = now() + pause
            pause = min(pause * 2, 60)
        }
    }

    /// Tells the service; false when it could not be told.
    private func send(active: Bool) -> Bool {
        if client == nil { connect() }
        guard let client, let token else { return false }
        let (container, seconds) = (self.container, self.seconds)
        return (try? runBlocking {
            try await client.setEnumerator(token: token, container: container, active: active, lifetime: active ? seconds : nil)
        }) != nil
    }

    /// The service and token the replica's `fprep watch` registered with.
    private func connect() {
        let settings = try? replica.open("changes", exclusive: false).pushSettings()
        if let address = settings?.service, let url = ServiceURL(address), let token = settings?.token {
            client = DeviceClient.make(service: url, timeoutSeconds: 2, caFile: settings?.ca)
            self.token = token
        }
    }

    private func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}

/// SIGINT/SIGTERM turned into a flag the loop reads, so it can close its
/// enumerator before it exits.
private final class StopRequest: @unchecked Sendable {
    nonisolated(unsafe) private static var flag: sig_atomic_t = 0

    var requested: Bool { Self.flag != 0 }

    static func install() -> StopRequest {
        signal(SIGINT) { _ in StopRequest.flag = 1 }
        signal(SIGTERM) { _ in StopRequest.flag = 1 }
        return StopRequest()
    }
}
