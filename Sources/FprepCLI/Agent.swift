import ArgumentParser
import FprepAgent
import FprepCore

struct AgentCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "agent",
        abstract: "Hydrate dataless files when a program first opens them (runs in the foreground).",
        discussion: """
            Watches every placeholder of the replica with a fanotify pre-content mark (Linux 6.14 or later, as root). The first read, write, mmap or exec of a placeholder waits until its content is fetched and written in place; the file is then materialized, as 'fprep materialize' leaves it. When the content cannot be had within the timeout (offline, say), the program's call fails with EIO instead of reading zeros. Logs one timestamped line per hydration on standard error; stops on SIGTERM or Ctrl-C.

            Without a running agent a placeholder reads as zeros, and 'fprep materialize' brings content explicitly.

            Example: sudo fprep agent -C ~/work
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Option(help: ArgumentHelp("Fail an access with EIO when its content takes longer than SECONDS.", valueName: "SECONDS"))
    var timeout: Double = 10

    func validate() throws {
        guard timeout > 0, timeout <= 3600 else { throw ValidationError("--timeout must be between 0 and 3600 seconds") }
    }

    func run() throws {
        do {
            try Agent.serve(replicaAt: replica.baseDirectory, timeout: timeout)
        } catch let refusal as AgentRefusal {
            printError(refusal.description)
            throw ExitCode(1)
        }
    }
}
