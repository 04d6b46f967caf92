import Crypto
import Foundation
import FprepCore
@testable import FprepPush
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOPosix
import Testing
@testable import FprepServer

@Suite("push service")
struct ServiceTests {
    @Test("only devices enumerating a container get it; every device gets the working set; replicated ones only that")
    func deliveryRules() async throws {
        let fixture = try await ServiceFixture()
        let enumerating = try await fixture.registerWebhook()
        let idle = try await fixture.registerWebhook()
        let replicated = try await fixture.registerWebhook(replicated: true)
        try await fixture.openEnumerator("docs", token: enumerating.token)
        try await fixture.openEnumerator("docs", token: replicated.token)
        try await fixture.openEnumerator("photos", token: idle.token)
        try await fixture.push([(anchor(1), anchor(2), [root, "docs", "src"])])
        _ = await fixture.sink.waitFor(4)
        try await Task.sleep(for: .milliseconds(200))  // nothing more may come
        #expect(fixture.sink.received.get().count == 4)
        let all = fixture.sink.payloads().map(\.container).sorted()
        #expect(all == ["docs", workingSet, workingSet, workingSet].sorted())
        #expect(fixture.sink.payloads().allSatisfy { $0.domain == fixture.domain && $0.old == anchor(1) && $0.new == anchor(2) })
        await fixture.stop()
    }

    @Test("many pushes and 10,000 changed folders make a handful of pushes per device")
    func coalescing() async throws {
        let fixture = try await ServiceFixture { $0.coalesceWindow = .milliseconds(50) }
        let device = try await fixture.registerWebhook()
        try await fixture.openEnumerator("docs", token: device.token)
        try await fixture.openEnumerator("dir-5", token: device.token)
        let folders = (0..<10_000).map { "dir-\($0)" }
        let pushes = (1...50).map { (anchor($0), anchor($0 + 1), $0 == 1 ? folders + ["docs"] : ["docs"]) }
        try await fixture.push(pushes)
        _ = await fixture.sink.waitFor(3)
        try await Task.sleep(for: .milliseconds(300))
        let payloads = fixture.sink.payloads()
        #expect(payloads.map(\.container).sorted() == ["dir-5", "docs", workingSet].sorted())
        #expect(payloads.allSatisfy { $0.old == anchor(1) && $0.new == anchor(51) }, "one span from the first old to the last new commit")
        await fixture.stop()
    }

    @Test("a webhook carries the HMAC-SHA256 of its timestamp, delivery id and body in x-fprep-signature")
    func webhookSignature() async throws {
        let fixture = try await ServiceFixture()
        let secret = "a-webhook-secret-of-some-length"
        _ = try await fixture.registerWebhook(secret: secret)
        let before = Int64(Date().timeIntervalSince1970)
        try await fixture.push([(anchor(1), anchor(2), [root])])
        let request = try #require(await fixture.sink.waitFor(1).first)
        let after = Int64(Date().timeIntervalSince1970)
        let body = Array(request.body.readableBytesView)
        let timestamp = try #require(request.headers.first(name: "x-fprep-timestamp"))
        let delivery = try #require(request.headers.first(name: "x-fprep-delivery"))
        // Between the push and its arrival, however long a loaded machine took.
        #expect((before - 1...after + 1).contains(Int64(timestamp) ?? 0), "\(timestamp)")
        let signed = Array("\(timestamp).\(delivery).".utf8) + body
        let expected = HMAC<SHA256>.authenticationCode(for: signed, using: SymmetricKey(data: Array(secret.utf8)))
        let hex = expected.map { String(format: "%02x", $0) }.joined()
        #expect(request.headers.first(name: "x-fprep-signature") == "sha256=" + hex)
        #expect(request.method == .POST && request.path == "/hook")
        #expect(request.headers.first(name: "x-fprep-event-id") == "1")
        #expect(try JSONCoding.decode(PushPayload.self, from: body).container == workingSet)
        await fixture.stop()
    }

