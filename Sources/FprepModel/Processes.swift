import Foundation
import Glibc

// Runs the real `fprep` and `git` as processes, as the end-to-end harness
// does (Tests/FprepEndToEndTests/Harness.swift): output captured to files, a
// timeout on every wait, children killed with their parent.

/// The C call the Glibc module does not import: chdir in posix_spawn.
private let addChdir: @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32 = {
    guard let handle = dlopen(nil, RTLD_NOW), let raw = dlsym(handle, "posix_spawn_file_actions_addchdir_np") else {
        fatalError("no posix_spawn_file_actions_addchdir_np in the C library")
    }
    return unsafeBitCast(raw, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32).self)
}()

/// Seconds on the monotonic clock.
func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) * 1e-9
}

/// What a finished program did.
public struct ProcessResult: Sendable {
    public let argv: [String]
    /// The exit status, or 128+signal when killed.
    public let status: Int32
    public let killedBySignal: Int32?
    public let stdout: Data
    public let stderr: Data
    public let timedOut: Bool

    public var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
    public var stderrText: String { String(decoding: stderr, as: UTF8.self) }

    /// One line for a report: the command, its status and its stderr's start.
    public var summary: String {
        let err = stderrText.trimmingCharacters(in: .whitespacesAndNewlines)
        return "`\(argv.map(shortArg).joined(separator: " "))` → \(timedOut ? "TIMED OUT" : "status \(status)")"
            + (err.isEmpty ? "" : ": \(err.prefix(600))")
    }
}

/// Long sandbox paths shortened for reports.
func shortArg(_ arg: String) -> String {
    if arg.hasPrefix("/"), let range = arg.range(of: "/fprep-model-") {
        let rest = arg[range.upperBound...]
        if let slash = rest.firstIndex(of: "/") { return "$BOX" + rest[slash...] }
        return "$BOX"
    }
    return arg.hasSuffix("/fprep") ? "fprep" : arg
}

/// A started program: wait for it (with a deadline), or kill it.
final class Spawned {
    let pid: pid_t
    let argv: [String]
    private let outPath: String
    private let errPath: String
    private var reaped: Int32?

    fileprivate init(pid: pid_t, argv: [String], outPath: String, errPath: String) {
        self.pid = pid
        self.argv = argv
        self.outPath = outPath
        self.errPath = errPath
    }

    var isRunning: Bool {
        if reaped != nil { return false }
        var status: Int32 = 0
        let rc = waitpid(pid, &status, WNOHANG)
        if rc == pid { reaped = status; return false }
        return rc == 0
    }

    /// Waits up to `timeout` seconds; then kills it (and its children) and marks the result.
    func wait(timeout: Double) -> ProcessResult {
        var timedOut = false
        let deadline = monotonicSeconds() + timeout
        while reaped == nil {
            var status: Int32 = 0
            let rc = waitpid(pid, &status, WNOHANG)
            if rc == pid { reaped = status; break }
            if rc < 0 && errno != EINTR { reaped = 0; break }
            if monotonicSeconds() > deadline {
                timedOut = true
                killTree()
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                reaped = status
                break
            }
            usleep(1_000)
        }
        let raw = reaped ?? 0
        let sig = raw & 0x7f
        let out = FileManager.default.contents(atPath: outPath) ?? Data()
        let err = FileManager.default.contents(atPath: errPath) ?? Data()
        unlink(outPath)
        unlink(errPath)
        return ProcessResult(argv: argv, status: sig == 0 ? (raw >> 8) & 0xff : 128 + sig,
                             killedBySignal: sig == 0 ? nil : sig, stdout: out, stderr: err, timedOut: timedOut)
    }

    /// SIGKILL to it and its children (a killed fprep would orphan its git), then reap.
    func kill9() -> ProcessResult {
        killTree()
        return wait(timeout: 30)
    }

    private func killTree() {
        guard reaped == nil else { return }
        for child in childProcesses(of: pid) {
            for grandchild in childProcesses(of: child) { kill(grandchild, SIGKILL) }
            kill(child, SIGKILL)
        }
        kill(pid, SIGKILL)
    }
}

