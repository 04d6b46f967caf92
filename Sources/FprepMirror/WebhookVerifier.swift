import Crypto
import FoundationEssentials
import FprepGit
import FprepPush
import FprepServer
import NIOHTTP1

/// Why a delivery is turned away.
public enum WebhookRejection: Error, Sendable, Equatable {
    /// No valid signature or token (401).
    case unauthorized(String)
    /// Signed, but not a body or headers this mirror can read (400).
    case malformed(String)
}

/// Checks one webhook delivery against the secret shared with the host and
/// reads what it says. Each host proves the secret its own way, always over
/// the raw body as received (re-encoded JSON would not match):
///
/// | host | event header | signature | delivery id |
/// | --- | --- | --- | --- |
/// | GitHub | `X-GitHub-Event` | `X-Hub-Signature-256: sha256=HEX` (HMAC-SHA256) | `X-GitHub-Delivery` |
/// | GitLab | `X-Gitlab-Event` | `X-Gitlab-Token`: the secret itself | `Idempotency-Key`, else `X-Gitlab-Event-UUID` |
/// | Gitea, Forgejo | `X-Gitea-Event`, `X-Forgejo-Event` | `X-Gitea-Signature`, `X-Forgejo-Signature`: HEX (HMAC-SHA256) | `X-Gitea-Delivery`, `X-Forgejo-Delivery` |
///
/// Gitea sends GitHub's headers too, so it is recognised first.
public struct WebhookVerifier: Sendable {
    private let key: SymmetricKey
    private let secretDigest: String

    public init(secret: String) {
        key = SymmetricKey(data: Array(secret.utf8))
        secretDigest = Signing.sha256Hex(secret)
    }

    /// The verified delivery, or why it is refused.
    public func verify(headers: HTTPHeaders, body: [UInt8]) -> Result<WebhookDelivery, WebhookRejection> {
        let host: WebhookHost, event: String, id: String?
        if let name = headers.first(name: "x-forgejo-event") ?? headers.first(name: "x-gitea-event") {
            host = .gitea
            event = name
            id = headers.first(name: "x-forgejo-delivery") ?? headers.first(name: "x-gitea-delivery")
            guard let signature = headers.first(name: "x-forgejo-signature") ?? headers.first(name: "x-gitea-signature"),
                  validMAC(hex: signature, body: body) else {
                return .failure(.unauthorized("the Gitea/Forgejo signature (X-Gitea-Signature) does not match the secret"))
            }
        } else if let name = headers.first(name: "x-gitlab-event") {
            host = .gitlab
            event = name
            // Idempotency-Key (GitLab 17.4 and later) is the one kept the same
            // on a retry of a delivery; the event's UUID before that.
            id = headers.first(name: "idempotency-key") ?? headers.first(name: "x-gitlab-event-uuid")
            // Hashed first, so that the comparison's time says nothing of
            // the secret's length either.
            guard let token = headers.first(name: "x-gitlab-token"),
                  Signing.constantTimeEqual(Signing.sha256Hex(token), secretDigest) else {
                return .failure(.unauthorized("the GitLab token (X-Gitlab-Token) does not match the secret"))
            }
        } else if let name = headers.first(name: "x-github-event") {
            host = .github
            event = name
            id = headers.first(name: "x-github-delivery")
            guard let signature = headers.first(name: "x-hub-signature-256"), signature.hasPrefix("sha256="),
                  validMAC(hex: String(signature.dropFirst(7)), body: body) else {
                return .failure(.unauthorized("the GitHub signature (X-Hub-Signature-256) does not match the secret"))
            }
        } else {
            return .failure(.malformed("no X-GitHub-Event, X-Gitlab-Event, X-Gitea-Event or X-Forgejo-Event header"))
        }
        let kind: WebhookDelivery.Kind
        switch (host, event) {
        case (.github, "push"), (.gitlab, "Push Hook"), (.gitea, "push"):
            guard let push = try? JSONCoding.decode(PushEventBody.self, from: body) else {
                return .failure(.malformed("the \(host.rawValue) push event's body lacks 'ref', 'before' or 'after'"))
            }
            if host == .gitlab, push.objectKind != "push" {
                kind = .other("Push Hook (object_kind \(push.objectKind ?? "missing"))")
            } else {
                guard Self.isObjectID(push.before), Self.isObjectID(push.after) else {
                    return .failure(.malformed("the push event's 'before' and 'after' are not 40-digit commit ids"))
                }
                kind = .push(ref: push.ref, before: push.before.lowercased(), after: push.after.lowercased())
            }
        case (.github, "ping"):
            kind = .ping
        default:
            kind = .other(event)
        }
        let cleanID = id.map { String($0.prefix(200)) }.flatMap { $0.isEmpty ? nil : $0 }
        return .success(WebhookDelivery(host: host, id: cleanID, kind: kind))
    }

    /// Whether `hex` is the HMAC-SHA256 of `body` under the secret; swift-crypto
    /// compares in constant time.
    private func validMAC(hex: String, body: [UInt8]) -> Bool {
        guard let mac = Hex.decode(hex), mac.count == SHA256.byteCount else { return false }
        return HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: body, using: key)
    }

    private static func isObjectID(_ text: String) -> Bool {
        text.utf8.count == 40 && text.allSatisfy(\.isHexDigit)
    }
}
