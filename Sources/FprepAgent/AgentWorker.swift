import CFprepSys
import Dispatch
import FoundationEssentials
import FprepCore
import FprepGit
import Glibc
import Synchronization

/// The agent's side of a replica's worker: a process (`fprep agent worker`)
/// that runs as the replica's owner (`ReplicaOwner`) and does everything
/// the agent does in the replica: opens and locks `.fprep/agent.pid` (and
/// hands it to the agent, which holds it while it serves), takes the
/// replica's lock, settles its journal, lists the placeholders, fetches content with git
/// and writes it through the descriptor of each event, which the agent
/// passes over a unix socket. The agent keeps the fanotify group, its
/// marks, the keeper and every answer to the kernel: it fails an access
/// with EIO itself when the worker dies or takes too long. The worker dies
/// with the agent (a kill -9 of it included).
final class WorkerClient: @unchecked Sendable {
    let pid: pid_t
    private let channel: WorkerChannel
    private let replies = Replies()
    private var reader: BlockingThread?
    private let ending = Mutex<String?>(nil)
    private let synced = SyncedHandler()

    /// Starts the worker of the replica at `root` as `owner` and waits
    /// until it holds the replica; returns it with the placeholders to
    /// watch and `.fprep/agent.pid` locked, or throws why the replica
    /// cannot be served (one line).
    static func start(root: String, owner: ReplicaOwner) throws -> (WorkerClient, [WatchedPlaceholder], AgentStatusFile, AgentSettings) {
        var pair: [Int32] = [-1, -1]
        guard fprep_channel_pair(&pair) == 0 else {
            throw FprepError("cannot start the agent: socketpair: \(String(cString: strerror(errno)))")
        }
        defer { close(pair[1]) }
        let channel = WorkerChannel(fd: pair[0], acceptsDescriptors: true)
        let exe = fprep_open_own_program()
        guard exe >= 0 else { throw FprepError("cannot start the agent: open /proc/self/exe: \(String(cString: strerror(errno)))") }
        defer { close(exe) }

        let arguments = ["fprep", "agent", "worker", root]
        let environment = owner.environment(from: ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var step: Int32 = 0
        let pid = owner.groups.withUnsafeBufferPointer { groups in
            fprep_spawn_worker(exe, argv, envp, owner.uid, owner.gid, groups.baseAddress, groups.count, pair[1], &step)
        }
        guard pid > 0 else {
            let what = [Int32(FPREP_WORKER_STEP_DESCRIPTORS): "descriptors", Int32(FPREP_WORKER_STEP_GROUPS): "setgroups", Int32(FPREP_WORKER_STEP_GID): "setresgid",
                        Int32(FPREP_WORKER_STEP_UID): "setresuid", Int32(FPREP_WORKER_STEP_EXEC): "exec"][step] ?? "fork"
            throw FprepError("cannot start its worker as \(ReplicaOwner.userName(Int64(owner.uid))): \(what): \(String(cString: strerror(errno)))")
        }
        let client = WorkerClient(pid: pid, channel: channel)
        let (placeholders, status, settings) = try client.handshake()
        return (client, placeholders, status, settings)
    }

    private init(pid: pid_t, channel: WorkerChannel) {
        self.pid = pid
        self.channel = channel
    }

    deinit { stop() }

    /// The worker's first word: it holds the replica (placeholders, the
    /// agent's lock file), or why not.
    private func handshake() throws -> ([WatchedPlaceholder], AgentStatusFile, AgentSettings) {
        guard let (message, descriptor) = channel.receive() else {
            throw FprepError("its worker process (pid \(pid)) ended before it started (\(stop()))")
        }
        channel.acceptsDescriptors = false
        // Closed unless it is what it should be: a regular file.
        let status = descriptor.map { AgentStatusFile(locked: $0) }
        var body = WorkerMessageReader(message.body)
        switch message.kind {
        case .started:
            var lockFile = fprep_stat()
            guard let status, let descriptor, fprep_fstat(descriptor, &lockFile) == 0, lockFile.mode & 0o170000 == 0o100000,
                  let placeholders = body.placeholders(), let budget = body.i64(), let refuse = body.text(),
                  let syncs = body.i64() else { break }
            var settings = AgentSettings()
            settings.readAheadBytes = budget
            settings.refused = RefusedPrograms(refuse)
            settings.syncs = syncs != 0
            let (channel, replies, synced) = (self.channel, self.replies, self.synced)
            reader = try BlockingThread { Self.readReplies(channel, into: replies, synced: synced) }
            return (placeholders, status, settings)
        case .startFailed:
            throw FprepError(body.text() ?? "its worker could not start")
        default:
            break
        }
        throw FprepError("its worker process (pid \(pid)) said something out of turn")
    }

    /// Delivers every answer to the request waiting for it, until the worker ends.
    private static func readReplies(_ channel: WorkerChannel, into replies: Replies, synced: SyncedHandler) {
        // Only a test run asks for it: a worker (its owner) cannot stop the agent.
        let killAllowed = getenv("FPREP_TEST_KILL_AGENT_AFTER_BYTES") != nil
        while let (message, _) = channel.receive() {
            if message.kind == .killAgent, killAllowed { raise(SIGKILL) }
            if message.kind == .note {
                var body = WorkerMessageReader(message.body)
                if let line = body.text() { synced.note(line) }
                continue
            }
            if message.kind == .watchFirst {
                var body = WorkerMessageReader(message.body)
                if var files = body.placeholders(), let requester = body.i64(), body.markPlaces(into: &files) {
                    synced.watchFirst(files, requester: pid_t(truncatingIfNeeded: requester))
                }
                channel.send(WorkerMessage(kind: .watching, id: message.id))
                continue
            }
            if message.kind == .leftOut {
                var body = WorkerMessageReader(message.body)
                if let count = body.i64() { synced.leftOut(Int(count)) }
                continue
            }
            if message.kind == .filledOne {
                replies.progress(message)
                continue
            }
            if message.kind == .remoteChanges {
                var body = WorkerMessageReader(message.body)
                if let service = body.text(), let connected = body.raw(1)?.first, let lost = body.text(), let poll = body.i64() {
                    synced.remoteChanges(RemoteChangesStatus(service: service.isEmpty ? nil : service, connected: connected != 0,
                                                             lost: lost.isEmpty ? nil : lost, pollSeconds: Double(poll) / 1000))
                }
                continue
            }
            if message.kind == .synced {
                var body = WorkerMessageReader(message.body)
                if let ok = body.raw(1)?.first, let summary = body.text(), let waiting = body.i64(), let anchor = body.text() {
                    synced.deliver(SyncScheduler.Outcome(succeeded: ok != 0, summary: summary, waiting: Int(waiting), anchor: anchor))
                }
                continue
            }
            replies.deliver(message)
        }
        replies.end()
    }

    /// Calls `handler` with what each of the worker's own syncs did (on the reader's thread).
    func onSynced(_ handler: @escaping @Sendable (SyncScheduler.Outcome) -> Void) { synced.set(handler) }

    /// Calls `handler` with the files the worker will evict (the disk
    /// budget), before it answers that they are watched.
    func onWatchFirst(_ handler: @escaping @Sendable ([WatchedPlaceholder], pid_t) -> Void) { synced.setWatchFirst(handler) }

    /// Calls `handler` with each batch of changes the worker's change watch
    /// left out (all to ignored items).
    func onLeftOut(_ handler: @escaping @Sendable (Int) -> Void) { synced.setLeftOut(handler) }

    /// Calls `handler` each time the worker's way of hearing of remote
    /// changes changes (the push service connected or lost).
    func onRemoteChanges(_ handler: @escaping @Sendable (RemoteChangesStatus) -> Void) { synced.setRemoteChanges(handler) }

    /// Calls `handler` with each line the worker has for the log.
    func onNote(_ handler: @escaping @Sendable (String) -> Void) { synced.setNote(handler) }

    /// Whether the worker still serves (false once its socket closed).
    var isRunning: Bool { !replies.ended }

    /// Fills under way (single hydrations and read-ahead chunks), each of
    /// which writes the index: its change is the agent's own, acknowledged
    /// when the fill answers.
    private let fills = Atomic<Int>(0)
    var fillsUnderWay: Bool { fills.load(ordering: .acquiring) > 0 }

    /// Has the worker fill `placeholder` through `fd` (a descriptor of the
    /// event's file); `indexWritten` is told of its index write.
    func hydrate(_ placeholder: WatchedPlaceholder, through fd: Int32,
                 indexWritten: (fprep_stat, fprep_stat) -> Void) -> Hydrator.Outcome {
        var request = WorkerMessageWriter()
        request.raw(placeholder.blob.bytes)
        request.data(placeholder.path.bytes)
        fills.add(1, ordering: .acquiringAndReleasing)
        defer { fills.subtract(1, ordering: .acquiringAndReleasing) }
        guard let reply = self.request(.hydrate, request.bytes, descriptor: fd) else {
            return .failed("the replica's worker process (pid \(pid)) ended")
        }
        var body = WorkerMessageReader(reply.body)
        switch reply.kind {
        case .hydrated:
            guard let bytes = body.i64(), let before = body.stat(), let after = body.stat() else { break }
            indexWritten(before, after)
            return .hydrated(bytes: bytes)
        case .notAPlaceholder:
            return .notAPlaceholder(body.text() ?? "")
        case .failed:
            return .failed(body.text() ?? "")
        default:
            break
        }
        return .failed("the replica's worker process (pid \(pid)) answered out of turn")
    }

    /// Read-ahead, step 1: the worker fetches `blobs` in one fetch; the
    /// quarantine's token, or why not.
    func fetchAhead(_ blobs: [ObjectID]) -> Result<String, FprepError> {
        var request = WorkerMessageWriter()
        request.u32(UInt32(blobs.count))
        for blob in blobs { request.raw(blob.bytes) }
        guard let reply = self.request(.fetchAhead, request.bytes) else {
            return .failure(FprepError("the replica's worker process (pid \(pid)) ended"))
        }
        var body = WorkerMessageReader(reply.body)
        switch reply.kind {
        case .fetchedAhead: if let token = body.text() { return .success(token) }
        case .failed: return .failure(FprepError(body.text() ?? "the fetch failed"))
        default: break
        }
        return .failure(FprepError("the replica's worker process (pid \(pid)) answered out of turn"))
    }

    /// Read-ahead, step 2: the worker fills `part` from the fetch of
    /// `token`, opening each file itself (as the owner); `indexWritten` is
    /// told of its index write. One outcome per file, in order.
    ///
    /// `filled` hears of each file as soon as its content is in place (its
    /// position in `part`, its bytes), before the chunk's index write: a
    /// reader waiting on it need not wait for the rest of the chunk.
    func fillAhead(_ part: [(key: FileKey, placeholder: WatchedPlaceholder)], token: String,
                   indexWritten: (fprep_stat, fprep_stat) -> Void,
                   filled: @escaping @Sendable (Int, Int64) -> Void = { _, _ in }) -> [Hydrator.Outcome] {
        var request = WorkerMessageWriter()
        request.text(token)
        request.placeholders(part.map(\.placeholder))
        for (key, _) in part { request.fileKey(key) }
        let ended = [Hydrator.Outcome](repeating: .failed("the replica's worker process (pid \(pid)) ended"), count: part.count)
        let count = part.count
        let progress: @Sendable (WorkerMessage) -> Void = { message in
            var body = WorkerMessageReader(message.body)
            guard let position = body.u32(), Int(position) < count, let bytes = body.i64() else { return }
            filled(Int(position), bytes)
        }
        fills.add(1, ordering: .acquiringAndReleasing)
        defer { fills.subtract(1, ordering: .acquiringAndReleasing) }
        guard let reply = self.request(.fillAhead, request.bytes, progress: progress), reply.kind == .filledAhead else { return ended }
        var body = WorkerMessageReader(reply.body)
        guard let before = body.stat(), let after = body.stat(), let count = body.u32(), Int(count) == part.count else { return ended }
        indexWritten(before, after)
        var outcomes: [Hydrator.Outcome] = []
        for _ in 0..<count {
            switch body.raw(1)?.first {
            case 0: guard let bytes = body.i64() else { return ended }; outcomes.append(.hydrated(bytes: bytes))
            case 1: outcomes.append(.notAPlaceholder(body.text() ?? ""))
            default: outcomes.append(.failed(body.text() ?? "not filled"))
            }
        }
        return outcomes
    }

    /// Read-ahead, step 3: the worker drops the fetch's quarantine.
    func endAhead(token: String) {
        var request = WorkerMessageWriter()
        request.text(token)
        _ = self.request(.endAhead, request.bytes)
    }

    /// What changed among the placeholders since the last listing (see
    /// `PlaceholderListing`); nil when the replica was busy or the worker ended.
    func list() -> PlaceholderListing.Changes? {
        guard let reply = request(.list, []), reply.kind == .listed else { return nil }
        var body = WorkerMessageReader(reply.body)
        guard let watch = body.placeholders(), let count = body.u32() else { return nil }
        var gone: [RepoPath] = []
        for _ in 0..<count {
            guard let path = body.data() else { return nil }
            gone.append(RepoPath(bytes: path))
        }
        return PlaceholderListing.Changes(watch: watch, gone: gone)
    }

    /// Ends the worker (its socket closes; it finishes the hydrations under
    /// way, or is killed after 5 s) and returns how it ended.
    @discardableResult
    func stop() -> String {
        if let ended = ending.withLock({ $0 }) { return ended }
        _ = shutdown(channel.fd, Int32(SHUT_RDWR))
        var status: Int32 = 0
        if fprep_wait_child(pid, 5000, &status) == 0 {
            kill(pid, SIGKILL)
            _ = fprep_wait_child(pid, 60_000, &status)
        }
        reader?.join()
        reader = nil
        let how = (status & 0x7f) != 0 ? "killed by signal \(status & 0x7f)" : "exit status \((status >> 8) & 0xff)"
        ending.withLock { $0 = how }
        return how
    }

    private func request(_ kind: WorkerMessage.Kind, _ body: [UInt8], descriptor: Int32 = -1,
                         progress: (@Sendable (WorkerMessage) -> Void)? = nil) -> WorkerMessage? {
        guard let (id, pending) = replies.open(progress: progress) else { return nil }
        guard channel.send(WorkerMessage(kind: kind, id: id, body: body), descriptor: descriptor) else {
            replies.cancel(id)
            return nil
        }
        pending.done.wait()
        return pending.reply
    }
}

/// Requests waiting for the worker's answer, by id.
private final class Replies: Sendable {
    final class Pending: @unchecked Sendable {
        let done = DispatchSemaphore(value: 0)
        /// Set before `done` is signalled; nil: the worker ended first.
        var reply: WorkerMessage?
        /// One-way messages about the request before its answer.
        let progress: (@Sendable (WorkerMessage) -> Void)?

