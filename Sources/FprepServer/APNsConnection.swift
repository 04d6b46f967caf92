import FprepCore
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL

/// What APNs answered to one request, read in full.
struct APNsResponse: Sendable {
    let status: Int
    let headers: HTTPHeaders
    let body: [UInt8]
}

/// Why an APNs request got no answer.
struct APNsConnectionError: Error, CustomStringConvertible, Sendable {
    let description: String
    init(_ description: String) { self.description = description }
}

/// One long-lived HTTP/2 connection over TLS to APNs, as Apple asks
/// ("keep your connections with APNs open across multiple notifications"):
/// each request is a stream of it (swift-nio-http2's multiplexer), at most
/// `maxStreams` at once, each with its own deadline, so a request APNs
/// never answers ends alone and the others go on. After a GOAWAY or a close
/// the next request opens a new connection.
actor APNsConnection {
    private let host: String
    private let port: Int
    private let tls: NIOSSLContext
    private let group: any EventLoopGroup
    private let streams: Slots
    private var current: Live?
    private var opening: Task<Live, any Error>?
    private var closed = false

    /// A connection in use and what is known of it.
    private struct Live {
        let channel: any Channel
        let multiplexer: NIOHTTP2Handler.StreamMultiplexer
        let state: ConnectionState
    }

    init(host: String, port: Int, tls: NIOSSLContext, group: any EventLoopGroup, maxStreams: Int = 100) {
        self.host = host
        self.port = port
        self.tls = tls
        self.group = group
        streams = Slots(count: maxStreams)
    }

    private var peer: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Sends one request on the shared connection (opened when there is
    /// none, or the last one closed or was told to go away) and reads the
    /// answer, all within `timeout`.
    func send(path: String, headers: HTTPHeaders, body: [UInt8], timeout: TimeAmount) async throws -> APNsResponse {
        let deadline = NIODeadline.now() + timeout
        await streams.acquire()
        defer { Task { await streams.release() } }
        guard !closed else { throw APNsConnectionError("the APNs client is shut down") }
        let live = try await connection(deadline: deadline)
        do {
            return try await Self.exchange(on: live, authority: peer, path: path, headers: headers, body: body, deadline: deadline)
        } catch let error as APNsConnectionError {
            // No answer in time on a connection that never answered anything
            // (a peer that took the TCP connection and went silent): the next
            // request tries a new one.
            if !live.state.heardFromPeer.get() { drop(live) }
            throw error
        }
    }

    /// Closes the connection; later requests fail.
    func shutdown() async {
        closed = true
        opening?.cancel()
        if let current { try? await current.channel.close() }
        current = nil
    }

    /// How many connections were opened (for the tests and the log).
    private(set) var connectionsOpened = 0

    private func drop(_ live: Live) {
        guard let current, current.channel === live.channel else { return }
        self.current = nil
        current.channel.close(promise: nil)
    }

    private func connection(deadline: NIODeadline) async throws -> Live {
        if let current, current.channel.isActive, !current.state.goingAway.get() { return current }
        // Closed, or told to go away: streams still in flight on it finish
        // (the peer closes it after them), new ones go on a new connection.
        current = nil
        if let opening { return try await opening.value }
        let (host, port, tls, group, peer) = (self.host, self.port, self.tls, self.group, self.peer)
        let task = Task { try await Self.open(host: host, port: port, tls: tls, group: group, peer: peer, deadline: deadline) }
        opening = task
        defer { opening = nil }
        let live = try await task.value
        connectionsOpened += 1
        current = live
        return live
    }

    private static func open(host: String, port: Int, tls: NIOSSLContext, group: any EventLoopGroup, peer: String,
                             deadline: NIODeadline) async throws -> Live {
        let state = ConnectionState()
        let connectTimeout = max(deadline - .now(), .milliseconds(1))
        do {
            let (channel, multiplexer) = try await ClientBootstrap(group: group)
                .connectTimeout(connectTimeout)
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .connect(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let sync = channel.pipeline.syncOperations
                        try sync.addHandler(try TLS.clientHandler(tls, host: host))
                        let multiplexer = try sync.configureHTTP2Pipeline(
                            mode: .client, connectionConfiguration: .init(), streamConfiguration: .init(),
                            inboundStreamInitializer: { $0.close() })
                        try sync.addHandler(ConnectionWatcher(state: state))
                        return (channel, multiplexer)
                    }
                }
            return Live(channel: channel, multiplexer: multiplexer, state: state)
        } catch {
            throw APNsConnectionError("cannot connect to APNs at \(peer): \(error)")
        }
    }

    /// One request as one stream: the HTTP/1-style parts are translated to
    /// HTTP/2 frames by NIO's codec.
    private static func exchange(on live: Live, authority: String, path: String, headers: HTTPHeaders, body: [UInt8],
                                 deadline: NIODeadline) async throws -> APNsResponse {
        let eventLoop = live.channel.eventLoop
        let promise = eventLoop.makePromise(of: APNsResponse.self)
        let state = live.state
        var headers = headers
        headers.replaceOrAdd(name: "host", value: authority)
        headers.replaceOrAdd(name: "content-length", value: String(body.count))
        let head = HTTPRequestHead(version: .http2, method: .POST, uri: path, headers: headers)
        // The deadline covers the TLS handshake, the stream and the answer.
        let timer = eventLoop.scheduleTask(deadline: deadline) {
            let reason = state.failure.get().map { ": \($0)" } ?? ""
            promise.fail(APNsConnectionError("no answer from APNs at \(authority) in time\(reason)"))
        }
        promise.futureResult.whenComplete { _ in timer.cancel() }
        live.multiplexer.createStreamChannel { stream in
            stream.eventLoop.makeCompletedFuture {
                try stream.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTP1ClientCodec(httpProtocol: .https))
                try stream.pipeline.syncOperations.addHandler(StreamAnswer(promise: promise, state: state, peer: authority))
            }
        }.whenComplete { result in
            switch result {
            case .failure(let error):
                promise.fail(APNsConnectionError("cannot open a stream to APNs at \(authority): \(state.failure.get() ?? "\(error)")"))
            case .success(let stream):
                // A stream past its deadline is reset; the connection stays.
                promise.futureResult.whenFailure { _ in stream.close(promise: nil) }
                stream.write(HTTPClientRequestPart.head(head), promise: nil)
                if !body.isEmpty { stream.write(HTTPClientRequestPart.body(.byteBuffer(ByteBuffer(bytes: body))), promise: nil) }
                stream.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
            }
        }
        return try await promise.futureResult.get()
    }
}

