import FoundationEssentials
import Glibc
import FprepCore

/// A token bucket per client address: `rate` requests a second, bursts of
/// `burst`. A flood from one client gets 429s; others are not affected.
final class RateLimiter: @unchecked Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: Double
    }

    private let rate: Double
    private let burst: Double
    private let lock = Lock()
    private var buckets: [String: Bucket] = [:]

    /// `rate` 0 turns the limit off.
    init(rate: Double, burst: Double) {
        self.rate = rate
        self.burst = max(burst, 1)
    }

    /// Whether `client` may make one more request now; when not, the seconds to wait.
    func admit(_ client: String, now: Double = monotonicNow()) -> (allowed: Bool, retryAfter: Int) {
        guard rate > 0 else { return (true, 0) }
        lock.lock()
        defer { lock.unlock() }
        var bucket = buckets[client] ?? Bucket(tokens: burst, updated: now)
        bucket.tokens = min(burst, bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        let allowed = bucket.tokens >= 1
        if allowed { bucket.tokens -= 1 }
        buckets[client] = bucket
        if buckets.count > 100_000 { buckets = buckets.filter { now - $0.value.updated < 60 } }
        return (allowed, allowed ? 0 : max(1, Int(((1 - bucket.tokens) / rate).rounded(.up))))
    }
}

/// Seconds on the monotonic clock.
func monotonicNow() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// Seconds since 1970.
func wallClockNow() -> Int64 { Int64(Date().timeIntervalSince1970) }