        init(progress: (@Sendable (WorkerMessage) -> Void)?) { self.progress = progress }
    }

    private struct State {
        var next: UInt32 = 1
        var waiting: [UInt32: Pending] = [:]
        var ended = false
    }

    private let state = Mutex(State())

    var ended: Bool { state.withLock { $0.ended } }

    func open(progress: (@Sendable (WorkerMessage) -> Void)? = nil) -> (UInt32, Pending)? {
        state.withLock { state in
            guard !state.ended else { return nil }
            let id = state.next
            state.next &+= 1
            let pending = Pending(progress: progress)
            state.waiting[id] = pending
            return (id, pending)
        }
    }

    func cancel(_ id: UInt32) { _ = state.withLock { $0.waiting.removeValue(forKey: id) } }

    /// A one-way message about a request still waiting (on the reader's thread).
    func progress(_ message: WorkerMessage) {
        state.withLock { $0.waiting[message.id] }?.progress?(message)
    }

    func deliver(_ message: WorkerMessage) {
        guard let pending = state.withLock({ $0.waiting.removeValue(forKey: message.id) }) else { return }
        pending.reply = message
        pending.done.signal()
    }

    func end() {
        let left = state.withLock { state -> [Pending] in
            state.ended = true
            defer { state.waiting = [:] }
            return Array(state.waiting.values)
        }
        for pending in left { pending.done.signal() }
    }
}

/// `fprep agent worker ROOT`: the worker process itself, started by the
/// agent as the replica's owner with its socket as descriptor 3.
public enum AgentWorker {
    static let channelFD: Int32 = 3

