/// Small text helpers that Foundation's full library would otherwise be
/// linked for (its start-up cost is paid by every command).
extension StringProtocol {
    /// Without leading and trailing spaces, tabs and line breaks.
    public var trimmed: String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard let start = firstIndex(where: { !isSpace($0) }), let end = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[start...end])
    }
}

extension String {
    /// Every `target` replaced by `replacement`.
    public func replacingAll(_ target: String, with replacement: String) -> String {
        replacing(target, with: replacement)
    }
}

/// Hex digits (either case) to bytes, the one decoder for object ids,
/// the agent link's paths and webhook signatures.
public enum Hex {
    /// The value of one ASCII hex digit, nil for anything else.
    @inline(__always)
    public static func nibble(_ digit: UInt8) -> UInt8? {
        switch digit {
        case 0x30...0x39: digit - 0x30
        case 0x61...0x66: digit - 0x61 + 10
        case 0x41...0x46: digit - 0x41 + 10
        default: nil
        }
    }

    /// The bytes of an even run of hex digits; nil for an odd count or a
    /// character that is no digit.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = nibble(digits[index]), let low = nibble(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }
}
