import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore

struct Sync: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Move the replica to the remote's latest anchor.",
        discussion: """
            Fetches the followed branch (commits and trees only) and applies the tree diff between the
            replica's anchor and the remote's: new and changed files appear as placeholders with their
            new size, mode and date; deleted ones go; renames are moves (a materialized file moves with its
            content, a renamed folder moves as one); materialized files that changed get their new content
            in one batched fetch. A file with local changes is never overwritten or deleted: it is kept and
            reported. Signals are raised for the affected containers and the working set.
            A killed sync is finished by the next fprep command.
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        let opened = try replica.open("sync", exclusive: true)
        let report = try opened.sync()
        if json { return try JSONOutput.print(report) }
        guard report.from != report.to else {
            print("up to date at \(report.to ?? "(empty remote)")")
            return
        }
        print("synced \(report.from.map { String($0.prefix(12)) } ?? "(empty)") → \(report.to.map { String($0.prefix(12)) } ?? "?"): \(report.added) added, \(report.changed) changed, \(report.deleted) deleted, \(report.moved) moved, \(humanSize(report.bytesFetched)) fetched")
        for kept in report.keptLocal { print("  kept: \(kept.path): \(kept.reason)") }
        for signal in report.signals { print("  signal \(signal.seq): \(signal.container) (\(signal.reason))") }
    }
}
