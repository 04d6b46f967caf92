import ArgumentParser
import CFprepSys
import FoundationEssentials
import Glibc
import FprepCore
import FprepGit

/// The `fprep` command: a dataless replica of a git remote.
public struct Fprep: ParsableCommand {
    /// Made on first use, after `fprep-full`'s `main` has put its commands
    /// in `FullCommands.commands`.
    public static let configuration = CommandConfiguration(
        commandName: "fprep",
        abstract: "Keep a dataless replica of a git remote: every file visible, content only where asked for.",
        discussion: """
            A replica shows every file of the remote with its real name, size and date, as a placeholder that takes no disk space; 'materialize' brings content in, 'evict' gives the space back. Commits of the remote are the sync anchors.

            Start with a remote ('init-remote', 'import-tree') or any git remote that allows partial clone, then 'clone' it. Run commands inside the replica, or pass -C DIR.

            Exit status: 0 done; 1 failed; 2 done in part (some items refused, listed); 64 bad usage; 65 sync anchor expired; 75 replica busy (with --no-wait).
            """,
        version: "fprep \(Fprep.version) (\(buildCommit.map { "commit \($0.prefix(12)), " } ?? "")libgit2 \(LibGit2.version))",
        subcommands: [
            InitRemote.self, ImportTree.self, Clone.self, List.self, Materialize.self, Evict.self,
            Pin.self, Unpin.self, Status.self, Sync.self, Changes.self, Anchor.self, WorkingSetCommand.self, Tag.self, Untag.self,
            Favorite.self, Unfavorite.self, Open.self, Signals.self, TrashCommand.self, Restore.self, Revert.self, Versions.self, GarbageCollect.self, RepairCommand.self, Hook.self,
            InstallHooks.self,
        ] + FullCommands.commands
    )

    public init() {}

    static let version = "0.1.0"

    /// Parses the command line, runs the command, and turns every failure
    /// into one line on standard error and the documented exit status.
    public static func runMain() -> Never {
        do {
            let arguments = Self.movingReplicaOption(Array(CommandLine.arguments.dropFirst()))
            if !FullCommands.inThisExecutable && FullCommands.wanted(by: arguments) { FullCommands.execute() }
            // Bare `fprep` is a usage mistake: the usage, and 64.
            if arguments.isEmpty {
                Console.error(helpMessage() + "\n")
                Glibc.exit(64)
            }
            // An unknown command is a usage mistake, with --help too
            // (ArgumentParser would print the root's help and exit 0).
            if let first = arguments.first, !first.hasPrefix("-"),
               !configuration.subcommands.contains(where: { $0.configuration.commandName == first }), first != "help" {
                fail("fprep: unknown command '\(first)' (see 'fprep --help')", status: 64)
            }
            if let request = ChangesRequest.quickParse(arguments) {
                try request.run()
                Trace.peakMemory()
                Glibc.exit(0)
            }
            var command = try parseAsRoot(PathArguments.fold(arguments))
            if var takesPaths = command as? any TakesPaths {
                takesPaths.paths = PathArguments.unfold(takesPaths.paths)
                command = takesPaths
            }
            Verbosity.apply(arguments)
            // Ctrl-C: what is done stays done (each step is atomic or
            // journaled) and the next fprep command settles the rest.
            let clear = isatty(STDERR_FILENO) == 1 ? "\r\u{1B}[K" : ""
            fprep_on_interrupt_say(clear + "fprep: interrupted; what was done is kept, and the next fprep command finishes or undoes the rest (run it again to continue)\n")
            try command.run()
            Trace.peakMemory()
            Glibc.exit(0)
        } catch let error as FprepError {
            report(error)
            Glibc.exit(error.exitCode)
        } catch let error as ExitCode {
            Glibc.exit(error.rawValue)
        } catch {
            if let message = ErrorRendering.unexpected(error) {
                fail("fprep: \(message)", status: 1)
            }
            // --help and --version print and exit 0; a usage mistake is one line.
            let code = exitCode(for: error)
            guard code != .success else { exit(withError: error) }
            let message = PathArguments.unfoldMessage(self.message(for: error)).split(separator: "\n").first.map(String.init) ?? "bad usage"
            fail("fprep: \(message.replacingAll("Error: ", with: "")) (see 'fprep --help')", status: code.rawValue)
        }
    }

    /// Whether the command line asks for JSON: errors are then one JSON
    /// object on standard error too, `{"error": MESSAGE, "status": CODE}`.
    static var wantsJSON: Bool { CommandLine.arguments.dropFirst().contains("--json") }

    /// Says why the command failed, in the form asked for, and exits.
    static func fail(_ line: String, status: Int32) -> Never {
        if wantsJSON {
            struct Failure: Encodable { let error: String; let status: Int32 }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            let message = line.hasPrefix("fprep: ") ? String(line.dropFirst(7)) : line
            if let data = try? encoder.encode(Failure(error: message, status: status)) {
                Console.error(String(decoding: data, as: UTF8.self) + "\n")
                Glibc.exit(status)
            }
        }
        printError(line)
        Glibc.exit(status)
    }

    /// `fprep -C DIR --no-wait COMMAND …` as git takes it: options of every
    /// replica command given before the command move behind its name, where
    /// the command's own options parse them.
    static func movingReplicaOption(_ arguments: [String]) -> [String] {
        var leading: [String] = []
        var rest = arguments[...]
        while let first = rest.first {
            if ["-C", "--replica"].contains(first), rest.count >= 2 {
                leading += rest.prefix(2)
                rest = rest.dropFirst(2)
            } else if first.hasPrefix("--replica=") || ["--no-wait", "--verbose"].contains(first) {
                leading.append(first)
                rest = rest.dropFirst()
            } else {
                break
            }
        }
        guard !leading.isEmpty, let command = rest.first else { return arguments }
        return [command] + leading + rest.dropFirst()
    }

    static func report(_ error: FprepError) {
        if wantsJSON { fail("fprep: \(error.message)", status: error.exitCode) }
        printError("fprep: \(error.message)")
        if Verbosity.verbose, let detail = error.detail, !detail.isEmpty {
            Console.error((detail.hasSuffix("\n") ? detail : detail + "\n"))
        }
    }
}
