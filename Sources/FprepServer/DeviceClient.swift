import FoundationEssentials
import FprepPush
import NIOCore
import NIOHTTP1
import NIOPosix

/// The service refused a call (an answer other than 2xx).
public struct ServiceRefused: Error, CustomStringConvertible, Sendable {
    public let status: Int
    public let message: String
    public var description: String { "the push service answered \(status): \(message)" }
}

/// A device's side of the push service's API.
public struct DeviceClient: Sendable {
    public let service: ServiceURL
    let client: HTTPClient
    let timeout: TimeAmount

    public init(service: ServiceURL, client: HTTPClient, timeout: TimeAmount = .seconds(5)) {
        self.service = service
        self.client = client
        self.timeout = timeout
    }

    /// A client on NIO's shared event loops, for a command's few calls.
    /// `caFile`: the CA an https service's certificate is checked against
    /// (nil: the system's trust store).
    public static func make(service: ServiceURL, timeoutSeconds: Int64, caFile: String? = nil) -> DeviceClient {
        DeviceClient(service: service, client: HTTPClient(group: MultiThreadedEventLoopGroup.singleton, caFile: caFile),
                     timeout: .seconds(timeoutSeconds))
    }

    /// A registration: the device's id and bearer token.
    public struct Registration: Sendable, Decodable {
        public let device: String
        public let token: String
        public let expires: Int64
    }

    /// Registers as a stream device of `domain`, with an enrollment secret.
    public func register(domain: String, enrollment: String?, branch: String, replicated: Bool,
                         name: String) async throws -> Registration {
        struct Body: Encodable {
            let domain: String
            let enrollment: String?
            let branch: String
            let replicated: Bool
            let name: String
            let channel = ["kind": "stream"]
        }
        let body = JSONCoding.encode(Body(domain: domain, enrollment: enrollment, branch: branch, replicated: replicated, name: name))
        let response = try await call(.POST, "/v1/devices", token: nil, body: body)
        return try JSONCoding.decode(Registration.self, from: response.body)
    }

    /// Tells the service an enumerator of `container` opened (for
    /// `lifetime` seconds unless renewed) or closed.
    public func setEnumerator(token: String, container: String, active: Bool, lifetime: Int64? = nil) async throws {
        struct Body: Encodable {
            let container: String
            let active: Bool
            let lifetime: Int64?
        }
        _ = try await call(.POST, "/v1/enumerators", token: token,
                           body: JSONCoding.encode(Body(container: container, active: active, lifetime: lifetime)))
    }

    /// Follows the device's event stream from after `lastEventID` until it
    /// ends (see `HTTPClient.events`).
    public func events(token: String, lastEventID: Int64?, idleTimeout: TimeAmount,
                       onOpen: @Sendable () async -> Void,
                       onEvent: @Sendable (ServerSentEvent) async -> Void) async throws {
        var headers: HTTPHeaders = ["authorization": "Bearer \(token)"]
        if let lastEventID { headers.add(name: "last-event-id", value: String(lastEventID)) }
        do {
            try await client.events(ClientRequest(.GET, service.with(path: "/v1/events"), headers: headers),
                                    connectTimeout: timeout, idleTimeout: idleTimeout, onOpen: onOpen, onEvent: onEvent)
        } catch let refused as StreamRefused {
            throw ServiceRefused(status: refused.status, message: refused.message)
        }
    }

    private func call(_ method: HTTPMethod, _ path: String, token: String?, body: [UInt8]) async throws -> ClientResponse {
        var headers: HTTPHeaders = ["content-type": "application/json"]
        if let token { headers.add(name: "authorization", value: "Bearer \(token)") }
        let response = try await client.send(ClientRequest(method, service.with(path: path), headers: headers, body: body),
                                             timeout: timeout)
        guard (200..<300).contains(response.status) else {
            throw ServiceRefused(status: response.status, message: ServiceError.message(in: response.body))
        }
        return response
    }
}

/// Runs async work from synchronous code (the command line's `run()`),
/// waiting on a semaphore; never call it from a task.
public func runBlocking<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let outcome = Locked<Result<T, any Error>?>(nil)
    let done = Semaphore()
    Task {
        do { outcome.set(.success(try await body())) } catch { outcome.set(.failure(error)) }
        done.signal()
    }
    done.wait()
    guard let result = outcome.get() else { throw HTTPClientError("the work ended without a result") }
    return try result.get()
}
