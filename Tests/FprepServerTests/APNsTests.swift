import Crypto
import Foundation
import FprepTestSupport
import Glibc
import FprepCore
import NIOCore
import NIOPosix
import Testing
@testable import FprepServer

/// The service with APNs pointed at a local HTTP/2 TLS server that trusts
/// a test CA: what each test needs, and its cleanup.
final class APNsSetup: @unchecked Sendable {
    let certificates: TestCertificates
    let group: MultiThreadedEventLoopGroup
    let apns: APNsTestServer
    let fixture: ServiceFixture
    let key = P256.Signing.PrivateKey()
    let keyFile: String
    let logs = Locked<[String]>([])

    init(_ kind: APNsTestServer.Kind = .http2, timeout: TimeAmount = .seconds(Int64(patience)),
         backoffFriendly: Bool = true) async throws {
        certificates = try TestCertificates.make()
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        apns = try await APNsTestServer.start(kind, certificates: certificates, group: group)
        keyFile = certificates.folder + "/apns.p8"
        try key.pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
        let configuration = try APNsConfiguration(server: apns.host, caFile: certificates.caFile, bundleID: "com.example.app",
                                                  keyID: "KEY1234567", teamID: "TEAM123456", keyFile: keyFile)
        let logs = self.logs
        fixture = try await ServiceFixture { settings in
            settings.apns = configuration
            settings.deliveryTimeout = timeout
            settings.log = { line in logs.update { $0.append(line) } }
        }
    }

    /// Registers an APNs device with `token` (hex).
    func register(_ token: String) async throws -> (device: String, token: String) {
        let result = try await fixture.register(#"{"kind":"apns","device-token":"\#(token)"}"#)
        return (result.device, result.token)
    }

    func stop() async {
        await fixture.stop()
        await apns.stop()
        try? await group.shutdownGracefully()
        certificates.remove()
    }
}

/// A device token: 32 bytes as hex, `n` making it unique.
func deviceToken(_ n: Int) -> String { String(format: "%02x", n % 256) + String(repeating: "ab", count: 31) }

@Suite("APNs over HTTP/2 and TLS", .serialized)
struct APNsTests {
    @Test("a push: POST /3/device/TOKEN with topic, push type, priority, expiration, seed 003's body and an ES256 provider token")
    func request() async throws {
        let before = Int64(Date().timeIntervalSince1970)
        let setup = try await APNsSetup()
        let token = deviceToken(1)
        _ = try await setup.register(token)
        try await setup.fixture.push([(anchor(1), anchor(2), [root])])
        let request = try #require(await setup.apns.waitFor { !$0.isEmpty }.first)
        // Times between the test's start and the request's arrival, however long a loaded machine took.
        let after = Int64(Date().timeIntervalSince1970)
        #expect(request.method == "POST")
        #expect(request.path == "/3/device/\(token)")
        #expect(request.headers.first(name: "apns-topic") == "com.example.app.pushkit.fileprovider")
        #expect(request.headers.first(name: "apns-push-type") == "fileprovider")
        #expect(request.headers.first(name: "apns-priority") == "5")
        let expiration = Int64(request.headers.first(name: "apns-expiration") ?? "") ?? 0
        #expect((before + 3600 - 1...after + 3600 + 1).contains(expiration), "\(expiration) not an hour after \(before)...\(after)")
        let body = try JSONSerialization.jsonObject(with: Data(request.body)) as? [String: String]
        #expect(body?["container-identifier"] == workingSet)
        #expect(body?["domain"] == setup.fixture.domain)
        #expect(body?["old-anchor"] == anchor(1) && body?["new-anchor"] == anchor(2))

        let authorization = try #require(request.headers.first(name: "authorization"))
        #expect(authorization.hasPrefix("bearer "))
        let parts = authorization.dropFirst(7).split(separator: ".").map(String.init)
        try #require(parts.count == 3)
        func decode(_ part: String) -> Data {
            var text = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            while text.count % 4 != 0 { text += "=" }
            return Data(base64Encoded: text) ?? Data()
        }
        let header = try JSONSerialization.jsonObject(with: decode(parts[0])) as? [String: String]
        #expect(header == ["alg": "ES256", "kid": "KEY1234567"])
        let claims = try JSONSerialization.jsonObject(with: decode(parts[1])) as? [String: Any]
        #expect(claims?["iss"] as? String == "TEAM123456")
        let issued = (claims?["iat"] as? NSNumber)?.int64Value ?? 0
        #expect((before - 1...after + 1).contains(issued), "\(issued) not in \(before)...\(after)")
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: decode(parts[2]))
        #expect(setup.key.publicKey.isValidSignature(signature, for: Data((parts[0] + "." + parts[1]).utf8)))
        #expect(await eventually { await setup.fixture.service.statistics.delivered == 1 })
        await setup.stop()
    }

