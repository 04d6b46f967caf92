import Glibc

/// Writes a script or program at `path`, executable, with a descriptor no
/// child process can inherit.
///
/// Tests run in parallel threads of one process. A file written the usual
/// way (Foundation's atomic write: a temporary file, then rename) is open
/// without close-on-exec for a moment; a process another test spawns in
/// that moment keeps it open for its whole life, and executing the file
/// then fails with "Text file busy" (seen: a fake `ssh` git could not run).
public func writeExecutable(_ text: String, to path: String) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o755)
    guard fd >= 0 else { throw ExecutableWriteError(path: path, errno: errno) }
    defer { close(fd) }
    let bytes = Array(text.utf8)
    var written = 0
    while written < bytes.count {
        let count = bytes[written...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else { throw ExecutableWriteError(path: path, errno: errno) }
        written += count
    }
    // The mode open(2) gave was masked by the umask.
    guard fchmod(fd, 0o755) == 0 else { throw ExecutableWriteError(path: path, errno: errno) }
}

public struct ExecutableWriteError: Error, CustomStringConvertible {
    public let path: String
    public let errno: Int32
    public var description: String { "cannot write \(path): \(String(cString: strerror(errno)))" }
}
