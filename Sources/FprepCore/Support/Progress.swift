import Dispatch
import Synchronization
import FoundationEssentials
import Glibc

/// Receives progress of long work (clone layout, materialize, evict). The CLI
/// draws it as one line on a terminal; called from any thread.
public protocol ProgressReporter: Sendable {
    /// `done` of `total` units of `phase` are finished.
    func report(_ phase: String, done: Int, total: Int)
    /// The work is over; clear the line.
    func finish()
    /// `bytes` of about `total` have arrived since `started` (seconds on
    /// the monotonic clock): a transfer, drawn with its rate and time left.
    func reportTransfer(_ phase: String, bytes: Int64, total: Int64, started: Double)
}

extension ProgressReporter {
    public func reportTransfer(_ phase: String, bytes: Int64, total: Int64, started: Double) {}
}

/// Watches a fetch write its pack into `folder` (git's `tmp_pack_*` grows
/// as the data arrives) and reports the bytes, a few times a second, until
/// stopped: a single large file's fetch shows movement, not "0/1".
public final class TransferWatch: @unchecked Sendable {
    private let stopped = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)

    public init(folder: String, phase: String, total: Int64, progress: any ProgressReporter) {
        let started = monotonicSeconds()
        // Mostly asleep between looks: a thread of its own, not one of
        // Dispatch's few (see `BlockingThread`).
        BlockingThread.start { [stopped, done] in
            // The rate counts from the first byte: before it, the remote
            // prepares the pack (compressing 200 MB took it 8 s), and a rate
            // over that wait would promise minutes for seconds of transfer.
            // The first bytes came some time after the last look that saw
            // none: counting from that look keeps the first rate honest.
            var firstByte: Double?
            var lastEmpty = started
            while stopped.wait(timeout: .now() + 0.25) == .timedOut {
                let bytes = Self.bytes(in: folder)
                if firstByte == nil {
                    if bytes > 0 { firstByte = lastEmpty } else { lastEmpty = monotonicSeconds() }
                }
                progress.reportTransfer(phase, bytes: bytes, total: total, started: firstByte ?? started)
            }
            done.signal()
        }
    }

    private let stopping = Mutex(false)

    /// Stops reporting (waits for the watcher to end); again does nothing.
    public func stop() {
        guard stopping.withLock({ already in defer { already = true }; return !already }) else { return }
        stopped.signal()
        done.wait()
    }

    private static func bytes(in folder: String) -> Int64 {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return 0 }
        var total: Int64 = 0
        for name in names where name.hasPrefix("tmp_pack_") || name.hasSuffix(".pack") {
            var info = stat()
            if lstat(folder + "/" + name, &info) == 0 { total += Int64(info.st_size) }
        }
        return total
    }
}

/// Seconds on a clock that never goes back.
public func monotonicSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

/// Reports nothing.
public struct SilentProgress: ProgressReporter {
    public init() {}
    public func report(_ phase: String, done: Int, total: Int) {}
    public func finish() {}
}
