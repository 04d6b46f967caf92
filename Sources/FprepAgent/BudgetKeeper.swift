import Dispatch
import FprepCore
import Glibc
import Synchronization

/// Keeps a replica within its disk budget (`fprep.budget.content`,
/// `fprep.budget.minFree`; see `DiskBudget`) while the agent serves it:
/// checked at start, a few seconds after content arrives (hydrations,
/// syncs), and every minute (other programs fill the disk too). Above it,
/// the least recently used files that may go are evicted, through
/// `evict`'s own checks, and the agent's log says which. Runs in the worker,
/// as the replica's owner; the settings are read at each check.
final class BudgetKeeper: @unchecked Sendable {
    /// Seconds between checks when nothing happens.
    static let period = 60.0
    /// Seconds after content arrived before a check: a burst of hydrations is one check.
    static let settle = 2.0

    private let root: String
    private let note: @Sendable (String) -> Void
    private let state = Mutex((poked: false, stopping: false, lastProblem: ""))
    private let wake = DispatchSemaphore(value: 0)
    private var thread: BlockingThread?

    init(root: String, note: @escaping @Sendable (String) -> Void) throws {
        self.root = root
        self.note = note
        thread = try BlockingThread { [self] in run() }
    }

    /// Content arrived: check soon.
    func poke() {
        state.withLock { $0.poked = true }
        wake.signal()
    }

    func stop() {
        state.withLock { $0.stopping = true }
        wake.signal()
        thread?.join()
        thread = nil
    }

    private func run() {
        var due = 0.0  // at once: the budget may have been passed while no agent ran
        while true {
            let now = monotonicNow()
            let (stopping, poked) = state.withLock { state -> (Bool, Bool) in
                defer { state.poked = false }
                return (state.stopping, state.poked)
            }
            if stopping { return }
            if poked { due = min(due, now + Self.settle) }
            if due > now {
                _ = wake.wait(timeout: .now() + .milliseconds(Int((due - now) * 1000) + 1))
                continue
            }
            due = now + (check() ? Self.period : 5)
        }
    }

    /// One check; false when the replica was busy (tried again soon).
    /// The settings are read without opening the replica, and the budget
    /// measured with it shared: only evicting takes it alone.
    private func check() -> Bool {
        do {
            let budget = try DiskBudget.load(replicaRoot: root)
            guard budget.isSet else { return true }
            let measured = try measure(budget)
            guard measured.overBy > 0 else {
                say(problem: "")
                return true
            }
            let replica = try Replica.open(containing: root, access: Replica.Access(command: "agent (disk budget)", exclusive: true, wait: false))
            // The agent watches each file before it becomes a placeholder
            // (evict asks it; see `AgentLink`).
            let report = try replica.enforceBudget(budget)
            say(problem: "")
            guard report.overBy > 0 else { return true }
            if !report.evicted.isEmpty {
                let shown = report.evicted.prefix(5).map { "'\($0)'" }.joined(separator: ", ") + (report.evicted.count > 5 ? " and \(report.evicted.count - 5) more" : "")
                note("evicted \(counted(report.evicted.count, "file")) (\(report.bytesFreed) bytes freed) to stay within the disk budget, least recently used first: \(shown)")
            }
            if report.bytesFreed < report.overBy {
                say(problem: "disk budget: still \(report.overBy - report.bytesFreed) bytes over; every other materialized file is pinned, changed, open, hard-linked or not pushed yet")
            }
        } catch let error as FprepError where error.kind == .busy {
            return false
        } catch {
            say(problem: "disk budget: \(SyncScheduler.message(error))")
        }
        return true
    }

    /// Where the replica stands, measured with it shared (closed again on
    /// return: the worker opens one at a time).
    private func measure(_ budget: DiskBudget) throws -> BudgetReport {
        let replica = try Replica.open(containing: root, access: Replica.Access(command: "agent (disk budget)", exclusive: false, wait: false))
        return try replica.enforceBudget(budget, dryRun: true)
    }

    /// Says a problem once, until it changes.
    private func say(problem: String) {
        let changed = state.withLock { state -> Bool in
            defer { state.lastProblem = problem }
            return state.lastProblem != problem
        }
        if changed, !problem.isEmpty { note(problem) }
    }
}
