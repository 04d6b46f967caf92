import FoundationEssentials
import FprepCore
import FprepPush
import NIOCore
import NIOHTTP1

/// The service's HTTP API (JSON in and out, errors as `{"error": …}`):
///
/// | request | what it does |
/// | --- | --- |
/// | `GET /v1/health` | 200 while the service runs (no token needed) |
/// | `POST /v1/devices` | register: `{domain, enrollment, branch?, replicated?, name?, channel: {kind: stream\|webhook\|apns, url?, secret?, device-token?}}` → 201 `{device, token, expires, webhook-secret?}`; 401 without a valid enrollment secret of the domain |
/// | `GET /v1/devices/me` | the device, its channel and active enumerators |
/// | `DELETE /v1/devices/me` | unregister |
/// | `POST /v1/enumerators` | `{container, active, lifetime?}`: an enumerator opened or closed |
/// | `GET /v1/events` | the device's pushes as server-sent events; `Last-Event-ID` resumes |
/// | `POST /v1/outbox/poke` | the hook, with the remote's secret: read the outbox now |
/// | a companion's paths | what the companion answers (`POST /v1/webhook` of a mirror) |
///
/// Registering needs an enrollment secret (`fprep serve enroll`); every
/// other call but health and poke needs the device's bearer token. Each
/// client address has a request budget (429 past it).
struct ServiceAPI: Sendable {
    let service: PushService
    let hookSecret: String
    let limiter: RateLimiter
    /// The part beside the service that answers its own paths, if any.
    var companion: (any ServiceCompanion)?

    func handle(_ request: HTTPRequest) async -> HTTPResponse {
        let admission = limiter.admit(request.client)
        guard admission.allowed else {
            return .error(.tooManyRequests, "too many requests; retry in \(admission.retryAfter) s",
                          headers: ["retry-after": String(admission.retryAfter)])
        }
        do {
            return try await route(request)
        } catch {
            return .error(error.status, error.message)
        }
    }

    private func route(_ request: HTTPRequest) async throws(APIError) -> HTTPResponse {
        if let companion, companion.paths.contains(request.path) { return await companion.handle(request) }
        switch (request.method, request.path) {
        case (.GET, "/v1/health"):
            return .json(["status": "ok"])
        case (.POST, "/v1/devices"):
            return try await register(request)
        case (.GET, "/v1/devices/me"):
            let device = try await service.authenticate(request.bearerToken)
            return .json(DeviceAnswer(device, enumerators: await service.activeContainers(device.id)))
        case (.DELETE, "/v1/devices/me"):
            let device = try await service.authenticate(request.bearerToken)
            try await service.unregister(device.id)
            return HTTPResponse(status: .noContent)
        case (.POST, "/v1/enumerators"):
            let device = try await service.authenticate(request.bearerToken)
            let body = try decode(EnumeratorRequest.self, request)
            guard !body.container.isEmpty, body.container.utf8.count <= 4096, !body.container.contains("\n") else {
                throw APIError(.badRequest, "'container' must be 1-4096 bytes on one line")
            }
            let expires = try await service.setEnumerator(device.id, container: body.container, open: body.active,
                                                          lifetime: body.lifetime)
            return .json(EnumeratorAnswer(container: body.container, active: expires != nil, expires: expires))
        case (.GET, "/v1/events"):
            let device = try await service.authenticate(request.bearerToken)
            guard device.channel == .stream else {
                throw APIError(.conflict, "this device receives its pushes by \(device.channel.kind), not by stream")
            }
            let lastID = request.headers.first(name: "last-event-id").flatMap { Int64($0.trimmed) }
            let stream = try await service.openStream(device.id, after: lastID)
            return HTTPResponse(status: .ok, headers: ["content-type": "text/event-stream", "cache-control": "no-cache"],
                                body: .stream(stream))
        case (.POST, "/v1/outbox/poke"):
            guard let token = request.bearerToken, Signing.constantTimeEqual(token, hookSecret) else {
                throw APIError(.unauthorized, "the hook's secret is required")
            }
            let service = self.service
            // `fprep serve revoke` pokes too: a revoked device's streams end now.
            Task {
                await service.noticeRevocations()
                await service.drainOutbox()
            }
            return .json(["status": "reading the outbox"], status: .accepted)
        case (_, "/v1/health"), (_, "/v1/devices"), (_, "/v1/devices/me"), (_, "/v1/enumerators"), (_, "/v1/events"),
             (_, "/v1/outbox/poke"):
            throw APIError(.methodNotAllowed, "\(request.method) is not allowed on \(request.path)")
        default:
            throw APIError(.notFound, "no such endpoint: \(request.path)")
        }
    }

