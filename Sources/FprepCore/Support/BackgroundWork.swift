import Dispatch
import FprepGit

/// Work on another thread whose result (or error) a caller waits for: a
/// thread of its own (`BlockingThread`), as such work mostly waits.
///
/// It runs with the caller's task-local settings (the `git` executable and
/// the commit dates a test fixed), which a thread of its own would not
/// inherit: work moved to the background behaves as it did in line.
final class BackgroundWork: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var error: Error?
    private var waited = false

    init(_ work: @escaping () throws -> Void) {
        let unchecked = UncheckedClosure(work)
        let git = GitCommand.executable
        let dates = CommitDates.fixed
        BlockingThread.start { [self] in
            do {
                try GitCommand.$executable.withValue(git) {
                    try CommitDates.$fixed.withValue(dates) { try unchecked.body() }
                }
            } catch { self.error = error }
            done.signal()
        }
    }

    /// Blocks until the work is over; rethrows its error.
    func wait() throws {
        if !waited {
            done.wait()
            waited = true
        }
        if let error { throw error }
    }
}

/// A closure handed to one other thread and used only there.
private struct UncheckedClosure: @unchecked Sendable {
    let body: () throws -> Void
    init(_ body: @escaping () throws -> Void) { self.body = body }
}