/// Direct children of `pid` (from /proc/*/stat).
func childProcesses(of pid: pid_t) -> [pid_t] {
    guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
    var result: [pid_t] = []
    for entry in entries {
        guard let child = pid_t(entry),
              let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { continue }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        if fields.count > 1, pid_t(fields[1]) == pid { result.append(child) }
    }
    return result
}

/// Starts programs with captured output in one folder and a fixed environment.
final class Launcher {
    let ioFolder: String
    let environment: [String: String]
    private var counter = 0

    init(ioFolder: String, environment: [String: String]) {
        self.ioFolder = ioFolder
        var env = ProcessInfo.processInfo.environment
        for key in env.keys where key.hasPrefix("GIT_") || key.hasPrefix("FPREP_") { env[key] = nil }
        for (key, value) in environment { env[key] = value }
        self.environment = env
    }

    /// Starts `argv` (stdout/stderr to files, stdin from /dev/null).
    func spawn(_ argv: [String], cwd: String? = nil, extraEnv: [String: String] = [:]) throws -> Spawned {
        counter += 1
        let outPath = "\(ioFolder)/io-\(counter).out", errPath = "\(ioFolder)/io-\(counter).err"
        let outFD = open(outPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        let errFD = open(errPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        let inFD = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { close(outFD); close(errFD); close(inFD) }
        guard outFD >= 0, errFD >= 0, inFD >= 0 else { throw ModelError("cannot open capture files in \(ioFolder)") }
        var actions = posix_spawn_file_actions_t()
        var attributes = posix_spawnattr_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawnattr_init(&attributes)
        defer {
            posix_spawn_file_actions_destroy(&actions)
            posix_spawnattr_destroy(&attributes)
        }
        posix_spawn_file_actions_adddup2(&actions, inFD, 0)
        posix_spawn_file_actions_adddup2(&actions, outFD, 1)
        posix_spawn_file_actions_adddup2(&actions, errFD, 2)
        if let cwd {
            let rc = cwd.withCString { addChdir(&actions, $0) }
            guard rc == 0 else { throw ModelError("posix_spawn chdir: \(String(cString: strerror(rc)))") }
        }
        var all = sigset_t(), none = sigset_t()
        sigfillset(&all)
        sigemptyset(&none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        var env = environment
        for (key, value) in extraEnv { env[key] = value }
        let cArgv = argv.map { strdup($0) } + [nil]
        let cEnv = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in cArgv { free(p) }
            for p in cEnv { free(p) }
        }
        var pid: pid_t = 0
        let rc = posix_spawnp(&pid, argv[0], &actions, &attributes, cArgv, cEnv)
        guard rc == 0 else { throw ModelError("cannot start \(argv[0]): \(String(cString: strerror(rc)))") }
        return Spawned(pid: pid, argv: argv, outPath: outPath, errPath: errPath)
    }

    /// Runs `argv` to its end, killed after `timeout` seconds.
    func run(_ argv: [String], cwd: String? = nil, timeout: Double = 30, extraEnv: [String: String] = [:]) throws -> ProcessResult {
        try spawn(argv, cwd: cwd, extraEnv: extraEnv).wait(timeout: timeout)
    }
}

/// Where the binaries are.
public enum Binaries {
    /// `fprep`: FPREP_BINARY, else next to the running executable (walking up a few folders).
    public static func fprep(near executable: String? = nil) throws -> String {
        if let explicit = ProcessInfo.processInfo.environment["FPREP_BINARY"], !explicit.isEmpty { return explicit }
        var folder = ((executable ?? (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? "") as NSString)
            .deletingLastPathComponent
        for _ in 0..<4 {
            let candidate = folder + "/fprep"
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: candidate, isDirectory: &isDirectory), !isDirectory.boolValue,
               FileManager.default.isExecutableFile(atPath: candidate) {
                return candidate
            }
            folder = (folder as NSString).deletingLastPathComponent
        }
        throw ModelError("cannot find the fprep binary next to this program (set FPREP_BINARY)")
    }

    public static let git: String = {
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            if FileManager.default.isExecutableFile(atPath: "\(dir)/git") { return "\(dir)/git" }
        }
        return "/usr/bin/git"
    }()
}

/// A failure of the model itself (not of fprep): setup, a git command of the checker.
public struct ModelError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
