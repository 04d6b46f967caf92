import Foundation
import Glibc

// File-system calls on byte paths. Names that differ only in Unicode
// normalization are equal as Swift Strings, so every comparison and every
// dictionary key here is the bytes ([UInt8]); Strings only carry bytes into
// system calls (Swift keeps a String's UTF-8 bytes as given).

typealias Bytes = [UInt8]

func text(_ bytes: Bytes) -> String { String(decoding: bytes, as: UTF8.self) }

/// `root/relative`.
func join(_ root: String, _ relative: Bytes) -> String { relative.isEmpty ? root : root + "/" + text(relative) }

func joinRel(_ parent: Bytes, _ name: Bytes) -> Bytes { parent.isEmpty ? name : parent + [0x2F] + name }

/// A path for reports: printable, with its bytes shown when not plain ASCII.
func show(_ path: Bytes) -> String {
    let plain = path.allSatisfy { $0 >= 0x20 && $0 < 0x7F }
    var shown = text(path)
    if shown.utf8.count > 40 { shown = String(shown.prefix(12)) + "…(\(path.count) bytes)" }
    let odd = path.filter { $0 >= 0x80 }.count
    return plain || path.count > 40 ? "'\(shown)'" + (odd > 0 ? " [\(odd) non-ASCII bytes]" : "")
        : "'\(shown)' [\(path.map { String(format: "%02x", $0) }.joined())]"
}

/// What is at a path (never following a symlink).
enum Entry: Equatable {
    case file(size: Int64, executable: Bool, inode: UInt64)
    case directory
    case symlink
    case other  // a FIFO, a socket, a device

    var isFile: Bool { if case .file = self { true } else { false } }
}

func entry(_ path: String) -> Entry? {
    var st = stat()
    guard lstat(path, &st) == 0 else { return nil }
    switch st.st_mode & S_IFMT {
    case S_IFREG: return .file(size: Int64(st.st_size), executable: st.st_mode & 0o100 != 0, inode: UInt64(st.st_ino))
    case S_IFDIR: return .directory
    case S_IFLNK: return .symlink
    default: return .other
    }
}

/// The names in a folder, sorted by bytes.
func listFolder(_ path: String) -> [Bytes] {
    guard let dir = opendir(path) else { return [] }
    defer { closedir(dir) }
    var result: [Bytes] = []
    while let item = readdir(dir) {
        let name: Bytes = withUnsafeBytes(of: item.pointee.d_name) { raw in
            Array(raw.prefix(while: { $0 != 0 }))
        }
        if name == [0x2E] || name == [0x2E, 0x2E] { continue }
        result.append(name)
    }
    return result.sorted { $0.lexicographicallyPrecedes($1) }
}

/// Every path below `root` (relative, parents before children), leaving out `.git` and `.fprep` at the top.
func walk(_ root: String) -> [(path: Bytes, entry: Entry)] {
    var result: [(Bytes, Entry)] = []
    func visit(_ relative: Bytes) {
        for name in listFolder(join(root, relative)) {
            if relative.isEmpty && (name == Array(".git".utf8) || name == Array(".fprep".utf8)) { continue }
            let child = joinRel(relative, name)
            guard let e = entry(join(root, child)) else { continue }
            result.append((child, e))
            if e == .directory { visit(child) }
        }
    }
    visit([])
    return result
}

/// A regular file's bytes (never opens anything else: a FIFO would block).
func readFile(_ path: String) -> Bytes? {
    guard entry(path)?.isFile == true else { return nil }
    let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var result: Bytes = []
    var buffer = Bytes(repeating: 0, count: 65536)
    while true {
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { break }
        result += buffer[0..<n]
    }
    return result
}

/// Writes `bytes` to a regular file: appended, or replacing its content.
func writeFile(_ path: String, _ bytes: Bytes, append: Bool) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0o644)
    guard fd >= 0 else { throw ModelError("cannot open \(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    guard n == bytes.count else { throw ModelError("cannot write \(path): \(String(cString: strerror(errno)))") }
}

/// rm -rf (making folders writable on the way).
func removeTree(_ path: String) {
    guard let e = entry(path) else { return }
    if e == .directory {
        chmod(path, 0o755)
        for name in listFolder(path) { removeTree(path + "/" + text(name)) }
        rmdir(path)
    } else {
        unlink(path)
    }
}

private let lgetxattrCall: @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeMutableRawPointer?, Int) -> Int = {
    guard let handle = dlopen(nil, RTLD_NOW), let raw = dlsym(handle, "lgetxattr") else { fatalError("no lgetxattr") }
    return unsafeBitCast(raw, to: (@convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeMutableRawPointer?, Int) -> Int).self)
}()

/// An extended attribute of the file itself.
func xattr(_ path: String, _ name: String) -> Bytes? {
    var buffer = Bytes(repeating: 0, count: 256)
    let count = buffer.withUnsafeMutableBytes { lgetxattrCall(path, name, $0.baseAddress, $0.count) }
    guard count >= 0 else { return nil }
    return Array(buffer[0..<count])
}

/// Whether fprep marks the file a placeholder.
func isDataless(_ path: String) -> Bool { xattr(path, "user.fprep.state") == Array("dataless".utf8) }

func hex(_ bytes: Bytes) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

/// The write tokens in some bytes: `@ACTOR#N` up to a newline.
func tokens(in bytes: Bytes) -> Set<String> {
    var result: Set<String> = []
    var i = 0
    while i < bytes.count {
        if bytes[i] == 0x40 {
            var j = i + 1
            while j < bytes.count, j - i < 40, bytes[j] != 0x0A, bytes[j] != 0x40, bytes[j] != 0 { j += 1 }
            if j < bytes.count, bytes[j] == 0x0A, j > i + 1 { result.insert(text(Array(bytes[(i + 1)..<j]))) }
            i = j
        } else {
            i += 1
        }
    }
    return result
}
