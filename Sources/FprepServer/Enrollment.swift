import FoundationEssentials
import FprepPush

/// A per-domain enrollment: the credential a device shows to register
/// (`fprep serve enroll` mints one). Only the secret's SHA-256 is stored;
/// the secret is printed once. Any number of devices may register with it
/// until it expires or is revoked; a device keeps it to register anew when
/// its token expires.
public struct Enrollment: Sendable, Equatable {
    /// `enr-` and 16 hex digits; the part of the secret before the dot.
    public let id: String
    public let domain: String
    /// SHA-256 of the secret's random part, hex.
    package let secretHash: String
    /// Seconds since 1970.
    public let created: Int64
    /// Seconds since 1970; nil: valid until revoked.
    public let expires: Int64?
    /// When it was revoked; nil while valid.
    public let revoked: Int64?

    package init(id: String, domain: String, secretHash: String, created: Int64, expires: Int64?, revoked: Int64?) {
        self.id = id
        self.domain = domain
        self.secretHash = secretHash
        self.created = created
        self.expires = expires
        self.revoked = revoked
    }

    /// Why it cannot register a device at `now`, or nil when it can.
    func refusal(at now: Int64) -> String? {
        if revoked != nil { return "the enrollment secret \(id) was revoked" }
        if let expires, expires <= now { return "the enrollment secret \(id) expired" }
        return nil
    }
}

/// The text of an enrollment secret: `ID.RANDOM`, e.g.
/// `enr-1a2b3c4d5e6f7081.` and 64 hex digits. The id finds the record; the
/// random part is checked against its hash in constant time, so the lookup
/// never depends on the secret's value.
public struct EnrollmentSecret: Sendable, Equatable {
    public let id: String
    let random: String

    /// A new secret with a new id.
    static func make() -> EnrollmentSecret {
        EnrollmentSecret(id: "enr-" + Token.random(bytes: 8), random: Token.random())
    }

    private init(id: String, random: String) {
        self.id = id
        self.random = random
    }

    /// Parses `ID.RANDOM`; nil for anything else.
    public init?(_ text: String) {
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, Self.isID(String(parts[0])), (32...128).contains(parts[1].utf8.count),
              parts[1].allSatisfy(\.isHexDigit) else { return nil }
        id = String(parts[0])
        random = String(parts[1])
    }

    /// Whether `text` has the shape of an enrollment id.
    public static func isID(_ text: String) -> Bool {
        text.hasPrefix("enr-") && text.utf8.count == 20 && text.dropFirst(4).allSatisfy(\.isHexDigit)
    }

    /// What is stored for it.
    var hash: String { Signing.sha256Hex(random) }

    /// Whether this secret is the one `enrollment` was minted with
    /// (hashes compared in constant time).
    func matches(_ enrollment: Enrollment) -> Bool {
        id == enrollment.id && Signing.constantTimeEqual(hash, enrollment.secretHash)
    }

    /// The secret as the admin hands it to a device.
    public var text: String { id + "." + random }
}
