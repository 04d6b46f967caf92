import Foundation
import Synchronization
import Testing
@testable import FprepCore

@Suite struct BackgroundWorkTests {
    /// Background work mostly waits (on git, on the disk, on other work),
    /// so every piece must run at once however many wait already. Here each
    /// waits until all of them run: on Dispatch's global pool (as wide as
    /// the machine's cores) they waited on each other until Dispatch added
    /// threads, and past its limit of threads for ever.
    @Test func everyPieceRunsWhileTheOthersWait() throws {
        let count = 300
        let running = Mutex(0)
        let allRunning = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let works = (0..<count).map { _ in
            BackgroundWork {
                let now = running.withLock { value -> Int in value += 1; return value }
                if now == count { allRunning.signal() }
                // Held until every piece has started: none may need another to end first.
                release.wait()
            }
        }
        let started = allRunning.wait(timeout: .now() + 60) == .success
        #expect(started, "only \(running.withLock { $0 }) of \(count) pieces of work ran at once")
        for _ in 0..<count { release.signal() }
        for work in works { try work.wait() }
    }

    @Test func anErrorReachesTheWaiter() {
        struct Failed: Error {}
        let work = BackgroundWork { throw Failed() }
        #expect(throws: Failed.self) { try work.wait() }
        // Asked again, the same error.
        #expect(throws: Failed.self) { try work.wait() }
    }
}
