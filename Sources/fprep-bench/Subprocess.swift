import Foundation
import Glibc

/// One command line to run: arguments, environment changes, working directory, stdin.
struct Command: CustomStringConvertible {
    /// Where the child's standard input comes from.
    enum Input {
        /// /dev/null: no git command should wait on a terminal.
        case null
        /// Bytes fed through a pipe while stdout and stderr are drained.
        case bytes([UInt8])
    }

    var argv: [String]
    /// Variables added to (or replacing) the inherited environment.
    var environment: [String: String] = [:]
    var directory: String? = nil
    var input: Input = .null

    init(_ argv: [String], environment: [String: String] = [:], directory: String? = nil, input: Input = .null) {
        self.argv = argv
        self.environment = environment
        self.directory = directory
        self.input = input
    }

    /// Shell-like rendering for error lines (quotes only where needed).
    var description: String {
        var parts: [String] = []
        if let directory { parts.append("(cd \(Command.quote(directory)) &&") }
        for (key, value) in environment.sorted(by: { $0.key < $1.key }) {
            parts.append("\(key)=\(Command.quote(value))")
        }
        parts += argv.map(Command.quote)
        return parts.joined(separator: " ") + (directory == nil ? "" : ")")
    }

    private static func quote(_ s: String) -> String {
        let plain = s.allSatisfy { $0.isLetter || $0.isNumber || "-_./:=,@%+".contains($0) }
        return plain && !s.isEmpty ? s : "'" + s.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}

/// What a finished child produced.
struct ProcessOutput {
    var stdout: [UInt8]
    var stderr: [UInt8]
    /// Wall-clock time from just before spawn to reaped exit.
    var seconds: Double

    var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
}

/// Runs children with posix_spawn and waitpid.
///
/// Foundation's `Process` polls its run loop to notice exits, which blurs
/// sub-100 ms timings; spawning directly gives exact times, resets signal
/// dispositions in the child (we ignore SIGPIPE and catch SIGINT) and lets the
/// daemon get its own process group.
struct Subprocess {
    let libc: LibC

    /// Runs `command` to completion; throws `commandFailed` unless it exits 0.
    @discardableResult
    func run(_ command: Command) throws -> ProcessOutput {
        var stdinPipe: [Int32] = [-1, -1]
        var outPipe: [Int32] = [-1, -1]
        var errPipe: [Int32] = [-1, -1]
        let devNull = open("/dev/null", O_RDONLY | O_CLOEXEC)
        guard devNull >= 0 else { throw BenchError.message("open /dev/null: \(errnoText())") }
        defer { close(devNull) }
        if case .bytes = command.input { try makePipe(&stdinPipe) }
        try makePipe(&outPipe)
        try makePipe(&errPipe)

        let start = monotonicSeconds()
        let pid: pid_t
        do {
            pid = try spawn(command, stdin: stdinPipe[0] >= 0 ? stdinPipe[0] : devNull,
                            stdout: outPipe[1], stderr: errPipe[1])
        } catch {
            for fd in stdinPipe + outPipe + errPipe where fd >= 0 { close(fd) }
            throw error
        }
        // The child holds its own copies; ours must close so EOF can arrive.
        for fd in [stdinPipe[0], outPipe[1], errPipe[1]] where fd >= 0 { close(fd) }

        var pending: [UInt8] = []
        if case let .bytes(bytes) = command.input { pending = bytes }
        let (out, err) = pump(stdinFD: stdinPipe[1], pending: pending, stdoutFD: outPipe[0], stderrFD: errPipe[0])
        let status = Subprocess.wait(pid)
        let output = ProcessOutput(stdout: out, stderr: err, seconds: monotonicSeconds() - start)
        if let failure = Subprocess.failure(status) {
            throw BenchError.commandFailed(command: command.description, status: failure,
                                           stderrTail: BenchError.tail(of: err.isEmpty ? out : err))
        }
        return output
    }