    /// Serves the agent's requests for the replica at `root` until the
    /// agent closes the socket (or dies: the kernel kills the worker then).
    ///
    /// `remoteSignals` starts the push service's signals when the replica
    /// has a service (the worker syncs on each push besides polling).
    public static func serve(root: String, remoteSignals: RemoteSignalsStarter? = nil) throws -> Never {
        var socket = fprep_stat()
        guard fprep_fstat(channelFD, &socket) == 0, socket.mode & 0o170000 == 0o140000 else {
            throw FprepError(.usage, "'fprep agent worker' is started by the agent only")
        }
        let channel = WorkerChannel(fd: channelFD, acceptsDescriptors: true)
        Replica.oneOpenAtATime()
        var syncSettings = SyncScheduler.Settings()
        // What the agent was last told of the placeholders: each listing
        // after the first sends only what changed since.
        let listing = Mutex(PlaceholderListing())
        // A test's kill "of the agent" in the middle of a write: the agent
        // dies, and the worker with it.
        InPlaceHydration.killForTest = {
            channel.send(WorkerMessage(kind: .killAgent))
            while true { pause() }
        }
        do {
            // First, so a second agent touches nothing of the first one's.
            // Sent to the agent, which holds the lock from then on (as long as it lives).
            let lock = try AgentStatusFile.lockReplica(root: root)
            defer { close(lock) }
            // Whatever a killed agent (or command) journaled is settled
            // here, before anything is watched: its quarantines are no longer needed.
            let replica = try Replica.open(containing: root, access: Replica.Access(command: "agent", exclusive: true))
            InPlaceHydration.removeAllQuarantines(replicaRoot: root)
            let settings = try AgentSettings(replica)
            syncSettings = try SyncScheduler.Settings(replica)
            var started = WorkerMessageWriter()
            started.placeholders(try listing.withLock { try replica.watchablePlaceholders(since: &$0) }.watch)
            started.i64(settings.readAheadBytes)
            started.text(settings.refused.setting)
            started.i64(syncSettings.enabled ? 1 : 0)
            channel.send(WorkerMessage(kind: .started, body: started.bytes), descriptor: lock)
        } catch {
            var why = WorkerMessageWriter()
            why.text((error as? FprepError)?.message ?? "\(error)")
            channel.send(WorkerMessage(kind: .startFailed, body: why.bytes))
            exit(1)
        }

        var scheduler: SyncScheduler?
        var changes: ChangeWatch?
        var signals: (any RemoteSignals)?
        let noteToAgent: @Sendable (String) -> Void = { line in
            var body = WorkerMessageWriter()
            body.text(line)
            channel.send(WorkerMessage(kind: .note, body: body.bytes))
        }
        // The disk budget is kept whether or not the agent syncs; what it
        // evicts the agent watches first (see `WatchFirst`).
        let watchFirst = WatchFirst(channel: channel)
        AgentLink.inProcess = { watchFirst.ask($0, requester: 0) }  // the worker's own accesses pass already
        let budget = try? BudgetKeeper(root: root, note: noteToAgent)
        // The change watch first, then the syncs: a change made before the
        // watch follows the tree is found by the first sync (which begins
        // after it), and every later one by the watch; the other order lost
        // a save made in between. The journal is kept when the agent syncs,
        // or when the replica's config asks (status and sync then read it
        // instead of scanning the tree; see `SyncScheduler.Settings.journal`).
        let syncsOnceStarted = Mutex<SyncScheduler?>(nil)
        let syncs = syncSettings.enabled
        if syncSettings.journal {
            do {
                changes = try ChangeWatch(root: root, onChange: { syncsOnceStarted.withLock { $0 }?.changed() }, onLeftOut: {
                    // Counted from the first event on (a change the watch sees
                    // before the syncs start is caught up by their first sync,
                    // which would find nothing to say of it).
                    guard syncs else { return }
                    var body = WorkerMessageWriter()
                    body.i64(1)
                    channel.send(WorkerMessage(kind: .leftOut, body: body.bytes))
                })
            } catch {
                noteToAgent("\(SyncScheduler.message(error)); status and sync look at every file")
            }
        }
        let journal: @Sendable (JournalToken?) -> JournalAnswer? = { [changes] point in changes?.changes(since: point) }
        AgentLink.inProcessJournal = journal
        let agentSocket: AgentSocket?
        do {
            agentSocket = try AgentSocket(replicaRoot: root, journal: journal) { watchFirst.ask($0, requester: $1) }
        } catch {
            agentSocket = nil
            noteToAgent("\(SyncScheduler.message(error)); placeholders other commands make are watched when the index changes")
        }
        if syncSettings.enabled {
            do {
                let syncs = try SyncScheduler(root: root, settings: syncSettings) { outcome in
                    budget?.poke()
                    var body = WorkerMessageWriter()
                    body.raw([outcome.succeeded ? 1 : 0])
                    body.text(outcome.summary)
                    body.i64(Int64(outcome.waiting))
                    body.text(outcome.anchor)
                    channel.send(WorkerMessage(kind: .synced, body: body.bytes))
                }
                scheduler = syncs
                syncsOnceStarted.withLock { $0 = syncs }
                let pollMilliseconds = Int64((syncSettings.pollSeconds * 1000).rounded())
                let tellAgent: @Sendable (String, String?) -> Void = { service, lost in
                    var body = WorkerMessageWriter()
                    body.text(service)
                    body.raw([lost == nil && !service.isEmpty ? 1 : 0])
                    body.text(lost ?? "")
                    body.i64(pollMilliseconds)
                    channel.send(WorkerMessage(kind: .remoteChanges, body: body.bytes))
                }
                // Until the stream opens, it is not connected.
                tellAgent("", nil)
                signals = try remoteSignals?(root, { syncs.pushed() }, tellAgent, noteToAgent)
            } catch {
                channel.send(WorkerMessage(kind: .synced, body: {
                    var body = WorkerMessageWriter()
                    body.raw([0]); body.text(SyncScheduler.message(error)); body.i64(0); body.text("")
                    return body.bytes
                }()))
            }
        }
        let listings = DispatchQueue(label: "fprep.agent.worker.list")
        let readAheads = DispatchQueue(label: "fprep.agent.worker.readahead")
        let underWay = DispatchGroup()
        while let (message, descriptor) = channel.receive() {
            switch message.kind {
            case .hydrate:
                var body = WorkerMessageReader(message.body)
                guard let placeholder = body.placeholder(), let descriptor else {
                    if let descriptor { close(descriptor) }
                    var why = WorkerMessageWriter()
                    why.text("the agent's request does not parse")
                    channel.send(WorkerMessage(kind: .failed, id: message.id, body: why.bytes))
                    continue
                }
                let id = message.id
                // Each on a thread of its own: a hydration waits on its fetch,
                // and one reader's must not wait for another's.
                underWay.enter()
                BlockingThread.start {
                    defer { underWay.leave() }
                    let reply = hydrate(placeholder, through: descriptor, root: root)
                    close(descriptor)
                    channel.send(WorkerMessage(kind: reply.kind, id: id, body: reply.body))
                    budget?.poke()
                }
            case .list:
                if let descriptor { close(descriptor) }
                let id = message.id
                listings.async(group: underWay) {
                    var reply = WorkerMessage(kind: .listBusy, id: id)
                    if let replica = try? Replica.open(containing: root, access: Replica.Access(command: "agent", exclusive: false, wait: false)),
                       let changes = try? listing.withLock({ try replica.watchablePlaceholders(since: &$0) }) {
                        var body = WorkerMessageWriter()
                        body.placeholders(changes.watch)
                        body.u32(UInt32(changes.gone.count))
                        for path in changes.gone { body.data(path.bytes) }
                        reply = WorkerMessage(kind: .listed, id: id, body: body.bytes)
                    }
                    channel.send(reply)
                }
            case .watching:
                if let descriptor { close(descriptor) }
                watchFirst.answered(message.id)
            case .fetchAhead, .fillAhead, .endAhead:
                if let descriptor { close(descriptor) }
                let request = message
                readAheads.async(group: underWay) {
                    let reply = readAhead(request, root: root, channel: channel)
                    channel.send(WorkerMessage(kind: reply.kind, id: request.id, body: reply.body))
                    budget?.poke()
                }
            default:
                if let descriptor { close(descriptor) }
            }
        }
        // The agent stopped: what is under way ends first (it waits a while).
        signals?.stop()
        changes?.stop()
        scheduler?.stop()
        budget?.stop()
        agentSocket?.stop()
        underWay.wait()
        exit(0)
    }

