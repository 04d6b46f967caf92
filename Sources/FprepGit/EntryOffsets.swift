import Glibc

/// Where every entry of an index file fprep wrote starts, kept in a file of
/// its own beside the index (`.git/fprep-index-offsets`), so a reader finds
/// entry N without walking the N before it.
///
/// It lives outside the index because git prints "ignoring … extension"
/// for an extension it does not know, on every command in the replica. The
/// file names the checksum of the index it describes: once anything else
/// writes the index (git does, on `git add`, `git status`, `git reset`), the
/// checksums differ and the entries are walked, as git would.
///
/// Layout: "FPOF", version (1), the index's 20-byte checksum, the entry
/// count, then one offset per entry; all numbers 32-bit big-endian.
enum EntryOffsets {
    static let magic = Array("FPOF".utf8)
    static let version: UInt32 = 1
    static let headerSize = 4 + 4 + 20 + 4
    /// The smallest index entry: 62 bytes, a one-byte path, its NUL.
    static let minimumEntry = 64

    static func path(beside indexPath: String) -> String {
        guard let slash = indexPath.lastIndex(of: "/") else { return "fprep-index-offsets" }
        return String(indexPath[...slash]) + "fprep-index-offsets"
    }

    /// Writes the table (a temporary, then a rename); a failure only costs
    /// the next reader a walk of the entries, so it is not reported.
    static func write(_ offsets: [UInt32], indexChecksum: [UInt8], table target: String) {
        guard indexChecksum.count == 20 else { unlink(target); return }
        var bytes = magic
        bytes.reserveCapacity(headerSize + 4 * offsets.count)
        append(&bytes, version)
        bytes += indexChecksum
        append(&bytes, UInt32(offsets.count))
        for offset in offsets { append(&bytes, offset) }
        // Never a table that may describe another file.
        if !CacheFile.replace(target, with: bytes) { unlink(target) }
    }

    /// The offsets recorded for `file` (the mapped index at its path), when
    /// the table names this file's checksum and fits it: every offset on an
    /// entry boundary (12 + a multiple of 8), after the one before by at
    /// least the smallest entry, the last entry ending where the checksum
    /// starts (`end`: fprep writes no extensions). Otherwise nil.
    static func read(table: String, for file: IndexStorage, entries: Int, end: Int) -> [Int32]? {
        let fd = open(table, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        let expected = headerSize + 4 * entries
        var info = stat()
        guard fstat(fd, &info) == 0, Int(info.st_size) == expected else { return nil }
        // Mapped, not read into a buffer: at 10^6 entries the table is 4 MB,
        // and a zeroed copy of it cost `changes` several milliseconds.
        guard let map = mmap(nil, expected, PROT_READ, MAP_PRIVATE, fd, 0), map != MAP_FAILED else { return nil }
        defer { munmap(map, expected) }
        let table = UnsafeRawPointer(map)
        func u32(_ at: Int) -> UInt32 { UInt32(bigEndian: table.loadUnaligned(fromByteOffset: at, as: UInt32.self)) }
        guard memcmp(table, magic, 4) == 0, u32(4) == version, Int(u32(28)) == entries,
              end + 20 == file.count, memcmp(file.base + end, table + 8, 20) == 0 else { return nil }
        var valid = true
        let offsets = [Int32](unsafeUninitializedCapacity: entries) { buffer, initialized in
            var previous = 12 - minimumEntry
            for i in 0..<entries {
                let offset = Int(u32(headerSize + 4 * i))
                guard offset % 8 == 4, offset >= previous + minimumEntry, offset <= end - minimumEntry, i > 0 || offset == 12 else {
                    valid = false
                    break
                }
                buffer[i] = Int32(offset)
                previous = offset
                initialized = i + 1
            }
        }
        guard valid else { return nil }
        if let last = offsets.last, Int(last) + file.entrySize(at: Int(last)) != end { return nil }
        if entries == 0, end != 12 { return nil }
        return offsets
    }

    /// After the index was written in place (its entries where they were):
    /// the table, when it named the `old` checksum, names the `new` one. A
    /// table left naming another checksum is not read (the entries are
    /// walked instead), so a failure here only costs speed.
    static func replaceChecksum(beside indexPath: String, old: [UInt8], new: [UInt8]) {
        guard old.count == 20, new.count == 20 else { return }
        let fd = open(path(beside: indexPath), O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var named = [UInt8](repeating: 0, count: 20)
        guard named.withUnsafeMutableBytes({ pread(fd, $0.baseAddress, 20, 8) }) == 20, named == old else { return }
        _ = new.withUnsafeBytes { pwrite(fd, $0.baseAddress, 20, 8) }
    }

    /// Whether the table beside `indexPath` names the index file's
    /// current checksum: fprep wrote the index as it is now.
    static func describes(indexPath: String) -> Bool {
        var header = [UInt8](repeating: 0, count: 28)
        let table = open(path(beside: indexPath), O_RDONLY | O_CLOEXEC)
        guard table >= 0 else { return false }
        defer { close(table) }
        guard pread(table, &header, 28, 0) == 28, Array(header[0..<4]) == magic, u32(header, 4) == version else { return false }
        let index = open(indexPath, O_RDONLY | O_CLOEXEC)
        guard index >= 0 else { return false }
        defer { close(index) }
        var info = stat()
        guard fstat(index, &info) == 0, info.st_size >= 32 else { return false }
        var checksum = [UInt8](repeating: 0, count: 20)
        guard pread(index, &checksum, 20, info.st_size - 20) == 20 else { return false }
        return checksum == Array(header[8..<28])
    }

    /// A 32-bit big-endian number appended (the layout of fprep's tables beside the index).
    static func append(_ bytes: inout [UInt8], _ value: UInt32) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }

    /// The 32-bit big-endian number at `at`.
    static func u32(_ bytes: [UInt8], _ at: Int) -> UInt32 {
        (UInt32(bytes[at]) << 24) | (UInt32(bytes[at + 1]) << 16) | (UInt32(bytes[at + 2]) << 8) | UInt32(bytes[at + 3])
    }
}
