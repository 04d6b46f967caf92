import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore
import FprepGit

/// Options of every command that works on a replica.
package struct ReplicaOptions: ParsableArguments {
    @Option(name: [.customShort("C"), .customLong("replica")],
            help: ArgumentHelp("Work in the replica at DIR instead of the one holding the current folder.", valueName: "DIR"))
    package var replica: String?

    @Flag(name: .customLong("no-wait"), help: "Fail at once (exit 75) if another fprep command holds the replica, instead of waiting.")
    package var noWait = false

    @Flag(name: .shortAndLong, help: "Show the detail behind an error.")
    package var verbose = false

    @Flag(name: .shortAndLong, help: "Print nothing but errors (and what --json asks for).")
    package var quiet = false

    package init() {}

    package var location: ReplicaLocation { ReplicaLocation(replica: replica, noWait: noWait, verbose: verbose) }
    package var baseDirectory: String { location.baseDirectory }

    package func open(_ command: String, exclusive: Bool) throws -> Replica {
        try location.open(command, exclusive: exclusive)
    }
}

/// Which replica a command works on and how it waits for it: the values of
/// `ReplicaOptions`, also for a command line parsed without ArgumentParser.
package struct ReplicaLocation: Equatable {
    package var replica: String?
    package var noWait = false
    package var verbose = false

    /// Where relative paths start: -C DIR when given, else the current folder.
    package var baseDirectory: String {
        let current = currentFolder()
        guard let replica else { return current }
        return replica.hasPrefix("/") ? replica : current + "/" + replica
    }

    package func open(_ command: String, exclusive: Bool) throws -> Replica {
        Verbosity.verbose = Verbosity.verbose || verbose
        Trace.start()
        return try Replica.open(containing: baseDirectory, access: Replica.Access(
            command: command, exclusive: exclusive, wait: !noWait, progress: TerminalProgress.make(),
            onWait: { message in printError("fprep: \(message)") },
            runsOnFullDisk: Self.runOnFullDisk.contains(command)))
    }

    /// Commands that only read, or free space (evict): they run while an
    /// interrupted sync waits for disk space to be finished.
    static let runOnFullDisk: Set<String> = ["status", "ls", "changes", "anchor", "evict"]
}

/// Every human-readable line a command prints goes through here (this
/// shadows the standard library's `print` in the CLI): the names in it are
/// the user's or a remote's, and a control character in one must neither
/// reach the terminal (an escape sequence) nor start a line of its own.
package func print(_ line: String) {
    Console.output(Console.escaped(line) + "\n")
}

/// One line on standard error, escaped like `print`'s.
package func printError(_ line: String) {
    Console.error(Console.escaped(line) + "\n")
}

/// Whether errors show their detail; set once from `--verbose` before work starts.
/// `-q` and `-v` for the commands that do not work on a replica (the
/// replica commands have them in `ReplicaOptions`).
package struct OutputOptions: ParsableArguments {
    @Flag(name: .shortAndLong, help: "Show the detail behind an error.")
    package var verbose = false

    @Flag(name: .shortAndLong, help: "Print nothing but errors (and what --json asks for).")
    package var quiet = false

    package init() {}
}

package enum Verbosity {
    nonisolated(unsafe) package static var verbose = false
    nonisolated(unsafe) package static var quiet = false

    /// Reads -q/--quiet and -v/--verbose from a command line ArgumentParser
    /// accepted (so the flags are the command's own), before the command
    /// runs: quiet sends standard output to /dev/null unless --json asks
    /// for it, and turns progress off.
    static func apply(_ arguments: [String]) {
        var quietAsked = false, verboseAsked = false, json = false
        var skipValue = false
        for argument in arguments {
            if skipValue { skipValue = false; continue }
            if argument == "--" { break }
            switch argument {
            case "-C", "--replica": skipValue = true
            case "--quiet": quietAsked = true
            case "--verbose": verboseAsked = true
            case "--json": json = true
            default:
                // Short flags, alone or together (-q, -qv).
                if argument.count >= 2, argument.hasPrefix("-"), !argument.hasPrefix("--"),
                   argument.dropFirst().allSatisfy({ $0 == "q" || $0 == "v" }) {
                    quietAsked = quietAsked || argument.contains("q")
                    verboseAsked = verboseAsked || argument.contains("v")
                }
            }
        }
        verbose = verbose || verboseAsked
        if verbose { Trace.showPhases() }
        guard quietAsked else { return }
        quiet = true
        if !json {
            let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
            if null >= 0 {
                dup2(null, STDOUT_FILENO)
                close(null)
            }
        }
    }
}

