import FoundationEssentials
import FprepCore
import FprepPush
import NIOCore
import NIOHTTP1

/// How the service behaves; the defaults are what `fprep serve` uses.
public struct ServiceConfiguration: Sendable {
    /// The remote's domain: devices of another domain are refused.
    public var domain: String
    /// How long a device's token is valid (then it registers again).
    public var tokenLifetime: Int64 = 30 * 24 * 3600
    /// How long an enumerator stays active unless the device renews it.
    public var enumeratorLifetime: Int64 = 3600
    /// A device's first push waits this long for more to coalesce with.
    public var coalesceWindow: Duration = .milliseconds(25)
    /// At most one flush per device per interval (the throttle).
    public var minimumInterval: Duration = .milliseconds(250)
    /// Event streams get a comment this often, so dead peers are noticed.
    public var heartbeat: Duration = .seconds(15)
    /// Events older than this are forgotten (a device away longer syncs in full).
    public var eventRetention: Int64 = 7 * 24 * 3600
    public var maxEnumeratorsPerDevice = 256
    public var maxStreamsPerDevice = 4
    /// Events replayed to a stream that resumes; older ones show as a gap.
    public var replayLimit = 1000
    public var deliveryTimeout: TimeAmount = .seconds(5)
    public var deliveryConcurrency = 64
    public var apns: APNsConfiguration?
    /// Where webhooks may be sent (`--allow-webhook-host`).
    public var webhookPolicy = WebhookPolicy()
    public var log: @Sendable (String) -> Void = { Console.error("fprep serve: \($0)\n") }
    /// Log each registration and enumerator change too.
    public var verbose = false
    /// Several instances (a shared store): how long an instance that stops
    /// renewing its lease keeps its webhook and APNs devices before another
    /// instance takes them over (seconds).
    public var senderLease: Int64 = 10

    public init(domain: String) { self.domain = domain }
}

/// A failed API call: its status and one line for the client.
struct APIError: Error {
    let status: HTTPResponseStatus
    let message: String
    init(_ status: HTTPResponseStatus, _ message: String) {
        self.status = status
        self.message = message
    }
}

