import Crypto
import FoundationEssentials

/// The hashes and signatures of the push side.
public enum Signing {
    /// The webhook signature header's value (`x-fprep-signature`): `sha256=`
    /// and the hex HMAC-SHA256, keyed with the device's webhook secret, of
    /// `TIMESTAMP.DELIVERY.BODY`: the `x-fprep-timestamp` value (seconds
    /// since 1970, decimal), a dot, the `x-fprep-delivery` value, a dot, and
    /// the body's bytes as sent. Signing the time and the id lets a receiver
    /// refuse a captured delivery replayed later (too old, or an id it saw).
    public static func webhookSignature(timestamp: Int64, delivery: String, body: [UInt8], secret: String) -> String {
        let signed = Array("\(timestamp).\(delivery).".utf8) + body
        let mac = HMAC<SHA256>.authenticationCode(for: signed, using: SymmetricKey(data: Array(secret.utf8)))
        return "sha256=" + hex(Array(mac))
    }

    /// SHA-256 as hex (tokens are stored as their hash).
    public static func sha256Hex(_ text: String) -> String {
        hex(Array(SHA256.hash(data: Array(text.utf8))))
    }

    /// Compares two strings in time that does not depend on where they
    /// differ (only a length difference shows; hashes have one length).
    public static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        guard x.count == y.count else { return false }
        var difference: UInt8 = 0
        for index in x.indices { difference |= x[index] ^ y[index] }
        return difference == 0
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// base64url without padding, as JWTs use it.
    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacing("+", with: "-").replacing("/", with: "_").replacing("=", with: "")
    }
}
