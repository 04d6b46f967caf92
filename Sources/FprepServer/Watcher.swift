import FoundationEssentials
import FprepCore
import FprepPush
import NIOCore
import NIOPosix

/// `fprep watch`: a replica that follows its push service. It registers
/// once (the token stays in the replica's state), keeps the event stream
/// open and resumes it after the last event it acted on, syncs shortly after
/// a push (pushes that arrive meanwhile ride along), reconnects with growing
/// pauses, and syncs every `fallbackInterval` while the service is away.
public struct Watcher: Sendable {
    public struct Options: Sendable {
        /// A folder inside the replica.
        public var replica: String
        /// The service to use from now on (recorded); nil: the recorded one.
        public var service: String?
        /// The enrollment secret to register with from now on (recorded); nil: the recorded one.
        public var enrollment: String?
        /// The CA file an https service's certificate is checked against
        /// from now on (recorded); nil: the recorded one, else the system's trust store.
        public var ca: String?
        public var replicated = false
        /// How long after a push the sync starts (0: at once; pushes that
        /// arrive while it runs ride along into the next).
        public var debounce: Duration = .zero
        public var fallbackInterval: Duration = .seconds(30)
        /// The longest pause between two connection attempts.
        public var maxBackoff: Duration = .seconds(10)
        /// Nothing on the stream (not even a heartbeat) for this long: reconnect.
        public var idleTimeout: TimeAmount = .seconds(65)
        public var output: @Sendable (String) -> Void = { Console.output($0 + "\n") }

        public init(replica: String) { self.replica = replica }
    }

    let options: Options

    public init(_ options: Options) { self.options = options }

    private enum Input: Sendable {
        case connected
        case disconnected(String)
        case push(ServerSentEvent)
        case tick
        /// TLS refused the service: the watch ends with this line.
        case refused(String)
    }

