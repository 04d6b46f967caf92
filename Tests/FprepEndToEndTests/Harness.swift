import Foundation
import FprepTestSupport
import Glibc
import Testing

// The end-to-end harness: runs the real `fprep` binary and `git` in a temporary
// folder per test, builds remotes (normal ones through fprep, hostile ones with
// git's plumbing), serves them with `git daemon`, and looks at what landed on
// disk with lstat/lgetxattr. Nothing here uses fprep's own code.

// MARK: - C calls the Glibc module does not import

private struct LibC: @unchecked Sendable {
    typealias LGetXattr = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeMutableRawPointer?, Int) -> Int
    typealias AddChdir = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
    let lgetxattr: LGetXattr
    let addChdir: AddChdir
    typealias AddClosefrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    let addClosefrom: AddClosefrom

    static let shared: LibC = {
        guard let handle = dlopen(nil, RTLD_NOW) else { fatalError("dlopen(nil) failed") }
        func symbol<T>(_ name: String, _ type: T.Type) -> T {
            guard let raw = dlsym(handle, name) else { fatalError("no \(name) in the C library") }
            return unsafeBitCast(raw, to: type)
        }
        return LibC(lgetxattr: symbol("lgetxattr", LGetXattr.self),
                    addChdir: symbol("posix_spawn_file_actions_addchdir_np", AddChdir.self),
                    addClosefrom: symbol("posix_spawn_file_actions_addclosefrom_np", AddClosefrom.self))
    }()
}

// MARK: - Errors and constants

struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The fixed date every remote's commits get (2023-11-14T22:13:20Z).
let fixedDate: Int64 = 1_700_000_000
let fixedDateISO = "2023-11-14T22:13:20Z"

func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) * 1e-9
}

func sleepSeconds(_ seconds: Double) { usleep(useconds_t(max(0, seconds) * 1_000_000)) }

// MARK: - Binaries

enum Binaries {
    /// The `fprep` built with this test bundle: next to the test executable.
    static let fprep: String = {
        if let explicit = ProcessInfo.processInfo.environment["FPREP_E2E_BINARY"], !explicit.isEmpty { return explicit }
        var candidates: [String] = []
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            var folder = (exe as NSString).deletingLastPathComponent
            // The bundle may be a folder (…/x.xctest/…); walk up a few levels.
            for _ in 0..<4 {
                candidates.append(folder + "/fprep")
                folder = (folder as NSString).deletingLastPathComponent
            }
        }
        for candidate in candidates where FileManager.default.isExecutableFile(atPath: candidate) {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: candidate, isDirectory: &isDirectory), !isDirectory.boolValue {
                return candidate
            }
        }
        fatalError("cannot find the fprep binary near \(candidates.first ?? "/proc/self/exe") (set FPREP_E2E_BINARY)")
    }()

    static let git: String = {
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            if FileManager.default.isExecutableFile(atPath: "\(dir)/git") { return "\(dir)/git" }
        }
        return "/usr/bin/git"
    }()

    /// git-daemon itself (not the `git` wrapper, which would stand between us
    /// and the daemon for signals).
    static let gitDaemon: String = {
        if let out = try? Shell.run([git, "--exec-path"]), out.status == 0 {
            let path = out.stdout.trimmingCharacters(in: .whitespacesAndNewlines) + "/git-daemon"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return "/usr/lib/git-core/git-daemon"
    }()
}

// MARK: - Running programs

/// What a finished program did.
struct RunResult: CustomStringConvertible {
    let argv: [String]
    /// The exit status, or 128+signal when killed.
    let status: Int32
    let killedBySignal: Int32?
    let stdoutData: Data
    let stderrData: Data
    let seconds: Double
    let timedOut: Bool

    var stdout: String { String(decoding: stdoutData, as: UTF8.self) }
    var stderr: String { String(decoding: stderrData, as: UTF8.self) }
    var stderrLines: [String] { stderr.split(separator: "\n", omittingEmptySubsequences: true).map(String.init) }

