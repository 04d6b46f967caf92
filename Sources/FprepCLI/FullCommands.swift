import ArgumentParser
import Glibc
import FprepCore

/// The commands that run the network stack (SwiftNIO, TLS, HTTP/2,
/// PostgreSQL): the push service, the watcher, the agent (it follows the
/// push service), `changes --follow` (it holds an enumerator open there),
/// and the completion scripts and manual, which need every command. They
/// live in a second executable, `fprep-full`, installed next to `fprep`,
/// which `fprep` runs in its place (exec, same process).
///
/// Why: that stack made the binary four times larger (168 MB, 43 MB without
/// it) and every command paid for it at start (relocations, metadata, the
/// conformance tables the runtime scans): `fprep --version` 12.6 ms against
/// 7.9 ms, `fprep changes` 18.5 ms against 15.3 ms. The commands people and
/// scripts run often stay in `fprep`, light.
public enum FullCommands {
    /// In `fprep-full`: the real commands (its `main` sets them); in `fprep`,
    /// stand-ins that only name them in `fprep --help`.
    nonisolated(unsafe) public static var commands: [any ParsableCommand.Type] = [
        ServeStandIn.self, WatchStandIn.self, AgentStandIn.self, CompletionsStandIn.self,
    ]
    /// `changes --follow`, in `fprep-full`.
    nonisolated(unsafe) package static var followChanges: ((ReplicaLocation, String, String?, @escaping (ChangeBatch) throws -> Void) throws -> Void)?
    /// Whether this is `fprep-full` (its `main` installed the commands).
    static var inThisExecutable: Bool { followChanges != nil }
    /// The first arguments that name one of them.
    private static let names = ["serve", "watch", "agent", "completions"]

    package static let serveAbstract = "Run the push service of a remote: devices register and get pushes as the remote changes."
    package static let watchAbstract = "Keep the replica in step with the remote: sync on each push from the push service."
    package static let agentAbstract = "Hydrate dataless files when a program first opens them, and sync by itself."
    package static let completionsAbstract = "Print the shell completion script for bash, zsh or fish."

    /// Whether `arguments` (after the program's name, the command first)
    /// ask for a command that lives in `fprep-full`.
    static func wanted(by arguments: [String]) -> Bool {
        guard let first = arguments.first else { return false }
        if names.contains(first) { return true }
        if first == "changes" && arguments.contains(where: { $0 == "--follow" || $0.hasPrefix("--follow=") }) { return true }
        if first == "help", arguments.count > 1 { return names.contains(arguments[1]) }
        // The manual (generate-manual) and completions describe every command.
        return first == "--experimental-dump-help"
    }

    /// Runs `fprep-full` in this process with the same arguments; returns
    /// only when it cannot.
    static func execute() -> Never {
        let own = currentExecutablePath()
        let path = (own.lastIndex(of: "/").map { String(own[..<$0]) } ?? ".") + "/fprep-full"
        let arguments = CommandLine.arguments
        let argv = arguments.map { strdup($0) } + [nil]
        execv(path, argv)
        let reason = String(cString: strerror(errno))
        Fprep.fail("fprep: '\(arguments.dropFirst().first ?? "")' runs in fprep-full, which cannot be started from \(path) (\(reason)): install both programs side by side (bash scripts/install.sh does)", status: 1)
    }
}

struct ServeStandIn: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "serve", abstract: FullCommands.serveAbstract)
}

struct WatchStandIn: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "watch", abstract: FullCommands.watchAbstract)
}

struct AgentStandIn: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "agent", abstract: FullCommands.agentAbstract)
}

struct CompletionsStandIn: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "completions", abstract: FullCommands.completionsAbstract)
}
