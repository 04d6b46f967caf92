import FoundationEssentials
import Glibc

/// Writes to the standard streams with write(2).
public enum Console {
    public static func error(_ text: String) { put(2, text) }
    public static func output(_ text: String) { put(1, text) }
    public static func output(_ data: Data) { data.withUnsafeBytes { put(1, $0) } }

    private static func put(_ fd: Int32, _ text: String) {
        var text = text
        text.withUTF8 { put(fd, UnsafeRawBufferPointer($0)) }
    }

    private static func put(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) {
        var offset = 0
        while offset < bytes.count {
            let count = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { return }
            offset += count
        }
    }

    /// `text` safe to show on a terminal as one line: control characters
    /// (C0, DEL, C1) and the code points that break or reorder lines (line
    /// and paragraph separators, bidirectional overrides) written as
    /// `\n`, `\t`, `\r`, `\xNN` or `\u{NNNN}`, so a name can neither send
    /// the terminal an escape sequence nor print a line of its own.
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var result = ""
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar) else {
                result.unicodeScalars.append(scalar)
                continue
            }
            switch scalar {
            case "\n": result += "\\n"
            case "\t": result += "\\t"
            case "\r": result += "\\r"
            default:
                let hex = String(scalar.value, radix: 16)
                result += scalar.value < 0x80 ? "\\x" + (hex.count < 2 ? "0" + hex : hex) : "\\u{\(hex)}"
            }
        }
        return result
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: true
        case 0x2028, 0x2029, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }

    /// Everything on standard input.
    public static func readInput() -> Data {
        var result = Data()
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            result.append(contentsOf: buffer[0..<count])
        }
        return result
    }
}

/// A lock: a pthread mutex owned by the object.
public final class Lock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t> = .allocate(capacity: 1)

    public init() { pthread_mutex_init(mutex, nil) }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }
}

/// The physical path of `path` (symlinks resolved), or the path itself.
func realPath(_ path: String) -> String {
    guard let resolved = realpath(path, nil) else { return path }
    defer { free(resolved) }
    return String(cString: resolved)
}

/// The current folder (getcwd).
public func currentFolder() -> String {
    guard let folder = getcwd(nil, 0) else { return "." }
    defer { free(folder) }
    return String(cString: folder)
}

/// `path` made absolute against the current folder, with "." and ".."
/// components and repeated slashes taken out (as URL's standardizedFileURL
/// does, symlinks untouched), without Foundation's URL: its first use costs
/// a command 0.4 ms.
public func absolutePath(_ path: String) -> String {
    let full = Array((path.hasPrefix("/") ? path : currentFolder() + "/" + path).utf8)
    let slash = UInt8(ascii: "/"), dot = UInt8(ascii: ".")
    var result: [UInt8] = []
    result.reserveCapacity(full.count)
    var start = 0
    while start < full.count {
        var end = start
        while end < full.count && full[end] != slash { end += 1 }
        let length = end - start
        if length == 2 && full[start] == dot && full[start + 1] == dot {
            while let last = result.popLast(), last != slash {}
        } else if length > 0 && !(length == 1 && full[start] == dot) {
            result.append(slash)
            result += full[start..<end]
        }
        start = end + 1
    }
    return result.isEmpty ? "/" : String(decoding: result, as: UTF8.self)
}

/// The folder part of a path, as `dirname` has it ("/" for "/a").
func parentFolder(of path: String) -> String {
    guard let slash = path.lastIndex(of: "/") else { return "." }
    return slash == path.startIndex ? "/" : String(path[..<slash])
}

/// Whether `path` is a folder (following a final symlink, as stat does).
func isFolder(_ path: String) -> Bool {
    var info = stat()
    return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
}

/// "1 file", "2 files": a count with its noun, singular for one.
public func counted(_ n: Int, _ noun: String) -> String { n == 1 ? "1 \(noun)" : "\(n) \(noun)s" }