    @Test("many devices' pushes go over one connection, as concurrent streams, with one provider token")
    func oneConnection() async throws {
        let setup = try await APNsSetup()
        // Each answer waits a little, so that streams overlap.
        setup.apns.reply.set { _ in .answer(200, "") }
        setup.apns.delay.set(.milliseconds(300))
        let count = 24
        for n in 0..<count { _ = try await setup.register(deviceToken(n)) }
        try await setup.fixture.push([(anchor(1), anchor(2), [root])])
        #expect(await eventually { await setup.fixture.service.statistics.delivered == count })
        // A second round on the same connection.
        try await setup.fixture.push([(anchor(2), anchor(3), [root])])
        #expect(await eventually { await setup.fixture.service.statistics.delivered == 2 * count })
        let received = setup.apns.received.get()
        #expect(received.count == 2 * count)
        #expect(setup.apns.connections.get() == 1, "\(setup.apns.connections.get()) connections")
        #expect(await setup.fixture.service.apnsConnectionsOpened() == 1)
        #expect(Set(received.map(\.connection)) == [1])
        #expect(setup.apns.mostInFlight.get() > 1, "streams never overlapped")
        #expect(setup.apns.mostInFlight.get() <= 100, "more streams at once than the client allows")
        #expect(Set(received.compactMap { $0.headers.first(name: "authorization") }).count == 1, "one provider token, reused")
        await setup.stop()
    }

    @Test("the provider token is reused for 40 minutes, then renewed (APNs: not older than 60, not renewed within 20)")
    func providerTokenAge() async throws {
        let folder = NSTemporaryDirectory() + "fprep-apns-key-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: folder + "/key.p8", atomically: true, encoding: .utf8)
        let configuration = try APNsConfiguration(bundleID: "com.example.app", keyID: "K", teamID: "T", keyFile: folder + "/key.p8")
        let cache = ProviderTokenCache(configuration)
        let start: Int64 = 1_800_000_000
        let first = await cache.token(now: start)
        #expect(await cache.token(now: start + 20 * 60) == first)
        #expect(await cache.token(now: start + 40 * 60 - 1) == first)
        let second = await cache.token(now: start + 40 * 60)
        #expect(second != first)
        // An expired answer for an older token does not throw away the newer one.
        await cache.invalidate(first)
        #expect(await cache.token(now: start + 40 * 60 + 1) == second)
        await cache.invalidate(second)
        #expect(await cache.token(now: start + 40 * 60 + 2) != second)
        #expect(configuration.host == "api.push.apple.com" && configuration.port == 443)
        #expect(APNsConfiguration.hostAndPort("api.sandbox.push.apple.com")! == ("api.sandbox.push.apple.com", 443))
        #expect(APNsConfiguration.hostAndPort("[::1]:8443")! == ("::1", 8443))
        #expect(APNsConfiguration.hostAndPort("https://api.push.apple.com") == nil)
    }

