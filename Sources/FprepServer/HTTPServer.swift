import FoundationEssentials
import FprepCore

import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// A small HTTP/1.1 server on SwiftNIO: each request is read in full (up to
/// `maxBodyBytes`, else 413 and the connection closes), handed to the
/// handler, and answered; keep-alive and pipelining as NIO's server pipeline
/// does them; a malformed request gets NIO's 400. A streamed answer
/// (server-sent events) runs until its stream ends or the client leaves.
/// With TLS it speaks HTTP/1.1 and HTTP/2, as ALPN chooses: each HTTP/2
/// stream is turned into HTTP/1 parts by NIO's codec and served as a request
/// of its own by the same code.
public final class HTTPServer: Sendable {
    public typealias Handler = @Sendable (HTTPRequest) async -> HTTPResponse

    /// The port the server listens on (the kernel's choice when asked for 0).
    public let port: Int
    public let host: String
    private let serverChannel: any Channel
    private let acceptLoop: Task<Void, Never>
    private let open: OpenChannels

    /// Binds `host:port` and starts serving; returns once the socket listens.
    /// With `tls`, connections are TLS and HTTP/1.1 or HTTP/2 by ALPN.
    public static func start(host: String, port: Int, group: any EventLoopGroup, maxBodyBytes: Int = 64 * 1024,
                             idleTimeout: TimeAmount = .seconds(60), tls: NIOSSLContext? = nil,
                             handler: @escaping Handler) async throws -> HTTPServer {
        let open = OpenChannels()
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 4096)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
        // Idle in both directions for this long: closed. A server-sent event
        // stream writes heartbeats to stay open.
        @Sendable func addIdleHandlers(_ channel: any Channel) throws {
            try channel.pipeline.syncOperations.addHandler(IdleStateHandler(allTimeout: idleTimeout))
            try channel.pipeline.syncOperations.addHandler(CloseWhenIdle())
        }
        let serverChannel: any Channel
        let loop: Task<Void, Never>
        if let tls {
            let listener = try await bootstrap.bind(host: host, port: port) { channel in
                open.add(channel)
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls))
                    try addIdleHandlers(channel)
                }.flatMap {
                    channel.configureAsyncHTTPServerPipeline { connection in
                        connection.eventLoop.makeCompletedFuture {
                            try RequestsInHand.add(to: connection, countingOn: connection)
                            return try Unserved.keep(NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(wrappingChannelSynchronously: connection))
                        }
                    } http2ConnectionInitializer: { connection in
                        connection.eventLoop.makeSucceededVoidFuture()
                    } http2StreamInitializer: { stream in
                        stream.eventLoop.makeCompletedFuture {
                            try stream.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTP1ServerCodec())
                            // A stream's requests count on its connection's idle closer.
                            if let connection = stream.parent { try RequestsInHand.add(to: stream, countingOn: connection) }
                            return try Unserved.keep(NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(wrappingChannelSynchronously: stream))
                        }
                    }
                }
            }
            serverChannel = listener.channel
            loop = Task {
                await withDiscardingTaskGroup { connections in
                    try? await listener.executeThenClose { inbound in
                        for try await negotiation in inbound {
                            connections.addTask {
                                // A failed handshake (a client that does not trust the certificate…) ends here.
                                guard let negotiated = try? await negotiation.get() else { return }
                                switch negotiated {
                                case .http1_1(let connection):
                                    await serve(connection, maxBodyBytes: maxBodyBytes, handler: handler)
                                case .http2((_, let streams)):
                                    await withDiscardingTaskGroup { requests in
                                        do {
                                            for try await stream in streams.inbound {
                                                requests.addTask { await serve(stream, maxBodyBytes: maxBodyBytes, handler: handler) }
                                            }
                                        } catch {}
                                        requests.cancelAll()
                                    }
                                }
                            }
                        }
                    }
                    connections.cancelAll()
                }
            }
        } else {
            let listener = try await bootstrap.bind(host: host, port: port) { channel in
                open.add(channel)
                return channel.eventLoop.makeCompletedFuture {
                    try addIdleHandlers(channel)
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try RequestsInHand.add(to: channel, countingOn: channel)
                    return try Unserved.keep(NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(wrappingChannelSynchronously: channel))
                }
            }
            serverChannel = listener.channel
            loop = Task {
                await withDiscardingTaskGroup { connections in
                    try? await listener.executeThenClose { inbound in
                        for try await connection in inbound {
                            connections.addTask {
                                await serve(connection, maxBodyBytes: maxBodyBytes, handler: handler)
                            }
                        }
                    }
                    // The listener is closed: end every connection still open.
                    connections.cancelAll()
                }
            }
        }
        let boundPort = serverChannel.localAddress?.port ?? port
        return HTTPServer(port: boundPort, host: host, serverChannel: serverChannel, acceptLoop: loop, open: open)
    }

    private init(port: Int, host: String, serverChannel: any Channel, acceptLoop: Task<Void, Never>, open: OpenChannels) {
        self.port = port
        self.host = host
        self.serverChannel = serverChannel
        self.acceptLoop = acceptLoop
        self.open = open
    }

    /// Stops listening and closes every connection.
    public func stop() async {
        try? await serverChannel.close()
        // A long-lived event stream does not end on cancellation alone:
        // close every connection's channel, which ends its handler.
        for channel in open.all() { try? await channel.close() }
        // The accept loop then ends by itself: the listener hands over the
        // connections it had accepted, each is served (closed at once) and
        // finished. It is not cancelled: that would drop connections
        // accepted but not yet handed over, and NIO stops the process on
        // one that was never finished ("Deinited NIOAsyncWriter without
        // calling finish()", seen as `fprep serve` stopped). Should it not
        // end within 5 s, the stop goes on without it (the process ends).
        let loop = acceptLoop
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let pending = Locked(true)
            let resume: @Sendable () -> Void = {
                if pending.update({ value in defer { value = false }; return value }) { continuation.resume() }
            }
            Task { await loop.value; resume() }
            Task { _ = await sleepUnlessCancelled(for: .seconds(5)); resume() }
        }
    }

    /// Serves one connection: request after request until the client or the
    /// answer closes it.
    private static func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>,
                              maxBodyBytes: Int, handler: Handler) async {
        // An HTTP/2 stream's peer is its connection's.
        let client = (connection.channel.remoteAddress ?? connection.channel.parent?.remoteAddress)?.ipAddress ?? "unknown"
        let closed = connection.channel.closeFuture
        // Finished by `executeThenClose` (whatever the body does): it may go.
        defer { Unserved.release(connection) }
        try? await connection.executeThenClose { inbound, outbound in
            var parts = inbound.makeAsyncIterator()
            while let first = try await parts.next() {
                guard case .head(let head) = first else { return }
                let declared = head.headers.first(name: "content-length").flatMap { Int($0) } ?? 0
                if declared > maxBodyBytes {
                    try await write(.error(.payloadTooLarge, "the request body is larger than \(maxBodyBytes) bytes"),
                                    to: outbound, version: head.version, keepAlive: false, closed: closed)
                    return
                }
                var body = ByteBuffer()
                reading: while let part = try await parts.next() {
                    switch part {
                    case .body(var chunk):
                        guard body.readableBytes + chunk.readableBytes <= maxBodyBytes else {
                            try await write(.error(.payloadTooLarge, "the request body is larger than \(maxBodyBytes) bytes"),
                                            to: outbound, version: head.version, keepAlive: false, closed: closed)
                            return
                        }
                        body.writeBuffer(&chunk)
                    case .end:
                        break reading
                    case .head:
                        return
                    }
                }
                let path = String(head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
                let request = HTTPRequest(method: head.method, path: path, headers: head.headers, body: body, client: client)
                let response = await handler(request)
                let keepAlive = head.isKeepAlive
                try await write(response, to: outbound, version: head.version, keepAlive: keepAlive, closed: closed)
                if !keepAlive { return }
                if case .stream = response.body { return }
            }
        }
    }

    private static func write(_ response: HTTPResponse, to outbound: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>,
                              version: HTTPVersion, keepAlive: Bool, closed: EventLoopFuture<Void>) async throws {
        var headers = response.headers
        if !keepAlive { headers.replaceOrAdd(name: "connection", value: "close") }
        switch response.body {
        case .bytes(let bytes):
            headers.replaceOrAdd(name: "content-length", value: String(bytes.count))
            try await outbound.write(.head(HTTPResponseHead(version: version, status: response.status, headers: headers)))
            if !bytes.isEmpty { try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: bytes)))) }
            try await outbound.write(.end(nil))
        case .stream(let chunks):
            // No content-length: NIO frames the body as chunked.
            try await outbound.write(.head(HTTPResponseHead(version: version, status: response.status, headers: headers)))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await chunk in chunks {
                        try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: chunk))))
                    }
                    try await outbound.write(.end(nil))
                }
                // The client went away: stop waiting for the next event.
                group.addTask { try? await closed.get() }
                _ = try await group.next()
                group.cancelAll()
            }
        }
    }
}

