import FoundationEssentials
import FprepPush
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// A request the client sends.
public struct ClientRequest: Sendable {
    public var method: HTTPMethod
    public var url: ServiceURL
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(_ method: HTTPMethod, _ url: ServiceURL, headers: HTTPHeaders = [:], body: [UInt8] = []) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// A response the client read in full.
public struct ClientResponse: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: [UInt8]
    public var text: String { String(decoding: body, as: UTF8.self) }
}

/// Why a request failed before an answer came.
public struct HTTPClientError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// TLS refused the server (its certificate is not trusted or does not name
/// it): trying again will not help.
public struct TLSFailure: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// A small HTTP/1.1 client on SwiftNIO: keep-alive connections pooled per
/// server (a delivery to 10,000 webhooks on one sink reuses a few sockets
/// instead of opening 10,000), a deadline per request, responses read in
/// full up to a limit. `https://` URLs go over TLS, the server's
/// certificate checked against the system's trust store or `caFile`.
public final class HTTPClient: Sendable {
    let group: any EventLoopGroup
    private let pool = ConnectionPool()
    private let maxResponseBytes: Int
    /// Set by `shutdown`: no new connection may be asked of the event loops.
    let isShutDown = Locked(false)
    private let caFile: String?
    /// Made at the first https request (reading the trust store costs time).
    private let tlsContext = Locked<NIOSSLContext?>(nil)

    public init(group: any EventLoopGroup, maxResponseBytes: Int = 1 << 20, caFile: String? = nil) {
        self.group = group
        self.maxResponseBytes = maxResponseBytes
        self.caFile = caFile
    }

    /// The TLS context for `url`, nil for plain HTTP.
    func tls(for url: ServiceURL) throws -> NIOSSLContext? {
        guard url.isSecure else { return nil }
        if let context = tlsContext.get() { return context }
        let context = try TLS.clientContext(caFile: caFile, protocols: ["http/1.1"])
        tlsContext.set(context)
        return context
    }

    /// Sends `request` and reads the answer, within `timeout` in all
    /// (connect, write and read); the connection goes back to the pool.
    public func send(_ request: ClientRequest, timeout: TimeAmount) async throws -> ClientResponse {
        try await send(request, connectingTo: nil, timeout: timeout)
    }

    /// Sends `request` over a connection to `address` when given (the URL's
    /// host then only names the server in the `host` header: a webhook goes
    /// to the address its policy checked), else to the URL's host.
    func send(_ request: ClientRequest, connectingTo address: SocketAddress?, timeout: TimeAmount) async throws -> ClientResponse {
        guard !isShutDown.get() else { throw HTTPClientError("the client is shut down") }
        let deadline = NIODeadline.now() + timeout
        // Connections to a given address are pooled apart from those the name found.
        let key = (request.url.isSecure ? "https://" : "http://") + request.url.authority + (address?.ipAddress.map { "@" + $0 } ?? "")
        if let idle = await pool.take(key) {
            // A pooled connection the server closed meanwhile fails at once:
            // then the request goes again on a new one.
            if let response = try? await exchange(request, on: idle, deadline: deadline, key: key) { return response }
        }
        var fresh = try await PooledConnection.connect(to: request.url, address: address, group: group, timeout: timeout,
                                                       maxResponseBytes: maxResponseBytes, tls: try tls(for: request.url))
        if !fresh.isActive {
            // Closed by the server as soon as it was made: nothing was
            // sent, so one more connection is safe for any request.
            fresh = try await PooledConnection.connect(to: request.url, address: address, group: group, timeout: timeout,
                                                       maxResponseBytes: maxResponseBytes, tls: try tls(for: request.url))
        }
        return try await exchange(request, on: fresh, deadline: deadline, key: key)
    }

    private func exchange(_ request: ClientRequest, on connection: PooledConnection, deadline: NIODeadline,
                          key: String) async throws -> ClientResponse {
        do {
            let response = try await connection.send(request, deadline: deadline)
            if response.keepAlive { await pool.put(connection, key) } else { connection.close() }
            return response.response
        } catch {
            connection.close()
            throw error
        }
    }

    /// Closes every pooled connection.
    public func shutdown() async {
        isShutDown.set(true)
        await pool.closeAll()
    }
}

/// Idle keep-alive connections per `host:port`.
private actor ConnectionPool {
    private var idle: [String: [PooledConnection]] = [:]
    private let maxIdlePerServer = 256

    func take(_ key: String) -> PooledConnection? {
        while var list = idle[key], let last = list.popLast() {
            idle[key] = list
            if last.isActive { return last }
        }
        return nil
    }

    func put(_ connection: PooledConnection, _ key: String) {
        guard connection.isActive, idle[key, default: []].count < maxIdlePerServer else {
            connection.close()
            return
        }
        idle[key, default: []].append(connection)
    }

    func closeAll() {
        for list in idle.values { for connection in list { connection.close() } }
        idle = [:]
    }
}

/// One client connection with a handler that collects one response at a time.
private final class PooledConnection: Sendable {
    let channel: any Channel
    private let collector: NIOLoopBound<ResponseCollector>

