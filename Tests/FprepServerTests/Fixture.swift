import Foundation
import FprepCore
@testable import FprepPush
import FprepGit
import NIOCore
import NIOHTTP1
import NIOPosix
@testable import FprepServer

// The focused tests' fixture: a real fprep remote in a temporary folder, the
// push service in this process on 127.0.0.1 (port chosen by the kernel), and
// a loopback sink that records what webhooks and APNs requests reach it.
//
// Waits and timeouts are long on purpose: the whole suite runs in one
// process, where synchronous end-to-end tests can hold both threads of
// Swift's task pool for tens of seconds on a 2-core machine; the service
// then stalls without being wrong. Nothing here waits that long when it works.

/// How long a test waits for what must come.
let patience = 120.0

/// Records every request it gets and answers with `status`.
final class Sink: Sendable {
    let server: HTTPServer
    let received = Locked<[HTTPRequest]>([])
    let status = Locked<HTTPResponseStatus>(.ok)

    private init(server: HTTPServer) { self.server = server }

    static func start(group: any EventLoopGroup) async throws -> Sink {
        let box = Locked<Sink?>(nil)
        let server = try await HTTPServer.start(host: "127.0.0.1", port: 0, group: group) { request in
            guard let sink = box.get() else { return HTTPResponse(status: .serviceUnavailable) }
            sink.received.update { $0.append(request) }
            return HTTPResponse(status: sink.status.get())
        }
        let sink = Sink(server: server)
        box.set(sink)
        return sink
    }

    var url: ServiceURL { ServiceURL("http://127.0.0.1:\(server.port)/hook")! }

    /// Waits until at least `count` requests arrived (or `timeout` seconds passed).
    func waitFor(_ count: Int, timeout: Double = patience) async -> [HTTPRequest] {
        let deadline = Date().addingTimeInterval(timeout)
        while received.get().count < count && Date() < deadline, await sleepUnlessCancelled(for: .milliseconds(10)) {}
        return received.get()
    }

    /// The payloads received, decoded.
    func payloads() -> [PushPayload] {
        received.get().compactMap { try? JSONCoding.decode(PushPayload.self, from: Array($0.body.readableBytesView)) }
    }
}

/// A remote with its push service running in this process.
final class ServiceFixture: @unchecked Sendable {
    let folder: String
    let remote: String
    let group: MultiThreadedEventLoopGroup
    let client: HTTPClient
    private(set) var service: PushService
    private(set) var server: HTTPServer
    let sink: Sink
    let secret: String
    /// An enrollment secret of the domain, minted as `fprep serve enroll` does.
    let enrollment: String
    let domain = "testdomain"
    private let configure: @Sendable (inout ServiceConfiguration) -> Void
    private let rateLimit: Double
    private var serverStopped = false
    /// Heartbeats on the event streams, as `fprep serve` sends them: the
    /// server closes a connection idle for 60 s, which a stream opened
    /// early in a slow test on a loaded machine would otherwise be.
    private var heartbeats: Task<Void, Never>?

    init(configure: @escaping @Sendable (inout ServiceConfiguration) -> Void = { _ in }, rateLimit: Double = 0) async throws {
        folder = NSTemporaryDirectory() + "fprep-server-test-" + UUID().uuidString
        remote = folder + "/remote.git"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        _ = try Remote.create(at: remote, domain: domain, branch: "main", fprepBinary: "/nonexistent/fprep")
        secret = try PushFolder(remote: remote).ensureSecret()
        enrollment = try ServiceAdmin(remote: remote).enroll(domain: nil, lifetime: nil).secret.text
        group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        client = HTTPClient(group: group)
        sink = try await Sink.start(group: group)
        self.configure = configure
        self.rateLimit = rateLimit
        (service, server) = try await Self.startService(remote: remote, domain: domain, group: group, client: client,
                                                        secret: secret, configure: configure, rateLimit: rateLimit)
        heartbeats = Task { [weak self] in
            while await sleepUnlessCancelled(for: .seconds(15)) {
                guard let service = self?.service else { return }
                await service.heartbeat()
            }
        }
    }

    private static func startService(remote: String, domain: String, group: any EventLoopGroup, client: HTTPClient, secret: String,
                                     configure: @Sendable (inout ServiceConfiguration) -> Void,
                                     rateLimit: Double) async throws -> (PushService, HTTPServer) {
        var configuration = ServiceConfiguration(domain: domain)
        configuration.coalesceWindow = .milliseconds(10)
        configuration.minimumInterval = .milliseconds(50)
        configuration.log = { _ in }
        configuration.deliveryTimeout = .seconds(Int64(patience))
        // The sink listens on loopback, where webhooks go only when allowed.
        configuration.webhookPolicy = WebhookPolicy(allowedHosts: ["127.0.0.1"])
        configure(&configuration)
        let service = try await PushService(configuration: configuration, folder: PushFolder(remote: remote), client: client)
        let api = ServiceAPI(service: service, hookSecret: secret, limiter: RateLimiter(rate: rateLimit, burst: rateLimit))
        let server = try await HTTPServer.start(host: "127.0.0.1", port: 0, group: group, handler: api.handle)
        return (service, server)
    }