    /// One step of a read-ahead (see `WorkerClient.fetchAhead`, `fillAhead`,
    /// `endAhead`), as the answer's kind and body. The files are opened
    /// here, beneath the replica's root, as the owner.
    private static func readAhead(_ request: WorkerMessage, root: String, channel: WorkerChannel) -> WorkerMessage {
        var body = WorkerMessageReader(request.body)
        var reply = WorkerMessageWriter()
        func failed(_ why: String) -> WorkerMessage {
            var text = WorkerMessageWriter()
            text.text(why)
            return WorkerMessage(kind: .failed, body: text.bytes)
        }
        switch request.kind {
        case .fetchAhead:
            guard let count = body.u32(), count <= 1 << 20 else { return failed("the agent's request does not parse") }
            var blobs: [ObjectID] = []
            for _ in 0..<count {
                guard let blob = body.raw(20).flatMap({ ObjectID(bytes: $0) }) else { return failed("the agent's request does not parse") }
                blobs.append(blob)
            }
            do {
                reply.text(try InPlaceHydration.fetch(blobs, replicaRoot: root))
                return WorkerMessage(kind: .fetchedAhead, body: reply.bytes)
            } catch {
                return failed((error as? FprepError)?.message ?? "\(error)")
            }
        case .endAhead:
            if let token = body.text(), InPlaceHydration.isToken(token) { InPlaceHydration.removeQuarantine(token, replicaRoot: root) }
            return WorkerMessage(kind: .fetchedAhead)
        default:
            guard let token = body.text(), InPlaceHydration.isToken(token), let part = body.placeholders() else {
                return failed("the agent's request does not parse")
            }
            var keys: [FileKey] = []
            for _ in part {
                guard let key = body.fileKey() else { return failed("the agent's request does not parse") }
                keys.append(key)
            }
            var outcomes = [(kind: UInt8, bytes: Int64, why: String)](repeating: (2, 0, "not filled"), count: part.count)
            var open: [(position: Int, fd: Int32)] = []
            defer { for (_, fd) in open { close(fd) } }
            let rootFD = Glibc.open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            defer { if rootFD >= 0 { close(rootFD) } }
            for (position, placeholder) in part.enumerated() where rootFD >= 0 {
                var raw = fprep_stat()
                // Read-only, as the kernel opens an event's file: the fill opens
                // it for writing once it holds the lock.
                let fd = fprep_open_regular(rootFD, placeholder.path.bytes.map { CChar(bitPattern: $0) } + [0], O_RDONLY, &raw)
                guard fd >= 0 else {
                    outcomes[position] = (2, 0, fd == -2 ? "it is no longer a file" : "open: \(String(cString: strerror(errno)))")
                    continue
                }
                // The file the agent planned for, not whatever has its name
                // now (moved or replaced since): a reader waiting on that
                // one must not be let through on another's fill.
                guard FileKey(fd: fd) == keys[position] else {
                    close(fd)
                    outcomes[position] = (2, 0, "it was moved or replaced meanwhile")
                    continue
                }
                open.append((position, fd))
            }
            var before = fprep_stat(), after = fprep_stat()
            do {
                let replica = try Replica.open(containing: root, access: Replica.Access(command: "agent", exclusive: true))
                before = IndexWatcher.stat(root)
                let positions = open.map(\.position)
                let results = try replica.hydrateInPlace(open.map { (part[$0.position].path, $0.fd) }, token: token, used: false) { index, bytes in
                    var one = WorkerMessageWriter()
                    one.u32(UInt32(positions[index]))
                    one.i64(bytes)
                    channel.send(WorkerMessage(kind: .filledOne, id: request.id, body: one.bytes))
                }
                after = IndexWatcher.stat(root)
                for ((position, _), result) in zip(open, results) {
                    switch result {
                    case .success(.hydrated(let bytes)): outcomes[position] = (0, bytes, "")
                    case .success(.notAPlaceholder(let why)): outcomes[position] = (1, 0, why)
                    case .failure(let error): outcomes[position] = (2, 0, (error as? FprepError)?.message ?? "\(error)")
                    }
                }
            } catch {
                let why = (error as? FprepError)?.message ?? "\(error)"
                for (position, _) in open { outcomes[position] = (2, 0, why) }
            }
            reply.stat(before)
            reply.stat(after)
            reply.u32(UInt32(part.count))
            for outcome in outcomes {
                reply.raw([outcome.kind])
                if outcome.kind == 0 { reply.i64(outcome.bytes) } else { reply.text(outcome.why) }
            }
            return WorkerMessage(kind: .filledAhead, body: reply.bytes)
        }
    }

