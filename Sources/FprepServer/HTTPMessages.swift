import FoundationEssentials
import FprepGit
import NIOCore
import NIOHTTP1

/// A request the server received, body read in full (within the limit).
public struct HTTPRequest: Sendable {
    public var method: HTTPMethod
    /// The path without the query, e.g. `/v1/devices`.
    public var path: String
    public var headers: HTTPHeaders
    public var body: ByteBuffer
    /// The peer's address (for rate limits), e.g. `127.0.0.1`.
    public var client: String

    /// The bearer token of the `authorization` header, if any.
    public var bearerToken: String? {
        guard let value = headers.first(name: "authorization") else { return nil }
        let parts = value.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let token = parts[1].trimmed
        return token.isEmpty ? nil : token
    }
}

/// What the server answers: a whole body, or a stream of chunks (server-sent
/// events) that ends when the stream finishes or the client goes away.
public struct HTTPResponse: Sendable {
    public enum Body: Sendable {
        case bytes([UInt8])
        case stream(AsyncStream<[UInt8]>)
    }

    public var status: HTTPResponseStatus
    public var headers: HTTPHeaders
    public var body: Body

    public init(status: HTTPResponseStatus, headers: HTTPHeaders = [:], body: Body = .bytes([])) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON answer.
    public static func json<T: Encodable>(_ value: T, status: HTTPResponseStatus = .ok) -> HTTPResponse {
        let data = (try? JSONCoding.encoder.encode(value)) ?? Data("{}".utf8)
        return HTTPResponse(status: status, headers: ["content-type": "application/json"], body: .bytes(Array(data) + [0x0A]))
    }

    /// An error answer: `{"error": "one line"}`.
    public static func error(_ status: HTTPResponseStatus, _ message: String, headers extra: HTTPHeaders = [:]) -> HTTPResponse {
        var response = json(["error": message], status: status)
        response.headers.add(contentsOf: extra)
        return response
    }
}

/// The one JSON style of the service: sorted keys, slashes as they are.
public enum JSONCoding {
    public static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        try JSONDecoder().decode(type, from: Data(bytes))
    }

    public static func encode<T: Encodable>(_ value: T) -> [UInt8] {
        Array((try? encoder.encode(value)) ?? Data())
    }
}