    /// Runs until SIGINT or SIGTERM (then returns, between syncs).
    public func run() async throws {
        let signals = TerminationSignals()
        guard let root = Replica.findRoot(from: options.replica) else {
            throw FprepError(.usage, "'\(options.replica)' is not inside an fprep replica (run 'fprep clone URL DIR' first, or pass -C DIR)")
        }
        let (domain, branch, settings) = try withReplica(root) { replica in
            var settings = try replica.pushSettings()
            if let service = options.service, service != settings.service {
                guard ServiceURL(service) != nil else {
                    throw FprepError(.usage, "'\(service)' is not an http://HOST:PORT or https://HOST[:PORT] address for --service")
                }
                // Another service: the old device and events mean nothing there.
                settings = PushSettings(service: service, ca: settings.ca)
                try replica.savePushSettings(settings)
            }
            if let ca = options.ca {
                let path = absolutePath(ca)
                guard FileManager.default.isReadableFile(atPath: path) else {
                    throw FprepError(.usage, "cannot read the CA file '\(ca)' for --ca (a PEM file of the CA that signed the service's certificate)")
                }
                settings.ca = path
                try replica.savePushSettings(settings)
            }
            if let enrollment = options.enrollment, enrollment != settings.enrollment {
                guard EnrollmentSecret(enrollment) != nil else {
                    throw FprepError(.usage, "the value of --enroll is not an enrollment secret (pass the whole line 'fprep serve enroll' printed: enr-…)")
                }
                // Used at the next registration: now when there is no token,
                // else when the service refuses the token (expired, revoked).
                settings.enrollment = enrollment
                try replica.savePushSettings(settings)
            }
            return (replica.domain, replica.branch, settings)
        }
        guard let address = settings.service, let url = ServiceURL(address) else {
            throw FprepError(.usage, "no push service is recorded for this replica; pass --service http://HOST:PORT (or https://…) once")
        }
        if url.isSecure {
            // A CA file that cannot be read fails here, in one line, not at each reconnection.
            _ = try TLS.clientContext(caFile: settings.ca, protocols: ["http/1.1"])
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let client = HTTPClient(group: group, caFile: settings.ca)
        let device = DeviceClient(service: url, client: client)
        let shared = Locked(settings)
        let (inputs, input) = AsyncStream.makeStream(of: Input.self)
        options.output("watching \(root) through \(url)")

        let stream = ServiceStream(device: device, root: root, domain: domain, branch: branch, replicated: options.replicated,
                                   name: "fprep watch \(root)", maxBackoff: options.maxBackoff, idleTimeout: options.idleTimeout,
                                   output: options.output, withReplica: { try withReplica($0, $1) })
        let streamTask = Task {
            if let failure = await stream.follow(shared, onOpen: { input.yield(.connected) }, onPush: { input.yield(.push($0)) },
                                                 onDrop: { input.yield(.disconnected($0)) }) {
                input.yield(.refused(failure.description))
            }
        }
        let ticker = Task {
            while await sleepUnlessCancelled(for: .milliseconds(20)) {
                input.yield(.tick)
            }
        }
        let stopping = Locked(false)
        let signalTask = Task {
            _ = await signals.next()
            stopping.set(true)
            input.finish()
        }

        var anchor = try await sync(root, shared: shared, eventID: nil)?.to
        var lastSync = ContinuousClock.now
        var connected = false
        var wasDisconnected = false
        var pending: (since: ContinuousClock.Instant, eventID: Int64?)?
        var refusal: String?
        inputLoop: for await next in inputs {
            if stopping.get() { break }
            switch next {
            case .refused(let reason):
                refusal = reason
                break inputLoop
            case .connected:
                connected = true
                options.output("connected to \(url)")
                if wasDisconnected {
                    // Whatever was pushed while the stream was down (and a
                    // service that came back may not know to resend) is
                    // caught up by one sync, as after a push.
                    pending = (pending?.since ?? ContinuousClock.now, pending?.eventID)
                }
                wasDisconnected = false
            case .disconnected(let reason):
                if connected { options.output("lost the push service (\(reason)); syncing every \(options.fallbackInterval) until it is back") }
                connected = false
                wasDisconnected = true
            case .push(let event):
                let id = event.id.flatMap { Int64($0) }
                guard let payload = try? JSONCoding.decode(PushPayload.self, from: Array(event.data.utf8)),
                      payload.domain == domain else { continue }
                if payload.new == anchor && pending == nil {
                    // Already there (a duplicate, or a push this replica synced by itself).
                    try? withReplica(root) { replica in
                        var current = shared.get()
                        current.lastEventID = max(current.lastEventID ?? 0, id ?? 0)
                        shared.set(current)
                        try replica.savePushSettings(current)
                    }
                    continue
                }
                if let anchor, payload.old != anchor, pending == nil {
                    options.output("push \(id.map(String.init) ?? "?") starts at \(payload.old.prefix(12)), not at \(anchor.prefix(12)): a gap, syncing all")
                }
                let now = ContinuousClock.now
                pending = (pending?.since ?? now, max(pending?.eventID ?? 0, id ?? 0))
                // No debounce: the sync starts now, not at the next tick;
                // pushes that come while it runs make one more sync after it.
                if options.debounce == .zero { input.yield(.tick) }
            case .tick:
                let now = ContinuousClock.now
                if let waiting = pending, now - waiting.since >= options.debounce {
                    pending = nil
                    if let report = try? await sync(root, shared: shared, eventID: waiting.eventID) {
                        anchor = report.to ?? anchor
                        let milliseconds = (ContinuousClock.now - waiting.since).components
                        let elapsed = milliseconds.seconds * 1000 + milliseconds.attoseconds / 1_000_000_000_000_000
                        options.output("push → synced in \(elapsed) ms")
                    }
                    lastSync = ContinuousClock.now
                } else if !connected && now - lastSync >= options.fallbackInterval {
                    if let report = try? await sync(root, shared: shared, eventID: nil) { anchor = report.to ?? anchor }
                    lastSync = ContinuousClock.now
                }
            }
        }
        // Every task that may still use the event loops ends before they do.
        streamTask.cancel()
        ticker.cancel()
        signalTask.cancel()
        await streamTask.value
        await client.shutdown()
        try? await group.shutdownGracefully()
        if let refusal { throw FprepError(refusal) }
    }

    /// Syncs on a thread of its own (git and libgit2 block), holding the
    /// replica only for the sync, and records the event acted on.
    private func sync(_ root: String, shared: Locked<PushSettings>, eventID: Int64?) async throws -> SyncReport? {
        let output = options.output
        do {
            return try await NIOThreadPool.singleton.runIfActive {
                // Each sync's phases from its own start (FPREP_TRACE).
                Trace.start()
                return try withReplica(root) { replica in
                    let report = try replica.sync()
                    if let eventID {
                        var settings = shared.get()
                        settings.lastEventID = max(settings.lastEventID ?? 0, eventID)
                        shared.set(settings)
                        try replica.savePushSettings(settings)
                    }
                    if report.from != report.to {
                        output("synced \(report.from.map { String($0.prefix(12)) } ?? "(empty)") → \(report.to ?? "?"): \(report.added) added, \(report.changed) changed, \(report.deleted) deleted, \(report.moved) moved")
                    }
                    return report
                }
            }
        } catch {
            output("sync failed: \(error)")
            return nil
        }
    }
}

/// Opens the replica for one step, alone, and lets it go at once
/// (`command`: who holds it, for another command that waits).
func withReplica<T>(_ root: String, command: String = "watch", wait: Bool = true, _ body: (Replica) throws -> T) throws -> T {
    let replica = try Replica.open(containing: root, access: Replica.Access(command: command, exclusive: true, wait: wait))
    return try body(replica)
}