    /// Starts `command` with the given descriptors as its 0, 1 and 2 and returns at once.
    /// `newProcessGroup` puts it in a group of its own, so one kill reaches every
    /// child it forks (git daemon forks one per connection) and a terminal's ^C
    /// reaches only us, who then stop it cleanly.
    func spawn(_ command: Command, stdin: Int32, stdout: Int32, stderr: Int32,
               newProcessGroup: Bool = false) throws -> pid_t {
        guard let program = command.argv.first else { throw BenchError.message("empty command line") }
        var actions = posix_spawn_file_actions_t()
        var attributes = posix_spawnattr_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawnattr_init(&attributes)
        defer {
            posix_spawn_file_actions_destroy(&actions)
            posix_spawnattr_destroy(&attributes)
        }
        posix_spawn_file_actions_adddup2(&actions, stdin, 0)
        posix_spawn_file_actions_adddup2(&actions, stdout, 1)
        posix_spawn_file_actions_adddup2(&actions, stderr, 2)
        if let directory = command.directory {
            let rc = directory.withCString { libc.addChdir(&actions, $0) }
            guard rc == 0 else { throw BenchError.message("posix_spawn chdir action: \(errnoText(rc))") }
        }
        var all = sigset_t()
        var none = sigset_t()
        sigfillset(&all)
        sigemptyset(&none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setsigmask(&attributes, &none)
        var flags = Int32(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK)
        if newProcessGroup {
            flags |= Int32(POSIX_SPAWN_SETPGROUP)
            posix_spawnattr_setpgroup(&attributes, 0)
        }
        posix_spawnattr_setflags(&attributes, Int16(flags))

        var environment = ProcessInfo.processInfo.environment
        for (key, value) in command.environment { environment[key] = value }
        let argv = command.argv.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in argv { free(p) }
            for p in envp { free(p) }
        }
        var pid: pid_t = 0
        let rc = posix_spawnp(&pid, program, &actions, &attributes, argv, envp)
        guard rc == 0 else {
            throw BenchError.message("cannot start \(program): \(errnoText(rc)) (command: \(command))")
        }
        return pid
    }

    /// Reaps `pid`, retrying on EINTR; returns the raw wait status.
    static func wait(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return status
    }

    /// nil for "exited 0", else a short text ("exit 128", "killed by signal 9").
    /// (WIFEXITED and friends are C macros Swift cannot import.)
    static func failure(_ status: Int32) -> String? {
        let signal = status & 0x7f
        if signal == 0 {
            let code = (status >> 8) & 0xff
            return code == 0 ? nil : "exit \(code)"
        }
        return "killed by signal \(signal)"
    }

    private func makePipe(_ fds: inout [Int32]) throws {
        fds = try Subprocess.pipe()
    }

    /// A close-on-exec pipe, so children only ever get the ends dup2'ed onto 0–2.
    /// (pipe2 is not imported; we spawn from one thread, so the gap is harmless.)
    static func pipe() throws -> [Int32] {
        var pair: [Int32] = [0, 0]
        guard Glibc.pipe(&pair) == 0 else { throw BenchError.message("pipe: \(errnoText())") }
        for fd in pair { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return pair
    }

    /// Feeds stdin and drains stdout/stderr together with poll(2): a child that
    /// writes a lot while we still write its input must not deadlock on a full pipe.
    private func pump(stdinFD: Int32, pending: [UInt8], stdoutFD: Int32, stderrFD: Int32) -> ([UInt8], [UInt8]) {
        var out: [UInt8] = []
        var err: [UInt8] = []
        var inFD = stdinFD
        var offset = 0
        if inFD >= 0 {
            _ = fcntl(inFD, F_SETFL, O_NONBLOCK)
            if pending.isEmpty { close(inFD); inFD = -1 }
        }
        var outFD = stdoutFD
        var errFD = stderrFD
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while inFD >= 0 || outFD >= 0 || errFD >= 0 {
            var fds: [pollfd] = []
            if inFD >= 0 { fds.append(pollfd(fd: inFD, events: Int16(POLLOUT), revents: 0)) }
            if outFD >= 0 { fds.append(pollfd(fd: outFD, events: Int16(POLLIN), revents: 0)) }
            if errFD >= 0 { fds.append(pollfd(fd: errFD, events: Int16(POLLIN), revents: 0)) }
            if poll(&fds, nfds_t(fds.count), -1) < 0 {
                if errno == EINTR { continue }
                break
            }
            for entry in fds where entry.revents != 0 {
                if entry.fd == inFD {
                    let n = pending.withUnsafeBytes { write(inFD, $0.baseAddress! + offset, $0.count - offset) }
                    if n > 0 { offset += n }
                    // EPIPE: the child stopped reading; its exit status will tell why.
                    if offset >= pending.count || (n < 0 && errno != EAGAIN && errno != EINTR) {
                        close(inFD)
                        inFD = -1
                    }
                } else {
                    let n = read(entry.fd, &buffer, buffer.count)
                    if n > 0 {
                        if entry.fd == outFD { out += buffer[0..<n] } else { err += buffer[0..<n] }
                    } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                        close(entry.fd)
                        if entry.fd == outFD { outFD = -1 } else { errFD = -1 }
                    }
                }
            }
        }
        return (out, err)
    }
}
