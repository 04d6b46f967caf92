import ArgumentParser
import FoundationEssentials
import FprepCore
import FprepPush
import Glibc

struct Hook: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hook",
        abstract: "Run a server-side hook (called by the hooks 'init-remote' installs).",
        discussion: """
            post-receive reads git's '<old> <new> <ref>' lines on standard input, extends the size manifest for each updated branch, and records the push's affected containers in the remote's outbox (fprep/outbox.db) for the push service, which it pokes with one short request. It never fails or holds up a push: errors go to fprep-hook.log in the repository and to standard error, and the exit status is 0.
            """,
        subcommands: [PostReceiveHook.self]
    )
}

struct PostReceiveHook: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "post-receive",
                                                    abstract: "Extend the size manifest and record push signals for pushed branches.")

    @OptionGroup var output: OutputOptions

    @Option(name: .customLong("git-dir"), help: "The repository (default: $GIT_DIR, else the current folder).")
    var gitDirectory: String?

    func run() throws {
        let directory = gitDirectory ?? ProcessInfo.processInfo.environment["GIT_DIR"] ?? "."
        let updates = PostReceive.parse(String(decoding: Console.readInput(), as: UTF8.self))
        // Two independent steps: a failure of one stops neither the other nor the push.
        attempt(in: directory) { try PostReceive.run(gitDirectory: directory, updates: updates) }
        attempt(in: directory) { try PushHook.run(gitDirectory: directory, updates: updates) }
    }

    private func attempt(in directory: String, _ step: () throws -> Void) {
        do {
            try step()
        } catch {
            let line = "\(Replica.isoDate(Int64(Date().timeIntervalSince1970))) post-receive: \(error)\n"
            Console.error("fprep hook: \(error)\n")
            // Appended with O_APPEND, so two hooks running at once do not mix lines.
            let fd = open(directory + "/fprep-hook.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
            if fd >= 0 {
                _ = line.withCString { write(fd, $0, strlen($0)) }
                close(fd)
            }
        }
    }
}
