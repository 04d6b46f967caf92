import FoundationEssentials
import Glibc

/// Phase timings when `FPREP_TRACE` is set: how a benchmark's figure
/// splits into its parts. On standard error, or appended to the file
/// `FPREP_TRACE` names when it is an absolute path (a benchmark that keeps
/// fprep's standard error to itself).
public enum Trace {
    // getenv, not ProcessInfo: building the whole environment costs every
    // command a little, traced or not.
    private static let setting = getenv("FPREP_TRACE").map { String(cString: $0) }
    private static let enabled = setting != nil
    private static let file: Int32 = {
        guard let setting, setting.hasPrefix("/") else { return 2 }
        let fd = open(setting, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        return fd >= 0 ? fd : 2
    }()
    nonisolated(unsafe) private static var last = Date()

    /// Starts the clock for the next mark.
    public static func start() {
        guard enabled else { return }
        last = Date()
    }

    public static func mark(_ phase: String) {
        guard enabled else { return }
        let now = Date()
        let micro = Int((now.timeIntervalSince(last) * 1_000_000).rounded())
        let padded = phase.count < 28 ? phase + String(repeating: " ", count: 28 - phase.count) : phase
        let line = Array("trace: \(padded) \(micro / 1_000_000).\(String(1_000_000 + micro % 1_000_000).dropFirst()) s\n".utf8)
        _ = line.withUnsafeBytes { write(file, $0.baseAddress, $0.count) }
        last = now
    }
}
