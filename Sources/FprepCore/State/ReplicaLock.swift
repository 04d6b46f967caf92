import Dispatch
import FoundationEssentials
import Glibc

/// The replica's lock (`.fprep/lock`, flock): one command that writes at a
/// time. A second one waits for it, saying who holds it, or with
/// `wait: false` stops with a clear error. The lock dies with its process,
/// so a killed command never leaves the replica locked.
final class ReplicaLock {
    private let fd: Int32
    private let exclusive: Bool
    private let holdsSlot: Bool

    enum Mode { case shared, exclusive }

    /// In a process that opens the replica from several threads at once
    /// (the agent's worker: fills, listings, its own syncs and polls), one
    /// opened replica at a time, readers included. Two SQLite connections
    /// to one database in one process are safe only as long as nothing
    /// else in it opens and closes the file (closing any descriptor drops
    /// every POSIX lock the process holds on it), and every open checks the
    /// file first (`StateFileCheck`).
    nonisolated(unsafe) static var onePerProcess = false
    private static let slot = DispatchSemaphore(value: 1)

    init(path: String, mode: Mode, command: String, wait: Bool, onWait: (String) -> Void) throws {
        exclusive = mode == .exclusive
        if Self.onePerProcess {
            if wait {
                Self.slot.wait()
            } else if Self.slot.wait(timeout: .now()) != .success {
                throw FprepError(.busy, "the replica is busy: this process has it open (try again when it is done)")
            }
        }
        holdsSlot = Self.onePerProcess
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            let error = errno
            if holdsSlot { Self.slot.signal() }
            let reason = String(cString: strerror(error))
            if [EROFS, EACCES, EPERM].contains(error) {
                throw FprepError.readOnlyState(parentFolder(of: path), reason: reason.lowercased())
            }
            throw FprepError("cannot open the replica lock '\(path)': \(reason)")
        }
        let operation = mode == .exclusive ? LOCK_EX : LOCK_SH
        if flock(fd, operation | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK else {
                close(fd)
                if holdsSlot { Self.slot.signal() }
                throw FprepError("cannot lock the replica ('\(path)'): \(String(cString: strerror(errno)))")
            }
            let holder = Self.holder(fd)
            guard wait else {
                close(fd)
                if holdsSlot { Self.slot.signal() }
                throw FprepError(.busy, "the replica is busy: \(holder) holds its lock (try again when it is done)")
            }
            onWait("waiting for \(holder) to finish with this replica…")
            while flock(fd, operation) != 0 {
                guard errno == EINTR else {
                    close(fd)
                    if holdsSlot { Self.slot.signal() }
                    throw FprepError("cannot lock the replica ('\(path)'): \(String(cString: strerror(errno)))")
                }
            }
        }
        if mode == .exclusive {
            let note = "pid \(getpid()) (fprep \(command))\n"
            _ = ftruncate(fd, 0)
            _ = note.withCString { pwrite(fd, $0, strlen($0), 0) }
        }
    }

    deinit {
        if exclusive { _ = ftruncate(fd, 0) }  // no stale "held by" note
        close(fd)  // closing the descriptor releases the flock
        if holdsSlot { Self.slot.signal() }
    }

    private static func holder(_ fd: Int32) -> String {
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        let text = count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self).trimmed : ""
        // A note left by a killed command names a process that is gone.
        if let pid = text.split(separator: " ").dropFirst().first.flatMap({ Int32($0) }), kill(pid, 0) == 0 {
            return text
        }
        return "another process"
    }
}