    /// Stops the service and starts a new one on the same state, as a restart would.
    func restart() async throws {
        await service.shutdown()
        await server.stop()
        await service.maintain()
        (service, server) = try await Self.startService(remote: remote, domain: domain, group: group, client: client,
                                                        secret: secret, configure: configure, rateLimit: rateLimit)
    }

    var url: ServiceURL { ServiceURL("http://127.0.0.1:\(server.port)/")! }

    func stop() async {
        heartbeats?.cancel()
        await service.shutdown()
        await server.stop()
        await sink.server.stop()
        await client.shutdown()
        try? await group.shutdownGracefully()
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// A raw call to the API.
    func call(_ method: HTTPMethod, _ path: String, token: String? = nil, body: String? = nil,
              headers extra: HTTPHeaders = [:]) async throws -> ClientResponse {
        var headers = extra
        if let token { headers.add(name: "authorization", value: "Bearer \(token)") }
        return try await client.send(ClientRequest(method, url.with(path: path), headers: headers, body: Array((body ?? "").utf8)),
                                     timeout: .seconds(Int64(patience)))
    }

    /// Registers a device with `channel` (JSON) and returns its id and token.
    func register(_ channel: String, replicated: Bool = false) async throws -> (device: String, token: String, answer: [String: Any]) {
        let response = try await call(.POST, "/v1/devices",
                                      body: #"{"domain":"\#(domain)","enrollment":"\#(enrollment)","replicated":\#(replicated),"channel":\#(channel)}"#)
        guard response.status == 201,
              let answer = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any],
              let device = answer["device"] as? String, let token = answer["token"] as? String else {
            throw FixtureError("registration failed: \(response.status) \(response.text)")
        }
        return (device, token, answer)
    }

    func registerWebhook(replicated: Bool = false, secret: String = "0123456789abcdef-secret") async throws -> (device: String, token: String) {
        let result = try await register(#"{"kind":"webhook","url":"\#(sink.url)","secret":"\#(secret)"}"#, replicated: replicated)
        return (result.device, result.token)
    }

    func openEnumerator(_ container: String, token: String) async throws {
        let body = try JSONSerialization.data(withJSONObject: ["container": container, "active": true])
        let response = try await call(.POST, "/v1/enumerators", token: token, body: String(decoding: body, as: UTF8.self))
        guard response.status == 200 else { throw FixtureError("enumerator: \(response.status) \(response.text)") }
    }

    /// Records pushes in the outbox as the hook would, and has the service read them.
    func push(_ pushes: [(old: String, new: String, containers: [String])], domain: String? = nil) async throws {
        let domain = domain ?? self.domain
        try Outbox(path: PushFolder(remote: remote).outboxPath)
            .append(pushes.map { (domain, "refs/heads/main", $0.old, $0.new, $0.containers) }, at: 0)
        await service.drainOutbox()
    }
}

extension ServiceFixture {
    /// Commits one more file on the remote's main branch (as a push would
    /// have, without running the hook) and returns the old and new commit.
    func commitNewFile() throws -> (old: String, new: String) {
        let repository = try Repository(openingAt: remote)
        let head = try repository.referenceTarget("refs/heads/main")
        let builder = try repository.treeBuilder()
        if let head {
            for entry in try repository.tree(try repository.commit(head).treeID).entries {
                try builder.insert(name: entry.name, id: entry.id, mode: entry.mode)
            }
        }
        let blob = try Array("new".utf8).withUnsafeBytes { try repository.writeBlob($0) }
        try builder.insert(name: Array("new-\(UUID().uuidString).txt".utf8), id: blob, mode: .blob)
        let signature = Signature(name: "t", email: "t@t", time: 1_700_000_100)
        let next = try repository.writeCommit(tree: try builder.write(), parents: head.map { [$0] } ?? [], message: "n",
                                              author: signature, committer: signature)
        try repository.setReference("refs/heads/main", to: next, message: "test")
        return ((head ?? .zero).hex, next.hex)
    }
}

/// Waits until `condition` holds (or `patience` ran out).
/// As `eventually`, but the deadline moves while `progress` grows: work
/// that goes on, however slowly a loaded machine lets it, is waited for;
/// work that stops for `patience` is not.
func eventually(progress: () -> Int, _ condition: () async -> Bool) async -> Bool {
    var deadline = Date().addingTimeInterval(patience)
    var last = progress()
    while Date() < deadline {
        if await condition() { return true }
        guard await sleepUnlessCancelled(for: .milliseconds(10)) else { break }
        let now = progress()
        if now != last {
            last = now
            deadline = Date().addingTimeInterval(patience)
        }
    }
    return await condition()
}

func eventually(_ condition: () async -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(patience)
    while Date() < deadline {
        if await condition() { return true }
        guard await sleepUnlessCancelled(for: .milliseconds(10)) else { break }
    }
    return await condition()
}

struct FixtureError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A commit id made of one repeated digit, for readable anchors.
func anchor(_ digit: Int) -> String { String(repeating: String(digit % 10), count: 40) }