    @Test("against nghttpd (nghttp2's HTTP/2 server, another implementation): the headers arrive, pushes share one connection, a 404 is dropped")
    func nghttpd() async throws {
        let certificates = try TestCertificates.make()
        defer { certificates.remove() }
        try FileManager.default.createDirectory(atPath: certificates.folder + "/docroot", withIntermediateDirectories: true)
        let logFile = certificates.folder + "/nghttpd.log"
        // A port the kernel picks, free again for nghttpd; another test's
        // socket may take it first (nghttpd then exits): another port.
        var started: (server: Process, port: Int)?
        for _ in 0..<5 where started == nil {
            let probe = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).get()
            let port = probe.localAddress?.port ?? 0
            try await probe.close()
            let server = Process()
            server.executableURL = URL(fileURLWithPath: "/usr/sbin/nghttpd")
            server.arguments = ["-v", "-d", certificates.folder + "/docroot", "--address", "127.0.0.1", String(port),
                                certificates.keyFile, certificates.certificateFile]
            _ = FileManager.default.createFile(atPath: logFile, contents: nil)
            server.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: logFile))
            server.standardError = FileHandle.nullDevice
            try server.run()
            _ = await eventually { !server.isRunning || isListening(port: UInt16(port), by: server.processIdentifier) }
            if server.isRunning && isListening(port: UInt16(port), by: server.processIdentifier) {
                started = (server, port)
            } else {
                kill(server.processIdentifier, SIGKILL)
            }
        }
        let (server, port) = try #require(started, "nghttpd did not listen (setup.sh installs nghttp2-server)")
        // Foundation reaps it.
        defer { kill(server.processIdentifier, SIGKILL) }

        let keyFile = certificates.folder + "/apns.p8"
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
        let configuration = try APNsConfiguration(server: "127.0.0.1:\(port)", caFile: certificates.caFile, bundleID: "com.example.app",
                                                  keyID: "KEY1234567", teamID: "TEAM123456", keyFile: keyFile)
        let logs = Locked<[String]>([])
        let fixture = try await ServiceFixture { settings in
            settings.apns = configuration
            settings.log = { line in logs.update { $0.append(line) } }
        }
        let token = deviceToken(7)
        let device = try await fixture.register(#"{"kind":"apns","device-token":"\#(token)"}"#)
        // Two pushes, the second after the first was answered (else they coalesce into one).
        for (round, (old, new)) in [(anchor(1), anchor(2)), (anchor(2), anchor(3))].enumerated() {
            try await fixture.push([(old, new, [root])])
            #expect(await eventually { logs.get().filter { $0.contains("dropped: APNs answered 404") }.count == round + 1 },
                    "\(logs.get())")
        }
        let log = (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
        let paths = log.split(separator: "\n").filter { $0.contains(":path: /3/device/\(token)") }
        #expect(paths.count == 2, "\(log)")
        // nghttpd numbers its connections: both requests came on the same one.
        #expect(Set(paths.map { $0.prefix { $0 != " " } }).count == 1, "\(paths)")
        #expect(log.contains(":method: POST") && log.contains("apns-push-type: fileprovider")
                && log.contains("apns-topic: com.example.app.pushkit.fileprovider") && log.contains("apns-priority: 5"), "\(log)")
        // A 404 drops the push, not the device.
        #expect(try await fixture.call(.GET, "/v1/devices/me", token: device.token).status == 200)
        await fixture.stop()
    }

    @Test("after APNs' GOAWAY the next push opens a new connection")
    func goAway() async throws {
        let setup = try await APNsSetup()
        _ = try await setup.register(deviceToken(1))
        setup.apns.goAwayAfterNextAnswer.set(true)
        try await setup.fixture.push([(anchor(1), anchor(2), [root])])
        #expect(await eventually { await setup.fixture.service.statistics.delivered == 1 })
        try await setup.fixture.push([(anchor(2), anchor(3), [root])])
        #expect(await eventually { await setup.fixture.service.statistics.delivered == 2 })
        #expect(setup.apns.received.get().map(\.connection) == [1, 2], "\(setup.apns.received.get().map(\.connection))")
        #expect(await setup.fixture.service.apnsConnectionsOpened() == 2)
        await setup.stop()
    }

    @Test("410 Unregistered retires the device unless it registered after APNs' timestamp; 400 BadDeviceToken retires it")
    func unregistered() async throws {
        let setup = try await APNsSetup()
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let (gone, kept, bad, fine) = (deviceToken(1), deviceToken(2), deviceToken(3), deviceToken(4))
        setup.apns.reply.set { push in
            switch push.deviceToken {
            // Invalid since a minute from now: the registration is older.
            case gone: .answer(410, #"{"reason":"Unregistered","timestamp":\#(now + 60_000)}"#)
            // Invalid since an hour ago: the device registered again since.
            case kept: .answer(410, #"{"reason":"Unregistered","timestamp":\#(now - 3_600_000)}"#)
            case bad: .answer(400, #"{"reason":"BadDeviceToken"}"#)
            default: .answer(200, "")
            }
        }
        let goneDevice = try await setup.register(gone)
        let keptDevice = try await setup.register(kept)
        let badDevice = try await setup.register(bad)
        let fineDevice = try await setup.register(fine)
        try await setup.fixture.push([(anchor(1), anchor(2), [root])])
        func status(_ device: (device: String, token: String)) async throws -> Int {
            try await setup.fixture.call(.GET, "/v1/devices/me", token: device.token).status
        }
        #expect(await eventually { (try? await status(goneDevice)) == 401 })
        #expect(await eventually { (try? await status(badDevice)) == 401 })
        #expect(await eventually { await setup.fixture.service.statistics.delivered == 1 })
        #expect(try await status(keptDevice) == 200)
        #expect(try await status(fineDevice) == 200)
        let logs = setup.logs.get()
        #expect(logs.contains { $0.contains(goneDevice.device) && $0.contains("410 Unregistered") && $0.contains("unregistered") }, "\(logs)")
        #expect(logs.contains { $0.contains(keptDevice.device) && $0.contains("registered after") && $0.contains("kept") }, "\(logs)")
        #expect(logs.contains { $0.contains(badDevice.device) && $0.contains("BadDeviceToken") }, "\(logs)")
        await setup.stop()
    }

    @Test("429 and 5xx are tried again until APNs takes the push; ExpiredProviderToken gets a new token at once")
    func retries() async throws {
        let setup = try await APNsSetup()
        let answers = Locked<[APNsReply]>([
            .answer(429, #"{"reason":"TooManyRequests"}"#), .answer(503, #"{"reason":"ServiceUnavailable"}"#),
            .answer(403, #"{"reason":"ExpiredProviderToken"}"#), .answer(200, ""),
        ])
        setup.apns.reply.set { _ in answers.update { $0.isEmpty ? .answer(200, "") : $0.removeFirst() } }
        _ = try await setup.register(deviceToken(1))
        try await setup.fixture.push([(anchor(1), anchor(2), [root])])
        #expect(await eventually { await setup.fixture.service.statistics.delivered == 1 })
        let received = setup.apns.received.get()
        #expect(received.count == 4, "\(received.count) requests")
        let tokens = received.compactMap { $0.headers.first(name: "authorization") }
        #expect(tokens.count == 4 && tokens[0] == tokens[2] && tokens[2] != tokens[3], "a new provider token after ExpiredProviderToken only")
        #expect(setup.apns.connections.get() == 1)
        await setup.stop()
    }

    @Test("a request APNs never answers times out alone: another device's push goes through meanwhile, and it is tried again")
    func hangingRequest() async throws {
        let setup = try await APNsSetup(timeout: .seconds(2))
        let (stuck, other) = (deviceToken(1), deviceToken(2))
        setup.apns.reply.set { push in push.deviceToken == stuck ? .hang : .answer(200, "") }
        _ = try await setup.register(stuck)
        _ = try await setup.register(other)
        try await setup.fixture.push([(anchor(1), anchor(2), [root])])
        // The other device's push is answered while the stuck one hangs.
        #expect(await eventually { await setup.fixture.service.statistics.delivered == 1 })
        #expect(await setup.apns.waitFor { $0.filter { $0.deviceToken == stuck }.count >= 2 }.filter { $0.deviceToken == stuck }.count >= 2)
        #expect(setup.logs.get().contains { $0.contains("not sent, trying again") && $0.contains("in time") }, "\(setup.logs.get())")
        // The stuck device gets its push once APNs answers again.
        setup.apns.reply.set { _ in .answer(200, "") }
        #expect(await eventually { await setup.fixture.service.statistics.delivered == 2 })
        #expect(setup.apns.connections.get() == 1, "a stream that timed out does not cost the connection")
        #expect(try await setup.fixture.call(.GET, "/v1/health").status == 200)
        await setup.stop()
    }

    @Test("an APNs server that answers garbage or says nothing: a clear log line, and the service stays up")
    func badServers() async throws {
        for kind in [APNsTestServer.Kind.garbage, .silent] {
            // Garbage is seen at once, whatever the deadline (a long one keeps a busy machine from
            // reporting a timeout instead); the silent peer is only ever seen by its deadline.
            let setup = try await APNsSetup(kind, timeout: kind == .garbage ? .seconds(Int64(patience)) : .seconds(1))
            _ = try await setup.register(deviceToken(1))
            try await setup.fixture.push([(anchor(1), anchor(2), [root])])
            let expected = kind == .garbage ? "does not speak HTTP/2" : "in time"
            // The attempts fail (and are retried); the give-up line names why.
            #expect(await eventually { setup.apns.connections.get() >= 2 }, "\(kind): no new connection after a failed one")
            #expect(try await setup.fixture.call(.GET, "/v1/health").status == 200)
            #expect(await eventually { setup.logs.get().contains { $0.contains("not sent, trying again") } })
            let failures = setup.logs.get().filter { $0.contains("not sent") }
            #expect(failures.count == 1 && failures[0].contains(expected) && !failures[0].contains("\n"), "\(kind): \(failures)")
            print("APNs server \(kind): \(failures.first ?? "")")
            #expect(await setup.fixture.service.statistics.delivered == 0)
            await setup.stop()
        }
    }
}