    /// Fills one placeholder and says how it went, as the answer's kind and body.
    private static func hydrate(_ placeholder: WatchedPlaceholder, through fd: Int32, root: String) -> WorkerMessage {
        let written = IndexWrite()
        let hydrator = Hydrator(root: root, indexWritten: { written.set($0, $1) })
        var body = WorkerMessageWriter()
        switch hydrator.hydrate(placeholder, through: fd) {
        case .hydrated(let bytes):
            body.i64(bytes)
            let (before, after) = written.value ?? (fprep_stat(), fprep_stat())
            body.stat(before)
            body.stat(after)
            return WorkerMessage(kind: .hydrated, body: body.bytes)
        case .notAPlaceholder(let why):
            body.text(why)
            return WorkerMessage(kind: .notAPlaceholder, body: body.bytes)
        case .failed(let why):
            body.text(why)
            return WorkerMessage(kind: .failed, body: body.bytes)
        }
    }
}

/// Where the worker's sync outcomes and log lines go. What comes before
/// serving is wired up (the worker's first sync and its push service start
/// with the handshake) is kept and handed over when the handlers are set.
private final class SyncedHandler: Sendable {
    private let outcomes = EarlyMessages<SyncScheduler.Outcome>()
    private let lines = EarlyMessages<String>()
    private let leftOuts = EarlyMessages<Int>()
    private let remote = EarlyMessages<RemoteChangesStatus>()
    private let watchers = Mutex<(@Sendable ([WatchedPlaceholder], pid_t) -> Void)?>(nil)

