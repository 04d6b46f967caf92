import Foundation

/// Every failure the benchmark reports: one line, naming what failed.
enum BenchError: Error, CustomStringConvertible {
    /// A subprocess exited non-zero or died of a signal.
    case commandFailed(command: String, status: String, stderrTail: String)
    /// Anything else (a syscall, a bad option, an unexpected git output).
    case message(String)

    var description: String {
        switch self {
        case let .commandFailed(command, status, tail):
            let detail = tail.isEmpty ? "no stderr output" : "stderr: \(tail)"
            return "command failed (\(status)): \(command) — \(detail)"
        case let .message(text):
            return text
        }
    }

    /// The last few non-empty lines of a stderr capture, joined into one line,
    /// so a failure stays one readable line.
    static func tail(of bytes: [UInt8], lines: Int = 3, maxChars: Int = 600) -> String {
        let text = String(decoding: bytes, as: UTF8.self)
        let kept = text.split(whereSeparator: { $0 == "\n" || $0 == "\r" })
            .map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty }
            .suffix(lines)
            .joined(separator: " | ")
        return kept.count > maxChars ? "…" + String(kept.suffix(maxChars)) : kept
    }
}
