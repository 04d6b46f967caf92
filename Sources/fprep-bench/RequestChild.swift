import Glibc

/// A child that answers one line with one line (`fprep changes --stdin`):
/// each request is timed from writing it to reading the whole answer.
final class RequestChild {
    private let pid: pid_t
    private var input: Int32
    private let output: Int32
    private var pending: [UInt8] = []

    init(_ command: Command, subprocess: Subprocess) throws {
        let requests = try Subprocess.pipe()
        let answers = try Subprocess.pipe()
        let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
        defer { close(null) }
        do {
            pid = try subprocess.spawn(command, stdin: requests[0], stdout: answers[1], stderr: null)
        } catch {
            for fd in requests + answers { close(fd) }
            throw error
        }
        close(requests[0])
        close(answers[1])
        input = requests[1]
        output = answers[0]
    }

    deinit {
        finish()
        close(output)
    }

    /// Sends `line` and returns the seconds until the answer's newline, with the answer.
    func ask(_ line: String) throws -> (seconds: Double, answer: [UInt8]) {
        let started = monotonicSeconds()
        let bytes = Array((line + "\n").utf8)
        var written = 0
        while written < bytes.count {
            let n = bytes[written...].withUnsafeBytes { Glibc.write(input, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw BenchError.message("writing a request: \(errnoText())")
            }
            written += n
        }
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            if let end = pending.firstIndex(of: 0x0A) {
                let answer = Array(pending[..<end])
                pending.removeFirst(end + 1)
                return (monotonicSeconds() - started, answer)
            }
            let n = chunk.withUnsafeMutableBytes { Glibc.read(output, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw BenchError.message("the answering process ended before it answered") }
            pending += chunk[..<n]
        }
    }

    /// Ends the input and reaps the child.
    func finish() {
        guard input >= 0 else { return }
        close(input)
        input = -1
        _ = Subprocess.wait(pid)
    }
}
