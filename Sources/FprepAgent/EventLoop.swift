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

    /// Watched placeholders by file (loop thread only).
    private var watched: [FileKey: WatchedPlaceholder] = [:]
    /// Hydrations under way, with the events that wait for each (loop thread only).
    private var running: [FileKey: Job] = [:]
    /// What workers finished, for the loop to answer.
    private let finished = Mutex<[(FileKey, Hydrator.Outcome, Double)]>([])
    /// Placeholders a rescan found, for the loop to mark.
    private let found = Mutex<[WatchedPlaceholder]?>(nil)
    private let workers = DispatchQueue(label: "fprep.agent.hydrate", attributes: .concurrent)

    private struct Waiting {
        let fd: Int32
        let deadline: Double
    }

    private final class Job {
        let placeholder: WatchedPlaceholder
        let started: Double
        var waiting: [Waiting] = []
        init(_ placeholder: WatchedPlaceholder, started: Double) {
            self.placeholder = placeholder
            self.started = started
        }
    }

    init(group: FanotifyGroup, hydrator: Hydrator, timeout: Double, log: AgentLog, wake: (read: Int32, write: Int32)) {
        self.group = group
        self.hydrator = hydrator
        self.timeout = timeout
        self.log = log
        self.wake = wake
    }

    var watchedCount: Int { watched.count }

    /// Marks `placeholders` not yet watched; returns how many were marked.
    /// With `complete` (a full rescan), files no longer listed are
    /// forgotten (a materialize replaced them; their marks stay on inodes
    /// nothing names any more until the agent exits).
    @discardableResult
    func watch(_ placeholders: [WatchedPlaceholder], rootFD: Int32, complete: Bool = false) -> Int {
        var marked = 0
        var listed = Set<FileKey>()
        defer {
            if complete {
                for key in Array(watched.keys) where !listed.contains(key) && running[key] == nil { watched.removeValue(forKey: key) }
            }
        }
        for placeholder in placeholders {
            let fd = openPath(rootFD, placeholder.path)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            guard let key = FileKey(fd: fd) else { continue }
            listed.insert(key)
            guard watched[key] == nil, running[key] == nil else { continue }
            guard group.mark(fd) else {
                log.write(.warning, "cannot watch \(placeholder.path): \(String(cString: strerror(errno)))")
                continue
            }
            watched[key] = placeholder
            marked += 1
        }
        return marked
    }

    /// Hands the result of a rescan to the loop (from any thread).
    func offer(_ placeholders: [WatchedPlaceholder]) {
        found.withLock { $0 = placeholders }
        wakeUp()
    }

    /// Serves until `shouldStop` says so, then fails whatever still waits
    /// with EIO (an agent that exits lets pending accesses read zeros).
    func run(rootFD: Int32, tick: () -> Void, shouldStop: () -> Bool) throws {
        while !shouldStop() {
            let ready = fprep_fanotify_wait(group.fd, wake.read, waitMilliseconds())
            if ready < 0 { throw AgentRefusal(description: "fprep: the agent cannot wait for events: \(String(cString: strerror(errno)))") }
            if ready & 2 != 0 { drainWake() }
            if ready & 1 != 0 {
                for event in try group.read() { accept(event) }
            }
            answerFinished()
            if let placeholders = found.withLock({ value -> [WatchedPlaceholder]? in defer { value = nil }; return value }) {
                let marked = watch(placeholders, rootFD: rootFD, complete: true)
                if marked > 0 { log.write(.info, "watching \(marked) new placeholder\(marked == 1 ? "" : "s") (\(watched.count) in all)") }
            }
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
        guard let key = FileKey(fd: event.fd) else { return answer(event.fd, error: EIO) }
        let waiting = Waiting(fd: event.fd, deadline: monotonicNow() + timeout)
        if let job = running[key] {
            job.waiting.append(waiting)
            return
        }
        guard let placeholder = watched[key] else { return answer(event.fd, error: 0) }
        let job = Job(placeholder, started: monotonicNow())
        job.waiting.append(waiting)
        running[key] = job
        // The worker's own descriptor: the event's is closed when it is
        // answered, which may come first (a reader's bound passed).
        let fd = dup(event.fd)
        guard fd >= 0 else {
            finished.withLock { $0.append((key, .failed("dup: \(String(cString: strerror(errno)))"), monotonicNow())) }
            return
        }
        let hydrator = self.hydrator
        let group = self.group
        workers.async { [self] in
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

    private func answerFinished() {
        let results = finished.withLock { value -> [(FileKey, Hydrator.Outcome, Double)] in defer { value = [] }; return value }
        for (key, outcome, end) in results {
            guard let job = running.removeValue(forKey: key) else { continue }
            let path = job.placeholder.path
            let milliseconds = Int(((end - job.started) * 1000).rounded())
            switch outcome {
            case .hydrated(let bytes):
                watched.removeValue(forKey: key)
                log.write(.info, "hydrated \(path) (\(AgentLog.size(bytes)), \(milliseconds) ms)")
                for waiting in job.waiting { answer(waiting.fd, error: 0) }
            case .notAPlaceholder(let why):
                watched.removeValue(forKey: key)
                log.write(.info, "no longer watching \(path): \(why)")
                for waiting in job.waiting { answer(waiting.fd, error: 0) }
            case .failed(let why):
                log.write(.error, "cannot hydrate \(path) (\(milliseconds) ms): \(why); \(job.waiting.count) access\(job.waiting.count == 1 ? "" : "es") failed with EIO")
                for waiting in job.waiting { answer(waiting.fd, error: EIO) }
            }
        }
    }

    /// Fails the accesses whose bound passed; their hydration goes on, and
    /// a later access finds the file filled (or starts again).
    private func expireDeadlines() {
        let now = monotonicNow()
        for (_, job) in running {
            let expired = job.waiting.filter { $0.deadline <= now }
            guard !expired.isEmpty else { continue }
            job.waiting.removeAll { $0.deadline <= now }
            log.write(.error, "cannot hydrate \(job.placeholder.path): no content after \(Self.seconds(timeout)); \(expired.count) access\(expired.count == 1 ? "" : "es") failed with EIO")
            for waiting in expired { answer(waiting.fd, error: EIO) }
        }
    }

    private func answer(_ fd: Int32, error: Int32) {
        group.answer(fd, error: error)
        close(fd)
    }

    private func waitMilliseconds() -> Int32 {
        let now = monotonicNow()
        var next = now + 0.5
        for (_, job) in running { for waiting in job.waiting { next = min(next, waiting.deadline) } }
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
        value == value.rounded() ? "\(Int(value)) s" : "\(value) s"
    }
}

/// Opens `path` beneath `rootFD` for marking only: a folder swapped for a
/// symlink must not make the agent watch a file outside the replica.
func openPath(_ rootFD: Int32, _ path: RepoPath) -> Int32 {
    var bytes = path.bytes.map { CChar(bitPattern: $0) }
    bytes.append(0)
    return fprep_open_for_mark(rootFD, bytes)
}
