import Dispatch
import FprepCore
import Glibc
import Synchronization

/// What tells the worker the remote moved (the push service's stream,
/// followed by `FprepServer.PushFollower`), kept while the worker serves.
public protocol RemoteSignals: AnyObject, Sendable {
    func stop()
}

/// Starts the remote's signals for the replica at a root, or nil when it has
/// none (no push service recorded): `onPush` when the remote moved,
/// `connection` when the service's stream opens (nil) or is lost (why),
/// `note` for one line in the agent's log.
public typealias RemoteSignalsStarter = @Sendable (_ root: String, _ onPush: @escaping @Sendable () -> Void,
                                                   _ connection: @escaping @Sendable (_ service: String, _ lost: String?) -> Void,
                                                   _ note: @escaping @Sendable (String) -> Void) throws -> (any RemoteSignals)?

/// The worker's own syncs of its replica (`fprep.agent.sync`, on unless a
/// replica's config turns it off): a sync
/// shortly after the user's changes settle (`fprep.agent.syncDelay`
/// milliseconds after the last one, at most 10 times that after the first:
/// a burst of saves is one sync, and a folder that never stops changing
/// still syncs), a sync at once when the push service says the remote
/// moved, and a look at the remote every `fprep.agent.pollSeconds`
/// (`git ls-remote`; a sync only when the remote moved). A file still open
/// for writing is left to the sync after its writer closes it. One sync
/// when serving starts catches up what changed while no agent ran. Runs as
/// the replica's owner, on a thread of its own, taking the replica's lock
/// only while it syncs (a busy replica is tried again a second later).
final class SyncScheduler: @unchecked Sendable {
    struct Settings: Sendable {
        /// On unless the replica's config turns it off (`fprep.agent.sync
        /// false`: the agent only hydrates).
        var enabled = true
        /// Whether the worker keeps the change journal (`fprep.agent.journal`;
        /// by default when it syncs, which it needs for). Its folder marks
        /// cost every read in the replica about 0.2 µs (measured: +17 % for
        /// a program reading 4 KiB at a time, a few % at 128 KiB), for a
        /// status and a sync by hand that need not scan the tree.
        var journal = true
        var delay: Double = 0.5
        var pollSeconds: Double = 60

        init() {}

        init(_ replica: Replica) throws {
            if let text = try replica.setting("fprep.agent.sync") {
                guard let value = Self.boolean(text) else {
                    throw FprepError("fprep.agent.sync is '\(text)', not true or false, in \(replica.root)/.git/config; set it to true or false")
                }
                enabled = value
            }
            journal = enabled
            if let text = try replica.setting("fprep.agent.journal") {
                guard let value = Self.boolean(text) else {
                    throw FprepError("fprep.agent.journal is '\(text)', not true or false, in \(replica.root)/.git/config; set it to true or false")
                }
                guard value || !enabled else {
                    throw FprepError("fprep.agent.journal is false but fprep.agent.sync is true in \(replica.root)/.git/config: the agent's syncs follow the journal; set fprep.agent.sync false too, or unset fprep.agent.journal")
                }
                journal = value
            }
            if let text = try replica.setting("fprep.agent.syncDelay") {
                guard let milliseconds = Int(text), milliseconds >= 0, milliseconds <= 3_600_000 else {
                    throw FprepError("fprep.agent.syncDelay is '\(text)', not a number of milliseconds, in \(replica.root)/.git/config; set it to a number such as 1000")
                }
                delay = Double(milliseconds) / 1000
            }
            if let text = try replica.setting("fprep.agent.pollSeconds") {
                guard let seconds = Double(text), seconds >= 0, seconds <= 86_400 else {
                    throw FprepError("fprep.agent.pollSeconds is '\(text)', not a number of seconds, in \(replica.root)/.git/config; set it to a number such as 60, or 0 to never poll")
                }
                pollSeconds = seconds
            }
        }

        /// git's spellings of a boolean.
        static func boolean(_ text: String) -> Bool? {
            switch text.lowercased() {
            case "true", "yes", "on", "1": return true
            case "false", "no", "off", "0": return false
            default: return nil
            }
        }
    }

    /// What the last sync did, for the agent's log and status.
    struct Outcome: Sendable {
        var succeeded: Bool
        /// One line: what came in and went out, or why it failed.
        var summary: String
        /// Local changes left for a later sync (files still open for writing).
        var waiting: Int
        var anchor: String
    }

    private struct State {
        var firstChange: Double?
        var lastChange: Double = 0
        /// The push service said the remote moved: sync at once (what the
        /// user changed meanwhile goes with it); pushes during that sync
        /// make one more.
        var pushed = false
        var stopping = false
    }

    private let root: String
    private let settings: Settings
    private let report: @Sendable (Outcome) -> Void
    private let state = Mutex(State())
    private let wake = DispatchSemaphore(value: 0)
    private var thread: BlockingThread?

