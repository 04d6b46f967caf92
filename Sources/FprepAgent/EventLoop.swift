import CFprepSys
import Dispatch
import FprepCore
import Glibc
import Synchronization

/// Serves the events of one fanotify group: every access of a watched
/// placeholder waits until its content is in place, or fails with EIO when
/// that takes longer than the bound. One hydration per file at a time (later
/// accesses of the same file wait for the one in flight); each runs on a
/// worker thread, so one slow fetch holds up no other file. Only this loop
/// answers events; workers report back through a pipe that wakes it.
final class EventLoop: @unchecked Sendable {
    private let group: FanotifyGroup
    private let hydrator: Hydrator
    private let timeout: Double
    private let log: AgentLog
    private let wake: (read: Int32, write: Int32)
    private let counters: ReplicaCounters
    /// Put before a file's path in the log: "" for one replica, its root
    /// and a slash when one agent serves several.
    private let prefix: String

    private let watchlist: Watchlist
    /// Hydrations under way, with the events that wait for each (loop thread only).
    private var running: [FileKey: Job] = [:]
    /// The jobs of `running` that accesses wait for: a read-ahead puts a
    /// whole folder in `running`, and the loop looks at deadlines after
    /// every event, so it looks only at these (loop thread only).
    private var awaited: Set<FileKey> = []
    /// What workers finished, for the loop to answer.
    private let finished = Mutex<[(FileKey, Hydrator.Outcome, Double)]>([])
    /// Fetches ahead for programs walking a folder (nil: off).
    var readAhead: ReadAhead?
    /// Programs refused hydration: their accesses fail with EIO.
    var refused = RefusedPrograms("")
    /// The agent and its worker: their accesses are their own fills.
    var ownProcesses: Set<pid_t> = [getpid()]
    /// Whether a process holds the replica's lock: a fill waits for that
    /// lock, so an open of that process's is never made to wait for a fill.
    var holdsReplicaLock: (pid_t) -> Bool = { _ in false }

    private struct Waiting {
        let fd: Int32
        let deadline: Double
    }

    private final class Job {
        let placeholder: WatchedPlaceholder
        let started: Double
        /// How long an access waits for this file's content (see `bound(of:)`).
        let bound: Double
        /// Filled by a read-ahead (logged in its summary, not one line each).
        let readAhead: Bool
        var waiting: [Waiting] = []
        init(_ placeholder: WatchedPlaceholder, started: Double, bound: Double, readAhead: Bool = false) {
            self.placeholder = placeholder
            self.started = started
            self.bound = bound
            self.readAhead = readAhead
        }
    }

    /// Bytes a second any fill is expected to beat: a large file's bound
    /// grows with it (200 MB took 8-10 s on this machine's debug build,
    /// past a bound of 10 s), a small one's stays the setting.
    static let slowestRate = 4.0 * 1024 * 1024

    /// The bound for a file of `size` bytes: the setting, plus a second
    /// for each `slowestRate` bytes of it.
    private func bound(size: Int64) -> Double {
        timeout + Double(max(size, 0)) / Self.slowestRate
    }

    /// The size of the file open as `fd` (nil: it cannot be looked at).
    private static func size(of fd: Int32) -> Int64? {
        var opened = fprep_stat()
        return fprep_fstat(fd, &opened) == 0 ? opened.size : nil
    }

    init(group: FanotifyGroup, watchlist: Watchlist, hydrator: Hydrator, timeout: Double, log: AgentLog,
         wake: (read: Int32, write: Int32), counters: ReplicaCounters, prefix: String) {
        self.group = group
        self.counters = counters
        self.prefix = prefix
        self.watchlist = watchlist
        self.hydrator = hydrator
        self.timeout = timeout
        self.log = log
        self.wake = wake
    }

    /// Serves until `shouldStop` says so, then fails whatever still waits
    /// with EIO (an agent that exits lets pending accesses read zeros).
    func run(tick: () -> Void, shouldStop: () -> Bool) throws {
        while !shouldStop() {
            let ready = fprep_fanotify_wait(group.fd, wake.read, waitMilliseconds())
            if ready < 0 { throw AgentRefusal(description: "fprep: the agent cannot wait for events: \(String(cString: strerror(errno)))") }
            if ready & 2 != 0 { drainWake() }
            if ready & 1 != 0 {
                for event in try group.read() { accept(event) }
            }
            answerFinished()
            expireDeadlines()
            tick()
        }
        for (_, job) in running {
            for waiting in job.waiting { answer(waiting.fd, error: EIO) }
            job.waiting = []
        }
    }

    // MARK: - Events