/// Turns errors that are not fprep's own into one line.
enum ErrorRendering {
    static func unexpected(_ error: Error) -> String? {
        if let storage = FprepError.storage(error, root: nil) { return storage.message }
        switch error {
        case let error as GitError: return "\(error.message) (in \(error.function))"
        case let error as GitCommandError: return "git failed: \(error.reason)"
        case let error as CocoaError:
            // One line: what, where, and the system's reason (no userInfo dump).
            let path = (error.userInfo["NSFilePath"] as? String).map { " '\($0)'" } ?? ""
            let reason = (error.userInfo["NSUnderlyingError"] as? POSIXError).map { String(cString: strerror($0.code.rawValue)) }
            return "cannot work on\(path): \(reason ?? "file error \(error.code.rawValue)")"
        default:
            // ArgumentParser's own errors (usage, --help) go through its renderer.
            let typeName = String(reflecting: type(of: error))
            if typeName.hasPrefix("ArgumentParser.") { return nil }
            return String(describing: error)
        }
    }
}

/// Prints values as JSON (sorted keys, so output is stable for scripts).
package enum JSONOutput {
    package static func print<T: Encodable>(_ value: T) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let data = try encoder.encode(value)
        Console.output(data)
        Console.output("\n")
    }

    /// One line of JSON (no pretty printing): for answers read line by line.
    package static func printLine<T: Encodable>(_ value: T) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        Console.output(try encoder.encode(value))
        Console.output("\n")
    }
}

/// "1 file", "2 files".
package func count(_ n: Int, _ noun: String) -> String { counted(n, noun) }

/// Human-readable sizes: 1023 B, 1.5 KiB, 12.0 MiB.
package func humanSize(_ bytes: Int64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"]
    var value = Double(bytes)
    var unit = 0
    while value >= 1024 && unit < units.count - 1 {
        value /= 1024
        unit += 1
    }
    let tenths = Int((value * 10).rounded())
    return unit == 0 ? "\(bytes) B" : "\(tenths / 10).\(tenths % 10) \(units[unit])"
}

/// Paths from the command line plus, with `--paths-from FILE`, one per line
/// of FILE (`-` is standard input).
func collectPaths(_ arguments: [String], from file: String?) throws -> [String] {
    var paths = arguments
    if let file {
        let data: Data
        if file == "-" {
            data = Console.readInput()
        } else {
            guard let read = FileManager.default.contents(atPath: file) else {
                throw FprepError(.usage, "cannot read the path list '\(file)'")
            }
            data = read
        }
        paths += String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init).filter { !$0.isEmpty }
    }
    guard !paths.isEmpty else { throw FprepError(.usage, "name at least one path (or use --paths-from FILE)") }
    return paths
}

/// A progress line on standard error, redrawn at most ten times a second,
/// only when standard error is a terminal.
final class TerminalProgress: ProgressReporter, @unchecked Sendable {
    private let lock = Lock()
    private var lastDraw = Date.distantPast
    private var drawn = false

    static func make() -> any ProgressReporter {
        isatty(STDERR_FILENO) == 1 && !Verbosity.quiet ? TerminalProgress() : SilentProgress()
    }

    func report(_ phase: String, done: Int, total: Int) {
        lock.lock()
        defer { lock.unlock() }
        let now = Date()
        guard done >= total || now.timeIntervalSince(lastDraw) >= 0.1 else { return }
        lastDraw = now
        let percent = total > 0 ? done * 100 / total : 100
        Console.error("\r\u{1B}[K\(phase): \(done)/\(total) (\(percent)%)")
        drawn = true
    }

    func reportTransfer(_ phase: String, bytes: Int64, total: Int64, started: Double) {
        lock.lock()
        defer { lock.unlock() }
        let elapsed = max(monotonicSeconds() - started, 0.001)
        guard bytes > 0 else {
            // Nothing has arrived yet: the remote is still making the pack.
            let size = total > 0 ? " \(humanSize(total))" : ""
            Console.error("\r\u{1B}[K\(phase): waiting for the remote to send\(size) (\(Int(elapsed)) s)")
            drawn = true
            lastDraw = Date()
            return
        }
        let rate = Double(bytes) / elapsed
        var line = "\r\u{1B}[K\(phase): \(humanSize(bytes))"
        if total > 0 { line += " of about \(humanSize(total)) (\(min(bytes * 100 / total, 99))%)" }
        line += ", \(humanSize(Int64(rate)))/s"
        if total > bytes, rate > 0 { line += ", \(Int((Double(total - bytes) / rate).rounded(.up))) s left" }
        Console.error(line)
        drawn = true
        lastDraw = Date()
    }

    func finish() {
        lock.lock()
        defer { lock.unlock() }
        if drawn { Console.error("\r\u{1B}[K") }
        drawn = false
    }
}

/// The path of the running fprep binary, for the hooks to call back.
func currentExecutablePath() -> String {
    var buffer = [UInt8](repeating: 0, count: 4096)
    let count = buffer.withUnsafeMutableBytes { readlink("/proc/self/exe", $0.baseAddress!.assumingMemoryBound(to: CChar.self), $0.count) }
    if count > 0 { return String(decoding: buffer[0..<count], as: UTF8.self) }
    return CommandLine.arguments.first ?? "fprep"
}

