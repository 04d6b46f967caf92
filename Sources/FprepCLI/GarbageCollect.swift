import ArgumentParser
import FoundationEssentials
import FprepCore

struct GarbageCollect: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gc",
        abstract: "Give back the space of content git fetched by itself into .git.",
        discussion: """
            'git log -p', 'git show' or a diff in a replica fetch the content they need into .git, where nothing uses it afterwards. gc removes those fetched packs of file content: the remote keeps every byte of them, and git fetches them again when asked. Your own commits, materialized files, commits, trees and symlink targets are never touched. 'fprep status' shows what .git takes.

            Example: fprep gc --dry-run
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Flag(help: "Say what would be removed and the space freed; change nothing.")
    var dryRun = false

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        let report = try replica.open("gc", exclusive: true).collectGarbage(dryRun: dryRun)
        if json { return try JSONOutput.print(report) }
        let verb = dryRun ? "would remove" : "removed"
        print("\(verb) \(count(report.blobs, "fetched file")) in \(count(report.packs.count, "pack")) (\(humanSize(report.bytesFreed)) freed); .git objects take \(humanSize(report.bytesLeft))")
    }
}
