/// Sizes as git's config writes them: `65536`, `64k`, `500m`, `20g`, `1t`
/// (any case, spaces ignored). One reading for every fprep setting that
/// takes bytes (the disk budget, the agent's read-ahead, the gc threshold).
public enum ByteSize {
    /// The bytes `text` says; nil when it is not a size (or overflows).
    public static func parse(_ text: String) -> Int64? {
        var digits = Array(text.utf8).filter { $0 != 0x20 && $0 != 0x09 }
        var scale: Int64 = 1
        if let last = digits.last, let shift = [UInt8(ascii: "k"): 10, UInt8(ascii: "m"): 20, UInt8(ascii: "g"): 30, UInt8(ascii: "t"): 40][last | 0x20] {
            scale = 1 << Int64(shift)
            digits.removeLast()
        }
        guard !digits.isEmpty, digits.count <= 18, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        var value: Int64 = 0
        for digit in digits {
            let (times, overflow) = value.multipliedReportingOverflow(by: 10)
            guard !overflow else { return nil }
            value = times + Int64(digit - 0x30)
        }
        let (product, overflow) = value.multipliedReportingOverflow(by: scale)
        return overflow ? nil : product
    }
}