    func set(_ body: @escaping @Sendable (SyncScheduler.Outcome) -> Void) { outcomes.set(body) }
    func setNote(_ body: @escaping @Sendable (String) -> Void) { lines.set(body) }
    func deliver(_ outcome: SyncScheduler.Outcome) { outcomes.deliver(outcome) }
    func note(_ line: String) { lines.deliver(line) }
    func setLeftOut(_ body: @escaping @Sendable (Int) -> Void) { leftOuts.set(body) }
    func setWatchFirst(_ body: @escaping @Sendable ([WatchedPlaceholder], pid_t) -> Void) { watchers.withLock { $0 = body } }
    /// Synchronous: the answer goes back once the handler returned (none
    /// set yet: the agent marks nothing, and the worker's eviction waits
    /// for the index to be listed again, as any evict's).
    func watchFirst(_ files: [WatchedPlaceholder], requester: pid_t) { watchers.withLock { $0 }?(files, requester) }
    func leftOut(_ count: Int) { leftOuts.deliver(count) }
    func setRemoteChanges(_ body: @escaping @Sendable (RemoteChangesStatus) -> Void) { remote.set(body) }
    func remoteChanges(_ status: RemoteChangesStatus) { remote.deliver(status) }
}

/// Messages for a handler that may not be set yet: the first 64 are kept
/// until it is.
private final class EarlyMessages<Message: Sendable>: Sendable {
    private struct State {
        var handler: (@Sendable (Message) -> Void)?
        var kept: [Message] = []
    }

