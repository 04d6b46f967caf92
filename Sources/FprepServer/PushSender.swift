import FoundationEssentials
import FprepCore
import NIOCore
import NIOHTTP1

/// Sends webhook and APNs pushes: one queue per device, sent in order, a
/// bounded number of requests in flight in all, a failed request retried
/// with growing pauses. What a device received is reported back, so the
/// service can tell where to start again after a restart.
actor PushSender {
    private let client: HTTPClient
    private let apns: APNsConfiguration?
    private let tokens: ProviderTokenCache?
    /// The one HTTP/2 connection to APNs all devices' pushes share.
    let apnsConnection: APNsConnection?
    private let timeout: TimeAmount
    /// Where webhooks may go.
    private let policy: WebhookPolicy
    private let onDelivered: @Sendable (_ device: String, _ seq: Int64) async -> Void
    /// `since`: APNs' timestamp (ms since 1970) from when the device token is
    /// known to be invalid; a device that registered after it is kept.
    private let onRejected: @Sendable (_ device: String, _ reason: String, _ since: Int64?) async -> Void
    private let log: @Sendable (String) -> Void
    private var queues: [String: (channel: DeliveryChannel, events: [DeviceEvent])] = [:]
    /// The sender task of each device with a queue.
    private var workers: [String: Task<Void, Never>] = [:]
    private var stopped = false
    private let slots: Slots
    /// Pauses between attempts, seconds; after the last the events wait for
    /// the device's next push (its anchors then show the gap).
    private let backoff: [Double]

    init(client: HTTPClient, apns: APNsConfiguration?, timeout: TimeAmount, concurrency: Int, policy: WebhookPolicy,
         backoff: [Double] = [0.25, 0.5, 1, 2, 4, 8, 15, 30],
         onDelivered: @escaping @Sendable (String, Int64) async -> Void,
         onRejected: @escaping @Sendable (String, String, Int64?) async -> Void,
         log: @escaping @Sendable (String) -> Void) throws {
        self.client = client
        self.apns = apns
        tokens = apns.map(ProviderTokenCache.init)
        if let apns {
            let tls = try TLS.clientContext(caFile: apns.caFile, protocols: ["h2"])
            apnsConnection = APNsConnection(host: apns.host, port: apns.port, tls: tls, group: client.group)
        } else {
            apnsConnection = nil
        }
        self.timeout = timeout
        self.policy = policy
        slots = Slots(count: concurrency)
        self.backoff = backoff
        self.onDelivered = onDelivered
        self.onRejected = onRejected
        self.log = log
    }

    /// Queues events for a device and starts its sender when idle.
    func enqueue(device: String, channel: DeliveryChannel, events: [DeviceEvent]) {
        guard !events.isEmpty, !stopped else { return }
        queues[device, default: (channel, [])].events += events
        guard workers[device] == nil else { return }
        workers[device] = Task { await self.drain(device) }
    }

    /// Queues one flush's events for many devices in one call.
    func enqueue(_ batch: [(device: String, channel: DeliveryChannel, events: [DeviceEvent])]) {
        for item in batch { enqueue(device: item.device, channel: item.channel, events: item.events) }
    }

    /// Stops sending: queues dropped, every sender task ended (before the
    /// event loops the client uses shut down).
    func stop() async {
        stopped = true
        queues = [:]
        let running = Array(workers.values)
        workers = [:]
        for task in running { task.cancel() }
        await slots.wakeAll()
        for task in running { await task.value }
        await apnsConnection?.shutdown()
    }

    /// Drops a device's queue (it unregistered).
    func forget(device: String) { queues[device] = nil }

    private func next(_ device: String) -> (DeliveryChannel, DeviceEvent)? {
        guard !stopped, var queue = queues[device], !queue.events.isEmpty else {
            queues[device] = nil
            workers[device] = nil
            return nil
        }
        let event = queue.events.removeFirst()
        queues[device] = queue
        return (queue.channel, event)
    }

    private func drain(_ device: String) async {
        while let (channel, event) = next(device) {
            var attempt = 0
            while true {
                await slots.acquire()
                if stopped || Task.isCancelled {
                    await slots.release()
                    return
                }
                let outcome = await send(event, of: device, on: channel)
                await slots.release()
                switch outcome {
                case .delivered:
                    await onDelivered(device, event.seq)
                case .rejected(let reason, let since):
                    // The endpoint will never take it (unknown device token…).
                    queues[device] = nil
                    workers[device] = nil
                    await onRejected(device, reason, since)
                    return
                case .dropped(let reason):
                    log("event \(event.seq) for device \(device) dropped: \(reason)")
                case .retry(let reason):
                    // Said once per event: the attempts after it say it again until the last.
                    if attempt == 0 { log("event \(event.seq) for device \(device) not sent, trying again: \(reason)") }
                    if attempt < backoff.count && !stopped,
                       await sleepUnlessCancelled(for: .milliseconds(Int64(backoff[attempt] * 1000))) {
                        attempt += 1
                        continue
                    }
                    log("giving up on event \(event.seq) for device \(device) after \(attempt + 1) attempts: \(reason)")
                }
                break
            }
        }
    }

    private enum Outcome {
        case delivered
        case retry(String)
        /// The endpoint refused this event; the next ones are still sent.
        case dropped(String)
        /// The endpoint will never take anything for this device (APNs: bad
        /// or unregistered token; `since`: APNs' timestamp of it, ms).
        case rejected(String, since: Int64? = nil)
    }

    private func send(_ event: DeviceEvent, of device: String, on channel: DeliveryChannel) async -> Outcome {
        let request: ClientRequest
        var address: SocketAddress?
        switch channel {
        case .stream:
            return .delivered
        case .webhook(let url, let secret):
            switch await WebhookTarget.choose(for: url, policy: policy) {
            case .connect(let checked): address = checked
            case .refused(let reason): return .dropped("webhook \(url) refused: \(reason)")
            case .unresolved(let reason): return .retry(reason)
            }
            // The same id on every attempt of this event, so a receiver
            // that took it already can tell a retry from a new push.
            let delivery = "\(device)-\(event.seq)"
            let timestamp = wallClockNow()
            let headers: HTTPHeaders = [
                "content-type": "application/json",
                "x-fprep-timestamp": String(timestamp),
                "x-fprep-delivery": delivery,
                "x-fprep-signature": Signing.webhookSignature(timestamp: timestamp, delivery: delivery, body: event.payload,
                                                              secret: secret),
                "x-fprep-event-id": String(event.seq),
            ]
            request = ClientRequest(.POST, url, headers: headers, body: event.payload)
        case .apns(let deviceToken):
            return await sendAPNs(event, to: deviceToken)
        }
        do {
            let response = try await client.send(request, connectingTo: address, timeout: timeout)
            switch response.status {
            case 200..<300: return .delivered
            case 400, 404, 410, 413: return .dropped("\(response.status) \(ServiceError.message(in: response.body))")
            default: return .retry("\(response.status) \(ServiceError.message(in: response.body))")
            }
        } catch {
            return .retry("\(error)")
        }
    }

    /// One push through APNs, and what its answer means (Apple's "Handling
    /// notification responses from APNs"): 200 sent; 410 Unregistered and
    /// 400 BadDeviceToken: the token is dead; 403 ExpiredProviderToken: a
    /// new provider token, once, at once; 429 and 5xx: again later; any
    /// other answer drops this push.
    private func sendAPNs(_ event: DeviceEvent, to deviceToken: String) async -> Outcome {
        guard let apns, let tokens, let apnsConnection else {
            return .rejected("no APNs server is configured (start 'fprep serve' with --apns-…)")
        }
        var refreshed = false
        while true {
            let providerToken = await tokens.token()
            let headers = apns.headers(providerToken: providerToken, now: wallClockNow())
            let response: APNsResponse
            do {
                response = try await apnsConnection.send(path: "/3/device/\(deviceToken)", headers: headers, body: event.payload,
                                                         timeout: timeout)
            } catch {
                return .retry("\(error)")
            }
            let answer = APNsAnswer(response.body)
            let reason = "APNs answered \(response.status) \(answer.reason ?? answer.text)"
            switch (response.status, answer.reason) {
            case (200, _):
                return .delivered
            case (410, _):
                return .rejected(reason, since: answer.timestamp)
            case (400, "BadDeviceToken"), (400, "DeviceTokenNotForTopic"):
                return .rejected(reason)
            case (403, "ExpiredProviderToken") where !refreshed:
                await tokens.invalidate(providerToken)
                refreshed = true
                continue
            case (429, _), (500..<600, _):
                return .retry(reason)
            default:
                return .dropped(reason)
            }
        }
    }
}