    private func accept(_ event: fprep_fanotify_event) {
        guard event.fd >= 0 else { return }  // a queue overflow carries no file
        // The agent's and its worker's own accesses: a read-ahead writing
        // through its own descriptors, recovery reading a half-filled file.
        if ownProcesses.contains(event.pid) { return answer(event.fd, error: 0) }
        guard let key = FileKey(fd: event.fd) else { return answer(event.fd, error: EIO) }
        // The command making it a placeholder, at work on it (see `AgentLink`).
        if watchlist.isExempt(key, event.pid) { return answer(event.fd, error: 0) }
        let isOpen = fprep_fanotify_is_open(event.mask) != 0
        if !refused.isEmpty, let file = running[key]?.placeholder ?? watchlist.placeholder(key),
           let process = refused.refusal(of: event.pid) {
            log.write(.warning, "refused hydration of \(prefix)\(file.path) to \(process): fprep.agent.refuse names it; the access failed with EIO")
            return answer(event.fd, error: EIO)
        }
        if let job = running[key] {
            let waiting = Waiting(fd: event.fd, deadline: monotonicNow() + job.bound)
            if holdsReplicaLock(event.pid) { return answerLockHolder(event, job.placeholder, isOpen: isOpen) }
            job.waiting.append(waiting)
            awaited.insert(key)
            return
        }
        guard let placeholder = watchlist.placeholder(key) else { return answer(event.fd, error: 0) }
        let size = Self.size(of: event.fd)
        // Emptied: a program truncated it (its change), and there is
        // nothing to fill; the fill would say so only after a fetch and the
        // lock (offline: never, and the program's write or read failed with
        // EIO). One holding bytes goes to the fill, which tells the user's
        // bytes from a half-filled file's under the lock.
        if size == 0 {
            group.unmark(event.fd)
            watchlist.forget(key)
            log.write(.info, "no longer watching \(prefix)\(placeholder.path): it is empty")
            return answer(event.fd, error: 0)
        }
        if holdsReplicaLock(event.pid) { return answerLockHolder(event, placeholder, isOpen: isOpen) }
        let job = Job(placeholder, started: monotonicNow(), bound: size.map(bound(size:)) ?? timeout)
        job.waiting.append(Waiting(fd: event.fd, deadline: job.started + job.bound))
        running[key] = job
        awaited.insert(key)
        hydrate(key, placeholder, through: event.fd)
        if let readAhead { startReadAhead(readAhead, after: placeholder) }
    }

    /// An open or access by a process that holds the replica's lock, which
    /// a fill needs: waiting would last until the bound, and end in EIO.
    /// Its opens go on. Such a process settled any interrupted fill when it
    /// took the lock, so bytes in the file are the user's: it reads them. A
    /// file with no bytes at all is a placeholder nobody can fill now: a
    /// read fails with EIO at once, never zeros.
    private func answerLockHolder(_ event: fprep_fanotify_event, _ placeholder: WatchedPlaceholder, isOpen: Bool) {
        // Its open goes on (a command opens a placeholder knowing it is one).
        guard !isOpen, fprep_holds_no_data(event.fd) == 1 else { return answer(event.fd, error: 0) }
        log.write(.warning, "cannot hydrate \(prefix)\(placeholder.path) for process \(event.pid): it holds the replica's lock, which the fill needs; the access failed with EIO")
        answer(event.fd, error: EIO)
    }

    /// One file's own hydration, through the descriptor of an access to it
    /// (the very file, wherever it is now), on a thread of its own.
    private func hydrate(_ key: FileKey, _ placeholder: WatchedPlaceholder, through eventFD: Int32) {
        // The worker's own descriptor: the event's is closed when it is
        // answered, which may come first (a reader's bound passed).
        let fd = dup(eventFD)
        guard fd >= 0 else {
            finished.withLock { $0.append((key, .failed("dup: \(String(cString: strerror(errno)))"), monotonicNow())) }
            return
        }
        let hydrator = self.hydrator
        let group = self.group
        // A thread of its own: the hydration waits on the worker's fetch,
        // and no reader's may wait for another's (`BlockingThread`).
        BlockingThread.start { [self] in
            let outcome = hydrator.hydrate(placeholder, through: fd)
            switch outcome {
            case .hydrated, .notAPlaceholder: group.unmark(fd)
            case .failed: break
            }
            close(fd)
            finished.withLock { $0.append((key, outcome, monotonicNow())) }
            wakeUp()
        }
    }

