import FprepCore
import Glibc

/// A process id under a lock held for as long as its process runs (a
/// killed process's lock goes with it): `.fprep/agent.pid` of a served
/// replica, so `fprep status` can tell whether an agent serves it, and
/// `agent.pid` in the state folder of `fprep agent run`.
final class AgentStatusFile {
    private let fd: Int32

    /// The replica's `.fprep/agent.pid` locked (by the replica's worker,
    /// as its owner); refuses when another agent serves it. The lock goes
    /// with the open file, so the agent holds it once it has the descriptor.
    static func lockReplica(root: String) throws -> Int32 {
        let path = InPlaceHydration.agentFile(replicaRoot: root)
        return try lock(path: path, busy: "an agent already serves '\(root)'; stop it first (its process id is in '\(path)')")
    }

    init(path: String, busy: String) throws {
        fd = try Self.lock(path: path, busy: busy)
    }

    /// Takes over a descriptor locked elsewhere (`lockReplica` in the worker).
    init(locked fd: Int32) { self.fd = fd }

    private static func lock(path: String, busy: String) throws -> Int32 {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw FprepError("cannot start the agent: open '\(path)': \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw FprepError(busy)
        }
        return fd
    }

    /// Says the agent serves: its process id, once every placeholder is watched.
    func ready() throws {
        let note = "\(getpid())\n"
        _ = ftruncate(fd, 0)
        _ = note.withCString { pwrite(fd, $0, strlen($0), 0) }
    }

    deinit {
        _ = ftruncate(fd, 0)
        close(fd)
    }

    /// The process id written in the file at `path` while its lock is held;
    /// nil when nobody holds it (or its holder has not written it yet).
    static func holder(_ path: String) -> Int32? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 { return nil }
        guard errno == EWOULDBLOCK else { return nil }
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        return Int32(String(decoding: buffer[0..<count], as: UTF8.self).filter { $0.isNumber })
    }
}
