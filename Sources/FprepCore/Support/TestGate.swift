import FoundationEssentials
import Glibc

/// Tests only: a point where a command waits while a test acts, so that
/// an interleaving of processes happens for sure, not by timing.
/// `FPREP_TEST_<NAME>_GATE=PATH` holds the command there: it makes
/// `PATH.waiting`, then waits while `PATH` exists. When `PATH` holds a
/// name (a repo path), only the work on that item waits.
public enum TestGate {
    /// The fill of a placeholder by the agent, after it looked at the
    /// file, the replica's lock held (`FPREP_TEST_FILL_GATE`).
    public static let fill = Gate("FPREP_TEST_FILL_GATE")
    /// A sync, once it holds the replica's lock, before it looks at
    /// anything (`FPREP_TEST_SYNC_GATE`).
    public static let sync = Gate("FPREP_TEST_SYNC_GATE")
    /// A replacement of a file (`SafeReplace`), its last check done and its
    /// lease held, right before the names are exchanged
    /// (`FPREP_TEST_BEFORE_EXCHANGE_GATE`)…
    public static let beforeExchange = Gate("FPREP_TEST_BEFORE_EXCHANGE_GATE")
    /// …and right after: the old file is at the temporary name
    /// (`FPREP_TEST_AFTER_EXCHANGE_GATE`).
    public static let afterExchange = Gate("FPREP_TEST_AFTER_EXCHANGE_GATE")
    /// An evict's punch of a file, opened for writing (a read-only one with
    /// the owner's write permission given for it) (`FPREP_TEST_PUNCH_GATE`).
    public static let punch = Gate("FPREP_TEST_PUNCH_GATE")
    /// A command's close of the state database it found sound, before its
    /// last look at the file (`FPREP_TEST_BEFORE_CLOSE_GATE`).
    public static let beforeClose = Gate("FPREP_TEST_BEFORE_CLOSE_GATE")

    public struct Gate: Sendable {
        let path: String?

        init(_ variable: String) {
            path = getenv(variable).map { String(cString: $0) }
        }

        /// Waits here while the gate is closed (its file exists), for
        /// `item` or for anything.
        public func pass(_ item: RepoPath? = nil) {
            guard let path, let named = FileManager.default.contents(atPath: path) else { return }
            guard named.isEmpty || item.map({ Array(named) == $0.bytes }) == true else { return }
            let mark = open(path + ".waiting", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            if mark >= 0 { close(mark) }
            while access(path, F_OK) == 0 { usleep(5_000) }
        }
    }
}
