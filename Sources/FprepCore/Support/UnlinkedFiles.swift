import CFprepSys
import Dispatch
import Glibc
import Synchronization

/// Descriptors of files with no name left, closed on a thread of their
/// own. The last close of such a file frees it: its inode (a read of the
/// inode bitmap on a cold cache) and its blocks (on a filesystem mounted
/// with `discard`, a discard of each extent that waits for the device), a
/// millisecond or more a file that a sync removing a few dozen of them
/// need not wait for.
///
/// Only a file whose last name is gone is handed over: a descriptor this
/// process keeps open on a file that still has a name would make its own
/// lease on that file (`SafeReplace`) fail later.
enum UnlinkedFiles {
    /// The descriptors waiting, whether the closer's thread was started,
    /// and whether it waits for more (`more`).
    private static let queue = Mutex<(waiting: [Int32], started: Bool, idle: Bool)>(([], false, false))
    private static let more = DispatchSemaphore(value: 0)

    /// Closes `fd`: at once when its file still has a name, else on the
    /// closer's thread.
    static func close(_ fd: Int32) {
        var raw = fprep_stat()
        guard fprep_fstat(fd, &raw) == 0, raw.nlink == 0 else {
            _ = Glibc.close(fd)
            return
        }
        let (start, wake) = queue.withLock { state -> (Bool, Bool) in
            state.waiting.append(fd)
            defer { state.started = true; state.idle = false }
            return (!state.started, state.idle)
        }
        // One thread for the process, started once and then waiting: a
        // thread was started for each batch, and a swap's files come one
        // by one (1,000 files materialized started 477 threads).
        if start {
            do {
                _ = try BlockingThread { drain() }
            } catch {
                // No thread to be had (never Dispatch's pool, which the
                // closer would hold for good): closed here, and the next
                // close tries again.
                let taken = queue.withLock { state -> [Int32] in
                    defer { state.waiting = []; state.started = false }
                    return state.waiting
                }
                for fd in taken { _ = Glibc.close(fd) }
                return
            }
        }
        if wake { more.signal() }
    }

    private static func drain() {
        while true {
            let taken = queue.withLock { state -> [Int32] in
                defer { state.waiting = [] }
                if state.waiting.isEmpty { state.idle = true }
                return state.waiting
            }
            if taken.isEmpty {
                more.wait()
                continue
            }
            for fd in taken { _ = Glibc.close(fd) }
        }
    }
}
