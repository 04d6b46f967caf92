import CFprepSys
import Glibc

/// A file fprep writes into, opened for writing, until `close`. One its
/// owner made read-only was given the owner's write permission to be
/// opened so (a write, a punch and the placeholder marks' removal need it)
/// and gets its own mode back at `giveBackMode` or, at the latest, at
/// `close`. Closed explicitly (`defer`), not when the object goes: its
/// descriptor is used after the object's last use.
final class WritableFile {
    let fd: Int32
    private var modeToGiveBack: mode_t?

    /// Takes over `fd`, open for writing.
    init(adopting fd: Int32) { self.fd = fd }

    /// The file open as `fd` opened anew for writing (through
    /// /proc/self/fd: also a file with no name left). The agent's
    /// descriptors are read-only, so that a fill waiting for the lock does
    /// not make the file look open for writing: call with the lock held.
    init(reopening fd: Int32, shown: String) throws {
        var opened = fprep_stat()
        guard fprep_fstat(fd, &opened) == 0 else { throw SystemError("stat", shown) }
        let mode = mode_t(truncatingIfNeeded: opened.mode) & 0o7777
        if mode & S_IWUSR == 0 {
            guard fchmod(fd, mode | S_IWUSR) == 0 else { throw SystemError("open for writing", shown) }
            modeToGiveBack = mode
        }
        let writable = fprep_reopen(fd, O_RDWR)
        guard writable >= 0 else {
            let code = errno
            if let mode = modeToGiveBack { _ = fchmod(fd, mode) }
            throw SystemError("open for writing", shown, code)
        }
        self.fd = writable
    }

    /// Whether the file has a mode to get back (see `giveBackMode`).
    var madeWritable: Bool { modeToGiveBack != nil }

    /// Gives the file its own mode back now (before a last look at it).
    func giveBackMode(shown: String) throws {
        guard let mode = modeToGiveBack else { return }
        modeToGiveBack = nil
        guard fchmod(fd, mode) == 0 else { throw SystemError("give back the mode of", shown) }
    }

    func close() {
        if let mode = modeToGiveBack { _ = fchmod(fd, mode) }
        modeToGiveBack = nil
        _ = Glibc.close(fd)
    }
}