    private func register(_ request: HTTPRequest) async throws(APIError) -> HTTPResponse {
        let body = try decode(RegistrationRequest.self, request)
        // Nothing else about the request is looked at before its secret passed.
        let enrollment = try await service.admit(body.enrollment, domain: body.domain)
        let branch = body.branch ?? "main"
        guard !branch.isEmpty, branch.utf8.count <= 255, !branch.contains(where: { $0 == " " || $0 == "\n" }) else {
            throw APIError(.badRequest, "'branch' must be a branch name")
        }
        let name = body.name ?? ""
        guard name.utf8.count <= 200, !name.contains("\n") else { throw APIError(.badRequest, "'name' must be at most 200 bytes on one line") }
        let channel: DeliveryChannel
        var webhookSecret: String?
        switch body.channel.kind {
        case "stream":
            channel = .stream
        case "webhook":
            guard let text = body.channel.url, let url = ServiceURL(text), !url.isSecure else {
                throw APIError(.badRequest, "a webhook channel needs 'url' as http://HOST:PORT/PATH (plain HTTP: webhooks are sent without TLS)")
            }
            if let refusal = service.configuration.webhookPolicy.refusal(ofLiteral: url.host) {
                throw APIError(.forbidden, "webhook url '\(url)' refused: \(refusal)")
            }
            let secret = body.channel.secret ?? Token.random()
            guard secret.utf8.count >= 16, secret.utf8.count <= 256 else {
                throw APIError(.badRequest, "a webhook 'secret' is 16-256 bytes")
            }
            if body.channel.secret == nil { webhookSecret = secret }
            channel = .webhook(url: url, secret: secret)
        case "apns":
            guard let token = body.channel.deviceToken, (16...200).contains(token.count),
                  token.allSatisfy({ $0.isHexDigit }) else {
                throw APIError(.badRequest, "an apns channel needs 'device-token' as 16-200 hex digits")
            }
            channel = .apns(deviceToken: token.lowercased())
        default:
            throw APIError(.badRequest, "unknown channel kind '\(body.channel.kind)' (stream, webhook or apns)")
        }
        let (device, token) = try await service.register(domain: body.domain, enrollment: enrollment, branch: branch,
                                                         replicated: body.replicated ?? false, channel: channel, name: name)
        return .json(RegistrationAnswer(device: device.id, token: token, expires: device.expires, webhookSecret: webhookSecret),
                     status: .created)
    }

    private func decode<T: Decodable>(_ type: T.Type, _ request: HTTPRequest) throws(APIError) -> T {
        do {
            return try JSONCoding.decode(type, from: Array(request.body.readableBytesView))
        } catch let DecodingError.keyNotFound(key, _) {
            throw APIError(.badRequest, "the JSON body lacks '\(key.stringValue)'")
        } catch let DecodingError.typeMismatch(_, context) {
            throw APIError(.badRequest, "'\(context.codingPath.map(\.stringValue).joined(separator: "."))' has the wrong type")
        } catch {
            throw APIError(.badRequest, "the body is not valid JSON")
        }
    }
}

// MARK: - bodies

struct RegistrationRequest: Decodable {
    struct Channel: Decodable {
        let kind: String
        let url: String?
        let secret: String?
        let deviceToken: String?

        enum CodingKeys: String, CodingKey {
            case kind, url, secret
            case deviceToken = "device-token"
        }
    }

    let domain: String
    /// The enrollment secret (`fprep serve enroll`).
    let enrollment: String?
    let branch: String?
    let replicated: Bool?
    let name: String?
    let channel: Channel
}

struct RegistrationAnswer: Encodable {
    let device: String
    let token: String
    let expires: Int64
    let webhookSecret: String?

    enum CodingKeys: String, CodingKey {
        case device, token, expires
        case webhookSecret = "webhook-secret"
    }
}

struct EnumeratorRequest: Decodable {
    let container: String
    let active: Bool
    /// Seconds the enumerator stays active unless renewed.
    let lifetime: Int64?
}

struct EnumeratorAnswer: Encodable {
    let container: String
    let active: Bool
    let expires: Int64?
}

struct DeviceAnswer: Encodable {
    let device: String
    let domain: String
    let branch: String
    let replicated: Bool
    let channel: String
    let expires: Int64
    let lastEventID: Int64
    let enumerators: [String]

    init(_ device: Device, enumerators: [String]) {
        self.device = device.id
        domain = device.domain
        branch = device.branch
        replicated = device.replicated
        channel = device.channel.kind
        expires = device.expires
        lastEventID = device.lastSeq
        self.enumerators = enumerators
    }

    enum CodingKeys: String, CodingKey {
        case device, domain, branch, replicated, channel, expires, enumerators
        case lastEventID = "last-event-id"
    }
}
