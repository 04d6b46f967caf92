import FoundationEssentials
import Glibc

/// Phase timings on standard error when `FPREP_TRACE` is set: how a
/// benchmark's figure splits into its parts.
public enum Trace {
    private static let enabled = ProcessInfo.processInfo.environment["FPREP_TRACE"] != nil
    nonisolated(unsafe) private static var last = Date()

    /// Starts the clock for the next mark.
    public static func start() {
        guard enabled else { return }
        last = Date()
    }

    public static func mark(_ phase: String) {
        guard enabled else { return }
        let now = Date()
        let milliseconds = Int((now.timeIntervalSince(last) * 1000).rounded())
        let padded = phase.count < 28 ? phase + String(repeating: " ", count: 28 - phase.count) : phase
        Console.error("trace: \(padded) \(milliseconds / 1000).\(String(1000 + milliseconds % 1000).dropFirst()) s\n")
        last = now
    }
}
