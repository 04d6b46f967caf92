import FoundationEssentials
import Glibc

/// Phase timings: with `FPREP_TRACE` set, how a benchmark's figure splits
/// into its parts, on standard error or appended to the file `FPREP_TRACE`
/// names when it is an absolute path (a benchmark that keeps fprep's
/// standard error to itself); with `--verbose`, a line per phase for the
/// user, on standard error.
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
    /// `--verbose`: each phase is also a line for the user on standard error.
    nonisolated(unsafe) private static var phasesShown = false

    /// Shows each phase as it ends on standard error (`--verbose`).
    public static func showPhases() {
        phasesShown = true
        last = Date()
    }

    /// Starts the clock for the next mark.
    public static func start() {
        guard enabled || phasesShown else { return }
        last = Date()
    }

    public static func mark(_ phase: String) {
        guard enabled || phasesShown else { return }
        let now = Date()
        let micro = Int((now.timeIntervalSince(last) * 1_000_000).rounded())
        let seconds = "\(micro / 1_000_000).\(String(1_000_000 + micro % 1_000_000).dropFirst())"
        let resident = statusField("VmRSS:")
        if enabled {
            let padded = phase.count < 28 ? phase + String(repeating: " ", count: 28 - phase.count) : phase
            let line = Array("trace: \(padded) \(seconds) s\(resident.map { " (resident \($0 / 1024) MiB)" } ?? "")\n".utf8)
            _ = line.withUnsafeBytes { write(file, $0.baseAddress, $0.count) }
        }
        if phasesShown {
            let clear = isatty(2) == 1 ? "\r\u{1B}[K" : ""
            let line = Array("\(clear)fprep: \(phase): \(seconds.prefix(seconds.count - 3)) s\(resident.map { ", \($0 / 1024) MiB in memory" } ?? "")\n".utf8)
            _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        }
        last = Date()
    }

    /// A field of `/proc/self/status` in KiB ("VmRSS:", "VmHWM:").
    private static func statusField(_ name: String) -> Int? {
        // Read in a loop: a /proc file says it is 0 bytes long.
        let fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            bytes += chunk[0..<n]
        }
        let status = String(decoding: bytes, as: UTF8.self)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(name) }) else { return nil }
        return line.split(separator: " ").dropFirst().first.flatMap { Int($0) }
    }

    /// The process's own peak resident memory (`VmHWM`, its git children
    /// not counted), as a last line: what a benchmark reports as fprep's
    /// memory.
    public static func peakMemory() {
        guard enabled, let kilobytes = statusField("VmHWM:") else { return }
        let text = Array("trace: peak memory \(kilobytes) KiB\n".utf8)
        _ = text.withUnsafeBytes { write(file, $0.baseAddress, $0.count) }
    }
}