/// Closes a connection that has been idle too long (see `IdleStateHandler`),
/// unless a request on it is in hand (see `RequestsInHand`): a handler that
/// waits (on the service's store, on a loaded machine) is no idle client,
/// and closing then loses its answer ("the server closed the connection")
/// after the request may have taken effect.
final class CloseWhenIdle: ChannelInboundHandler, Sendable {
    typealias InboundIn = NIOAny

    /// Requests on this connection being answered now.
    private let answering = Atomic<Int>(0)
    /// Idle timeouts that came while a request was in hand, on every
    /// connection of the process (each one a connection kept open).
    static let keptOpen = Atomic<Int>(0)

    func began() { answering.add(1, ordering: .relaxed) }
    func ended() { answering.subtract(1, ordering: .relaxed) }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            guard answering.load(ordering: .relaxed) == 0 else {
                Self.keptOpen.add(1, ordering: .relaxed)
                return
            }
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }
}

/// Counts a request in hand on its connection's `CloseWhenIdle` from the
/// moment its last part is read, on the connection's event loop, until its
/// response's end is written. Counted when a task of the service took it,
/// a request read while every thread of the process was busy for longer
/// than the idle timeout was closed unanswered. A response that streams
/// events counts as done at its head: the stream keeps its connection open
/// with heartbeats. A request of a channel that closes (a client gone, an
/// HTTP/2 stream reset) stops counting then.
final class RequestsInHand: ChannelDuplexHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private let closer: CloseWhenIdle
    // The channel's event loop only.
    private var inHand = 0
    private var streaming = false

    init(countingOn closer: CloseWhenIdle) { self.closer = closer }

    /// Adds one to `channel` (an HTTP/1 connection or an HTTP/2 stream),
    /// counting on the idle closer of `connection`; on the event loop.
    static func add(to channel: any Channel, countingOn connection: any Channel) throws {
        let closer = try connection.pipeline.syncOperations.handler(type: CloseWhenIdle.self)
        try channel.pipeline.syncOperations.addHandler(RequestsInHand(countingOn: closer))
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .end = unwrapInboundIn(data) {
            inHand += 1
            closer.began()
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(let head):
            streaming = !head.headers.contains(name: "content-length")
            if streaming { answered() }
        case .end:
            if !streaming { answered() }
        case .body:
            break
        }
        context.write(data, promise: promise)
    }

    func channelInactive(context: ChannelHandlerContext) {
        while inHand > 0 { answered() }
        context.fireChannelInactive()
    }

    /// One request answered; an answer with no request read to its end (a
    /// body refused as too large) counts nothing.
    private func answered() {
        guard inHand > 0 else { return }
        inHand -= 1
        closer.ended()
    }
}

