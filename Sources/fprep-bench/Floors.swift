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

    /// Frees the data blocks of `entries` under `root` (fallocate PUNCH_HOLE,
    /// size kept) and returns the seconds taken: the raw cost of an eviction.
    func punchHoles(root: String, entries: [TreeEntry]) throws -> Double {
        let paths = CStrings(entries.map(\.path))
        let sizes = entries.map { Int64($0.size) }
        let rootFD = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard rootFD >= 0 else { throw BenchError.message("open \(root): \(errnoText())") }
        defer { close(rootFD) }
        let start = monotonicSeconds()
        for i in 0..<paths.count {
            let fd = openat(rootFD, paths[i], O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw BenchError.message("open \(root)/\(entries[i].path): \(errnoText())") }
            let rc = sizes[i] == 0 ? 0 : libc.fallocate(fd, LibC.punchHole | LibC.keepSize, 0, sizes[i])
            let failure = errno
            close(fd)
            guard rc == 0 else { throw BenchError.message("punch \(root)/\(entries[i].path): \(errnoText(failure))") }
        }
        return monotonicSeconds() - start
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
