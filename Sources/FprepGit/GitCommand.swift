import CLibGit2Support
import Dispatch
import FoundationEssentials
import Glibc
import Synchronization

/// A `git` command that failed: its arguments, exit status and what it said.
public struct GitCommandError: Error, CustomStringConvertible, Sendable {
    public let arguments: [String]
    public let status: Int32
    public let standardError: String

    /// The line that says why: git's first `fatal:` or `error:` line (with
    /// the next line when it ends in ':', as "unable to connect to …:" does),
    /// without the prefix; else the last line it printed.
    public var reason: String {
        let lines = standardError.split(whereSeparator: \.isNewline).map(String.init)
        // What the other side said first: a push's own last line ("failed
        // to push some refs") names no cause; the remote's error does (a
        // stale lock, a hook's refusal).
        for line in lines {
            for prefix in ["remote: error: ", "remote: fatal: "] where line.hasPrefix(prefix) {
                var said = line.dropFirst(prefix.count)
                while said.last == " " || said.last == "\t" { said.removeLast() }
                if !said.isEmpty { return "the remote says: " + said }
            }
        }
        guard let first = lines.firstIndex(where: { $0.hasPrefix("fatal: ") || $0.hasPrefix("error: ") }) else {
            return lines.last ?? "exit status \(status)"
        }
        var line = String(lines[first].drop { $0 != " " }.dropFirst())
        if line.hasSuffix(":"), first + 1 < lines.count { line += " " + lines[first + 1] }
        return line
    }

    public var description: String { "git \(arguments.prefix(2).joined(separator: " ")): \(reason)" }
}

/// Runs the `git` command: the transport for what libgit2 lacks (filtered
/// fetch, fetching blobs by id). fprep runs no git command that reads blob
/// content, so none fetches a missing blob one by one; every run also has
/// `GIT_NO_LAZY_FETCH=1` (honoured from git 2.44 on) as a second guard, and
/// `GIT_TERMINAL_PROMPT=0`, so no command waits for a password.
///
/// Spawned with `posix_spawn`, its pipes drained with `poll`: no Foundation
/// `Process`, whose library costs every fprep command a cold start.
public enum GitCommand {
    /// Runs `git args…` (in `directory`, through git's own `-C`) and returns
    /// its standard output. Standard error is captured for the error, or
    /// passed through when `showProgress` is set (git draws its progress).
    @discardableResult
    public static func run(_ arguments: [String], in directory: String? = nil,
                           environment extra: [String: String] = [:], input: Data? = nil,
                           showProgress: Bool = false, stop: Stop? = nil) throws -> Data {
        let fullArguments = (directory.map { ["-C", $0] } ?? []) + arguments
        var environment = ProcessInfo.processInfo.environment
        environment["GIT_NO_LAZY_FETCH"] = "1"
        environment["GIT_TERMINAL_PROMPT"] = "0"
        environment["LC_ALL"] = "C"
        for (key, value) in extra { environment[key] = value }

        var stdinPipe: [Int32] = [-1, -1], stdoutPipe: [Int32] = [-1, -1], stderrPipe: [Int32] = [-1, -1]
        guard pipe(&stdinPipe) == 0, pipe(&stdoutPipe) == 0, pipe(&stderrPipe) == 0 else {
            throw GitCommandError(arguments: arguments, status: -1, standardError: "fatal: cannot make pipes: \(String(cString: strerror(errno)))")
        }
        // Close-on-exec: other threads' children must not inherit these ends
        // (the dup2 copies in this child stay open).
        for fd in stdinPipe + stdoutPipe + stderrPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, stdinPipe[0], 0)
        posix_spawn_file_actions_adddup2(&actions, stdoutPipe[1], 1)
        if !showProgress { posix_spawn_file_actions_adddup2(&actions, stderrPipe[1], 2) }
        // Nothing else: a descriptor another thread holds without
        // close-on-exec (a file the agent holds for a reader, a pipe made
        // a moment ago) must not live on in a git that may hang.
        _ = fprep_spawn_close_from(&actions, 3)

