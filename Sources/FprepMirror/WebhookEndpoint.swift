import FoundationEssentials
import FprepCore
import FprepGit
import FprepServer
import NIOHTTP1

/// `POST /v1/webhook`: the host's deliveries. Answers at once and never
/// fetches while the host waits (GitHub gives up after 10 s):
///
/// | delivery | answer |
/// | --- | --- |
/// | signature or token wrong or missing | 401, logged |
/// | a push (any ref; only branches signal) | 202, a pass queued |
/// | a delivery id seen before | 200, nothing done |
/// | GitHub's ping | 200 |
/// | any other event | 202, ignored, logged |
/// | no host's event header, or an unreadable push body | 400 |
struct WebhookEndpoint: Sendable {
    static let path = "/v1/webhook"

    let verifier: WebhookVerifier
    let store: MirrorStore
    let worker: MirrorWorker
    let log: @Sendable (String) -> Void

    func handle(_ request: HTTPRequest) -> HTTPResponse {
        guard request.method == .POST else {
            return .error(.methodNotAllowed, "\(request.method) is not allowed on \(Self.path) (the host POSTs its webhook)")
        }
        let delivery: WebhookDelivery
        switch verifier.verify(headers: request.headers, body: Array(request.body.readableBytesView)) {
        case .success(let verified):
            delivery = verified
        case .failure(.unauthorized(let reason)):
            log("webhook from \(request.client) refused: \(reason)")
            return .error(.unauthorized, reason)
        case .failure(.malformed(let reason)):
            log("webhook from \(request.client) refused: \(reason)")
            return .error(.badRequest, reason)
        }
        let name = "\(delivery.host.rawValue) delivery \(delivery.id ?? "(no id)")"
        switch delivery.kind {
        case .ping:
            return .json(["status": "pong"])
        case .other(let event):
            log("\(name): event '\(event)' ignored (the mirror takes push events)")
            return .json(["status": "ignored"], status: .accepted)
        case .push(let ref, _, let after):
            if let id = delivery.id {
                do {
                    guard try store.firstDelivery(id, host: delivery.host, at: Int64(Date().timeIntervalSince1970)) else {
                        log("\(name): received before; nothing to do")
                        return .json(["status": "already received"])
                    }
                } catch {
                    // Without the record a redelivery does one more pass,
                    // which finds nothing new: harmless.
                    log("\(name): cannot record the delivery: \(error)")
                }
            }
            let commit = ObjectID(hex: after).flatMap { $0.isZero ? nil : $0 }
            worker.request(expecting: ref.hasPrefix("refs/heads/") ? commit : nil)
            log("\(name): push to \(ref), fetch queued")
            return .json(["status": "queued"], status: .accepted)
        }
    }
}
