import Foundation
@testable import FprepServer
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL

// A real HTTP/2 server over TLS on 127.0.0.1 that plays APNs for the tests:
// it records each request (headers, body, the connection it came on),
// answers as the test says, and counts connections and concurrent streams.
// Built with the same swift-nio-http2 and swift-nio-ssl as the service, but
// on the server side: a real peer, not a mock of the client.

/// A CA and a server certificate for 127.0.0.1 and localhost, made with the
/// openssl command in a temporary folder.
struct TestCertificates {
    let folder: String
    var caFile: String { folder + "/ca.pem" }
    var certificateFile: String { folder + "/server.pem" }
    var keyFile: String { folder + "/server.key" }
    /// A second CA that signed nothing here (a wrong --ca).
    var otherCAFile: String { folder + "/other-ca.pem" }

    static func make() throws -> TestCertificates {
        let folder = NSTemporaryDirectory() + "fprep-certs-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
            .write(toFile: folder + "/server.ext", atomically: true, encoding: .utf8)
        let curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        try openssl(["req", "-x509"] + curve + ["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=fprep test CA"], in: folder)
        try openssl(["req", "-x509"] + curve + ["-keyout", "other-ca.key", "-out", "other-ca.pem", "-days", "2", "-subj", "/CN=fprep other CA"], in: folder)
        try openssl(["req"] + curve + ["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"], in: folder)
        try openssl(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                     "-out", "server.pem", "-days", "2", "-extfile", "server.ext"], in: folder)
        return TestCertificates(folder: folder)
    }

    func remove() { try? FileManager.default.removeItem(atPath: folder) }

    private static func openssl(_ arguments: [String], in folder: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: folder)
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw FixtureError("openssl \(arguments.joined(separator: " ")) failed") }
    }
}

/// One request the test server received.
struct ReceivedPush: Sendable {
    let method: String
    let path: String
    let headers: HTTPHeaders
    let body: [UInt8]
    /// Which connection it came on (1, 2, …).
    let connection: Int

    var deviceToken: String { String(path.split(separator: "/").last ?? "") }
}

/// What the server does with a request.
enum APNsReply: Sendable {
    case answer(Int, String)
    /// Never answers (the stream stays open).
    case hang
}

final class APNsTestServer: Sendable {
    enum Kind {
        /// HTTP/2 over TLS, as APNs.
        case http2
        /// TLS, then bytes that are not HTTP/2.
        case garbage
        /// Takes the TCP connection and says nothing, not even TLS.
        case silent
    }

    let port: Int
    private let channel: any Channel
    let received = Locked<[ReceivedPush]>([])
    let connections = Locked(0)
    let inFlight = Locked(0)
    let mostInFlight = Locked(0)
    /// How long each answer waits (so that streams overlap).
    let delay = Locked<TimeAmount?>(nil)
    /// After its next answer, the server sends GOAWAY on that connection (as
    /// APNs does before it closes one), then closes it.
    let goAwayAfterNextAnswer = Locked(false)
    let reply: Locked<@Sendable (ReceivedPush) -> APNsReply>

    private init(port: Int, channel: any Channel, reply: Locked<@Sendable (ReceivedPush) -> APNsReply>) {
        self.port = port
        self.channel = channel
        self.reply = reply
    }

    static func start(_ kind: Kind = .http2, certificates: TestCertificates, group: any EventLoopGroup) async throws -> APNsTestServer {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificates.certificateFile).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: certificates.keyFile, format: .pem)))
        configuration.applicationProtocols = ["h2"]
        let context = try NIOSSLContext(configuration: configuration)
        let box = Locked<APNsTestServer?>(nil)
        let reply = Locked<@Sendable (ReceivedPush) -> APNsReply>({ _ in .answer(200, "") })
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    guard let server = box.get() else { return }
                    let number = server.connections.update { count -> Int in
                        count += 1
                        return count
                    }
                    let sync = channel.pipeline.syncOperations
                    switch kind {
                    case .silent:
                        return
                    case .garbage:
                        try sync.addHandler(NIOSSLServerHandler(context: context))
                        try sync.addHandler(Garbage())
                    case .http2:
                        try sync.addHandler(NIOSSLServerHandler(context: context))
                        _ = try sync.configureHTTP2Pipeline(
                            mode: .server, connectionConfiguration: .init(), streamConfiguration: .init()
                        ) { stream in
                            stream.eventLoop.makeCompletedFuture {
                                try stream.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTP1ServerCodec())
                                try stream.pipeline.syncOperations.addHandler(Recorder(server: server, connection: number))
                            }
                        }
                    }
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let server = APNsTestServer(port: channel.localAddress?.port ?? 0, channel: channel, reply: reply)
        box.set(server)
        return server
    }

    var host: String { "127.0.0.1:\(port)" }

    func stop() async { try? await channel.close() }

    /// Waits until `condition` holds of what was received (or patience ran out).
    func waitFor(_ condition: @escaping ([ReceivedPush]) -> Bool) async -> [ReceivedPush] {
        _ = await eventually { condition(self.received.get()) }
        return received.get()
    }

    fileprivate func record(_ push: ReceivedPush) -> APNsReply {
        received.update { $0.append(push) }
        return reply.get()(push)
    }
}

/// Reads one request on a stream and answers it.
private final class Recorder: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let server: APNsTestServer
    let connection: Int
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var counted = false

    init(server: APNsTestServer, connection: Int) {
        self.server = server
        self.connection = connection
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let requestHead):
            head = requestHead
            counted = true
            let now = server.inFlight.update { count -> Int in
                count += 1
                return count
            }
            server.mostInFlight.update { $0 = max($0, now) }
        case .body(let chunk):
            body += chunk.readableBytesView
        case .end:
            guard let head else { return }
            let push = ReceivedPush(method: head.method.rawValue, path: head.uri, headers: head.headers, body: body,
                                    connection: connection)
            switch server.record(push) {
            case .hang:
                return
            case .answer(let status, let text):
                guard let delay = server.delay.get() else { return answer(context: context, status: status, text: text) }
                context.eventLoop.assumeIsolated().scheduleTask(in: delay) {
                    self.answer(context: context, status: status, text: text)
                }
            }
        }
    }

    private func answer(context: ChannelHandlerContext, status: Int, text: String) {
        var headers: HTTPHeaders = ["apns-id": UUID().uuidString]
        if !text.isEmpty { headers.add(name: "content-type", value: "application/json") }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http2, status: HTTPResponseStatus(statusCode: status),
                                                             headers: headers))), promise: nil)
        if !text.isEmpty { context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: text)))), promise: nil) }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        if server.goAwayAfterNextAnswer.update({ flag -> Bool in
            defer { flag = false }
            return flag
        }), let connection = context.channel.parent {
            let goAway = HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: .maxID, errorCode: .noError, opaqueData: nil))
            connection.writeAndFlush(goAway).whenComplete { _ in connection.close(promise: nil) }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if counted { server.inFlight.update { $0 -= 1 } }
        context.fireChannelInactive()
    }
}

/// Answers whatever comes after the TLS handshake with bytes that are not HTTP/2.
private final class Garbage: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    private var answered = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !answered else { return }
        answered = true
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello\u{0}\u{1}\u{2}garbage")),
                              promise: nil)
    }
}