    var description: String {
        "`\(argv.joined(separator: " "))` → status \(status)\(timedOut ? " (TIMED OUT)" : "")\n--- stdout\n\(stdout.prefix(3000))\n--- stderr\n\(stderr.prefix(3000))"
    }

    /// Parses stdout as a JSON object.
    func json() throws -> [String: Any] {
        guard let object = try JSONSerialization.jsonObject(with: stdoutData) as? [String: Any] else {
            throw HarnessError("stdout is not a JSON object: \(self)")
        }
        return object
    }
}

/// A started program: wait for it, or kill it.
final class Spawned: @unchecked Sendable {
    let pid: pid_t
    let argv: [String]
    private let outPath: String
    private let errPath: String
    private let started: Double
    private var reaped: Int32?

    fileprivate init(pid: pid_t, argv: [String], outPath: String, errPath: String) {
        self.pid = pid
        self.argv = argv
        self.outPath = outPath
        self.errPath = errPath
        started = monotonicSeconds()
    }

    /// Still running (not reaped yet and not a zombie we reaped now)?
    var isRunning: Bool {
        if reaped != nil { return false }
        var status: Int32 = 0
        let rc = waitpid(pid, &status, WNOHANG)
        if rc == pid { reaped = status; return false }
        return rc == 0
    }

    func signal(_ sig: Int32) { if reaped == nil { kill(pid, sig) } }

    /// What Ctrl-C on a terminal does: the signal to the whole process group
    /// (started with `newProcessGroup`), children included.
    func signalGroup(_ sig: Int32) { if reaped == nil { kill(-pid, sig) } }

    /// What it has written to stdout so far (it may still be running).
    var stdoutSoFar: String {
        String(decoding: FileManager.default.contents(atPath: outPath) ?? Data(), as: UTF8.self)
    }

    /// What it has written to stderr so far (it may still be running).
    var stderrSoFar: String {
        String(decoding: FileManager.default.contents(atPath: errPath) ?? Data(), as: UTF8.self)
    }

    /// Waits up to `timeout` seconds; on timeout kills it (-9) and marks the result.
    func wait(timeout: Double = 60) -> RunResult {
        var timedOut = false
        let deadline = monotonicSeconds() + timeout
        while reaped == nil {
            var status: Int32 = 0
            let rc = waitpid(pid, &status, WNOHANG)
            if rc == pid { reaped = status; break }
            if rc < 0 && errno != EINTR { reaped = 0; break }
            if monotonicSeconds() > deadline {
                timedOut = true
                for child in Shell.childProcesses(of: pid) { kill(child, SIGKILL) }
                kill(pid, SIGKILL)
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                reaped = status
                break
            }
            usleep(2_000)
        }
        let raw = reaped ?? 0
        let sig = raw & 0x7f
        let out = FileManager.default.contents(atPath: outPath) ?? Data()
        let err = FileManager.default.contents(atPath: errPath) ?? Data()
        unlink(outPath)
        unlink(errPath)
        return RunResult(argv: argv, status: sig == 0 ? (raw >> 8) & 0xff : 128 + sig,
                         killedBySignal: sig == 0 ? nil : sig, stdoutData: out, stderrData: err,
                         seconds: monotonicSeconds() - started, timedOut: timedOut)
    }

    /// kill -9 (and its direct children, which a killed fprep would orphan), then reap.
    func kill9() -> RunResult {
        for child in Shell.childProcesses(of: pid) { kill(child, SIGKILL) }
        signal(SIGKILL)
        return wait(timeout: 30)
    }
}

enum Shell {
    private static let counter = Counter()

