import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore

struct Materialize: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "materialize",
        abstract: "Bring the content of files into the replica.",
        discussion: """
            Fetches every missing blob in one request, writes each file beside its placeholder, checks it against its id, makes the batch durable and renames it into place, with its mode and date. A folder means every file below it. Files already materialized are left as they are; a placeholder a program wrote into keeps what was written.

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
        if json {
            try JSONOutput.print(result)
        } else {
            print("materialized \(count(result.materialized.count, "file")) (\(humanSize(result.bytesWritten)), \(result.fetchedBlobs) fetched); \(result.alreadyMaterialized) already materialized")
            for skipped in result.skipped { print("  left as is: \(skipped.path): \(skipped.reason)") }
        }
    }
}
