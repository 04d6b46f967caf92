import FoundationEssentials
import Glibc

/// The agent's log: one timestamped line per thing that happened, with its
/// level (`2026-11-23T17:40:01Z info hydrated docs/a.md (1.2 KiB, 35 ms)`),
/// on standard error.
struct AgentLog: Sendable {
    enum Level: String { case info, warning, error }

    func write(_ level: Level, _ message: String) {
        let line = "\(Self.timestamp()) \(level.rawValue) \(message)\n"
        line.withCString { _ = Glibc.write(2, $0, strlen($0)) }
    }

    static func timestamp() -> String {
        var now = time(nil)
        var parts = tm()
        gmtime_r(&now, &parts)
        var buffer = [CChar](repeating: 0, count: 32)
        let count = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%SZ", &parts)
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// 1.2 KiB, 3.4 MiB: sizes as a person reads them.
    static func size(_ bytes: Int64) -> String {
        if bytes < 1024 { return "\(bytes) B" }
        var value = Double(bytes) / 1024
        for unit in ["KiB", "MiB", "GiB"] {
            if value < 1024 || unit == "GiB" {
                let tenths = Int((value * 10).rounded())
                return "\(tenths / 10).\(tenths % 10) \(unit)"
            }
            value /= 1024
        }
        return "\(bytes) B"
    }
}

/// Seconds on a clock that never goes back.
func monotonicNow() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}
