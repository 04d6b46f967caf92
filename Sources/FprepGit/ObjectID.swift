import CLibGit2

/// A git object id (SHA-1, 20 bytes); wraps `git_oid`.
public struct ObjectID: Hashable, Comparable, Sendable, CustomStringConvertible {
    var raw: git_oid

    init(_ raw: git_oid) { self.raw = raw }

    /// Parses 40 hex digits; nil for anything else.
    public init?(hex: String) {
        guard hex.utf8.count == 40, hex.utf8.allSatisfy({ $0.isHexDigit }) else { return nil }
        var oid = git_oid()
        guard git_oid_fromstrn(&oid, hex, 40) == 0 else { return nil }
        raw = oid
    }

    /// Parses 40 hex digits given as ASCII bytes, without making a String.
    public init?(hexBytes: UnsafeRawBufferPointer) {
        guard hexBytes.count == 40 else { return nil }
        var raw = git_oid()
        let ok = withUnsafeMutableBytes(of: &raw.id) { out -> Bool in
            for i in 0..<20 {
                guard let high = Hex.nibble(hexBytes[2 * i]), let low = Hex.nibble(hexBytes[2 * i + 1]) else { return false }
                out[i] = high << 4 | low
            }
            return true
        }
        guard ok else { return nil }
        self.raw = raw
    }

    /// The 20 raw bytes.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 20 else { return nil }
        var oid = git_oid()
        _ = bytes.withUnsafeBufferPointer { git_oid_fromraw(&oid, $0.baseAddress) }
        raw = oid
    }

    /// The all-zero id git uses for "no object" in hook input.
    public static let zero = ObjectID(git_oid())

    public var isZero: Bool { bytes.allSatisfy { $0 == 0 } }

    /// The id of the empty tree, which exists in every repository.
    public static let emptyTree = ObjectID(hex: "4b825dc642cb6eb9a060e54bf8d69288fbee4904")!

    public var bytes: [UInt8] {
        withUnsafeBytes(of: raw.id) { Array($0) }
    }

    /// The id's first two bytes as a number (0–65535): where a table
    /// sorted by id starts looking, ids being evenly spread.
    public var leadingBits16: Int { Int(raw.id.0) << 8 | Int(raw.id.1) }

    public var hex: String {
        var buffer = [UInt8](repeating: 0, count: 40)
        var copy = raw
        buffer.withUnsafeMutableBufferPointer { out in
            out.baseAddress!.withMemoryRebound(to: CChar.self, capacity: 40) { _ = git_oid_fmt($0, &copy) }
        }
        return String(decoding: buffer, as: UTF8.self)
    }

    public var description: String { hex }

    // Compared here as three big-endian numbers (byte order, as
    // `git_oid_cmp`), not through a call into libgit2 that the compiler
    // cannot inline: a clone sorts and searches 10^6 ids.
    public static func == (lhs: ObjectID, rhs: ObjectID) -> Bool { lhs.words == rhs.words }

    public static func < (lhs: ObjectID, rhs: ObjectID) -> Bool { lhs.words < rhs.words }

    @inline(__always) private var words: (UInt64, UInt64, UInt32) {
        withUnsafeBytes(of: raw.id) { bytes in
            (UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
             UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self)),
             UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: 16, as: UInt32.self)))
        }
    }

    public func hash(into hasher: inout Hasher) {
        withUnsafeBytes(of: raw.id) { hasher.combine(bytes: $0) }
    }
}

extension UInt8 {
    var isHexDigit: Bool {
        (0x30...0x39).contains(self) || (0x61...0x66).contains(self) || (0x41...0x46).contains(self)
    }
}
