import FprepCore
import Glibc

/// A process id under a lock held for as long as its process runs (a
/// killed process's lock goes with it): `.fprep/agent.pid` of a served
/// replica, so `fprep status` can tell whether an agent serves it, and
/// `agent.pid` in the state folder of `fprep agent run`.
final class AgentStatusFile {
    private let fd: Int32

    /// The replica's: refuses when another agent serves it.
    convenience init(root: String) throws {
        let path = InPlaceHydration.agentFile(replicaRoot: root)
        try self.init(path: path, busy: "an agent already serves '\(root)'; stop it first (its process id is in '\(path)')")
    }

    init(path: String, busy: String) throws {
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw FprepError("cannot start the agent: open '\(path)': \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw FprepError(busy)
        }
    }

    /// Says the agent serves: its process id (`pid`: the agent's, written
    /// by its worker), once every placeholder is watched.
    func ready(pid: Int32 = getpid()) throws {
        let note = "\(pid)\n"
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
