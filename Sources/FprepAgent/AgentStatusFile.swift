import FprepCore
import Glibc

/// `.fprep/agent.pid`: the agent's process id, under a lock held for as
/// long as it runs, so `fprep status` can tell whether an agent serves the
/// replica (a killed agent's lock goes with it).
final class AgentStatusFile {
    private let fd: Int32

    init(root: String) throws {
        let path = InPlaceHydration.agentFile(replicaRoot: root)
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw FprepError("cannot start the agent: open '\(path)': \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw FprepError("an agent already serves '\(root)'; stop it first (its process id is in '\(path)')")
        }
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
}