/// APNs' error body, `{"reason": "...", "timestamp": ms}` (timestamp with 410 only).
struct APNsAnswer {
    var reason: String?
    var timestamp: Int64?
    /// The body's first line when it is not that JSON.
    var text: String

    init(_ body: [UInt8]) {
        struct Fields: Decodable {
            let reason: String?
            let timestamp: Int64?
        }
        let fields = try? JSONCoding.decode(Fields.self, from: body)
        reason = fields?.reason
        timestamp = fields?.timestamp
        let first = String(decoding: body.prefix(200), as: UTF8.self).split(separator: "\n").first.map(String.init)
        text = fields == nil ? (first.map { "(not APNs' JSON: \($0))" } ?? "(no body)") : "(no reason)"
    }
}

/// A counting semaphore for tasks.
actor Slots {
    private var free: Int
    private var waiting: [CheckedContinuation<Void, Never>] = []
    /// The next waiter to wake: a queue without O(n) removals at the front.
    private var head = 0

    init(count: Int) { free = max(1, count) }

    func acquire() async {
        if free > 0 {
            free -= 1
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    /// Lets every waiter go (the sender stops; they see it and return).
    func wakeAll() {
        let woken = waiting[head...]
        waiting = []
        head = 0
        free = Int.max / 2
        for waiter in woken { waiter.resume() }
    }

    func release() {
        guard head < waiting.count else {
            free += 1
            return
        }
        let next = waiting[head]
        head += 1
        if head == waiting.count {
            waiting.removeAll(keepingCapacity: true)
            head = 0
        }
        next.resume()
    }
}
