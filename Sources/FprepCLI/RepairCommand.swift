import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore

struct RepairCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "repair",
        abstract: "Rebuild a replica's state database from its git directory.",
        discussion: """
            For a replica whose .fprep/state.db is lost or corrupt: the database is moved aside and rebuilt from the git config and refs (remote, branch, anchor, domain), the fetched size manifest and the index (which files are materialized). The files are not touched, except placeholders laid out before their size was known: they get it from the manifest. Interrupted commands need no repair: the next command finishes them on its own.
            """
    )

    @OptionGroup var output: OutputOptions

    @Argument(help: "The replica's folder (default: the current folder).")
    var directory = "."

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        var result = try Repair.rebuildState(of: directory)
        // Placeholders laid out before their size was known get it now.
        result.sizesLaidOut = try ReplicaLocation(replica: result.root).open("repair", exclusive: true).layOutLearnedSizes(always: true)
        if json { return try JSONOutput.print(result) }
        if let aside = result.movedAside { print("moved the old state database to \(aside)") }
        print("rebuilt the state of \(result.root): anchor \(result.anchor ?? "(none)"), \(result.materialized) materialized files, \(result.sizes) known sizes")
        if result.sizesLaidOut > 0 { print("\(count(result.sizesLaidOut, "placeholder")) got the size the remote's size manifest now lists") }
        if let unpushed = result.unpushed {
            print("local commit \(unpushed.prefix(12)) is not on the remote yet: the next 'fprep sync' pushes it")
        }
    }
}
