import Glibc

/// A child we feed a long stream through its stdin (git fast-import).
///
/// Its stdout and stderr go to an unlinked temporary file rather than pipes:
/// we block on writing its input, so it must never block on output we are not
/// reading; the file is read back only to report a failure.
final class StreamingChild {
    private let command: Command
    private let pid: pid_t
    private var stdinFD: Int32
    private let logFD: Int32
    private var buffer: [UInt8] = []
    private let flushAt = 1 << 20

    init(_ command: Command, subprocess: Subprocess) throws {
        self.command = command
        var template = Array("/tmp/fprep-bench-log-XXXXXX".utf8CString)
        let log = mkstemp(&template)
        guard log >= 0 else { throw BenchError.message("mkstemp: \(errnoText())") }
        _ = fcntl(log, F_SETFD, FD_CLOEXEC)
        unlink(template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
        let pair: [Int32]
        do { pair = try Subprocess.pipe() } catch {
            close(log)
            throw error
        }
        do {
            pid = try subprocess.spawn(command, stdin: pair[0], stdout: log, stderr: log)
        } catch {
            close(pair[0]); close(pair[1]); close(log)
            throw error
        }
        close(pair[0])
        stdinFD = pair[1]
        logFD = log
        buffer.reserveCapacity(flushAt * 2)
    }

    deinit {
        if stdinFD >= 0 { close(stdinFD) }
        close(logFD)
    }

    /// Appends text to the stream.
    func write(_ text: String) throws {
        buffer.append(contentsOf: text.utf8)
        if buffer.count >= flushAt { try flush() }
    }

    /// Appends raw bytes to the stream.
    func write(_ bytes: UnsafeBufferPointer<UInt8>) throws {
        if bytes.count >= flushAt {
            // Large blobs go straight to the pipe instead of through the buffer.
            try flush()
            try writeAll(UnsafeRawBufferPointer(bytes))
        } else {
            buffer.append(contentsOf: bytes)
            if buffer.count >= flushAt { try flush() }
        }
    }

    /// Closes stdin, waits, and throws `commandFailed` with the child's output tail unless it exited 0.
    func finish() throws {
        let flushError: Error?
        do { try flush(); flushError = nil } catch { flushError = error }
        close(stdinFD)
        stdinFD = -1
        let status = Subprocess.wait(pid)
        if let failure = Subprocess.failure(status) {
            throw BenchError.commandFailed(command: command.description, status: failure,
                                           stderrTail: BenchError.tail(of: readLog()))
        }
        if let flushError { throw flushError }
    }

    private func flush() throws {
        guard !buffer.isEmpty else { return }
        try buffer.withUnsafeBytes { try writeAll($0) }
        buffer.removeAll(keepingCapacity: true)
    }

    private func writeAll(_ bytes: UnsafeRawBufferPointer) throws {
        guard let base = bytes.baseAddress else { return }
        var offset = 0
        while offset < bytes.count {
            let n = Glibc.write(stdinFD, base + offset, bytes.count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                // EPIPE (SIGPIPE is ignored): the child died; finish() reports its stderr.
                let code = errno
                close(stdinFD)
                stdinFD = -1
                let status = Subprocess.wait(pid)
                throw BenchError.commandFailed(
                    command: command.description,
                    status: Subprocess.failure(status) ?? "write: \(errnoText(code))",
                    stderrTail: BenchError.tail(of: readLog()))
            }
            offset += n
        }
    }

    private func readLog() -> [UInt8] {
        var result: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        var offset: off_t = 0
        while true {
            let n = pread(logFD, &chunk, chunk.count, offset)
            if n <= 0 { break }
            result += chunk[0..<n]
            offset += off_t(n)
        }
        return result
    }
}
