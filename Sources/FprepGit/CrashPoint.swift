import Glibc
import Synchronization

/// A test-only crash switch for the randomized model test and crash tests:
/// with `FPREP_CRASH_AT=N` in the environment, the process kills itself
/// with SIGKILL when it reaches its Nth durable step (a database commit, an
/// index write, a reference update, a rename into place, a push), as a
/// power cut or `kill -9` would stop it there. Without the variable each
/// call is one load of a constant.
public enum CrashPoint {
    private static let target: Int = {
        guard let raw = getenv("FPREP_CRASH_AT"), let n = Int(String(cString: raw)), n > 0 else { return 0 }
        return n
    }()

    // Counted across threads: some durable steps run two at a time (the
    // swaps of a materialize), and each must count once.
    private static let reached = Atomic<Int>(0)

    /// Counts one durable step; at the Nth, dies at once (no cleanup, no flush).
    public static func reach() {
        guard target > 0 else { return }
        if reached.add(1, ordering: .relaxed).newValue == target { kill(getpid(), SIGKILL) }
    }
}
