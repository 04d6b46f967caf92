import FoundationEssentials
import NIOCore
import NIOHTTP1
import NIOPosix

/// One server-sent event (the `text/event-stream` format).
public struct ServerSentEvent: Sendable, Equatable {
    public var id: String?
    public var event: String
    public var data: String

    public init(id: String? = nil, event: String = "message", data: String) {
        self.id = id
        self.event = event
        self.data = data
    }

    /// The event as the stream carries it.
    public var encoded: [UInt8] {
        var text = ""
        if let id { text += "id: \(id)\n" }
        if event != "message" { text += "event: \(event)\n" }
        for line in data.split(separator: "\n", omittingEmptySubsequences: false) { text += "data: \(line)\n" }
        return Array((text + "\n").utf8)
    }

    /// A comment line: keeps an idle connection alive, ignored by readers.
    public static func comment(_ text: String) -> [UInt8] { Array(": \(text)\n\n".utf8) }
}

/// Reads `text/event-stream` bytes as they arrive and returns whole events.
public struct ServerSentEventParser: Sendable {
    private var line: [UInt8] = []
    private var id: String?
    private var event = "message"
    private var data: [String] = []
    private var sawField = false

    public init() {}

    public mutating func feed<Bytes: Sequence>(_ bytes: Bytes) -> [ServerSentEvent] where Bytes.Element == UInt8 {
        var events: [ServerSentEvent] = []
        for byte in bytes {
            if byte == 0x0A {
                if let event = finishLine() { events.append(event) }
            } else if byte != 0x0D {
                line.append(byte)
            }
        }
        return events
    }

    private mutating func finishLine() -> ServerSentEvent? {
        defer { line.removeAll(keepingCapacity: true) }
        if line.isEmpty {
            // A blank line ends the event (if it had any field).
            defer { id = nil; event = "message"; data = []; sawField = false }
            return sawField && !data.isEmpty ? ServerSentEvent(id: id, event: event, data: data.joined(separator: "\n")) : nil
        }
        if line.first == 0x3A { return nil }  // ':' comment
        let text = String(decoding: line, as: UTF8.self)
        let name: Substring
        var value: Substring
        if let colon = text.firstIndex(of: ":") {
            name = text[..<colon]
            value = text[text.index(after: colon)...]
            if value.hasPrefix(" ") { value = value.dropFirst() }
        } else {
            name = Substring(text)
            value = ""
        }
        sawField = true
        switch name {
        case "id": id = String(value)
        case "event": event = String(value)
        case "data": data.append(String(value))
        default: break
        }
        return nil
    }
}

/// The server refused to open an event stream (an answer other than 200).
public struct StreamRefused: Error, CustomStringConvertible, Sendable {
    public let status: Int
    public let message: String
    public var description: String { "the service answered \(status): \(message)" }
}

extension HTTPClient {
    /// Opens `request` as an event stream on a connection of its own and
    /// calls `onEvent` for each event, until the server ends the stream, the
    /// connection drops, or nothing (not even a heartbeat) arrives for
    /// `idleTimeout`. `onOpen` runs once the server accepted the stream.
    /// Throws `StreamRefused` for an answer other than 200.
    public func events(_ request: ClientRequest, connectTimeout: TimeAmount, idleTimeout: TimeAmount,
                       onOpen: @Sendable () async -> Void,
                       onEvent: @Sendable (ServerSentEvent) async -> Void) async throws {
        guard !isShutDown.get() else { throw HTTPClientError("the client is shut down") }
        let url = request.url
        let tls = try tls(for: url)
        let channel: NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>
        do {
            channel = try await ClientBootstrap(group: group)
                .connectTimeout(connectTimeout)
                .connect(host: url.host, port: url.port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        if let tls { try channel.pipeline.syncOperations.addHandler(try TLS.clientHandler(tls, host: url.host)) }
                        try channel.pipeline.syncOperations.addHandler(IdleStateHandler(readTimeout: idleTimeout))
                        try channel.pipeline.syncOperations.addHandler(CloseWhenIdle())
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                    }
                }
        } catch {
            throw HTTPClientError("cannot connect to \(url.authority): \(error)")
        }
        var headers = request.headers
        headers.replaceOrAdd(name: "host", value: url.authority)
        headers.replaceOrAdd(name: "accept", value: "text/event-stream")
        headers.replaceOrAdd(name: "content-length", value: String(request.body.count))
        let head = HTTPRequestHead(version: .http1_1, method: request.method, uri: url.path, headers: headers)
        do {
            try await follow(channel, head: head, body: request.body, onOpen: onOpen, onEvent: onEvent)
        } catch {
            // The handshake runs once connected: a certificate refused shows here.
            if let text = TLS.explain(error, peer: url.authority) { throw TLSFailure(text) }
            throw error
        }
    }

    private func follow(_ channel: NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>, head: HTTPRequestHead,
                        body: [UInt8], onOpen: @Sendable () async -> Void,
                        onEvent: @Sendable (ServerSentEvent) async -> Void) async throws {
        try await channel.executeThenClose { inbound, outbound in
            try await outbound.write(.head(head))
            if !body.isEmpty { try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: body)))) }
            try await outbound.write(.end(nil))
            var parser = ServerSentEventParser()
            var refusal: (status: Int, body: [UInt8])?
            for try await part in inbound {
                switch part {
                case .head(let response):
                    if response.status == .ok { await onOpen() } else { refusal = (Int(response.status.code), []) }
                case .body(let chunk):
                    if var refused = refusal {
                        if refused.body.count < 4096 { refused.body += chunk.readableBytesView }
                        refusal = refused
                    } else {
                        for event in parser.feed(chunk.readableBytesView) { await onEvent(event) }
                    }
                case .end:
                    if let refusal { throw StreamRefused(status: refusal.status, message: ServiceError.message(in: refusal.body)) }
                    return
                }
            }
            if let refusal { throw StreamRefused(status: refusal.status, message: ServiceError.message(in: refusal.body)) }
        }
    }
}

/// The service's error answers.
public enum ServiceError {
    /// The `error` of a `{"error": …}` body, else the body's first line.
    public static func message(in body: [UInt8]) -> String {
        // fprep's answers say "error", APNs' say "reason".
        if let decoded = try? JSONCoding.decode([String: String].self, from: body),
           let message = decoded["error"] ?? decoded["reason"] { return message }
        let text = String(decoding: body.prefix(300), as: UTF8.self)
        return text.split(separator: "\n").first.map(String.init) ?? "no detail"
    }
}
