import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore

struct Materialize: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "materialize",
        abstract: "Bring the content of files into the replica.",
        discussion: """
            Fetches every missing blob in one request, writes each file beside its placeholder, checks it against its id, makes the batch durable and renames it into place, with its mode and date. A folder means every file below it. Files already materialized are left as they are; a placeholder a program wrote into keeps what was written. Exit status 2 when some files were left without their content (each is listed with why: a program wrote into its placeholder, it was deleted here, its folder moved during the fetch); run it again once that is settled.

            Example: fprep materialize docs/report.pdf src
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "Files or folders, relative to the current folder (or to -C DIR).")
    var paths: [String] = []

    @Option(help: ArgumentHelp("Read more paths from FILE, one a line ('-' for standard input).", valueName: "FILE"))
    var pathsFrom: String?

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        let all = try collectPaths(paths, from: pathsFrom)
        let opened = try replica.open("materialize", exclusive: true)
        let result = try opened.materialize(all, relativeTo: replica.baseDirectory)
        // Done in part: a file asked for is still without its content.
        let done = Set(result.materialized)
        let leftOut = result.skipped.filter { !done.contains($0.path) }
        if json {
            try JSONOutput.print(result)
        } else {
            print("materialized \(count(result.materialized.count, "file")) (\(humanSize(result.bytesWritten)), \(result.fetchedBlobs) fetched); \(result.alreadyMaterialized) already materialized")
            for note in result.skipped where done.contains(note.path) { print("  \(Console.escaped(note.path)): \(note.reason)") }
            for skipped in leftOut { printError("fprep: left as is '\(Console.escaped(skipped.path))': \(skipped.reason)") }
        }
        if !leftOut.isEmpty { throw ExitCode(2) }
    }
}