/// The connections a server has open, so that stopping it closes them all.
final class OpenChannels: @unchecked Sendable {
    private let lock = Lock()
    private var channels: [ObjectIdentifier: any Channel] = [:]

    func add(_ channel: any Channel) {
        let key = ObjectIdentifier(channel)
        lock.lock()
        channels[key] = channel
        lock.unlock()
        channel.closeFuture.whenComplete { [weak self] _ in
            guard let self else { return }
            self.lock.lock()
            self.channels.removeValue(forKey: key)
            self.lock.unlock()
        }
    }

    func all() -> [any Channel] {
        lock.lock()
        defer { lock.unlock() }
        return Array(channels.values)
    }
}

/// Every connection's async wrapper from its making until it was served.
/// NIO stops the process when a wrapper whose writer was never finished
/// is freed ("Deinited NIOAsyncWriter without calling finish()"), and one
/// accepted while the service stops may never reach `serve` (still seen in
/// CI after the accept loop stopped being cancelled): held here, process
/// wide, such a wrapper is never freed; the process ends with it.
enum Unserved {
    typealias Wrapper = NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>
    private static let held = Locked<[ObjectIdentifier: Wrapper]>([:])

    static func keep(_ wrapper: Wrapper) -> Wrapper {
        held.update { $0[ObjectIdentifier(wrapper.channel)] = wrapper }
        return wrapper
    }

    static func release(_ wrapper: Wrapper) {
        held.update { $0[ObjectIdentifier(wrapper.channel)] = nil }
    }
}
