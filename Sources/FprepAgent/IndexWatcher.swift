import CFprepSys
import Dispatch
import FprepCore
import Glibc
import Synchronization

/// Notices that the index changed (a sync, clone, materialize or evict
/// wrote it) and has the worker list what changed among the placeholders, off the loop's thread,
/// with the replica's lock shared and never waited for (a busy replica is
/// looked at on a later tick).
final class IndexWatcher: @unchecked Sendable {
    private let root: String
    private let seen: Mutex<fprep_stat>
    private let busy = Mutex(false)
    private let queue = DispatchQueue(label: "fprep.agent.rescan")
    /// What changed among the placeholders since the last listing (through
    /// the replica's worker); nil when busy.
    private let list: @Sendable () -> PlaceholderListing.Changes?
    /// Whether the agent's own fills are writing the index now: a change
    /// seen then is most likely theirs, acknowledged when they answer, and
    /// listing 10^5 placeholders for each (a read-ahead writes the index
    /// once a chunk) took a third of the worker's time in a `grep -r`.
    private let ownWritesUnderWay: @Sendable () -> Bool
    /// When a change was first seen while own writes were under way: after
    /// `patience` it is listed anyway (another command's write must not
    /// wait behind a reader that never stops).
    private let deferredSince = Mutex<Double?>(nil)
    static let patience = 2.0

    init(root: String, list: @escaping @Sendable () -> PlaceholderListing.Changes?,
         ownWritesUnderWay: @escaping @Sendable () -> Bool = { false }) {
        self.root = root
        self.list = list
        self.ownWritesUnderWay = ownWritesUnderWay
        seen = Mutex(Self.stat(root))
    }

    /// The agent wrote the index itself (`before` → `after`): nothing to
    /// look for, unless someone else wrote it since the last look.
    func acknowledge(before: fprep_stat, after: fprep_stat) {
        seen.withLock { seen in
            if Self.same(seen, before) { seen = after }
        }
    }

    func poll(_ deliver: @escaping @Sendable (PlaceholderListing.Changes) -> Void) {
        let now = Self.stat(root)
        let changed = seen.withLock { !Self.same($0, now) }
        guard changed else {
            deferredSince.withLock { $0 = nil }
            return
        }
        if ownWritesUnderWay() {
            let clock = monotonicNow()
            let since = deferredSince.withLock { value -> Double in
                if value == nil { value = clock }
                return value ?? clock
            }
            guard clock - since >= Self.patience else { return }
        }
        deferredSince.withLock { $0 = nil }
        guard busy.withLock({ value -> Bool in defer { value = true }; return !value }) else { return }
        queue.async { [self] in
            defer { busy.withLock { $0 = false } }
            guard let changes = list() else { return }
            seen.withLock { $0 = now }
            deliver(changes)
        }
    }

    /// The stat of the replica's index file.
    static func stat(_ root: String) -> fprep_stat {
        var raw = fprep_stat()
        _ = fprep_lstat_at(AT_FDCWD, root + "/.git/index", &raw)
        return raw
    }

    private static func same(_ a: fprep_stat, _ b: fprep_stat) -> Bool {
        a.ino == b.ino && a.size == b.size && a.mtime_sec == b.mtime_sec && a.mtime_nsec == b.mtime_nsec && a.ctime_nsec == b.ctime_nsec
    }
}
