import Dispatch
import FoundationEssentials
import FprepGit
import FprepServer

/// Runs mirror passes one at a time on a queue of its own (git and libgit2
/// work stays off the shared concurrency pool). Requests coalesce: any
/// number that arrive while a pass waits make one pass, which fetches
/// everything the host has. A delivery whose commit the fetch did not bring
/// yet (a host that sends the webhook before its replicas have the push) is
/// fetched again a little later; the sweep asks for a pass every interval,
/// catching deliveries the host never sent.
final class MirrorWorker: Sendable {
    /// A commit a delivery announced, and how often it was looked for.
    struct Expectation: Sendable {
        let commit: ObjectID
        var attempts = 0
    }

    private struct State {
        var queued = false
        var stopped = false
        var expected: [Expectation] = []
        var readOutbox: (@Sendable () async -> Void)?
        var sweep: Task<Void, Never>?
    }

    private let queue = DispatchQueue(label: "fprep.mirror.pass")
    private let state = Locked(State())
    private let pass: MirrorPass
    private let log: @Sendable (String) -> Void
    /// Seconds between fetches of a delivery's commit the host did not show yet.
    static let retryDelays: [Double] = [2, 5, 15]

    init(pass: MirrorPass, log: @escaping @Sendable (String) -> Void) {
        self.pass = pass
        self.log = log
    }

    /// Starts the sweep; passes recording pushes then make the service read its outbox.
    func start(sweepInterval: Duration, readOutbox: @escaping @Sendable () async -> Void) {
        let sweep = Task { [weak self] in
            while await sleepUnlessCancelled(for: sweepInterval) {
                self?.request()
            }
        }
        state.update {
            $0.readOutbox = readOutbox
            $0.sweep = sweep
        }
    }

    /// Queues a pass (none when one is queued already); `expecting` is the
    /// commit a delivery announced, looked for after the pass.
    func request(expecting commit: ObjectID? = nil) {
        let schedule = state.update { state -> Bool in
            if let commit { state.expected.append(Expectation(commit: commit)) }
            guard !state.stopped, !state.queued else { return false }
            state.queued = true
            return true
        }
        if schedule { queue.async { self.runPass() } }
    }

    /// Stops the sweep and waits for the pass in flight; queued ones are dropped.
    func stop() async {
        let sweep = state.update { state -> Task<Void, Never>? in
            state.stopped = true
            return state.sweep
        }
        sweep?.cancel()
        await withCheckedContinuation { continuation in queue.async { continuation.resume() } }
    }

    private func runPass() {
        // A request from now on queues another pass: it may announce a
        // push this pass's fetch misses.
        let (stopped, readOutbox) = state.update { state in
            state.queued = false
            return (state.stopped, state.readOutbox)
        }
        guard !stopped else { return }
        do {
            if try pass.run() > 0, let readOutbox { Task { await readOutbox() } }
        } catch {
            log("mirror pass failed: \(error); the next delivery or sweep tries again")
        }
        lookForExpectedCommits()
    }

    /// Delivered commits the mirror has now are done; the others are
    /// fetched again later, a few times, then left to the sweep.
    private func lookForExpectedCommits() {
        let expected = state.update { state -> [Expectation] in
            defer { state.expected = [] }
            return state.expected
        }
        guard !expected.isEmpty, let repository = try? Repository(openingAt: pass.mirror.gitDirectory) else { return }
        for var expectation in expected where (try? repository.commit(expectation.commit)) == nil {
            guard expectation.attempts < Self.retryDelays.count else {
                log("the host has not shown the delivered commit \(expectation.commit.hex.prefix(12)) yet; the sweep looks again")
                continue
            }
            let delay = Self.retryDelays[expectation.attempts]
            expectation.attempts += 1
            let retry = expectation
            queue.asyncAfter(deadline: .now() + delay) { [weak self] in
                self?.state.update { $0.expected.append(retry) }
                self?.request()
            }
        }
    }
}
