import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore

struct Hook: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a server-side hook (called by the hooks 'init-remote' installs).",
        discussion: """
            post-receive reads git's '<old> <new> <ref>' lines on standard input and extends the size manifest for each updated branch. It never fails a push: errors go to fprep-hook.log in the repository and to standard error, and the exit status is 0.
            """,
        subcommands: [PostReceiveHook.self]
    )
}

struct PostReceiveHook: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "post-receive",
                                                    abstract: "Extend the size manifest for pushed branches.")

    @Option(name: .customLong("git-dir"), help: "The repository (default: $GIT_DIR, else the current folder).")
    var gitDirectory: String?

    func run() throws {
        let directory = gitDirectory ?? ProcessInfo.processInfo.environment["GIT_DIR"] ?? "."
        let input = String(decoding: Console.readInput(), as: UTF8.self)
        do {
            try PostReceive.run(gitDirectory: directory, updates: PostReceive.parse(input))
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
