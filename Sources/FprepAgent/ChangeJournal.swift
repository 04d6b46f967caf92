import Dispatch
import FprepCore
import Synchronization

/// The agent's journal of one replica's changes, fed by `ChangeWatch`:
/// every path something was created, deleted, moved, written or changed
/// at, numbered, so that a command asks "what changed since N" instead of
/// scanning the tree (git's fsmonitor protocol, kept in the worker). A gap
/// (the kernel's event queue overflowed, an event came from a folder not
/// followed) makes every earlier point unanswerable: the command then
/// scans everything once, and goes on from the point it was given.
final class ChangeJournal: Sendable {
    /// This journal's life: a point from another one (an agent before a
    /// restart) is never answered with paths.
    let epoch: String

    /// Paths kept at most; a point older than the oldest kept is answered
    /// with a full scan.
    static let capacity = 1 << 18

    private struct State {
        var next: UInt64 = 1
        /// The oldest point still answered with paths.
        var validFrom: UInt64 = 1
        var entries: [(sequence: UInt64, path: [UInt8])] = []
        /// Cookies are numbered as asked; the highest one the event queue delivered.
        var cookiesAsked: UInt64 = 0
        var cookiesSeen: UInt64 = 0
        var waiting: [UInt64: DispatchSemaphore] = [:]
        /// Folders of the tree that could not be followed (out of marks):
        /// changes there go unseen, so no answer is given with paths.
        var unfollowed = 0
    }
    private let state = Mutex(State())

    init() {
        var bytes = [UInt8](repeating: 0, count: 8)
        for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255) }
        epoch = bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
    }

    /// Paths (relative to the root) where something changed.
    func record(_ paths: [[UInt8]]) {
        guard !paths.isEmpty else { return }
        state.withLock { state in
            for path in paths {
                state.entries.append((state.next, path))
                state.next += 1
            }
            if state.entries.count > Self.capacity {
                let dropped = state.entries.count - Self.capacity / 2
                state.validFrom = max(state.validFrom, state.entries[dropped - 1].sequence + 1)
                state.entries.removeFirst(dropped)
            }
        }
    }

    /// Events were lost: no earlier point can be answered with paths.
    func gap() {
        state.withLock { state in
            state.next += 1
            state.validFrom = state.next
            state.entries = []
        }
    }

    /// How many folders of the tree are not followed now.
    func setUnfollowed(_ count: Int) {
        state.withLock { state in
            if count > 0 { state.next += 1; state.validFrom = state.next; state.entries = [] }
            state.unfollowed = count
        }
    }

    /// A number for the next cookie, and the semaphore its arrival signals.
    func askCookie() -> (UInt64, DispatchSemaphore) {
        state.withLock { state in
            state.cookiesAsked += 1
            let semaphore = DispatchSemaphore(value: 0)
            state.waiting[state.cookiesAsked] = semaphore
            return (state.cookiesAsked, semaphore)
        }
    }

    func forgetCookie(_ number: UInt64) {
        _ = state.withLock { $0.waiting.removeValue(forKey: number) }
    }

    /// The event queue delivered cookies up to `number`: every change made
    /// before they were made is recorded.
    func cookiesArrived(upTo number: UInt64) {
        let ready = state.withLock { state -> [DispatchSemaphore] in
            state.cookiesSeen = max(state.cookiesSeen, number)
            let done = state.waiting.filter { $0.key <= state.cookiesSeen }
            for key in done.keys { state.waiting.removeValue(forKey: key) }
            return Array(done.values)
        }
        for semaphore in ready { semaphore.signal() }
    }

    /// What changed since `point` (every path at most once), or that the
    /// asker must scan everything; with the point to ask from next time.
    func answer(since point: JournalToken?) -> JournalAnswer {
        state.withLock { state in
            let now = JournalToken(epoch: epoch, sequence: state.next)
            guard state.unfollowed == 0, let point, point.epoch == epoch, point.sequence >= state.validFrom,
                  point.sequence <= state.next else {
                return .full(now)
            }
            var seen = Set<[UInt8]>()
            var paths: [[UInt8]] = []
            // Entries are in sequence order: the first at or after the point, by bisection.
            var low = 0, high = state.entries.count
            while low < high {
                let middle = (low + high) / 2
                if state.entries[middle].sequence < point.sequence { low = middle + 1 } else { high = middle }
            }
            for entry in state.entries[low...] where seen.insert(entry.path).inserted {
                paths.append(entry.path)
            }
            return .since(now, paths)
        }
    }
}