/// The push service's state and work: registered devices and their active
/// enumerators, the outbox read into per-device mailboxes, the flushes that
/// turn mailboxes into numbered events, and their delivery (streams here,
/// webhooks and APNs through `PushSender`). Everything durable is in its
/// store (`ServiceStorage`); the rest is rebuilt from it on start.
///
/// With a shared store (`SharedServiceStorage`, several instances on one
/// PostgreSQL database) the outbox goes to the store, a dispatch there turns
/// pushes into events once for all instances (no mailboxes here: the pushes
/// one dispatch claims are coalesced together), and the store's
/// notifications bring every instance the events its streams and senders
/// deliver.
public actor PushService {
    let configuration: ServiceConfiguration
    private let store: any ServiceStorage
    private let shared: (any SharedServiceStorage)?
    /// Where the outbox's entries come from, in the shared store.
    private let source: String
    private let outbox: Outbox
    private var listener: Task<Void, Never>?
    private var sender: PushSender?

    private var devices: [String: Device] = [:]
    private var deviceByToken: [String: String] = [:]
    /// The devices on an event stream (a device's channel never changes):
    /// a push reaches them before the mailboxes of the rest are filled.
    private var streamDevices: Set<String> = []
    /// device → container → expiry (seconds since 1970)
    private var active: [String: [String: Int64]] = [:]
    private var mailboxes: [String: Mailbox] = [:]
    private var mailboxSince: [String: ContinuousClock.Instant] = [:]
    private var lastFlush: [String: ContinuousClock.Instant] = [:]
    private var flushAt: ContinuousClock.Instant?
    private var flushTask: Task<Void, Never>?
    private var streams: [String: [Int: AsyncStream<[UInt8]>.Continuation]] = [:]
    private var nextStreamID = 0
    private var unsavedAcks: [String: Int64] = [:]
    /// When devices last called, saved with the acknowledgements.
    private var unsavedSeen: [String: Int64] = [:]
    private var lastPrune = ContinuousClock.now
    /// Outbox entries read into mailboxes; marked delivered once every
    /// mailbox is flushed.
    private var dispatchedSeqs: [Int64] = []
    private var highestDispatched: Int64 = 0
    private var draining = false
    /// Pushes read into the stream devices' mailboxes whose other devices'
    /// mailboxes `filling` has not filled yet (with how many devices they
    /// reached so far); the outbox marks them delivered only after.
    private var unfilled: [(entry: Outbox.Entry, reached: Int)] = []
    private var filling: Task<Void, Never>?
    /// Each device's last event given to its streams here (with a shared
    /// store an event comes twice, from this instance's dispatch and from
    /// the store's announcement; it is given once).
    private var streamedSeq: [String: Int64] = [:]
    private var drainAgain = false
    public private(set) var statistics = Statistics()

    /// Counters for the log and the benchmark.
    public struct Statistics: Sendable, Codable {
        public var pushesRead = 0
        public var eventsQueued = 0
        public var delivered = 0
    }

    /// Async so that it runs on the actor and can hand `self` to the sender.
    public init(configuration: ServiceConfiguration, folder: PushFolder, client: HTTPClient) async throws {
        try await self.init(configuration: configuration, folder: folder, client: client,
                            openStorage: { try ServiceStore(path: $0.servicePath) })
    }

    /// A service on the store `openStorage` opens (SQLite in the remote, or a shared one).
    package init(configuration: ServiceConfiguration, folder: PushFolder, client: HTTPClient,
                 openStorage: @Sendable (PushFolder) throws -> any ServiceStorage) async throws {
        self.configuration = configuration
        try folder.ensureFolder()
        store = try openStorage(folder)
        shared = store as? any SharedServiceStorage
        source = folder.remote
        outbox = try Outbox(path: folder.outboxPath)
        let now = wallClockNow()
        for device in try store.devices() { remember(device) }
        for record in try store.enumerators() where record.expires > now {
            active[record.device, default: [:]][record.container] = record.expires
        }
        sender = try PushSender(client: client, apns: configuration.apns, timeout: configuration.deliveryTimeout,
                            concurrency: configuration.deliveryConcurrency, policy: configuration.webhookPolicy,
                            onDelivered: { [weak self] device, seq in await self?.acknowledge(device, seq) },
                            onRejected: { [weak self] device, reason, since in await self?.rejected(device, reason, since: since) },
                            log: configuration.log)
        if let shared {
            shared.renewLease(every: .seconds(max(1, configuration.senderLease / 3)), for: configuration.senderLease)
            let notifications = shared.notifications
            listener = Task { [weak self] in
                for await notification in notifications { await self?.received(notification) }
            }
        }
    }

    /// Sends again what webhook and APNs devices had not received before a restart.
    public func resumeDeliveries() async throws {
        if shared != nil { return await keepAlive() }
        for device in devices.values where device.channel != .stream && device.lastSeq > device.ackedSeq {
            let events = try store.events(device: device.id, after: device.ackedSeq, limit: configuration.replayLimit)
            await sender?.enqueue(device: device.id, channel: device.channel, events: events)
        }
    }

    // MARK: devices

    /// Registers a device admitted with `enrollment` (see `admit`); returns
    /// it with its bearer token (shown once).
    func register(domain: String, enrollment: Enrollment, branch: String, replicated: Bool, channel: DeliveryChannel,
                  name: String) throws(APIError) -> (device: Device, token: String) {
        guard domain == configuration.domain else {
            throw APIError(.notFound, "unknown domain '\(domain)' (this service serves '\(configuration.domain)')")
        }
        let token = Token.random()
        let now = wallClockNow()
        let device = Device(id: "dev-" + Token.random(bytes: 8), tokenHash: Signing.sha256Hex(token), domain: domain,
                            branch: branch, replicated: replicated, channel: channel, name: name, created: now,
                            expires: now + configuration.tokenLifetime, lastSeq: 0, ackedSeq: 0, enrollment: enrollment.id,
                            lastSeen: now)
        do {
            try store.insert(device)
        } catch {
            throw APIError(.internalServerError, "cannot record the device: \(error)")
        }
        remember(device)
        if configuration.verbose {
            configuration.log("registered \(device.id) (\(channel.kind)\(replicated ? ", replicated" : ""), enrollment \(enrollment.id))")
        }
        return (device, token)
    }

    /// The enrollment a registration's secret belongs to; 401 unless it is
    /// one of `domain`, neither expired nor revoked. Read from the state on
    /// each call: `fprep serve enroll` adds them while the service runs.
    func admit(_ secret: String?, domain: String) throws(APIError) -> Enrollment {
        let ask = "ask the service's admin for one ('fprep serve enroll') and pass it as 'enrollment'"
        guard let secret, !secret.isEmpty else {
            throw APIError(.unauthorized, "registering needs an enrollment secret for domain '\(domain)' (\(ask))")
        }
        guard let parsed = EnrollmentSecret(secret) else {
            throw APIError(.unauthorized, "the enrollment secret is not one 'fprep serve enroll' printed (\(ask))")
        }
        let record: Enrollment?
        do {
            record = try store.enrollment(id: parsed.id)
        } catch {
            throw APIError(.internalServerError, "cannot read the enrollments: \(error)")
        }
        guard let record, parsed.matches(record) else {
            throw APIError(.unauthorized, "unknown enrollment secret (\(ask))")
        }
        if let refusal = record.refusal(at: wallClockNow()) { throw APIError(.unauthorized, "\(refusal) (\(ask))") }
        guard record.domain == domain else {
            throw APIError(.unauthorized, "the enrollment secret is for domain '\(record.domain)', not '\(domain)'")
        }
        return record
    }

    /// The device a bearer token belongs to; 401 when unknown, expired or revoked.
    func authenticate(_ token: String?) throws(APIError) -> Device {
        noticeRevocations()
        guard let token else { throw APIError(.unauthorized, "a bearer token is required (register with POST /v1/devices)") }
        let hash = Signing.sha256Hex(token)
        if deviceByToken[hash] == nil, shared != nil, let known = try? store.device(tokenHash: hash) {
            // Registered at another instance.
            remember(known)
        }
        guard let id = deviceByToken[hash], let device = devices[id] else {
            throw APIError(.unauthorized, "unknown token (register again with POST /v1/devices)")
        }
        let now = wallClockNow()
        guard device.expires > now else {
            throw APIError(.unauthorized, "the token expired (register again with POST /v1/devices)")
        }
        unsavedSeen[id] = now
        return device
    }

    /// Forgets, here, the devices an admin revoked (`fprep serve revoke`
    /// deletes them from the state): their streams end and their next
    /// request is 401. Cheap when nothing changed (one pragma).
    public func noticeRevocations() {
        do {
            guard try store.changedElsewhere() else { return }
            let recorded = try store.devices()
            let ids = Set(recorded.map(\.id))
            for id in devices.keys where !ids.contains(id) {
                forget(id)
                configuration.log("device \(id) was revoked")
            }
            for device in recorded where devices[device.id] == nil { remember(device) }
        } catch {
            configuration.log("cannot read the devices: \(error)")
        }
    }

    func unregister(_ id: String) throws(APIError) {
        guard devices[id] != nil else { return }
        forget(id)
        do { try store.delete(device: id) } catch { throw APIError(.internalServerError, "cannot forget the device: \(error)") }
        if configuration.verbose { configuration.log("unregistered \(id)") }
    }

    private func remember(_ device: Device) {
        devices[device.id] = device
        deviceByToken[device.tokenHash] = device.id
        if device.channel == .stream { streamDevices.insert(device.id) }
    }

    /// Drops a device from memory: its token, enumerators, mail, streams and sends.
    private func forget(_ id: String) {
        guard let device = devices.removeValue(forKey: id) else { return }
        deviceByToken[device.tokenHash] = nil
        streamDevices.remove(id)
        active[id] = nil
        mailboxes[id] = nil
        mailboxSince[id] = nil
        unsavedAcks[id] = nil
        unsavedSeen[id] = nil
        if let open = streams.removeValue(forKey: id) { for continuation in open.values { continuation.finish() } }
        if let sender { Task { await sender.forget(device: id) } }
    }

    /// The containers a device enumerates now.
    func activeContainers(_ id: String) -> [String] {
        let now = wallClockNow()
        return (active[id] ?? [:]).filter { $0.value > now }.keys.sorted()
    }

    /// Opens or closes an enumerator; returns its expiry (nil when closed).
    func setEnumerator(_ id: String, container: String, open: Bool, lifetime: Int64?) throws(APIError) -> Int64? {
        let now = wallClockNow()
        var containers = (active[id] ?? [:]).filter { $0.value > now }
        var expires: Int64?
        if open {
            if containers[container] == nil && containers.count >= configuration.maxEnumeratorsPerDevice {
                throw APIError(.conflict, "too many active enumerators (\(configuration.maxEnumeratorsPerDevice)); close some first")
            }
            expires = now + min(max(lifetime ?? configuration.enumeratorLifetime, 1), 24 * 3600)
            containers[container] = expires
        } else {
            containers[container] = nil
        }
        active[id] = containers
        do {
            try store.setEnumerator(device: id, container: container, expires: expires)
        } catch {
            throw APIError(.internalServerError, "cannot record the enumerator: \(error)")
        }
        if configuration.verbose { configuration.log("\(id) \(open ? "opened" : "closed") \(container)") }
        return expires
    }

    // MARK: streams

    /// A device's event stream: the events after `lastEventID` first, then
    /// each new one as it is flushed, and a comment now and then.
    func openStream(_ id: String, after lastEventID: Int64?) throws(APIError) -> AsyncStream<[UInt8]> {
        guard (streams[id]?.count ?? 0) < configuration.maxStreamsPerDevice else {
            throw APIError(.tooManyRequests, "this device has \(configuration.maxStreamsPerDevice) streams open already")
        }
        let (stream, continuation) = AsyncStream.makeStream(of: [UInt8].self)
        let streamID = nextStreamID
        nextStreamID += 1
        continuation.yield(ServerSentEvent.comment("fprep push stream for \(id)"))
        if let lastEventID {
            let missed: [DeviceEvent]
            do {
                missed = try store.events(device: id, after: lastEventID, limit: configuration.replayLimit)
            } catch {
                throw APIError(.internalServerError, "cannot read the device's events: \(error)")
            }
            for event in missed { continuation.yield(Self.encode(event)) }
            streamedSeq[id] = max(streamedSeq[id] ?? 0, missed.last?.seq ?? lastEventID)
        }
        streams[id, default: [:]][streamID] = continuation
        continuation.onTermination = { [weak self] _ in
            Task { await self?.closeStream(id, streamID) }
        }
        return stream
    }

    private func closeStream(_ id: String, _ streamID: Int) {
        streams[id]?[streamID] = nil
        if streams[id]?.isEmpty == true { streams[id] = nil }
    }

    /// How many event streams are open (for tests and the log).
    public var openStreams: Int { streams.values.reduce(0) { $0 + $1.count } }

    /// A comment on every stream, so a peer that is gone is noticed.
    public func heartbeat() {
        let comment = ServerSentEvent.comment("heartbeat")
        for list in streams.values { for continuation in list.values { continuation.yield(comment) } }
    }

    /// Stops the work in flight: the flush timer, the streams and the
    /// webhook and APNs senders (before the event loops shut down).
    public func shutdown() async {
        flushTask?.cancel()
        filling?.cancel()
        listener?.cancel()
        closeAllStreams()
        await sender?.stop()
    }

    /// Ends every stream (the service stops).
    public func closeAllStreams() {
        for list in streams.values { for continuation in list.values { continuation.finish() } }
        streams = [:]
    }

    private static func encode(_ event: DeviceEvent) -> [UInt8] {
        ServerSentEvent(id: String(event.seq), event: "push", data: String(decoding: event.payload, as: UTF8.self)).encoded
    }

    // MARK: outbox → mailboxes

    /// Reads the outbox entries not yet read into mailboxes. Safe to call
    /// often: a call during a drain makes that drain run once more.
    public func drainOutbox() {
        if let shared { return drainShared(shared) }
        guard !draining else {
            drainAgain = true
            return
        }
        draining = true
        defer { draining = false }
        repeat {
            drainAgain = false
            do {
                while true {
                    // Pushes spooled while the outbox was held come in first.
                    _ = try? outbox.drainSpool()
                    let entries = try outbox.pending(limit: 1000).filter { $0.seq > highestDispatched }
                    if entries.isEmpty { break }
                    for entry in entries { dispatch(entry) }
                    // Before anything else the actor has to do (filling
                    // 10^5 other mailboxes, saving acknowledgements).
                    flushStreams(at: .now)
                }
            } catch {
                configuration.log("cannot read the outbox: \(error)")
            }
        } while drainAgain
        markDeliveredIfSettled()
    }

    /// Reads a push into the mailboxes of the devices on an event stream at
    /// once; the other devices' mailboxes are filled after, in slices
    /// (`fillMailboxes`): with 10^5 webhook devices, a watching device's
    /// event is then not made after theirs, and the actor serves
    /// registrations, streams and acknowledgements between slices.
    private func dispatch(_ entry: Outbox.Entry) {
        highestDispatched = max(highestDispatched, entry.seq)
        dispatchedSeqs.append(entry.seq)
        statistics.pushesRead += 1
        let streamed = fill(entry, devices: streamDevices, now: wallClockNow())
        unfilled.append((entry, streamed))
        if filling == nil { filling = Task { await self.fillMailboxes() } }
    }

    /// Fills the mailboxes of the devices that are not on a stream with the
    /// pushes read so far, a slice of devices at a time; each slice gets
    /// every push waiting, in order, so pushes read together still
    /// coalesce in each device's mailbox. A slice lasts about 20 ms: what
    /// waits for the actor (a push to read, a stream to tell) waits no
    /// longer, and the work is not cut so fine that it queues behind
    /// every delivery in flight after each slice.
    private func fillMailboxes() async {
        let slice = 500
        let budget: Duration = .milliseconds(20)
        while !unfilled.isEmpty {
            // Pushes read while these are filled in wait for the next round;
            // devices registered meanwhile do not get these (as if they had
            // registered after they were read).
            let batch = unfilled
            let ids = devices.keys.filter { !streamDevices.contains($0) }
            var reached = batch.map(\.reached)
            var sliceStart = ContinuousClock.now
            for start in stride(from: 0, to: ids.count, by: slice) {
                let now = wallClockNow()
                for (index, pending) in batch.enumerated() {
                    reached[index] += fill(pending.entry, devices: ids[start..<min(start + slice, ids.count)], now: now)
                }
                guard ContinuousClock.now - sliceStart >= budget else { continue }
                await Task.yield()
                if Task.isCancelled { return }
                sliceStart = .now
            }
            unfilled.removeFirst(batch.count)
            for (pending, reached) in zip(batch, reached) {
                let entry = pending.entry
                configuration.log("push \(entry.seq): \(entry.reference) \(entry.old.prefix(12))…\(entry.new.prefix(12)), \(counted(entry.containers.count, "container")), \(counted(reached, "device"))")
            }
        }
        filling = nil
        markDeliveredIfSettled()
    }

    /// Adds `entry` to the mailboxes of those of `ids` it concerns; returns how many.
    private func fill<IDs: Sequence<String>>(_ entry: Outbox.Entry, devices ids: IDs, now: Int64) -> Int {
        let pushed = Set(entry.containers)
        var reached = 0
        for id in ids {
            guard let device = devices[id], device.domain == entry.domain,
                  entry.reference == "refs/heads/" + device.branch, device.expires > now else { continue }
            let enumerated = (active[id] ?? [:]).compactMap { $0.value > now ? $0.key : nil }.sorted()
            let targets = PushRules.containers(pushed: pushed, active: enumerated, replicated: device.replicated)
            var box = mailboxes[id] ?? Mailbox(old: entry.old, new: entry.new)
            box.add(targets, new: entry.new)
            mailboxes[id] = box
            noteMail(id)
            reached += 1
        }
        return reached
    }

    /// When a device's mailbox may be flushed: after the coalescing window,
    /// and not sooner than the throttle allows after its last flush.
    private func due(_ id: String) -> ContinuousClock.Instant {
        let since = mailboxSince[id] ?? .now
        // A device on an event stream hears at once: its watcher already
        // makes one sync of what comes while it syncs. The window is for
        // webhook and APNs deliveries, one request each.
        let windowEnd = streamDevices.contains(id) ? since : since + configuration.coalesceWindow
        guard let last = lastFlush[id] else { return windowEnd }
        return max(windowEnd, last + configuration.minimumInterval)
    }

    private func noteMail(_ id: String) {
        if mailboxSince[id] == nil { mailboxSince[id] = .now }
        schedule(at: due(id))
    }

    private func schedule(at instant: ContinuousClock.Instant) {
        if let flushAt, flushAt <= instant { return }
        flushAt = instant
        flushTask?.cancel()
        flushTask = Task { [weak self] in
            guard await sleepUnlessCancelled(until: instant) else { return }
            await self?.flush()
        }
    }

    /// Turns every due mailbox into numbered events: stored first (a stream
    /// that reconnects finds them), then delivered.
    func flush() async {
        flushAt = nil
        let now = ContinuousClock.now
        let streamsLater = flushStreams(at: now)
        var (ready, later) = due(mailboxes.keys.filter { !streamDevices.contains($0) }, at: now)
        if let streamsLater { later = min(later ?? streamsLater, streamsLater) }
        // Webhook and APNs devices a slice at a time: a push read meanwhile
        // reaches the streams between slices, not after 10^5 events.
        var encoded: [PushPayload: [UInt8]] = [:]
        for start in stride(from: 0, to: ready.count, by: 5_000) {
            let sent = takeEvents(ready[start..<min(start + 5_000, ready.count)], at: now, encoded: &encoded)
            do {
                try store.append(sent, at: wallClockNow())
            } catch {
                configuration.log("cannot store events: \(error)")
            }
            statistics.eventsQueued += sent.count
            var pushBatches: [String: [DeviceEvent]] = [:]
            for (id, event) in sent { pushBatches[id, default: []].append(event) }
            if let sender, !pushBatches.isEmpty {
                let batch = pushBatches.compactMap { id, events in devices[id].map { (id, $0.channel, events) } }
                await sender.enqueue(batch)
            }
            await Task.yield()
        }
        if let later { schedule(at: later) }
        markDeliveredIfSettled()
    }

    /// The devices on an event stream first: their events numbered, stored
    /// in a transaction of their own and given to their streams before the
    /// events of thousands of webhook devices are even made, so a watching
    /// device syncs at once. Returns when the next of them is due.
    @discardableResult
    private func flushStreams(at now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        let (ready, later) = due(streamDevices, at: now)
        guard !ready.isEmpty else { return later }
        var encoded: [PushPayload: [UInt8]] = [:]
        let streamed = takeEvents(ready, at: now, encoded: &encoded)
        do {
            try store.append(streamed, at: wallClockNow())
        } catch {
            configuration.log("cannot store events: \(error)")
        }
        yieldToStreams(streamed, onlyNext: false)
        statistics.eventsQueued += streamed.count
        markDeliveredIfSettled()
        return later
    }

    /// Of `ids`, those with a mailbox due at `now`, and when the first of
    /// the others is due.
    private func due(_ ids: some Sequence<String>, at now: ContinuousClock.Instant)
        -> (ready: [String], later: ContinuousClock.Instant?) {
        var ready: [String] = []
        var later: ContinuousClock.Instant?
        for id in ids where mailboxes[id] != nil {
            let dueAt = due(id)
            if dueAt <= now { ready.append(id) } else { later = min(later ?? dueAt, dueAt) }
        }
        return (ready, later)
    }

    /// Empties the mailboxes of `ready` into numbered events (each
    /// payload encoded once: devices of one push mostly get the same).
    private func takeEvents(_ ready: some Sequence<String>, at now: ContinuousClock.Instant,
                            encoded: inout [PushPayload: [UInt8]]) -> [(device: String, event: DeviceEvent)] {
        var events: [(device: String, event: DeviceEvent)] = []
        // Each mailbox is read here, not before: a flush that yields
        // between slices may find some taken by another meanwhile.
        for id in ready {
            guard let box = mailboxes[id] else { continue }
            mailboxes[id] = nil
            mailboxSince[id] = nil
            guard var device = devices[id] else { continue }
            lastFlush[id] = now
            for payload in box.payloads(domain: device.domain) {
                device.lastSeq += 1
                let bytes = encoded[payload] ?? JSONCoding.encode(payload)
                encoded[payload] = bytes
                events.append((id, DeviceEvent(seq: device.lastSeq, payload: bytes)))
            }
            devices[id] = device
        }
        return events
    }

    /// The outbox's entries count as delivered once every device they reach
    /// has them as numbered events (a restart reads them again otherwise).
    private func markDeliveredIfSettled() {
        guard mailboxes.isEmpty, unfilled.isEmpty else { return }
        markDispatchedDelivered()
    }

    private func markDispatchedDelivered() {
        guard !dispatchedSeqs.isEmpty else { return }
        do {
            try outbox.markDelivered(dispatchedSeqs, at: wallClockNow())
            dispatchedSeqs = []
        } catch {
            configuration.log("cannot mark the outbox: \(error)")
        }
    }

    // MARK: delivery reports

    func acknowledge(_ id: String, _ seq: Int64) {
        statistics.delivered += 1
        guard var device = devices[id], seq > device.ackedSeq else { return }
        device.ackedSeq = seq
        devices[id] = device
        unsavedAcks[id] = seq
    }

    /// The endpoint will never take pushes for this device: it is
    /// unregistered, unless APNs' `since` (ms since 1970: when it last
    /// found the device token invalid) is older than the registration, which
    /// then is one that came after, with a token valid again.
    func rejected(_ id: String, _ reason: String, since: Int64? = nil) {
        guard let device = devices[id] else { return }
        if let since, device.created * 1000 > since {
            configuration.log("device \(id): \(reason), but it registered after that (\(device.created * 1000) > \(since) ms); it is kept")
            return
        }
        configuration.log("device \(id) refused by its endpoint: \(reason); it is unregistered")
        try? unregister(id)
    }

    /// How many connections to APNs were opened (one, while it stays up).
    public func apnsConnectionsOpened() async -> Int {
        await sender?.apnsConnection?.connectionsOpened ?? 0
    }

    /// Saves delivery acknowledgements and forgets old events, expired
    /// enumerators and long-expired devices; with a shared store, renews
    /// this instance's lease and takes over the devices of instances gone.
    public func maintain() async {
        if shared != nil { await keepAlive() }
        do {
            // 10^5 devices' acknowledgements are saved in slices: a push
            // that comes meanwhile is read between them, not after all.
            let acks = unsavedAcks
            unsavedAcks = [:]
            try await saveInSlices(acks, keepingOnFailure: { self.unsavedAcks.merge($0, uniquingKeysWith: max) }) {
                try $0.saveAcknowledgements($1)
            }
            let seen = unsavedSeen
            unsavedSeen = [:]
            try await saveInSlices(seen, keepingOnFailure: { self.unsavedSeen.merge($0, uniquingKeysWith: max) }) {
                try $0.saveLastSeen($1)
            }
            // Pruning scans the event log: once a minute is plenty.
            guard ContinuousClock.now - lastPrune >= .seconds(60) else { return }
            lastPrune = .now
            let now = wallClockNow()
            try store.prune(eventsBefore: now - configuration.eventRetention,
                            devicesExpiredBefore: now - configuration.eventRetention, now: now)
            for (id, containers) in active { active[id] = containers.filter { $0.value > now } }
            try outbox.prune(deliveredBefore: now - configuration.eventRetention)
        } catch {
            configuration.log("maintenance failed: \(error)")
        }
    }

    /// Saves a per-device table kept in memory between maintenance rounds
    /// (acknowledgements, last calls), a slice of devices per statement;
    /// what a failure leaves unsaved goes back for the next round.
    private func saveInSlices(_ pending: [String: Int64], keepingOnFailure keep: ([String: Int64]) -> Void,
                              _ save: (any ServiceStorage, [String: Int64]) throws -> Void) async throws {
        let ids = Array(pending.keys)
        for start in stride(from: 0, to: ids.count, by: 5_000) {
            do {
                try save(store, Dictionary(uniqueKeysWithValues: ids[start..<min(start + 5_000, ids.count)].map { ($0, pending[$0] ?? 0) }))
            } catch {
                keep(Dictionary(uniqueKeysWithValues: ids[start...].map { ($0, pending[$0] ?? 0) }))
                throw error
            }
            await Task.yield()
        }
    }

    /// Lets go of the store (after the last `maintain`): a shared store
    /// drops this instance's lease, so its devices move at once.
    public func closeStore() {
        store.close()
    }

    // MARK: several instances (a shared store)

    /// Copies the outbox into the shared store, then dispatches what waits
    /// there, in claims of up to 100 pushes.
    private func drainShared(_ shared: any SharedServiceStorage) {
        do {
            _ = try? outbox.drainSpool()
            while true {
                let entries = try outbox.pending(limit: 1000)
                if entries.isEmpty { break }
                try shared.ingest(entries, source: source)
                try outbox.markDelivered(entries.map(\.seq), at: wallClockNow())
            }
            let now = wallClockNow()
            for streams in [true, false] {
                while true {
                    let dispatched = try shared.dispatch(limit: 100, now: now, streams: streams, plan: { pushes, devices, active in
                        plan(pushes, devices: devices, active: active, now: now, streams: streams)
                    })
                    if dispatched.pushes.isEmpty { break }
                    if streams {
                        // This instance's own streams hear at once, not
                        // after the store's notification comes back (which
                        // would wait for the webhook step below).
                        yieldToStreams(dispatched.events, onlyNext: true)
                    }
                }
            }
        } catch {
            configuration.log("cannot dispatch the outbox: \(error)")
        }
    }

    /// Each device's payloads for pushes claimed together (coalesced as one
    /// mailbox); `devices` are those of one dispatch step (`streams`: on an
    /// event stream, else by webhook or APNs).
    private func plan(_ pushes: [Outbox.Entry], devices: [Device], active: [String: [String]],
                      now: Int64, streams: Bool) -> [(device: String, payloads: [[UInt8]])] {
        var boxes: [String: Mailbox] = [:]
        var order: [(id: String, domain: String)] = []
        for entry in pushes {
            let pushed = Set(entry.containers)
            var reached = 0
            for device in devices where device.domain == entry.domain && entry.reference == "refs/heads/" + device.branch
                && device.expires > now {
                let targets = PushRules.containers(pushed: pushed, active: active[device.id] ?? [], replicated: device.replicated)
                if boxes[device.id] == nil {
                    boxes[device.id] = Mailbox(old: entry.old, new: entry.new)
                    order.append((device.id, device.domain))
                }
                boxes[device.id]?.add(targets, new: entry.new)
                reached += 1
            }
            statistics.pushesRead += streams ? 1 : 0
            // Logged where it first reaches a device (the stream step
            // always, the other step only with devices to reach).
            guard streams || reached > 0 else { continue }
            configuration.log("push \(entry.seq) to \(streams ? "event streams" : "webhooks and APNs"): \(entry.reference) \(entry.old.prefix(12))…\(entry.new.prefix(12)), \(counted(entry.containers.count, "container")), \(counted(reached, "device"))")
        }
        // Devices of one push mostly get the same payloads: each is encoded once.
        var encoded: [PushPayload: [UInt8]] = [:]
        var result: [(device: String, payloads: [[UInt8]])] = []
        for (id, domain) in order {
            var payloads: [[UInt8]] = []
            for payload in boxes[id]?.payloads(domain: domain) ?? [] {
                if let bytes = encoded[payload] {
                    payloads.append(bytes)
                } else {
                    let bytes: [UInt8] = JSONCoding.encode(payload)
                    encoded[payload] = bytes
                    payloads.append(bytes)
                }
            }
            if !payloads.isEmpty { result.append((id, payloads)) }
        }
        return result
    }

    /// Hands events to the streams open here, each once and in order:
    /// `onlyNext` (a dispatch's own events, before the store announces
    /// them) yields an event only when it follows the last one this
    /// instance gave that device; any other waits for the announcement,
    /// which comes in the store's order.
    private func yieldToStreams(_ events: [(device: String, event: DeviceEvent)], onlyNext: Bool) {
        for (id, event) in events {
            guard let open = streams[id], !open.isEmpty else { continue }
            let last = streamedSeq[id]
            if onlyNext ? last != event.seq - 1 : (last ?? 0) >= event.seq { continue }
            streamedSeq[id] = event.seq
            let bytes = Self.encode(event)
            for continuation in open.values { continuation.yield(bytes) }
            statistics.delivered += 1
        }
    }

    /// What another instance (or this one) announced through the store.
    private func received(_ notification: ServiceNotification) async {
        switch notification {
        case .events(let batch): await deliver(batch: batch)
        case .revoked(let id):
            guard devices[id] != nil else { return }
            forget(id)
            configuration.log("device \(id) was revoked")
        }
    }

    /// Hands a dispatch's events to the streams open here and to this
    /// instance's sender for the devices it sends to.
    private func deliver(batch: Int64) async {
        guard let shared, let sender else { return }
        let rows: [(device: String, event: DeviceEvent, sender: String?)]
        do {
            rows = try shared.events(batch: batch)
        } catch {
            return configuration.log("cannot read the events of batch \(batch): \(error)")
        }
        var reloaded = false
        var sends: [String: [DeviceEvent]] = [:]
        yieldToStreams(rows.map { ($0.device, $0.event) }, onlyNext: false)
        for (id, event, sendingInstance) in rows {
            statistics.eventsQueued += sendingInstance == shared.instance || streams[id] != nil ? 1 : 0
            guard sendingInstance == shared.instance else { continue }
            if devices[id] == nil && !reloaded {
                // Registered at another instance since this one read the devices.
                reloaded = true
                for device in (try? store.devices()) ?? [] where devices[device.id] == nil { remember(device) }
            }
            guard var device = devices[id], device.channel != .stream else { continue }
            device.lastSeq = max(device.lastSeq, event.seq)
            devices[id] = device
            sends[id, default: []].append(event)
        }
        let queued = sends.compactMap { id, events in devices[id].map { (id, $0.channel, events) } }
        if !queued.isEmpty { await sender.enqueue(queued) }
    }

    /// Renews this instance's lease in the shared store and resends what the
    /// devices it took over had not acknowledged.
    private func keepAlive() async {
        guard let shared, let sender else { return }
        let now = wallClockNow()
        do {
            let taken = try shared.heartbeat(until: now + configuration.senderLease, now: now)
            for device in taken {
                remember(device)
                let events = try store.events(device: device.id, after: device.ackedSeq, limit: configuration.replayLimit)
                configuration.log("took over device \(device.id) (\(counted(events.count, "event")) to send)")
                await sender.enqueue(device: device.id, channel: device.channel, events: events)
            }
        } catch {
            configuration.log("cannot renew this instance's lease: \(error)")
        }
    }
}