/// What the connection's handlers learn: whether the peer said anything
/// (its SETTINGS), whether it asked to go away, and why it failed.
final class ConnectionState: Sendable {
    let heardFromPeer = Locked(false)
    let goingAway = Locked(false)
    let failure = Locked<String?>(nil)
}

/// Watches the connection's own frames (stream 0) and errors.
private final class ConnectionWatcher: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTP2Frame

    let state: ConnectionState

    init(state: ConnectionState) { self.state = state }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        state.heardFromPeer.set(true)
        if case .goAway = frame.payload { state.goingAway.set(true) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // NIO's HTTP/2 errors describe themselves with their source file and line: the name says enough.
        let text = TLS.explain(error, peer: "APNs") ?? "it does not speak HTTP/2 (\(String("\(error)".prefix { $0 != "(" })))"
        state.failure.update { $0 = $0 ?? text }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        state.goingAway.set(true)
        context.fireChannelInactive()
    }
}

/// Collects one stream's answer and completes its promise.
private final class StreamAnswer: ChannelInboundHandler {
    typealias InboundIn = HTTPClientResponsePart

    private let promise: EventLoopPromise<APNsResponse>
    private let state: ConnectionState
    private let peer: String
    private var head: HTTPResponseHead?
    private var body: [UInt8] = []
    /// APNs' answers are a small JSON object at most.
    private let limit = 64 * 1024

    init(promise: EventLoopPromise<APNsResponse>, state: ConnectionState, peer: String) {
        self.promise = promise
        self.state = state
        self.peer = peer
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        state.heardFromPeer.set(true)
        switch unwrapInboundIn(data) {
        case .head(let answer):
            head = answer
        case .body(let chunk):
            guard body.count + chunk.readableBytes <= limit else {
                promise.fail(APNsConnectionError("APNs at \(peer) answered more than \(limit) bytes"))
                context.close(promise: nil)
                return
            }
            body += chunk.readableBytesView
        case .end:
            guard let head else { return }
            promise.succeed(APNsResponse(status: Int(head.status.code), headers: head.headers, body: body))
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        promise.fail(APNsConnectionError("APNs at \(peer) sent a bad answer: \(error)"))
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        let why = state.failure.get() ?? "the stream closed before an answer"
        promise.fail(APNsConnectionError("no answer from APNs at \(peer): \(why)"))
        context.fireChannelInactive()
    }
}