    init(root: String, settings: Settings, report: @escaping @Sendable (Outcome) -> Void) throws {
        self.root = root
        self.settings = settings
        self.report = report
        // The sync that catches up what changed while no agent ran.
        state.withLock { $0.firstChange = -.infinity }
        thread = try BlockingThread { [self] in run() }
    }

    /// The push service said the remote moved: a sync now, not after the
    /// delay that lets a user's burst of saves settle.
    func pushed() {
        state.withLock { $0.pushed = true }
        wake.signal()
    }

    /// The user changed something.
    func changed() {
        let now = monotonicNow()
        state.withLock { state in
            if state.firstChange == nil { state.firstChange = now }
            state.lastChange = now
        }
        wake.signal()
    }

    func stop() {
        state.withLock { $0.stopping = true }
        wake.signal()
        thread?.join()
        thread = nil
    }

    private func run() {
        var nextPoll = monotonicNow() + settings.pollSeconds
        while true {
            let now = monotonicNow()
            let (stopping, localDue) = state.withLock { state -> (Bool, Double?) in
                if state.pushed { return (state.stopping, now) }
                guard let first = state.firstChange else { return (state.stopping, nil) }
                return (state.stopping, min(state.lastChange + settings.delay, first + max(settings.delay * 10, 1)))
            }
            if stopping { return }
            let pollDue = settings.pollSeconds > 0 ? nextPoll : Double.infinity
            let due = min(localDue ?? .infinity, pollDue)
            if due > now {
                let wait = min(due - now, 3600)
                _ = wake.wait(timeout: .now() + .milliseconds(Int(wait * 1000) + 1))
                continue
            }
            if let localDue, localDue <= now {
                state.withLock {
                    $0.firstChange = nil
                    $0.pushed = false
                }
                if !sync() { retryLater() }
            } else {
                nextPoll = now + settings.pollSeconds
                if pollFindsWork(), !sync() { retryLater() }
            }
        }
    }

    /// A sync that could not run (the replica busy): again in a second.
    private func retryLater() {
        let now = monotonicNow()
        state.withLock { state in
            state.firstChange = min(state.firstChange ?? now, now)
            state.lastChange = max(state.lastChange, now + 1 - settings.delay)
        }
    }

    private func pollFindsWork() -> Bool {
        guard let replica = try? Replica.open(containing: root, access: Replica.Access(command: "agent", exclusive: false, wait: false)) else {
            return false
        }
        do {
            return try replica.pollFindsWork()
        } catch {
            report(Outcome(succeeded: false, summary: "cannot reach the remote: \(Self.message(error))", waiting: 0,
                           anchor: replica.anchor?.hex ?? ""))
            return false
        }
    }

    /// Syncs once; false when the replica was busy (nothing done).
    private func sync() -> Bool {
        let replica: Replica
        do {
            replica = try Replica.open(containing: root, access: Replica.Access(command: "agent (sync)", exclusive: true, wait: false))
        } catch let error as FprepError where error.kind == .busy {
            return false
        } catch {
            report(Outcome(succeeded: false, summary: Self.message(error), waiting: 0, anchor: ""))
            return true
        }
        do {
            let result = try replica.sync(deferOpenForWriting: true)
            report(Outcome(succeeded: true, summary: Self.summary(result), waiting: result.waitingForWriters.count, anchor: result.to ?? ""))
        } catch {
            report(Outcome(succeeded: false, summary: Self.message(error), waiting: 0, anchor: replica.anchor?.hex ?? ""))
        }
        return true
    }

    /// The summary of a sync that found nothing to do (not logged).
    static let nothing = "nothing to sync"

    static func summary(_ report: SyncReport) -> String {
        var parts: [String] = []
        if !report.localChanges.isEmpty { parts.append("\(report.localChanges.count) local change\(report.localChanges.count == 1 ? "" : "s") committed") }
        if report.added + report.changed + report.deleted + report.moved > 0 {
            parts.append("took in \(report.added) added, \(report.changed) changed, \(report.deleted) deleted, \(report.moved) moved")
        }
        if let pushed = report.pushed { parts.append("pushed \(pushed.prefix(12))") }
        if parts.isEmpty, report.from != report.to, let to = report.to { parts.append("now at \(to.prefix(12))") }
        if let waiting = report.waitingToPush { parts.append("waiting to push: \(waiting)") }
        if !report.conflicts.isEmpty { parts.append("\(report.conflicts.count) conflict cop\(report.conflicts.count == 1 ? "y" : "ies") kept") }
        let open = report.waitingForWriters
        if !open.isEmpty { parts.append("left for later (open for writing): \(open.prefix(5).joined(separator: ", "))\(open.count > 5 ? ", …" : "")") }
        return parts.isEmpty ? nothing : parts.joined(separator: "; ")
    }

    static func message(_ error: any Error) -> String {
        var text = (error as? FprepError)?.message ?? "\(error)"
        if text.hasPrefix("fprep: ") { text = String(text.dropFirst(7)) }
        return text
    }
}
