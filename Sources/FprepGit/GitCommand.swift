import Foundation

/// A `git` command that failed: its arguments, exit status and what it said.
public struct GitCommandError: Error, CustomStringConvertible, Sendable {
    public let arguments: [String]
    public let status: Int32
    public let standardError: String

    /// The line that says why: git's first `fatal:` or `error:` line (with
    /// the next line when it ends in ':', as "unable to connect to …:" does),
    /// without the prefix; else the last line it printed.
    public var reason: String {
        let lines = standardError.split(whereSeparator: \.isNewline).map(String.init)
        guard let first = lines.firstIndex(where: { $0.hasPrefix("fatal: ") || $0.hasPrefix("error: ") }) else {
            return lines.last ?? "exit status \(status)"
        }
        var line = String(lines[first].drop { $0 != " " }.dropFirst())
        if line.hasSuffix(":"), first + 1 < lines.count { line += " " + lines[first + 1] }
        return line
    }

    public var description: String { "git \(arguments.prefix(2).joined(separator: " ")): \(reason)" }
}

/// Runs the `git` command: the transport for what libgit2 lacks (filtered
/// fetch, fetching blobs by id). fprep runs no git command that reads blob
/// content, so none fetches a missing blob one by one; every run also has
/// `GIT_NO_LAZY_FETCH=1` (honoured from git 2.44 on) as a second guard, and
/// `GIT_TERMINAL_PROMPT=0`, so no command waits for a password.
public enum GitCommand {
    /// Runs `git args…` in `directory` and returns its standard output.
    /// Standard error is captured for the error, or passed to ours when
    /// `showProgress` is set (git then draws its own progress lines).
    @discardableResult
    public static func run(_ arguments: [String], in directory: String? = nil,
                           environment extra: [String: String] = [:], input: Data? = nil,
                           showProgress: Bool = false) throws -> Data {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: gitPath)
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        var environment = ProcessInfo.processInfo.environment
        environment["GIT_NO_LAZY_FETCH"] = "1"
        environment["GIT_TERMINAL_PROMPT"] = "0"
        environment["LC_ALL"] = "C"
        for (key, value) in extra { environment[key] = value }
        process.environment = environment

        let outPipe = Pipe(), errPipe = Pipe()
        process.standardOutput = outPipe
        process.standardError = showProgress ? FileHandle.standardError : errPipe
        let inPipe = input.map { _ in Pipe() }
        process.standardInput = inPipe ?? FileHandle.nullDevice

        try process.run()
        // Drain both pipes and feed stdin at once: git may fill one pipe
        // before it has read all of its input.
        let collected = Collected()
        let group = DispatchGroup()
        if !showProgress {
            DispatchQueue.global().async(group: group) {
                collected.setError(errPipe.fileHandleForReading.readDataToEndOfFile())
            }
        }
        if let inPipe, let input {
            DispatchQueue.global().async(group: group) {
                try? inPipe.fileHandleForWriting.write(contentsOf: input)
                try? inPipe.fileHandleForWriting.close()
            }
        }
        let output = outPipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        group.wait()
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            throw GitCommandError(arguments: arguments, status: process.terminationStatus,
                                  standardError: String(decoding: collected.error, as: UTF8.self))
        }
        return output
    }

    /// The `git` executable: `FPREP_GIT` when set, else the first `git` on PATH.
    public static var gitPath: String {
        let environment = ProcessInfo.processInfo.environment
        if let explicit = environment["FPREP_GIT"], !explicit.isEmpty { return explicit }
        for dir in (environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let candidate = "\(dir)/git"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return "/usr/bin/git"
    }
}

/// Collects a pipe's bytes on another thread.
private final class Collected: @unchecked Sendable {
    private let lock = NSLock()
    private var errorBytes = Data()
    func setError(_ data: Data) { lock.lock(); errorBytes = data; lock.unlock() }
    var error: Data { lock.lock(); defer { lock.unlock() }; return errorBytes }
}
