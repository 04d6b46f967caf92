import FoundationEssentials
import Glibc

/// An item identifier: the item's path relative to the replica root, as
/// bytes, '/'-separated, no leading '/'; the root is the empty path. Bytes,
/// not `String`: git names need not be UTF-8, and two names that Swift finds
/// equal (Unicode normalization) can be two different items.
public struct RepoPath: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init(bytes: [UInt8]) { self.bytes = bytes }

    public init(_ string: String) { bytes = Array(string.utf8) }

    public static let root = RepoPath(bytes: [])

    public var isRoot: Bool { bytes.isEmpty }

    /// The last component (the file name); empty for the root.
    public var name: [UInt8] {
        guard let slash = bytes.lastIndex(of: 0x2F) else { return bytes }
        return Array(bytes[(slash + 1)...])
    }

    /// The containing folder; the root's parent is the root.
    public var parent: RepoPath {
        guard let slash = bytes.lastIndex(of: 0x2F) else { return .root }
        return RepoPath(bytes: Array(bytes[..<slash]))
    }

    public var components: [[UInt8]] {
        bytes.split(separator: 0x2F, omittingEmptySubsequences: true).map(Array.init)
    }

    public func appending(_ name: [UInt8]) -> RepoPath {
        isRoot ? RepoPath(bytes: name) : RepoPath(bytes: bytes + [0x2F] + name)
    }

    /// The folders above this path, nearest first, the root excluded.
    public var ancestors: [RepoPath] {
        var result: [RepoPath] = []
        var current = parent
        while !current.isRoot {
            result.append(current)
            current = current.parent
        }
        return result
    }

    /// Whether `self` is `other` or lies below it.
    public func isWithin(_ other: RepoPath) -> Bool {
        if other.isRoot || self == other { return true }
        return bytes.count > other.bytes.count && bytes.starts(with: other.bytes) && bytes[other.bytes.count] == 0x2F
    }

    /// The item identifier as text: the path itself when it is UTF-8, else
    /// `%b64:` and the bytes in URL-safe base64, so that two paths which
    /// differ only in bytes that are not UTF-8 keep two identifiers, and an
    /// identifier always leads back to its item. A UTF-8 path that itself
    /// starts with `%b64:` is encoded too: one identifier, one item.
    public var description: String {
        if let text = String(validating: bytes, as: UTF8.self), !text.hasPrefix(Self.binaryPrefix) { return text }
        return Self.binaryPrefix + Data(bytes).base64EncodedString()
            .replacingAll("+", with: "-").replacingAll("/", with: "_")
            .replacingAll("=", with: "")
    }

    static let binaryPrefix = "%b64:"

    /// The path an identifier in the encoded form names; nil when
    /// `identifier` is not one `description` makes (a plain path that
    /// happens to start with `%b64:`, say).
    public init?(encodedIdentifier identifier: String) {
        guard identifier.hasPrefix(Self.binaryPrefix) else { return nil }
        var base64 = String(identifier.dropFirst(Self.binaryPrefix.count))
            .replacingAll("-", with: "+").replacingAll("_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64) else { return nil }
        let path = RepoPath(bytes: Array(data))
        guard path.description == identifier else { return nil }
        self = path
    }

    /// The path an identifier names (the inverse of `description`).
    public init(identifier: String) {
        if let path = RepoPath(encodedIdentifier: identifier) {
            self = path
        } else {
            self.init(identifier)
        }
    }

    public static func < (lhs: RepoPath, rhs: RepoPath) -> Bool {
        lhs.bytes.lexicographicallyPrecedes(rhs.bytes)
    }
}

/// The identifiers File Provider uses for its special containers; fprep uses
/// the same literal strings so payloads interoperate with Apple clients.
public enum ContainerIdentifier {
    public static let root = "NSFileProviderRootContainerItemIdentifier"
    public static let workingSet = "NSFileProviderWorkingSetContainerItemIdentifier"
    public static let trash = "NSFileProviderTrashContainerItemIdentifier"

    /// The identifier of a folder: its path, or the root's literal.
    public static func of(_ path: RepoPath) -> String {
        path.isRoot ? root : path.description
    }
}

/// Checks the names in a remote tree before anything is written: a name that
/// could escape the replica, or write into git's or fprep's own state, or
/// that a checkout on another system would read as `.git`, is refused, as
/// git's `verify_path` does (CVE-2014-9390, CVE-2021-21300).
public enum EntryNameCheck {
    /// Why `name` is refused, or nil when it is a safe name.
    public static func problem(with name: [UInt8]) -> String? {
        if name.isEmpty { return "an empty name" }
        if name == [0x2E] || name == [0x2E, 0x2E] { return "a name that points outside its folder" }
        if name.contains(0x2F) { return "a name containing '/'" }
        if name.contains(0) { return "a name containing NUL" }
        // NAME_MAX: no file system here takes a longer name.
        if name.count > maxNameLength { return "a name longer than \(maxNameLength) bytes" }
        // Most names need no folding (a clone checks 10^6 twice).
        if let first = name.first, !mayFoldToReserved(first: first) { return nil }
        let folded = foldedForComparison(name)
        for reserved in ["git", "fprep"] {
            let dotted = Array(("." + reserved).utf8)
            if folded == dotted { return "a name reserved for \(reserved)'s own state" }
        }
        // NTFS 8.3 short name of ".git".
        if folded == Array("git~1".utf8) { return "a name reserved for git's own state" }
        return nil
    }

    /// Whether a name starting with `first` may fold to a reserved name:
    /// not one that starts with an ASCII byte other than '.', 'g' and 'G'
    /// (the code points folding drops are not ASCII).
    static func mayFoldToReserved(first: UInt8) -> Bool {
        first >= 0x80 || first == 0x2E || first == 0x67 || first == 0x47
    }

    /// The longest name a file may have (Linux's NAME_MAX), in bytes.
    public static let maxNameLength = 255

    /// Lowercases ASCII, drops trailing dots and spaces (NTFS) and the
    /// zero-width code points HFS+ ignores, so every spelling of `.git` that
    /// some file system would treat as `.git` compares equal to it.
    static func foldedForComparison(_ name: [UInt8]) -> [UInt8] {
        if name.allSatisfy({ $0 < 0x80 }) {
            // ASCII: the same folding without a String.
            var end = name.count
            while end > 0, name[end - 1] == 0x2E || name[end - 1] == 0x20 { end -= 1 }
            return name[..<end].map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }
        }
        return foldedAsText(name)
    }

    /// The folding, done on the name as Unicode text.
    static func foldedAsText(_ name: [UInt8]) -> [UInt8] {
        var text = String(decoding: name, as: UTF8.self).unicodeScalars.filter { scalar in
            !ignorableScalars.contains(scalar.value)
        }.map { Character($0) }
        while let last = text.last, last == "." || last == " " { text.removeLast() }
        return Array(String(text).lowercased().utf8)
    }

    static let ignorableScalars: Set<UInt32> = [
        0x200C, 0x200D, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E,
        0x206A, 0x206B, 0x206C, 0x206D, 0x206E, 0x206F, 0xFEFF,
    ]
}
