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
