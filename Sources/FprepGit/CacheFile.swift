import Glibc

/// Files fprep keeps only to save work (the index's entry offsets, the
/// journal record, the untracked cache, the agent's published status):
/// replaced whole (a temporary, then a rename, so a reader never sees half
/// of one) and never flushed to disk. One lost in a power cut costs a scan
/// or a walk; a flush of each cost the command that wrote it a commit of
/// the filesystem's journal (24 ms in a sync).
public enum CacheFile {
    /// Replaces the file at `path` with `bytes`; false when it could not
    /// (errno says why; the temporary is gone).
    @discardableResult
    public static func replace(_ path: String, with bytes: [UInt8]) -> Bool {
        let temporary = path + ".tmp-\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return false }
        let written = bytes.withUnsafeBytes { raw -> Bool in
            guard let base = raw.baseAddress else { return true }
            var done = 0
            while done < raw.count {
                let n = write(fd, base + done, raw.count - done)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { return false }
                done += n
            }
            return true
        }
        let closed = close(fd) == 0
        guard written, closed, rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            errno = code
            return false
        }
        return true
    }
}