    /// Starts `argv` with stdout/stderr captured to files (no pipes: nothing to
    /// drain, nothing to deadlock), stdin from `stdin` bytes (or /dev/null).
    static func spawn(_ argv: [String], cwd: String? = nil, env: [String: String] = [:],
                      stdin: Data? = nil, ioFolder: String, newProcessGroup: Bool = false) throws -> Spawned {
        precondition(!argv.isEmpty)
        let folder = ioFolder
        let n = counter.next()
        let outPath = "\(folder)/.io-\(n).out", errPath = "\(folder)/.io-\(n).err", inPath = "\(folder)/.io-\(n).in"
        let outFD = open(outPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        let errFD = open(errPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        var inFD: Int32
        if let stdin {
            _ = FileManager.default.createFile(atPath: inPath, contents: stdin)
            inFD = open(inPath, O_RDONLY | O_CLOEXEC)
            unlink(inPath)
        } else {
            inFD = open("/dev/null", O_RDONLY | O_CLOEXEC)
        }
        defer { close(outFD); close(errFD); close(inFD) }
        guard outFD >= 0, errFD >= 0, inFD >= 0 else { throw HarnessError("cannot open capture files in \(folder)") }

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
        // Nothing else the test process has open (other tests' files and
        // sockets, opened without close-on-exec) lives on in the child.
        _ = LibC.shared.addClosefrom(&actions, 3)
        if let cwd {
            let rc = cwd.withCString { LibC.shared.addChdir(&actions, $0) }
            guard rc == 0 else { throw HarnessError("posix_spawn chdir: \(String(cString: strerror(rc)))") }
        }
        var all = sigset_t(), none = sigset_t()
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
        for key in environment.keys where key.hasPrefix("GIT_") { environment[key] = nil }
        for (key, value) in env { environment[key] = value }
        let cArgv = argv.map { strdup($0) } + [nil]
        let cEnv = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in cArgv { free(p) }
            for p in cEnv { free(p) }
        }
        var pid: pid_t = 0
        let rc = posix_spawnp(&pid, argv[0], &actions, &attributes, cArgv, cEnv)
        guard rc == 0 else { throw HarnessError("cannot start \(argv[0]): \(String(cString: strerror(rc)))") }
        return Spawned(pid: pid, argv: argv, outPath: outPath, errPath: errPath)
    }

    /// Runs `argv` to its end (killed after `timeout` seconds). Output is
    /// captured in `ioFolder`, or in a temporary folder removed afterwards.
    static func run(_ argv: [String], cwd: String? = nil, env: [String: String] = [:], stdin: Data? = nil,
                    timeout: Double = 120, ioFolder: String? = nil) throws -> RunResult {
        if let ioFolder {
            return try spawn(argv, cwd: cwd, env: env, stdin: stdin, ioFolder: ioFolder).wait(timeout: timeout)
        }
        var template = Array((NSTemporaryDirectory() + "fprep-e2e-io-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw HarnessError("mkdtemp failed") }
        let folder = String(cString: made)
        defer { rmdir(folder) }
        return try spawn(argv, cwd: cwd, env: env, stdin: stdin, ioFolder: folder).wait(timeout: timeout)
    }

    /// Direct children of `pid` (from /proc/*/stat).
    static func childProcesses(of pid: pid_t) -> [pid_t] {
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
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    func next() -> Int { lock.lock(); defer { lock.unlock() }; value += 1; return value }
}

// MARK: - Sandbox: a temporary folder per test

/// A temporary folder for one test, removed by `withSandbox` when the test ends.
final class Sandbox: @unchecked Sendable {
    let path: String
    private var daemons: [GitDaemon] = []
    private var spawned: [Spawned] = []

    init() throws {
        umask(0o022)  // placeholders are 0666/0777 & umask: 644/755 as the tests expect
        var template = Array((NSTemporaryDirectory() + "fprep-e2e-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw HarnessError("mkdtemp failed") }
        // Physical path, so it compares equal with what fprep prints.
        path = URL(fileURLWithPath: String(cString: made)).resolvingSymlinksInPath().path
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: io, withIntermediateDirectories: true)
    }

    var home: String { path + "/.home" }
    var io: String { path + "/.io" }

    func at(_ relative: String) -> String { path + "/" + relative }

    /// The environment every program of the test gets: fixed identity and
    /// dates, no global or system git config.
    var baseEnvironment: [String: String] {
        ["HOME": home, "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C",
         "GIT_AUTHOR_NAME": "E2E Tester", "GIT_AUTHOR_EMAIL": "e2e@example.com",
         "GIT_COMMITTER_NAME": "E2E Tester", "GIT_COMMITTER_EMAIL": "e2e@example.com",
         "GIT_AUTHOR_DATE": "@\(fixedDate)", "GIT_COMMITTER_DATE": "@\(fixedDate)"]
    }

    private func environment(_ extra: [String: String]) -> [String: String] {
        var env = baseEnvironment
        for (k, v) in extra { env[k] = v }
        return env
    }

    /// Runs fprep.
    @discardableResult
    func fprep(_ args: [String], cwd: String? = nil, env: [String: String] = [:], stdin: Data? = nil,
               timeout: Double = 60) throws -> RunResult {
        try Shell.run([Binaries.fprep] + args, cwd: cwd ?? path, env: environment(env), stdin: stdin,
                      timeout: timeout, ioFolder: io)
    }

    /// Starts fprep without waiting for it.
    /// `newProcessGroup`: it leads a group of its own, as a terminal's
    /// foreground job does, so `signalGroup` reaches its git children too.
    func spawnFprep(_ args: [String], cwd: String? = nil, env: [String: String] = [:],
                    newProcessGroup: Bool = false) throws -> Spawned {
        let started = try Shell.spawn([Binaries.fprep] + args, cwd: cwd ?? path, env: environment(env), ioFolder: io,
                                      newProcessGroup: newProcessGroup)
        spawned.append(started)
        return started
    }

    /// Starts any program without waiting for it; killed at the end of the test if still running.
    func spawn(_ argv: [String], cwd: String? = nil, env: [String: String] = [:]) throws -> Spawned {
        let started = try Shell.spawn(argv, cwd: cwd ?? path, env: environment(env), ioFolder: io)
        spawned.append(started)
        return started
    }

    /// Runs git.
    @discardableResult
    func git(_ args: [String], cwd: String? = nil, env: [String: String] = [:], stdin: Data? = nil) throws -> RunResult {
        try Shell.run([Binaries.git] + args, cwd: cwd ?? path, env: environment(env), stdin: stdin, ioFolder: io)
    }

    /// Runs git and returns its trimmed stdout; throws unless it exits 0.
    @discardableResult
    func gitOK(_ args: [String], cwd: String? = nil, env: [String: String] = [:], stdin: Data? = nil) throws -> String {
        let result = try git(args, cwd: cwd, env: env, stdin: stdin)
        guard result.status == 0 else { throw HarnessError("git failed: \(result)") }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Runs fprep and requires exit 0.
    @discardableResult
    func fprepOK(_ args: [String], cwd: String? = nil, env: [String: String] = [:], stdin: Data? = nil,
                 sourceLocation: SourceLocation = #_sourceLocation) throws -> RunResult {
        let result = try fprep(args, cwd: cwd, env: env, stdin: stdin)
        guard result.status == 0 else {
            Issue.record("fprep failed: \(result)", sourceLocation: sourceLocation)
            throw HarnessError("fprep failed: \(result)")
        }
        return result
    }

    /// Runs fprep with --json and parses its output; requires exit 0.
    func fprepJSON(_ args: [String], cwd: String? = nil, env: [String: String] = [:],
                   sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: Any] {
        try fprepOK(args + ["--json"], cwd: cwd, env: env, sourceLocation: sourceLocation).json()
    }

    /// Starts a git daemon serving `base`; stopped when the test ends.
    func startDaemon(base: String) throws -> GitDaemon {
        let daemon = try GitDaemon(base: base, sandbox: self)
        daemons.append(daemon)
        return daemon
    }

    fileprivate func cleanUp() {
        for process in spawned where process.isRunning {
            for child in Shell.childProcesses(of: process.pid) { kill(child, SIGKILL) }
            _ = process.kill9()
        }
        for daemon in daemons { daemon.stop() }
        _ = try? Shell.run(["/bin/chmod", "-R", "u+rwX", path])
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// Runs `body` with a fresh sandbox, removed (daemons and leftover processes
/// stopped) when it returns or throws.
func withSandbox<T>(_ body: (Sandbox) throws -> T) throws -> T {
    let sandbox = try Sandbox()
    defer { sandbox.cleanUp() }
    return try body(sandbox)
}

// MARK: - git daemon

final class GitDaemon: @unchecked Sendable {
    let port: UInt16
    let base: String
    private let process: Spawned
    private var running = true

    fileprivate init(base: String, sandbox: Sandbox) throws {
        self.base = base
        var lastError = ""
        for _ in 0..<5 {
            let port = try Self.freePort()
            let process = try Shell.spawn(
                [Binaries.gitDaemon, "--reuseaddr", "--export-all", "--base-path=\(base)",
                 "--listen=127.0.0.1", "--port=\(port)", base],
                cwd: base, env: sandbox.baseEnvironment, ioFolder: sandbox.io, newProcessGroup: true)
            let deadline = monotonicSeconds() + patienceSeconds
            while process.isRunning && !isListening(port: port, by: process.pid) && monotonicSeconds() < deadline { usleep(10_000) }
            if isListening(port: port, by: process.pid) {
                self.port = port
                self.process = process
                return
            }
            kill(-process.pid, SIGKILL)
            lastError = process.wait(timeout: 60).stderr
        }
        throw HarnessError("git daemon did not start: \(lastError)")
    }

    func url(_ name: String) -> String { "git://127.0.0.1:\(port)/\(name)" }

    /// Freezes the daemon: connections are accepted by the kernel and then hang.
    func pause() { kill(-process.pid, SIGSTOP) }
    func resume() { kill(-process.pid, SIGCONT) }

    /// Stops the daemon and every connection it serves; the port then refuses.
    func stop() {
        guard running else { return }
        running = false
        kill(-process.pid, SIGCONT)
        kill(-process.pid, SIGTERM)
        let deadline = monotonicSeconds() + 5
        while process.isRunning && monotonicSeconds() < deadline { usleep(10_000) }
        kill(-process.pid, SIGKILL)
        _ = process.wait(timeout: 60)
    }

    /// A port free right now (bind to 0 and read it back).
    static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw HarnessError("bind failed") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return UInt16(bigEndian: address.sin_port)
    }
}

// MARK: - Files: writing trees, stat, xattrs

/// What to put in a source folder for `import-tree`.
enum Node {
    case file(Data, executable: Bool = false)
    case symlink(String)

    static func text(_ s: String, executable: Bool = false) -> Node { .file(Data(s.utf8), executable: executable) }
}

/// Deterministic pseudo-random bytes (xorshift), so remotes are the same every run.
func pseudoRandomBytes(_ count: Int, seed: UInt64) -> Data {
    var state = seed &* 0x9E37_79B9_7F4A_7C15 | 1
    var bytes = [UInt8](repeating: 0, count: count)
    for i in 0..<count {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        bytes[i] = UInt8(truncatingIfNeeded: state >> 24)
    }
    return Data(bytes)
}

/// Writes `nodes` (relative path → node) below `root`.
func writeTree(_ nodes: [String: Node], at root: String) throws {
    try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    for (relative, node) in nodes.sorted(by: { $0.key < $1.key }) {
        let path = root + "/" + relative
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                withIntermediateDirectories: true)
        switch node {
        case .file(let data, let executable):
            guard FileManager.default.createFile(atPath: path, contents: data) else { throw HarnessError("cannot write \(path)") }
            chmod(path, executable ? 0o755 : 0o644)
            // The fixture's files carry the fixed date: import-tree keeps a
            // file's own date, and the tests expect placeholders to show it.
            var times = utimbuf(actime: time_t(fixedDate), modtime: time_t(fixedDate))
            utime(path, &times)
        case .symlink(let target):
            guard symlink(target, path) == 0 else { throw HarnessError("cannot symlink \(path)") }
        }
    }
}

struct FileInfo {
    let size: Int64
    let blocks: Int64
    let mtime: Int64
    let mode: UInt32
    let inode: UInt64

    var type: UInt32 { mode & UInt32(S_IFMT) }
    var isRegular: Bool { type == UInt32(S_IFREG) }
    var isDirectory: Bool { type == UInt32(S_IFDIR) }
    var isSymlink: Bool { type == UInt32(S_IFLNK) }
    var permissions: UInt32 { mode & 0o7777 }
}

func lstatInfo(_ path: String) -> FileInfo? {
    var st = stat()
    guard lstat(path, &st) == 0 else { return nil }
    return FileInfo(size: Int64(st.st_size), blocks: Int64(st.st_blocks), mtime: Int64(st.st_mtim.tv_sec),
                    mode: UInt32(st.st_mode), inode: UInt64(st.st_ino))
}

func exists(_ path: String) -> Bool { lstatInfo(path) != nil }

/// An extended attribute of the file itself (never following a symlink).
func xattr(_ path: String, _ name: String) -> [UInt8]? {
    var buffer = [UInt8](repeating: 0, count: 256)
    let count = buffer.withUnsafeMutableBytes { LibC.shared.lgetxattr(path, name, $0.baseAddress, $0.count) }
    guard count >= 0 else { return nil }
    return Array(buffer[0..<count])
}

func xattrString(_ path: String, _ name: String) -> String? {
    xattr(path, name).map { String(decoding: $0, as: UTF8.self) }
}

func readLink(_ path: String) -> String? { try? FileManager.default.destinationOfSymbolicLink(atPath: path) }

func contents(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

/// Raw bytes of a 40-hex object id.
func rawID(_ hex: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var index = hex.startIndex
    while index < hex.endIndex {
        let next = hex.index(index, offsetBy: 2)
        bytes.append(UInt8(hex[index..<next], radix: 16)!)
        index = next
    }
    return bytes
}

/// Every path below `root` (relative, sorted), optionally leaving out some top-level names.
func walk(_ root: String, skipping: Set<String> = []) -> [String] {
    var result: [String] = []
    func visit(_ relative: String) {
        let full = relative.isEmpty ? root : root + "/" + relative
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: full) else { return }
        for name in names.sorted() {
            if relative.isEmpty && skipping.contains(name) { continue }
            let child = relative.isEmpty ? name : relative + "/" + name
            result.append(child)
            if let info = lstatInfo(root + "/" + child), info.isDirectory { visit(child) }
        }
    }
    visit("")
    return result
}

/// A description of everything below `root` — type, mode, size, blocks, mtime,
/// content, link target, fprep xattrs — to show that a command changed nothing.
func snapshot(_ root: String, skipping: Set<String> = []) -> [String: String] {
    guard let top = lstatInfo(root) else { return [:] }
    var result: [String: String] = [".": "mode \(String(top.mode, radix: 8))"]
    for relative in walk(root, skipping: skipping) {
        let path = root + "/" + relative
        guard let info = lstatInfo(path) else { continue }
        var line = "mode \(String(info.mode, radix: 8))"
        if info.isRegular {
            let data = contents(path) ?? Data()
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in data { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
            line += " size \(info.size) blocks \(info.blocks) mtime \(info.mtime) fnv \(String(hash, radix: 16))"
            line += " state \(xattrString(path, "user.fprep.state") ?? "-") blob \(xattr(path, "user.fprep.blob")?.count ?? -1)"
        } else if info.isSymlink {
            line += " -> \(readLink(path) ?? "?")"
        }
        result[relative] = line
    }
    return result
}

/// Text that shows a Swift runtime crash or an uncaught error dump.
func looksLikeCrash(_ text: String) -> Bool {
    ["Fatal error", "Stack dump", "Current stack trace", "💣", "Program crashed", "SIGSEGV", "SIGILL",
     "Segmentation fault", "backtrace", "Thread 0"].contains { text.contains($0) }
}

/// The contract for every bad input: a non-zero exit, exactly one line on
/// stderr starting `fprep: ` (with --json: one JSON object `{"error",
/// "status"}` whose status is the exit status), and no crash trace.
func expectOneLineError(_ result: RunResult, status expected: Int32? = nil, mentioning: [String] = [],
                        sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(result.status != 0, "expected a failure: \(result)", sourceLocation: sourceLocation)
    #expect(result.killedBySignal == nil, "killed by a signal: \(result)", sourceLocation: sourceLocation)
    if let expected {
        #expect(result.status == expected, "exit status: \(result)", sourceLocation: sourceLocation)
    }
    let lines = result.stderrLines
    #expect(lines.count == 1, "expected exactly one stderr line: \(result)", sourceLocation: sourceLocation)
    if let line = lines.first, line.hasPrefix("{") {
        let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        #expect(object?["error"] is String && (object?["status"] as? Int).map(Int32.init) == result.status,
                "a JSON error must say the error and the exit status: \(result)", sourceLocation: sourceLocation)
    } else {
        #expect(lines.first?.hasPrefix("fprep: ") == true, "stderr must start with 'fprep: ': \(result)",
                sourceLocation: sourceLocation)
    }
    #expect(!looksLikeCrash(result.stderr + result.stdout), "crash trace: \(result)", sourceLocation: sourceLocation)
    for word in mentioning {
        #expect(result.stderr.contains(word), "stderr should mention '\(word)': \(result)", sourceLocation: sourceLocation)
    }
}

// MARK: - Remotes

/// The fixture most tests use: text, an executable, nested folders, an empty
/// file, a binary file, and two symlinks (one into a parent folder).
let standardTree: [String: Node] = [
    "a.txt": .text("hello\n"),
    "run.sh": .text("#!/bin/sh\necho run\n", executable: true),
    "empty.txt": .file(Data()),
    "bin.dat": .file(pseudoRandomBytes(10_000, seed: 1)),
    "docs/readme.md": .text("# Readme\n\nSome words.\n"),
    "docs/deep/nested.txt": .file(pseudoRandomBytes(5_000, seed: 2)),
    "docs/deep/tool": .file(pseudoRandomBytes(300, seed: 3), executable: true),
    "link": .symlink("a.txt"),
    "docs/up": .symlink("../a.txt"),
]

/// A remote made by `fprep init-remote` + `fprep import-tree`, and what went into it.
struct Remote {
    let path: String
    let source: String
    let nodes: [String: Node]
    let commit: String

    var files: [String: Data] {
        nodes.compactMapValues { if case .file(let data, _) = $0 { data } else { nil } }
    }
    var symlinks: [String: String] {
        nodes.compactMapValues { if case .symlink(let target) = $0 { target } else { nil } }
    }
    func isExecutable(_ path: String) -> Bool {
        if case .file(_, let executable) = nodes[path] { return executable }
        return false
    }
}

extension Sandbox {
    /// Writes `nodes` into a source folder and imports them into a new fprep remote.
    func makeRemote(_ name: String = "remote.git", nodes: [String: Node] = standardTree,
                    domain: String? = nil) throws -> Remote {
        let source = at("src-" + name)
        try writeTree(nodes, at: source)
        let remote = at(name)
        try fprepOK(["init-remote", remote] + (domain.map { ["--domain", $0] } ?? []))
        try fprepOK(["import-tree", source, "--into", remote, "-m", "Import fixture"])
        let commit = try gitOK(["rev-parse", "refs/heads/main"], cwd: remote)
        return Remote(path: remote, source: source, nodes: nodes, commit: commit)
    }

    /// Writes one object with `git hash-object -w` (literally, for hostile trees).
    func writeObject(_ data: Data, type: String = "blob", in repo: String) throws -> String {
        var args = ["hash-object", "-w", "--stdin"]
        if type != "blob" { args += ["-t", type, "--literally"] }
        return try gitOK(args, cwd: repo, stdin: data)
    }

    /// A tree written byte by byte, so names `git mktree` refuses ('a/b') or
    /// duplicates still make a tree object.
    func writeRawTree(_ entries: [(mode: String, name: [UInt8], id: String)], in repo: String) throws -> String {
        var bytes: [UInt8] = []
        for entry in entries {
            bytes += Array(entry.mode.utf8) + [0x20] + entry.name + [0] + rawID(entry.id)
        }
        return try writeObject(Data(bytes), type: "tree", in: repo)
    }

    /// A bare repository (not made by fprep) whose main branch is one commit of `tree`.
    /// It allows partial clone, as every server fprep clones without `--full` must
    /// (see `HostedSizeTests.serverWithoutPartialClone`).
    func makeBareRemote(_ name: String, tree: (String) throws -> String) throws -> String {
        let repo = at(name)
        try gitOK(["init", "-q", "--bare", "-b", "main", repo])
        try gitOK(["config", "uploadpack.allowFilter", "true"], cwd: repo)
        try gitOK(["config", "uploadpack.allowAnySHA1InWant", "true"], cwd: repo)
        let treeID = try tree(repo)
        let commit = try gitOK(["commit-tree", "-m", "hostile", treeID], cwd: repo)
        try gitOK(["update-ref", "refs/heads/main", commit], cwd: repo)
        return repo
    }

    /// Clones and returns the parsed --json result; requires exit 0.
    func clone(_ url: String, _ directory: String, extra: [String] = []) throws -> [String: Any] {
        try fprepJSON(["clone", url, directory] + extra)
    }

    /// A remote of the standard tree and its replica at `replica`, with
    /// `materialized` given their content.
    func standardReplica(materializing materialized: [String] = []) throws -> (remote: Remote, replica: String) {
        let remote = try makeRemote()
        let replica = at("replica")
        _ = try clone(remote.path, replica)
        if !materialized.isEmpty { try fprepOK(["materialize"] + materialized, cwd: replica) }
        return (remote, replica)
    }
}

extension Dictionary where Key == String, Value == Any {
    func int(_ key: String) -> Int? { (self[key] as? NSNumber)?.intValue ?? self[key] as? Int }
    func string(_ key: String) -> String? { self[key] as? String }
    func array(_ key: String) -> [Any] { self[key] as? [Any] ?? [] }
    func objects(_ key: String) -> [[String: Any]] { self[key] as? [[String: Any]] ?? [] }
    func strings(_ key: String) -> [String] { self[key] as? [String] ?? [] }
}

extension Sandbox {
    /// Commits `files` to the remote's main from a plain git clone, as
    /// another device would; a nil content deletes the file.
    /// Pushes one commit to `remote`: `moves` (`git mv`), then `files` written (nil: removed).
    func pushToRemote(_ remote: Remote, _ files: [String: Data?], moves: [(String, String)] = [], message: String) throws {
        let work = at("work-\(UUID().uuidString.prefix(8))")
        try gitOK(["clone", "-q", remote.path, work])
        for (from, to) in moves { try gitOK(["mv", from, to], cwd: work) }
        for (path, data) in files {
            guard let data else {
                try gitOK(["rm", "-q", path], cwd: work)
                continue
            }
            try FileManager.default.createDirectory(atPath: (work + "/" + path as NSString).deletingLastPathComponent,
                                                    withIntermediateDirectories: true)
            try data.write(to: URL(fileURLWithPath: work + "/" + path))
        }
        try gitOK(["add", "-A"], cwd: work)
        try gitOK(["commit", "-q", "-m", message], cwd: work)
        try gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)
    }
}