        let argv = ([gitPath] + fullArguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        // A git that exits before reading all of its input must not take
        // fprep down with SIGPIPE (the write fails with EPIPE instead); git
        // itself starts with every signal fprep ignores back at its default.
        _ = Self.brokenPipeIgnored
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        sigaddset(&defaults, SIGIO)
        // A process that ignores these (a service that stops on its own
        // terms) must not hand that to git: a stop of the group, a Ctrl-C
        // or a `Stop` ends git.
        sigaddset(&defaults, SIGINT)
        sigaddset(&defaults, SIGTERM)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        // Nothing blocked: a child inherits the spawning thread's mask, and
        // a Dispatch or task thread blocks nearly every signal, so a git
        // started there ignored Ctrl-C and a `Stop` alike.
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        posix_spawnattr_setsigmask(&attributes, &unblocked)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, gitPath, &actions, &attributes, argv, envp)
        for fd in [stdinPipe[0], stdoutPipe[1], stderrPipe[1]] { close(fd) }
        guard spawned == 0 else {
            for fd in [stdinPipe[1], stdoutPipe[0], stderrPipe[0]] { close(fd) }
            throw GitCommandError(arguments: arguments, status: -1,
                                  standardError: "fatal: cannot run \(gitPath): \(String(cString: strerror(spawned)))")
        }
        stop?.started(pid)
        let (output, errors) = exchange(input: input ?? Data(), stdin: stdinPipe[1], stdout: stdoutPipe[0],
                                        stderr: showProgress ? -1 : stderrPipe[0])
        if showProgress { close(stderrPipe[0]) }
        if let stop {
            // Exited, not yet reaped: until `ended` the pid is still this
            // git's (a zombie), so a `stop` meanwhile signals no other process.
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR {}
            stop.ended()
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let exited = status & 0x7f == 0
        let code = exited ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        guard exited, code == 0 else {
            throw GitCommandError(arguments: arguments, status: code, standardError: String(decoding: errors, as: UTF8.self))
        }
        return output
    }

    /// Lets another thread end a running git command (SIGTERM; git
    /// removes what it made, as on Ctrl-C): a clone that turns out not to
    /// be wanted, say. `run` then throws its usual error.
    public final class Stop: Sendable {
        private struct State {
            var running: pid_t?
            var requested = false
        }
        private let state = Mutex(State())

        public init() {}

        /// Ends the command now if it runs, else as soon as it starts.
        public func request() {
            state.withLock { state in
                state.requested = true
                if let pid = state.running { kill(pid, SIGTERM) }
            }
        }

        public var isRequested: Bool { state.withLock { $0.requested } }

        fileprivate func started(_ pid: pid_t) {
            state.withLock { state in
                state.running = pid
                if state.requested { kill(pid, SIGTERM) }
            }
        }

        fileprivate func ended() { state.withLock { $0.running = nil } }
    }

    private static let brokenPipeIgnored: Void = { signal(SIGPIPE, SIG_IGN) }()

    /// Feeds `input` to the child's stdin and drains its stdout and stderr
    /// at once: git may fill one pipe before it has read all of its input.
    private static func exchange(input: Data, stdin: Int32, stdout: Int32, stderr: Int32) -> (Data, Data) {
        var output = Data(), errors = Data()
        var written = 0
        var stdinOpen = true
        if input.isEmpty { close(stdin); stdinOpen = false }
        var open: [Int32] = [stdout] + (stderr >= 0 ? [stderr] : [])
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while !open.isEmpty || stdinOpen {
            var fds = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            if stdinOpen { fds.append(pollfd(fd: stdin, events: Int16(POLLOUT), revents: 0)) }
            guard poll(&fds, nfds_t(fds.count), -1) >= 0 || errno == EINTR else { break }
            for entry in fds where entry.revents != 0 {
                if entry.fd == stdin && stdinOpen {
                    let count = input.withUnsafeBytes { raw in
                        write(stdin, raw.baseAddress! + written, min(raw.count - written, 1 << 16))
                    }
                    if count > 0 { written += count }
                    if count < 0 && errno != EINTR && errno != EAGAIN || written >= input.count {
                        close(stdin)
                        stdinOpen = false
                    }
                    continue
                }
                let count = buffer.withUnsafeMutableBytes { read(entry.fd, $0.baseAddress, $0.count) }
                if count > 0 {
                    if entry.fd == stdout { output.append(contentsOf: buffer[0..<count]) }
                    else { errors.append(contentsOf: buffer[0..<count]) }
                } else if count == 0 || (errno != EINTR && errno != EAGAIN) {
                    close(entry.fd)
                    open.removeAll { $0 == entry.fd }
                }
            }
        }
        return (output, errors)
    }

    /// The `git` executable for the commands run in this task, for tests: a
    /// test sets it here, not through `FPREP_GIT` in the environment, which
    /// every test running at the same time in the process (and every child
    /// it spawns) would share.
    @TaskLocal public static var executable: String?

    /// The `git` executable: `executable` when set, `FPREP_GIT` when set, else
    /// the first `git` on PATH.
    public static var gitPath: String {
        if let executable { return executable }
        let environment = ProcessInfo.processInfo.environment
        if let explicit = environment["FPREP_GIT"], !explicit.isEmpty { return explicit }
        for dir in (environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let candidate = "\(dir)/git"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return "/usr/bin/git"
    }
}