    @Test("bad input gets a clear 4xx and the service stays up")
    func badInput() async throws {
        let fixture = try await ServiceFixture { $0.tokenLifetime = 3600 }
        func expect(_ response: ClientResponse, _ status: Int, _ words: String, sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(response.status == status, "\(response.status) \(response.text)", sourceLocation: sourceLocation)
            #expect(ServiceError.message(in: response.body).contains(words), "\(response.text)", sourceLocation: sourceLocation)
        }
        expect(try await fixture.call(.POST, "/v1/devices", body: "{not json"), 400, "not valid JSON")
        let enrolled = #""enrollment":"\#(fixture.enrollment)""#
        expect(try await fixture.call(.POST, "/v1/devices", body: #"{"domain":"testdomain"}"#), 400, "lacks 'channel'")
        expect(try await fixture.call(.POST, "/v1/devices", body: #"{"domain":7,"channel":{"kind":"stream"}}"#), 400, "wrong type")
        expect(try await fixture.call(.POST, "/v1/devices", body: #"{"domain":"testdomain","channel":{"kind":"stream"}}"#), 401, "enrollment secret")
        expect(try await fixture.call(.POST, "/v1/devices", body: #"{"domain":"other",\#(enrolled),"channel":{"kind":"stream"}}"#), 401,
               "for domain 'testdomain', not 'other'")
        expect(try await fixture.call(.POST, "/v1/devices", body: #"{"domain":"testdomain",\#(enrolled),"channel":{"kind":"carrier-pigeon"}}"#),
               400, "unknown channel kind")
        expect(try await fixture.call(.POST, "/v1/devices", body: #"{"domain":"testdomain",\#(enrolled),"channel":{"kind":"webhook","url":"ftp://x"}}"#),
               400, "needs 'url'")
        expect(try await fixture.call(.POST, "/v1/devices", body: String(repeating: " ", count: 100_000)), 413, "larger than")
        expect(try await fixture.call(.GET, "/v1/events"), 401, "bearer token is required")
        expect(try await fixture.call(.GET, "/v1/events", token: "nonsense"), 401, "unknown token")
        expect(try await fixture.call(.POST, "/v1/enumerators", token: "nonsense", body: "{}"), 401, "unknown token")
        expect(try await fixture.call(.POST, "/v1/outbox/poke", token: "not-the-secret"), 401, "secret")
        expect(try await fixture.call(.GET, "/v2/anything"), 404, "no such endpoint")
        expect(try await fixture.call(.PUT, "/v1/devices"), 405, "not allowed")
        let webhook = try await fixture.registerWebhook()
        expect(try await fixture.call(.GET, "/v1/events", token: webhook.token), 409, "by webhook")
        expect(try await fixture.call(.POST, "/v1/enumerators", token: webhook.token, body: #"{"container":"","active":true}"#), 400, "1-4096 bytes")
        #expect(try await fixture.call(.POST, "/v1/outbox/poke", token: fixture.secret).status == 202)
        #expect(try await fixture.call(.GET, "/v1/health").status == 200)
        await fixture.stop()
    }

    @Test("an expired token is refused")
    func expiredToken() async throws {
        let fixture = try await ServiceFixture { $0.tokenLifetime = 0 }
        let device = try await fixture.registerWebhook()
        let response = try await fixture.call(.GET, "/v1/devices/me", token: device.token)
        #expect(response.status == 401)
        #expect(response.text.contains("expired"))
        await fixture.stop()
    }

    @Test("a flood from one client gets 429s; the service answers again after the pause")
    func flood() async throws {
        let fixture = try await ServiceFixture(rateLimit: 10)
        var statuses: [Int] = []
        let started = Date()
        for _ in 0..<60 { statuses.append(try await fixture.call(.GET, "/v1/health").status) }
        // A burst of 10, then 10 a second: however slow this machine was, no more passed.
        let allowed = 10 + Int(Date().timeIntervalSince(started) * 10) + 1
        #expect(statuses.allSatisfy { $0 == 200 || $0 == 429 }, "\(statuses)")
        #expect(statuses.filter { $0 == 200 }.count <= allowed, "\(statuses)")
        #expect(statuses.filter { $0 == 200 }.count >= 10)
        try await Task.sleep(for: .milliseconds(1100))
        #expect(try await fixture.call(.GET, "/v1/health").status == 200)
        await fixture.stop()
    }

    @Test("an event stream resumes after Last-Event-ID, also across a restart of the service")
    func streamResume() async throws {
        let fixture = try await ServiceFixture()
        let device = try await fixture.register(#"{"kind":"stream"}"#)
        try await fixture.openEnumerator("docs", token: device.token)
        try await fixture.push([(anchor(1), anchor(2), ["docs"])])
        #expect(await eventually { await fixture.service.statistics.eventsQueued == 2 })
        try await fixture.restart()
        try await fixture.push([(anchor(2), anchor(3), ["docs"])])
        #expect(await eventually { await fixture.service.statistics.eventsQueued == 2 })
        // The device saw event 2 (the first push's working set) and missed the rest.
        let events = Locked<[ServerSentEvent]>([])
        let reader = DeviceClient(service: fixture.url, client: fixture.client)
        let task = Task {
            try await reader.events(token: device.token, lastEventID: 2, idleTimeout: .seconds(Int64(patience)), onOpen: {},
                                    onEvent: { event in events.update { $0.append(event) } })
        }
        _ = await eventually { events.get().count >= 2 }
        task.cancel()
        let received = events.get()
        #expect(received.map(\.id) == ["3", "4"], "\(received)")
        let payloads = received.compactMap { try? JSONCoding.decode(PushPayload.self, from: Array($0.data.utf8)) }
        #expect(payloads.map(\.container) == ["docs", workingSet])
        #expect(payloads.allSatisfy { $0.old == anchor(2) && $0.new == anchor(3) })
        // The enumerator survived the restart too.
        let me = try await fixture.call(.GET, "/v1/devices/me", token: device.token)
        #expect(me.text.contains(#""enumerators":["docs"]"#), "\(me.text)")
        await fixture.stop()
    }

    @Test("pushes read while 2,000 devices' mailboxes are filled in slices reach every device once each, in order, one chain of spans")
    func mailboxesFilledInSlices() async throws {
        let fixture = try await ServiceFixture()
        let devices = 2_000
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<devices {
                if index >= 16 { try await group.next() }
                group.addTask { _ = try await fixture.registerWebhook() }
            }
            try await group.waitForAll()
        }
        // The stream opens after the registrations, which may take longer
        // on a loaded machine than the server keeps an idle connection (this
        // fixture sends no heartbeats).
        let watcher = try await fixture.register(#"{"kind":"stream"}"#)
        let streamed = Locked<[ServerSentEvent]>([])
        let reader = DeviceClient(service: fixture.url, client: fixture.client)
        let opened = Locked(false)
        let reading = Task {
            try await reader.events(token: watcher.token, lastEventID: nil, idleTimeout: .seconds(Int64(patience)),
                                    onOpen: { opened.set(true) }, onEvent: { event in streamed.update { $0.append(event) } })
        }
        #expect(await eventually { opened.get() })
        // One push at a time, without waiting: each comes while the
        // mailboxes of the ones before are still being filled.
        let pushes = 6
        for round in 1...pushes { try await fixture.push([(anchor(round), anchor(round + 1), [root])]) }

        /// Whether `spans` (in event order) go from the first push's old
        /// commit to the last one's new commit, each starting where the one
        /// before ended.
        func chained(_ spans: [PushPayload]) -> Bool {
            guard let first = spans.first, let last = spans.last, first.old == anchor(1), last.new == anchor(pushes + 1) else { return false }
            return zip(spans, spans.dropFirst()).allSatisfy { $0.new == $1.old }
        }
        func byDevice() -> [String: [(seq: Int, payload: PushPayload)]] {
            var result: [String: [(seq: Int, payload: PushPayload)]] = [:]
            for request in fixture.sink.received.get() {
                guard let delivery = request.headers.first(name: "x-fprep-delivery"), let dash = delivery.lastIndex(of: "-"),
                      let seq = Int(delivery[delivery.index(after: dash)...]),
                      let payload = try? JSONCoding.decode(PushPayload.self, from: Array(request.body.readableBytesView)) else { continue }
                result[String(delivery[..<dash]), default: []].append((seq, payload))
            }
            return result
        }
        #expect(await eventually(progress: { fixture.sink.received.get().count }) {
            let received = byDevice()
            return received.count == devices && received.values.allSatisfy { chained($0.sorted { $0.seq < $1.seq }.map(\.payload)) }
        })
        for (device, events) in byDevice() {
            let seqs = events.map(\.seq).sorted()
            #expect(seqs == Array(1...seqs.count), "\(device): events \(seqs): each once, none missing")
        }
        #expect(await eventually { chained(streamed.get().compactMap { try? JSONCoding.decode(PushPayload.self, from: Array($0.data.utf8)) }) },
                "the watching device: \(streamed.get().map(\.data))")
        reading.cancel()
        await fixture.stop()
    }

    /// The connection's own handlers, driven by the idle event itself: the
    /// version of this test that waited for a real 1 s timeout on a real
    /// server failed in CI runs, since on a loaded machine the timeout can
    /// come before a request is in hand. A request is in hand from its last
    /// part read off the connection (on the event loop, whether or not a
    /// task of the service took it yet) to its response's end.
    @Test("an idle timeout keeps a connection whose request is read and not yet answered, and closes one with none in hand")
    func idleMeansNoRequestInHand() throws {
        func connection() throws -> EmbeddedChannel {
            let channel = EmbeddedChannel()
            try channel.pipeline.syncOperations.addHandler(CloseWhenIdle())
            try RequestsInHand.add(to: channel, countingOn: channel)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
            return channel
        }
        func idle(_ channel: EmbeddedChannel) { channel.pipeline.fireUserInboundEventTriggered(IdleStateHandler.IdleStateEvent.all) }
        let head = HTTPRequestHead(version: .http1_1, method: .POST, uri: "/v1/devices")
        func answer(_ channel: EmbeddedChannel, streaming: Bool = false) throws {
            let headers: HTTPHeaders = streaming ? [:] : ["content-length": "0"]
            try channel.writeOutbound(HTTPServerResponsePart.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers)))
            if !streaming { try channel.writeOutbound(HTTPServerResponsePart.end(nil)) }
        }

        // Read to its end, not answered yet: kept open; answered: closed.
        let answered = try connection()
        try answered.writeInbound(HTTPServerRequestPart.head(head))
        try answered.writeInbound(HTTPServerRequestPart.end(nil))
        let before = CloseWhenIdle.keptOpen.load(ordering: .relaxed)
        idle(answered)
        #expect(answered.isActive, "closed with a request in hand")
        #expect(CloseWhenIdle.keptOpen.load(ordering: .relaxed) > before)
        try answer(answered)
        idle(answered)
        #expect(!answered.isActive, "kept open with nothing in hand")
        _ = try? answered.finish()

        // A request that stalls before its end is no request in hand.
        let stalled = try connection()
        try stalled.writeInbound(HTTPServerRequestPart.head(head))
        idle(stalled)
        #expect(!stalled.isActive, "kept open for a request that never ended")
        _ = try? stalled.finish()

        // A stream of events keeps itself open with heartbeats: done at its head.
        let streamed = try connection()
        try streamed.writeInbound(HTTPServerRequestPart.head(head))
        try streamed.writeInbound(HTTPServerRequestPart.end(nil))
        try answer(streamed, streaming: true)
        idle(streamed)
        #expect(!streamed.isActive, "a stream's connection counted as a request in hand")
        _ = try? streamed.finish()

        // An answer to a request not read to its end (a body refused) counts
        // nothing: the next request read is in hand.
        let refused = try connection()
        try refused.writeInbound(HTTPServerRequestPart.head(head))
        try answer(refused)
        try refused.writeInbound(HTTPServerRequestPart.end(nil))
        idle(refused)
        #expect(refused.isActive, "a refused answer took the next request out of hand")
        _ = try? refused.finish()
    }

    @Test("a webhook that fails is retried until it answers")
    func webhookRetry() async throws {
        let fixture = try await ServiceFixture()
        fixture.sink.status.set(.serviceUnavailable)
        _ = try await fixture.registerWebhook()
        try await fixture.push([(anchor(1), anchor(2), [root])])
        _ = await fixture.sink.waitFor(2)
        fixture.sink.status.set(.ok)
        // Attempts go on until one is answered 2xx, then stop.
        #expect(await eventually { await fixture.service.statistics.delivered == 1 })
        let after = fixture.sink.received.get().count
        try await Task.sleep(for: .milliseconds(1200))
        #expect(fixture.sink.received.get().count == after, "no attempt after the delivery")
        #expect(after >= 3)
        await fixture.stop()
    }

    @Test("the hook's step writes the outbox and pokes the service, which delivers at once")
    func hookPokes() async throws {
        let fixture = try await ServiceFixture { $0.coalesceWindow = .milliseconds(1) }
        try PushFolder(remote: fixture.remote).recordServiceURL(fixture.url.description)
        _ = try await fixture.registerWebhook()
        let (head, next) = try fixture.commitNewFile()
        let started = Date()
        let result = try PushHook.run(gitDirectory: fixture.remote,
                                      updates: PostReceive.parse("\(head) \(next) refs/heads/main\n"))
        #expect(result.recorded == 1)
        #expect(Date().timeIntervalSince(started) < 1)
        // Nothing but the poke makes this service read its outbox.
        let request = try #require(await fixture.sink.waitFor(1).first)
        #expect(try JSONCoding.decode(PushPayload.self, from: Array(request.body.readableBytesView)).new == next)
        await fixture.stop()
    }

    @Test("with the service down the hook records the push, returns at once, and the service sends it when back")
    func hookWithoutService() async throws {
        let fixture = try await ServiceFixture()
        _ = try await fixture.registerWebhook()
        try PushFolder(remote: fixture.remote).recordServiceURL(fixture.url.description)
        await fixture.server.stop()
        let (head, next) = try fixture.commitNewFile()
        let started = Date()
        let result = try PushHook.run(gitDirectory: fixture.remote,
                                      updates: PostReceive.parse("\(head) \(next) refs/heads/main\n"))
        #expect(result.recorded == 1 && !result.poked)
        #expect(Date().timeIntervalSince(started) < 1)
        #expect(try Outbox(path: PushFolder(remote: fixture.remote).outboxPath).pendingCount() == 1)
        try await fixture.restart()
        await fixture.service.drainOutbox()
        let request = try #require(await fixture.sink.waitFor(1).first)
        #expect(try JSONCoding.decode(PushPayload.self, from: Array(request.body.readableBytesView)).new == next)
        #expect(await eventually { (try? Outbox(path: PushFolder(remote: fixture.remote).outboxPath).pendingCount()) == 0 })
        await fixture.stop()
    }
}
