import Foundation

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
        FileHandle.standardError.write(Data(String(format: "trace: %-28@ %8.3f s\n", phase as NSString, now.timeIntervalSince(last)).utf8))
        last = now
    }
}