    private let state = Mutex(State())

    func set(_ body: @escaping @Sendable (Message) -> Void) {
        let early = state.withLock { state -> [Message] in
            state.handler = body
            defer { state.kept = [] }
            return state.kept
        }
        early.forEach(body)
    }

    func deliver(_ message: Message) {
        let handler = state.withLock { state -> (@Sendable (Message) -> Void)? in
            if state.handler == nil, state.kept.count < 64 { state.kept.append(message) }
            return state.handler
        }
        handler?(message)
    }
}

/// The index's stat before and after a hydration's write.
private final class IndexWrite: Sendable {
    private let state = Mutex<(fprep_stat, fprep_stat)?>(nil)
    var value: (fprep_stat, fprep_stat)? { state.withLock { $0 } }
    func set(_ before: fprep_stat, _ after: fprep_stat) { state.withLock { $0 = (before, after) } }
}

/// The worker's side of `watchFirst`: asks the agent to watch files it is
/// about to evict, and waits for the answer the worker's message loop
/// delivers.
final class WatchFirst: Sendable {
    private let channel: WorkerChannel
    private let state = Mutex((next: UInt32(0x8000_0000), waiting: [UInt32: DispatchSemaphore]()))

    init(channel: WorkerChannel) { self.channel = channel }

    /// Whether the agent watches `files` now (false: it did not answer in time).
    func ask(_ files: [WatchedPlaceholder], requester: pid_t) -> Bool {
        let done = DispatchSemaphore(value: 0)
        let id = state.withLock { state -> UInt32 in
            state.next &+= 1
            state.waiting[state.next] = done
            return state.next
        }
        var body = WorkerMessageWriter()
        body.placeholders(files)
        body.i64(Int64(requester))
        body.markPlaces(files)
        guard channel.send(WorkerMessage(kind: .watchFirst, id: id, body: body.bytes)) else {
            _ = state.withLock { $0.waiting.removeValue(forKey: id) }
            return false
        }
        let answered = done.wait(timeout: .now() + 30) == .success
        _ = state.withLock { $0.waiting.removeValue(forKey: id) }
        return answered
    }

    func answered(_ id: UInt32) {
        state.withLock { $0.waiting[id] }?.signal()
    }
}
