import Crypto
import FoundationEssentials
import FprepCore
import NIOHTTP1

/// What the service needs to send File Provider pushes through APNs: the
/// endpoint (`https://api.push.apple.com` in production, behind a TLS proxy
/// for this HTTP/1.1 client; a loopback sink in tests), the app's bundle
/// identifier, and the provider key (`.p8`, ES256) with its key and team ids.
public struct APNsConfiguration: Sendable {
    public let endpoint: ServiceURL
    public let bundleID: String
    public let keyID: String
    public let teamID: String
    let key: P256.Signing.PrivateKey

    /// Reads the `.p8` key (PEM, PKCS#8) from `keyFile`.
    public init(endpoint: String, bundleID: String, keyID: String, teamID: String, keyFile: String) throws {
        guard let url = ServiceURL(endpoint) else {
            throw FprepError(.usage, "'\(endpoint)' is not an http://HOST:PORT address for --apns-endpoint")
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
        self.endpoint = url
        self.bundleID = bundleID
        self.keyID = keyID
        self.teamID = teamID
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

    /// The request APNs expects for one device: `POST /3/device/TOKEN`.
    func request(deviceToken: String, payload: [UInt8], providerToken: String) -> ClientRequest {
        let headers: HTTPHeaders = [
            "authorization": "bearer \(providerToken)",
            "apns-topic": topic,
            "apns-push-type": "fileprovider",
            "content-type": "application/json",
        ]
        return ClientRequest(.POST, endpoint.with(path: "/3/device/\(deviceToken)"), headers: headers, body: payload)
    }

    private func jsonEscaped(_ text: String) -> String {
        let encoded = JSONCoding.encode([text])
        return String(decoding: encoded.dropFirst(2).dropLast(2), as: UTF8.self)
    }
}

/// The provider token in use: APNs wants one no older than an hour and
/// refreshed at most every 20 minutes, so it is reused for 40.
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

    /// Forgets the token after APNs called it expired.
    func invalidate() { current = nil }
}
