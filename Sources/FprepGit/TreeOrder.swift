import Glibc

/// git's order of one tree's entries: by name, byte by byte, a folder's
/// name as if it ended in '/'. The tree diff walks two trees by it and the
/// layout's walk checks a tree against it; both find two entries of one
/// name by it (`sortsBetween`).
public enum TreeOrder {
    /// Below, at or above 0 as the entry named `a` sorts before, with or
    /// after the one named `b` (names are not empty).
    public static func compare(_ a: UnsafeBufferPointer<UInt8>, folder aIsFolder: Bool,
                               _ b: UnsafeBufferPointer<UInt8>, folder bIsFolder: Bool) -> Int32 {
        let common = min(a.count, b.count)
        if common > 0, let x = a.baseAddress, let y = b.baseAddress {
            let byBytes = memcmp(x, y, common)
            if byBytes != 0 { return byBytes }
        }
        // After the shared bytes: the next byte, '/' for a folder's end, 0
        // (no name holds it) for another entry's.
        let next = a.count > common ? Int32(a[common]) : (aIsFolder ? 0x2F : 0)
        let otherNext = b.count > common ? Int32(b[common]) : (bIsFolder ? 0x2F : 0)
        return next - otherNext
    }

    /// Whether the entry `other` sorts between a non-folder named `name`
    /// and the folder of that name: it starts with `name`, then a byte
    /// below '/'. Only such names part two entries of one name in a tree in
    /// git's order.
    public static func sortsBetween(_ other: UnsafeBufferPointer<UInt8>, fileAndFolderNamed name: UnsafeBufferPointer<UInt8>) -> Bool {
        guard other.count > name.count, other[name.count] < 0x2F else { return false }
        guard let x = other.baseAddress, let y = name.baseAddress else { return true }
        return memcmp(x, y, name.count) == 0
    }
}
