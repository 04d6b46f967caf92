import Foundation
import Glibc

/// The filesystem halves of the floors: lean loops doing only the syscalls any
/// placeholder layout or eviction needs, so fprep's times can be read against them.
struct FilesystemFloors {
    let libc: LibC

    /// Creates every entry of `entries` under `root` (which must not exist) as an
    /// empty sparse file of its real size with one xattr, and returns the seconds
    /// taken. Paths and folder list are prepared before the clock starts: the
    /// floor measures the filesystem, not string handling.
    func createPlaceholders(root: String, entries: [TreeEntry]) throws -> Double {
        var folders = Set<Substring>()
        for entry in entries {
            var dir = Layout.split(entry.path).0
            while !dir.isEmpty, folders.insert(dir).inserted {
                dir = Layout.split(String(dir)).0
            }
        }
        // Byte order puts every folder after its parent.
        let folderPaths = CStrings(folders.map(String.init).sorted())
        let filePaths = CStrings(entries.map(\.path))
        let sizes = entries.map { off_t($0.size) }
        let modes = entries.map { mode_t($0.mode == "100755" ? 0o755 : 0o644) }
        let values = entries.map { Array($0.oid.utf8) }
        guard mkdir(root, 0o755) == 0 else { throw BenchError.message("mkdir \(root): \(errnoText())") }
        let rootFD = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard rootFD >= 0 else { throw BenchError.message("open \(root): \(errnoText())") }
        defer { close(rootFD) }

        let start = monotonicSeconds()
        for i in 0..<folderPaths.count {
            guard mkdirat(rootFD, folderPaths[i], 0o755) == 0 else {
                throw BenchError.message("mkdir \(root)/\(String(cString: folderPaths[i])): \(errnoText())")
            }
        }
        for i in 0..<filePaths.count {
            let fd = openat(rootFD, filePaths[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, modes[i])
            guard fd >= 0 else { throw BenchError.message("create \(root)/\(entries[i].path): \(errnoText())") }
            let ok = ftruncate(fd, sizes[i]) == 0
                && values[i].withUnsafeBytes { libc.fsetxattr(fd, "user.x", $0.baseAddress, $0.count, 0) } == 0
            let failure = ok ? 0 : errno
            close(fd)
            guard ok else { throw BenchError.message("placeholder \(root)/\(entries[i].path): \(errnoText(failure))") }
        }
        return monotonicSeconds() - start
    }

    /// Writes content into the placeholders of `entries` under `root`
    /// (untimed): what the evict floor then frees.
    func fill(root: String, entries: [TreeEntry]) throws {
        let chunk = [UInt8](repeating: 0xA5, count: 1 << 16)
        for entry in entries where entry.size > 0 {
            let fd = open(root + "/" + entry.path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw BenchError.message("open \(root)/\(entry.path): \(errnoText())") }
            defer { close(fd) }
            var left = Int(entry.size)
            while left > 0 {
                let n = chunk.withUnsafeBytes { write(fd, $0.baseAddress, min(left, $0.count)) }
                guard n > 0 else { throw BenchError.message("write \(root)/\(entry.path): \(errnoText())") }
                left -= n
            }
        }
    }
}

/// The evict floor as a command of its own (`fprep-bench punch-floor ROOT
/// LIST`): a process that opens each listed file under ROOT and frees its
/// blocks (fallocate PUNCH_HOLE, size kept), started as fprep's evict is,
/// so both pay a process's start. With no arguments it only starts (to warm
/// its binary).
enum PunchFloor {
    static let mode = "punch-floor"

    static var executable: String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        return n > 0 ? String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : CommandLine.arguments[0]
    }

    private static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("fprep-bench punch-floor: \(message)\n".utf8))
        exit(1)
    }

    static func main(_ arguments: [String]) -> Never {
        guard arguments.count == 2 else { exit(0) }
        guard let libc = try? LibC.load() else {
            fail("no fallocate in the C library")
        }
        guard let list = try? String(contentsOfFile: arguments[1], encoding: .utf8) else {
            fail("cannot read \(arguments[1])")
        }
        let paths = CStrings(list.split(separator: "\n").map(String.init))
        let rootFD = open(arguments[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard rootFD >= 0 else {
            fail("open \(arguments[0]): \(errnoText())")
        }
        for i in 0..<paths.count {
            let fd = openat(rootFD, paths[i], O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
            var info = stat()
            guard fd >= 0, fstat(fd, &info) == 0,
                  info.st_size == 0 || libc.fallocate(fd, LibC.punchHole | LibC.keepSize, 0, Int64(info.st_size)) == 0 else {
                fail("\(String(cString: paths[i])): \(errnoText())")
            }
            close(fd)
        }
        exit(0)
    }
}

/// NUL-terminated copies of strings in one allocation, so a timed loop passes
/// plain pointers instead of converting a Swift string per call.
final class CStrings {
    private let storage: UnsafeMutablePointer<CChar>
    private let offsets: [Int]

    init(_ strings: [String]) {
        var offsets: [Int] = []
        offsets.reserveCapacity(strings.count)
        var total = 0
        for s in strings {
            offsets.append(total)
            total += s.utf8.count + 1
        }
        storage = .allocate(capacity: max(1, total))
        for (s, offset) in zip(strings, offsets) {
            var p = storage + offset
            for byte in s.utf8 {
                p.pointee = CChar(bitPattern: byte)
                p += 1
            }
            p.pointee = 0
        }
        self.offsets = offsets
    }

    deinit { storage.deallocate() }

    var count: Int { offsets.count }
    subscript(i: Int) -> UnsafePointer<CChar> { UnsafePointer(storage + offsets[i]) }
}