    private init(channel: any Channel, collector: NIOLoopBound<ResponseCollector>) {
        self.channel = channel
        self.collector = collector
    }

    var isActive: Bool { channel.isActive }

    static func connect(to url: ServiceURL, address: SocketAddress?, group: any EventLoopGroup, timeout: TimeAmount,
                        maxResponseBytes: Int, tls: NIOSSLContext?) async throws -> PooledConnection {
        let channel: any Channel
        // The collector is handed over as the pipeline is made: looked up
        // after the connect, it is gone from a connection the server closed
        // at once, and the lookup failed with NIO's bare `.notFound`.
        let collectorMade = group.next().makePromise(of: NIOLoopBound<ResponseCollector>.self)
        do {
            let bootstrap = ClientBootstrap(group: group)
                .connectTimeout(timeout)
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        if let tls { try channel.pipeline.syncOperations.addHandler(try TLS.clientHandler(tls, host: url.host)) }
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        let collector = ResponseCollector(limit: maxResponseBytes, peer: url.authority)
                        try channel.pipeline.syncOperations.addHandler(collector)
                        collectorMade.succeed(NIOLoopBound(collector, eventLoop: channel.eventLoop))
                    }
                }
            if let address {
                channel = try await bootstrap.connect(to: address).get()
            } else {
                channel = try await bootstrap.connect(host: url.host, port: url.port).get()
            }
        } catch {
            // (A promise completed already ignores this.)
            collectorMade.fail(error)
            throw HTTPClientError("cannot connect to \(url.authority): \(error)")
        }
        return PooledConnection(channel: channel, collector: try await collectorMade.futureResult.get())
    }

    func send(_ request: ClientRequest, deadline: NIODeadline) async throws -> (response: ClientResponse, keepAlive: Bool) {
        let channel = self.channel
        let collector = self.collector
        var headers = request.headers
        headers.replaceOrAdd(name: "host", value: request.url.authority)
        headers.replaceOrAdd(name: "content-length", value: String(request.body.count))
        let head = HTTPRequestHead(version: .http1_1, method: request.method, uri: request.url.path, headers: headers)
        let body = request.body
        let future = channel.eventLoop.flatSubmit { () -> EventLoopFuture<(ClientResponse, Bool)> in
            let promise = channel.eventLoop.makePromise(of: (ClientResponse, Bool).self)
            collector.value.start(promise)
            // A request past its deadline closes the connection; the
            // collector then fails the promise.
            let timer = channel.eventLoop.scheduleTask(deadline: deadline) {
                collector.value.fail(HTTPClientError("no answer from \(request.url.authority) in time"))
                channel.close(promise: nil)
            }
            promise.futureResult.whenComplete { _ in timer.cancel() }
            channel.write(HTTPClientRequestPart.head(head), promise: nil)
            if !body.isEmpty { channel.write(HTTPClientRequestPart.body(.byteBuffer(ByteBuffer(bytes: body))), promise: nil) }
            channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
            return promise.futureResult
        }
        let (response, keepAlive) = try await future.get()
        return (response, keepAlive)
    }

    func close() { channel.close(promise: nil) }
}

/// Collects the response to the request in flight and completes its promise.
private final class ResponseCollector: ChannelInboundHandler {
    typealias InboundIn = HTTPClientResponsePart

    private let limit: Int
    private let peer: String
    private var promise: EventLoopPromise<(ClientResponse, Bool)>?
    private var head: HTTPResponseHead?
    private var body: [UInt8] = []
    /// A TLS failure seen before a request started (the handshake runs at connect).
    private var tlsFailure: TLSFailure?
    private var closed = false

    init(limit: Int, peer: String) {
        self.limit = limit
        self.peer = peer
    }

    func start(_ promise: EventLoopPromise<(ClientResponse, Bool)>) {
        if let tlsFailure { return promise.fail(tlsFailure) }
        // Closed before the request: nothing would ever answer it.
        if closed { return promise.fail(HTTPClientError("the server closed the connection")) }
        self.promise = promise
        head = nil
        body = []
    }

    func fail(_ error: any Error) {
        promise?.fail(error)
        promise = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let responseHead):
            head = responseHead
        case .body(let chunk):
            guard body.count + chunk.readableBytes <= limit else {
                fail(HTTPClientError("the answer is larger than \(limit) bytes"))
                context.close(promise: nil)
                return
            }
            body += chunk.readableBytesView
        case .end:
            guard let head else { return }
            let response = ClientResponse(status: Int(head.status.code), headers: head.headers, body: body)
            promise?.succeed((response, head.isKeepAlive))
            promise = nil
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let text = TLS.explain(error, peer: peer) {
            tlsFailure = TLSFailure(text)
            fail(TLSFailure(text))
        } else {
            fail(HTTPClientError("connection failed: \(error)"))
        }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed = true
        fail(tlsFailure ?? HTTPClientError("the server closed the connection"))
        context.fireChannelInactive()
    }
}
