import CFprepSys
import FoundationEssentials
import FprepGit
import Glibc

/// What the last scan found in each folder that the index does not have,
/// with what made that answer true: the folder's dates and inode, and a
/// hash of the names the index has in it. While all of them are the same,
/// the folder's names are not read again (git's untracked cache does the
/// same). Kept in `.fprep/untracked-cache`; a file that is missing or
/// unreadable only means every folder is read once more.
struct UntrackedCache {
    struct Stamp: Equatable {
        var mtime: Int64
        var mtimeNanoseconds: Int64
        var ctime: Int64
        var ctimeNanoseconds: Int64
        var inode: UInt64
        var indexNames: UInt64

        init(mtime: Int64, mtimeNanoseconds: Int64, ctime: Int64, ctimeNanoseconds: Int64, inode: UInt64, indexNames: UInt64) {
            self.mtime = mtime
            self.mtimeNanoseconds = mtimeNanoseconds
            self.ctime = ctime
            self.ctimeNanoseconds = ctimeNanoseconds
            self.inode = inode
            self.indexNames = indexNames
        }

        /// Older than a second at `now` (seconds since 1970): no later
        /// change can share its time stamp.
        func isSettled(at now: Double) -> Bool {
            let changed = max(Double(mtime) + Double(mtimeNanoseconds) / 1e9, Double(ctime) + Double(ctimeNanoseconds) / 1e9)
            return now - changed > 1
        }

        init(_ dir: fprep_scan_dir) {
            self.init(mtime: Int64(dir.mtime_sec), mtimeNanoseconds: Int64(dir.mtime_nsec), ctime: Int64(dir.ctime_sec),
                      ctimeNanoseconds: Int64(dir.ctime_nsec), inode: UInt64(dir.inode), indexNames: UInt64(dir.names_hash))
        }
    }

    struct Name: Equatable {
        var bytes: [UInt8]
        var isDirectory: Bool
    }

    struct Entry {
        var stamp: Stamp
        var names: [Name]
    }

    var folders: [[UInt8]: Entry] = [:]

    static let fileName = "untracked-cache"
    private static let magic = Array("fprep-untracked-1\n".utf8)

    static func load(_ replica: Replica) -> UntrackedCache {
        var cache = UntrackedCache()
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: replica.stateFolder + "/" + fileName)) else { return cache }
        let bytes = [UInt8](data)
        guard bytes.starts(with: magic) else { return cache }
        var reader = Reader(bytes: bytes, at: magic.count)
        while !reader.atEnd {
            guard let path = reader.field(), let mtime = reader.int(), let mtimeNanoseconds = reader.int(),
                  let ctime = reader.int(), let ctimeNanoseconds = reader.int(), let inode = reader.int(),
                  let hash = reader.int(), let count = reader.int(), count >= 0, count < 1 << 24 else { return UntrackedCache() }
            var names: [Name] = []
            for _ in 0..<count {
                guard let flag = reader.int(), let name = reader.field() else { return UntrackedCache() }
                names.append(Name(bytes: name, isDirectory: flag != 0))
            }
            let stamp = Stamp(mtime: mtime, mtimeNanoseconds: mtimeNanoseconds, ctime: ctime, ctimeNanoseconds: ctimeNanoseconds,
                              inode: UInt64(bitPattern: inode), indexNames: UInt64(bitPattern: hash))
            cache.folders[path] = Entry(stamp: stamp, names: names)
        }
        return cache
    }

    /// Writes the cache (a temporary file, then a rename); a failure only
    /// costs the next scan its shortcut.
    func save(_ replica: Replica) {
        var out = Self.magic
        out.reserveCapacity(folders.count * 64)
        for (path, entry) in folders {
            Self.append(&out, path)
            for value in [entry.stamp.mtime, entry.stamp.mtimeNanoseconds, entry.stamp.ctime, entry.stamp.ctimeNanoseconds,
                          Int64(bitPattern: entry.stamp.inode), Int64(bitPattern: entry.stamp.indexNames), Int64(entry.names.count)] {
                Self.append(&out, value)
            }
            for name in entry.names {
                Self.append(&out, Int64(name.isDirectory ? 1 : 0))
                Self.append(&out, name.bytes)
            }
        }
        CacheFile.replace(replica.stateFolder + "/" + Self.fileName, with: out)
    }

    /// Forgets every folder: the next scan reads them all.
    static func invalidate(_ replica: Replica) {
        unlink(replica.stateFolder + "/" + fileName)
    }

    var isEmpty: Bool { folders.isEmpty }

    private static func append(_ out: inout [UInt8], _ value: Int64) {
        withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) }
    }

    private static func append(_ out: inout [UInt8], _ bytes: [UInt8]) {
        append(&out, Int64(bytes.count))
        out += bytes
    }

    private struct Reader {
        let bytes: [UInt8]
        var at: Int

        var atEnd: Bool { at >= bytes.count }

        mutating func int() -> Int64? {
            guard at + 8 <= bytes.count else { return nil }
            var value: Int64 = 0
            for i in (0..<8).reversed() { value = value << 8 | Int64(bytes[at + i]) }
            at += 8
            return value
        }

        mutating func field() -> [UInt8]? {
            guard let count = int(), count >= 0, at + Int(count) <= bytes.count else { return nil }
            defer { at += Int(count) }
            return Array(bytes[at..<at + Int(count)])
        }
    }
}
