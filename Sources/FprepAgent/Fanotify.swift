import CFprepSys
import FprepCore
import Glibc

/// Why this machine cannot serve pre-content events, one line each.
public struct AgentRefusal: Error, CustomStringConvertible {
    public let description: String
}

/// A fanotify pre-content group: the descriptor the kernel queues events
/// on, and the marks that say which files raise them.
final class FanotifyGroup: @unchecked Sendable {
    let fd: Int32

    /// Tells the refusals apart on `probeFile` (any regular file on the
    /// replica's filesystem; nil: the privilege only), before anything is watched.
    /// `rerun`: the command a refusal for want of privilege suggests.
    static func probe(_ probeFile: String?, replica: String, rerun: String? = nil) throws {
        switch fprep_fanotify_probe(AT_FDCWD, probeFile) {
        case Int32(FPREP_FANOTIFY_SUPPORTED): return
        case Int32(FPREP_FANOTIFY_NOT_PRIVILEGED):
            throw AgentRefusal(description: "fprep: cannot start the agent: fanotify needs root (or CAP_SYS_ADMIN); run 'sudo \(rerun ?? "fprep agent -C \(replica)")'")
        case Int32(FPREP_FANOTIFY_NO_KERNEL_SUPPORT):
            throw AgentRefusal(description: "fprep: cannot start the agent: this kernel has no fanotify pre-content events (Linux 6.14 or later is needed); use 'fprep materialize' instead")
        case Int32(FPREP_FANOTIFY_NO_FILESYSTEM_SUPPORT):
            throw AgentRefusal(description: "fprep: cannot start the agent: the filesystem of '\(replica)' has no fanotify pre-content events (tmpfs and network filesystems lack them); keep the replica on ext4, xfs or btrfs, or use 'fprep materialize'")
        default:
            throw AgentRefusal(description: "fprep: cannot start the agent: fanotify on '\(replica)' failed: \(String(cString: strerror(errno)))")
        }
    }

    init() throws {
        fd = fprep_fanotify_init()
        guard fd >= 0 else { throw AgentRefusal(description: "fprep: cannot start the agent: fanotify_init: \(String(cString: strerror(errno)))") }
    }

    deinit { close(fd) }

    /// Marks the open file `fd` (an O_PATH descriptor will do).
    func mark(_ file: Int32) -> Bool { fprep_fanotify_mark_fd(fd, file) == 0 }

    /// Removes the mark of the file open as `file` (a hydrated file).
    func unmark(_ file: Int32) { _ = fprep_fanotify_unmark_fd(fd, file) }

    /// Removes the mark of the file `name` in the folder open as `folder`,
    /// without opening the file (never through a symlink).
    func unmark(in folder: Int32, name: [CChar]) { _ = fprep_fanotify_unmark_at(fd, folder, name) }

    /// The events queued now (none: empty).
    func read() throws -> [fprep_fanotify_event] {
        var buffer = [fprep_fanotify_event](repeating: fprep_fanotify_event(), count: 256)
        let count = buffer.withUnsafeMutableBufferPointer { fprep_fanotify_read(fd, $0.baseAddress, $0.count) }
        if count < 0 {
            if errno == EAGAIN || errno == EINTR { return [] }
            throw AgentRefusal(description: "fprep: the agent cannot read its events: \(String(cString: strerror(errno)))")
        }
        return Array(buffer[0..<count])
    }

    /// Lets the access of event `file` go on (error 0), or fails it with `error`.
    func answer(_ file: Int32, error: Int32) { _ = fprep_fanotify_answer(fd, file, error) }
}

/// One file, whatever name it is reached by.
struct FileKey: Hashable {
    let device: Int64
    let inode: Int64
    /// An inode number is given again once its file is gone (a sync that
    /// replaces a placeholder, then makes another): with the generation, a
    /// new file is never taken for a watched one whose mark died with it.
    let generation: Int64

    init?(fd: Int32) {
        var raw = fprep_stat()
        guard fprep_fstat(fd, &raw) == 0 else { return nil }
        device = raw.dev
        inode = raw.ino
        generation = fprep_file_generation(fd, nil)
    }
}