    /// Hydrations in a row in one folder: the rest of it in one fetch, each
    /// file a job that later accesses wait for.
    private func startReadAhead(_ readAhead: ReadAhead, after placeholder: WatchedPlaceholder) {
        let batch = readAhead.plan(after: placeholder, watchlist: watchlist) { running[$0] != nil }
        guard !batch.isEmpty else { return }
        let now = monotonicNow()
        for (key, file, size) in batch { running[key] = Job(file, started: now, bound: bound(size: size), readAhead: true) }
        let group = self.group
        let indexWritten = hydrator.indexWritten
        BlockingThread.start { [self] in
            readAhead.run(batch.map { ($0.key, $0.file) }, group: group, indexWritten: indexWritten) { [self] outcomes in
                let end = monotonicNow()
                finished.withLock { $0.append(contentsOf: outcomes.map { ($0.0, $0.1, end) }) }
                wakeUp()
            }
        }
    }

    private func answerFinished() {
        let results = finished.withLock { value -> [(FileKey, Hydrator.Outcome, Double)] in defer { value = [] }; return value }
        for (key, outcome, end) in results {
            guard let job = running.removeValue(forKey: key) else { continue }
            awaited.remove(key)
            let path = prefix + job.placeholder.path.description
            let milliseconds = Int(((end - job.started) * 1000).rounded())
            switch outcome {
            case .hydrated(let bytes):
                watchlist.forget(key)
                if !job.readAhead { log.write(.info, "hydrated \(path) (\(AgentLog.size(bytes)), \(milliseconds) ms)") }
                counters.hydrated()
                for waiting in job.waiting { answer(waiting.fd, error: 0) }
            case .notAPlaceholder(let why):
                watchlist.forget(key)
                log.write(.info, "no longer watching \(path): \(why)")
                for waiting in job.waiting { answer(waiting.fd, error: 0) }
            case .failed where job.readAhead && job.waiting.isEmpty:
                break  // fetched ahead for nobody yet: a later access tries again
            case .failed(let why) where job.readAhead:
                // Read ahead, not filled (moved meanwhile, the batch's fetch
                // failed): a read-ahead never fails a reader; the file's own
                // hydration through the access's descriptor decides.
                let retry = Job(job.placeholder, started: job.started, bound: job.bound)
                retry.waiting = job.waiting
                running[key] = retry
                awaited.insert(key)
                log.write(.info, "read ahead did not fill \(path) (\(why)); hydrating it on its own")
                hydrate(key, job.placeholder, through: job.waiting[0].fd)
            case .failed(let why):
                log.write(.error, "cannot hydrate \(path) (\(milliseconds) ms): \(why); \(job.waiting.count) access\(job.waiting.count == 1 ? "" : "es") failed with EIO")
                counters.failed("cannot hydrate \(path): \(why)")
                for waiting in job.waiting { answer(waiting.fd, error: EIO) }
            }
        }
    }

    /// Fails the accesses whose bound passed; their hydration goes on, and
    /// a later access finds the file filled (or starts again).
    private func expireDeadlines() {
        let now = monotonicNow()
        for key in awaited {
            guard let job = running[key] else { continue }
            let expired = job.waiting.filter { $0.deadline <= now }
            guard !expired.isEmpty else { continue }
            job.waiting.removeAll { $0.deadline <= now }
            if job.waiting.isEmpty { awaited.remove(key) }
            let path = prefix + job.placeholder.path.description
            log.write(.error, "cannot hydrate \(path): no content after \(Self.seconds(job.bound)); \(expired.count) access\(expired.count == 1 ? "" : "es") failed with EIO")
            counters.failed("cannot hydrate \(path): no content after \(Self.seconds(job.bound))")
            for waiting in expired { answer(waiting.fd, error: EIO) }
        }
    }

    /// Closes the event's descriptor, then answers by its number (the
    /// kernel finds the event by the number, not through the descriptor):
    /// the descriptor is open for writing, and closed only after the
    /// answer it could still be there when the program goes on, which
    /// then finds its own file "open in another program" (a lease refused).
    private func answer(_ fd: Int32, error: Int32) {
        close(fd)
        group.answer(fd, error: error)
    }

    private func waitMilliseconds() -> Int32 {
        let now = monotonicNow()
        var next = now + 0.5
        for key in awaited { for waiting in running[key]?.waiting ?? [] { next = min(next, waiting.deadline) } }
        return Int32(max(0, min(500, ((next - now) * 1000).rounded(.up))))
    }

    private func wakeUp() {
        var byte: UInt8 = 1
        _ = Glibc.write(wake.write, &byte, 1)
    }

    private func drainWake() {
        var buffer = [UInt8](repeating: 0, count: 256)
        while Glibc.read(wake.read, &buffer, buffer.count) > 0 {}
    }

    private static func seconds(_ value: Double) -> String {
        let tenths = (value * 10).rounded() / 10
        return tenths == tenths.rounded() ? "\(Int(tenths)) s" : "\(tenths) s"
    }
}
