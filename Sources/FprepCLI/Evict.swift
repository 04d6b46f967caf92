import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore

struct Evict: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "evict",
        abstract: "Turn materialized files back into placeholders and free their space.",
        discussion: """
            Frees each file's data blocks in place; the file keeps its name, size and date. A folder means every file below it. A file with local changes is never evicted: it is listed with the reason, the others are evicted, and the exit status is 2.

            Example: fprep evict src
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "Files or folders, relative to the current folder (or to -C DIR).")
    var paths: [String] = []

    @Option(help: ArgumentHelp("Read more paths from FILE, one a line ('-' for standard input).", valueName: "FILE"))
    var pathsFrom: String?

    @Flag(help: "Say what would be evicted and the space it would free; change nothing.")
    var dryRun = false

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        let all = try collectPaths(paths, from: pathsFrom)
        let opened = try replica.open("evict", exclusive: !dryRun)
        let result = try opened.evict(all, relativeTo: replica.baseDirectory, dryRun: dryRun)
        if json {
            try JSONOutput.print(result)
        } else if dryRun {
            print("would evict \(count(result.evicted.count, "file")) (\(humanSize(result.bytesFreed)) freed); \(result.alreadyDataless) already dataless")
            for path in result.evicted { print("  \(Console.escaped(path))") }
        } else {
            print("evicted \(count(result.evicted.count, "file")) (\(humanSize(result.bytesFreed)) freed); \(result.alreadyDataless) already dataless")
            for refused in result.refused {
                printError("fprep: cannot evict '\(refused.path)': \(refused.reason)")
            }
        }
        if !result.refused.isEmpty { throw ExitCode(2) }
    }
}
