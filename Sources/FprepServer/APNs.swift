import Crypto
import FoundationEssentials
import FprepCore
import NIOHTTP1

/// What the service needs to send File Provider pushes through APNs: the
/// server (`api.push.apple.com:443`, or the sandbox's), the CA to trust
/// instead of the system's (tests), the app's bundle identifier, and the
/// provider key (`.p8`, ES256) with its key and team ids.
public struct APNsConfiguration: Sendable {
    /// APNs for apps from the App Store, TestFlight and ad hoc builds.
    public static let production = "api.push.apple.com:443"
    /// APNs for apps built for development (`--apns-sandbox`).
    public static let sandbox = "api.sandbox.push.apple.com:443"

    /// The APNs server's name (or address) and port.
    public let host: String
    public let port: Int
    /// A PEM file of CA certificates to trust instead of the system's.
    public let caFile: String?
    /// The app's bundle identifier (the topic is `BUNDLE.pushkit.fileprovider`).
    public let bundleID: String
    /// The provider key's id (the JWT's `kid`).
    public let keyID: String
    /// The developer team's id (the JWT's `iss`).
    public let teamID: String
    let key: P256.Signing.PrivateKey
    /// `apns-priority`. Apple's "Sending notification requests to APNs":
    /// 10 sends at once, 5 "based on power considerations on the user's
    /// device", and pushes that only wake the app in the background (as a
    /// File Provider signal does: the system calls `signalEnumerator`, the
    /// user sees nothing, seed 003) must use 5; 10 is refused for them.
    public var priority = 5
    /// `apns-expiration`, seconds from sending: APNs keeps the push this
    /// long for a device that is offline (it keeps only the last one per
    /// app, which is all a signal needs: the sync catches up everything).
    public var expiration: Int64 = 3600

    /// Reads the `.p8` key (PEM, PKCS#8) from `keyFile`; `server` is
    /// `HOST[:PORT]` (port 443 when left out).
    public init(server: String = APNsConfiguration.production, caFile: String? = nil, bundleID: String, keyID: String,
                teamID: String, keyFile: String) throws {
        guard let (host, port) = Self.hostAndPort(server) else {
            throw FprepError(.usage, "'\(server)' is not HOST[:PORT] for --apns-host (e.g. api.push.apple.com:443)")
        }
        guard !bundleID.isEmpty, !keyID.isEmpty, !teamID.isEmpty else {
            throw FprepError(.usage, "--apns-bundle-id, --apns-key-id and --apns-team-id must not be empty")
        }
        guard let pem = FileManager.default.contents(atPath: keyFile) else {
            throw FprepError(.usage, "cannot read the APNs key '\(keyFile)'")
        }
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: String(decoding: pem, as: UTF8.self))
        } catch {
            throw FprepError(.usage, "'\(keyFile)' is not a P-256 private key in PEM (an APNs .p8 key)")
        }
        if let caFile, !FileManager.default.fileExists(atPath: caFile) {
            throw FprepError(.usage, "cannot read the CA file '\(caFile)' for --apns-ca")
        }
        self.host = host
        self.port = port
        self.caFile = caFile
        self.bundleID = bundleID
        self.keyID = keyID
        self.teamID = teamID
    }

    /// `host`, `host:port`, `[v6]:port` → host and port (443 by default).
    static func hostAndPort(_ text: String) -> (String, Int)? {
        guard !text.isEmpty, !text.contains("/"), !text.contains(" "), !text.contains("@") else { return nil }
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            let host = String(text[text.index(after: text.startIndex)..<close])
            let rest = text[text.index(after: close)...]
            if rest.isEmpty { return (host, 443) }
            guard rest.hasPrefix(":"), let port = Int(rest.dropFirst()), (1...65535).contains(port) else { return nil }
            return (host, port)
        }
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        switch parts.count {
        case 1: return (text, 443)
        case 2:
            guard !parts[0].isEmpty, let port = Int(parts[1]), (1...65535).contains(port) else { return nil }
            return (String(parts[0]), port)
        default: return nil
        }
    }

    /// `BUNDLE.pushkit.fileprovider`, the topic of File Provider pushes.
    public var topic: String { bundleID + ".pushkit.fileprovider" }

    /// A provider authentication token: a JWT with header `{"alg":"ES256","kid":KEY}`
    /// and claims `{"iss":TEAM,"iat":NOW}`, signed with the key (raw r‖s).
    public func providerToken(issuedAt: Int64) -> String {
        let header = JSONCoding.encode(["alg": "ES256", "kid": keyID])
        let claims = Array(#"{"iat":\#(issuedAt),"iss":"\#(jsonEscaped(teamID))"}"#.utf8)
        let signingInput = Signing.base64URL(header) + "." + Signing.base64URL(claims)
        let signature = (try? key.signature(for: Array(signingInput.utf8)).rawRepresentation) ?? Data()
        return signingInput + "." + Signing.base64URL(Array(signature))
    }

    /// The headers of a push to one device (`POST /3/device/TOKEN`), as
    /// seed 003 and Apple's "Sending notification requests to APNs" give
    /// them. No `apns-id`: APNs makes one and answers it.
    func headers(providerToken: String, now: Int64) -> HTTPHeaders {
        [
            "authorization": "bearer \(providerToken)",
            "apns-topic": topic,
            "apns-push-type": "fileprovider",
            "apns-priority": String(priority),
            "apns-expiration": String(now + expiration),
            "content-type": "application/json",
        ]
    }

    private func jsonEscaped(_ text: String) -> String {
        let encoded = JSONCoding.encode([text])
        return String(decoding: encoded.dropFirst(2).dropLast(2), as: UTF8.self)
    }
}

/// The provider token in use: APNs refuses one older than an hour
/// (ExpiredProviderToken) and one refreshed more often than every 20
/// minutes (TooManyProviderTokenUpdates), so it is reused for 40.
actor ProviderTokenCache {
    private let configuration: APNsConfiguration
    private var current: (token: String, issued: Int64)?

    init(_ configuration: APNsConfiguration) { self.configuration = configuration }

    func token(now: Int64 = wallClockNow()) -> String {
        if let current, now - current.issued < 40 * 60 { return current.token }
        let token = configuration.providerToken(issuedAt: now)
        current = (token, now)
        return token
    }

    /// Forgets `token` after APNs called it expired; a newer one made
    /// meanwhile (another device's push saw the same answer) is kept, so
    /// that many answers at once make one new token, not one each.
    func invalidate(_ token: String) {
        if current?.token == token { current = nil }
    }
}
