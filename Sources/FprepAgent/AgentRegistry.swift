import FoundationEssentials
import FprepCore
import Glibc

/// The replicas `fprep agent run` serves: `replicas` in the agent's state
/// folder, one replica root a line. Changed under `replicas.lock` and
/// replaced whole by a rename, so the running agent (which watches the
/// folder) never reads half a list.
public struct AgentRegistry: Sendable {
    /// Where the registry, the running agent's pid and its status live.
    public let folder: String

    public static let defaultFolder = "/var/lib/fprep/agent"
    /// Overrides the default folder (tests, a user's own agent).
    public static let environmentVariable = "FPREP_AGENT_STATE_DIR"

    /// The state folder: `option` when given, else the environment's, else the default.
    public init(option: String?) {
        let chosen = option ?? getenv(Self.environmentVariable).map { String(cString: $0) }
        folder = Self.absolute(chosen.flatMap { $0.isEmpty ? nil : $0 } ?? Self.defaultFolder)
    }

    var file: String { folder + "/replicas" }

    /// The registered replica roots, in the order they were added.
    public func read() throws -> [String] {
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return [] }
            throw failure("read", file)
        }
        defer { close(fd) }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 { if errno == EINTR { continue }; throw failure("read", file) }
            if count == 0 { break }
            data.append(contentsOf: buffer[0..<count])
        }
        return data.split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) }.filter { $0.hasPrefix("/") }
    }

    /// Registers the replica holding `path`; returns its root and whether
    /// it was new (false: registered already).
    public func add(_ path: String) throws -> (root: String, added: Bool) {
        guard let root = Replica.findRoot(from: path) else {
            throw FprepError(.usage, "'\(path)' is not inside an fprep replica; register a replica's folder (one 'fprep clone URL DIR' made)")
        }
        guard !root.utf8.contains(UInt8(ascii: "\n")) else {
            throw FprepError("cannot register '\(root)' with the agent: its path holds a line break; move the replica")
        }
        let added = try change { roots in
            guard !roots.contains(root) else { return false }
            roots.append(root)
            return true
        }
        return (root, added)
    }

    /// Unregisters `path` (a replica root as registered, or any path inside
    /// it; the folder may be gone). Returns the root removed, nil when none was.
    public func remove(_ path: String) throws -> String? {
        let absolute = Self.absolute(path)
        let candidates = [absolute, Replica.findRoot(from: path)].compactMap { $0 }
        return try change { roots in
            guard let found = roots.first(where: { candidates.contains($0) }) else { return nil }
            roots.removeAll { $0 == found }
            return found
        }
    }

    /// Runs `edit` on the list with the registry's lock held, and writes
    /// the result (a temporary renamed over the list) when it changed.
    private func change<T>(_ edit: (inout [String]) -> T) throws -> T {
        try makeFolder()
        let lockPath = folder + "/replicas.lock"
        let lock = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard lock >= 0 else { throw failure("open", lockPath) }
        defer { close(lock) }
        while flock(lock, LOCK_EX) != 0 {
            guard errno == EINTR else { throw failure("lock", lockPath) }
        }
        var roots = try read()
        let before = roots
        let result = edit(&roots)
        guard roots != before else { return result }
        let text = roots.map { $0 + "\n" }.joined()
        let temporary = file + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw failure("write", temporary) }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { fprepWriteAll(fd, $0) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written, synced, rename(temporary, file) == 0 else { throw failure("write", file) }
        return result
    }

    /// Makes the state folder (and its parents) when missing.
    func makeFolder() throws {
        var current = ""
        for part in folder.split(separator: "/") {
            current += "/" + part
            if mkdir(current, 0o755) != 0 && errno != EEXIST { throw failure("make the folder", current) }
        }
    }

    private func failure(_ what: String, _ path: String) -> FprepError {
        let reason = String(cString: strerror(errno))
        let hint = errno == EACCES || errno == EPERM || errno == EROFS
            ? "run it with sudo, or pick another state folder with --state-dir"
            : "check the agent's state folder '\(folder)'"
        return FprepError("cannot \(what) '\(path)': \(reason); \(hint)")
    }

    /// `path` from the root (relative to the current folder), resolved
    /// through symlinks where it exists.
    static func absolute(_ path: String) -> String {
        var full = path
        if !path.hasPrefix("/") {
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let current = getcwd(&buffer, buffer.count).map { String(cString: $0) } ?? "/"
            full = (current == "/" ? "" : current) + "/" + path
        }
        guard let resolved = realpath(full, nil) else {
            // Gone: its spelling, without "." or a trailing slash.
            let parts = full.split(separator: "/").filter { $0 != "." }
            return "/" + parts.joined(separator: "/")
        }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}

/// Writes every byte of `bytes` to `fd`.
func fprepWriteAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
    guard let base = bytes.baseAddress else { return true }
    var done = 0
    while done < bytes.count {
        let count = Glibc.write(fd, base + done, bytes.count - done)
        if count < 0 { if errno == EINTR { continue }; return false }
        done += count
    }
    return true
}
