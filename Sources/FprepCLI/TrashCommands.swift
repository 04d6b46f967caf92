import ArgumentParser
import FoundationEssentials
import FprepCore

struct TrashCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "trash",
        abstract: "List recently deleted items (local or remote deletions).",
        discussion: """
            Items deleted in the last days (30 by default), found in the replica's history and among the local deletions not synced yet. 'fprep restore PATH' brings one back.
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Option(help: "How many days back.")
    var days = 30

    @Flag(help: "Print the list as JSON.")
    var json = false

    func validate() throws {
        guard days >= 1 else { throw ValidationError("--days must be at least 1") }
    }

    func run() throws {
        let items = try replica.open("trash", exclusive: false).trash(days: days)
        if json { return try JSONOutput.print(items) }
        for item in items {
            print("\(item.deleted)  \(item.size.map(String.init) ?? "-")  \(item.identifier)\(item.commit == nil ? "  (deleted here, not synced)" : "")")
        }
    }
}

struct Restore: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Bring a recently deleted item back.",
        discussion: """
            The item comes back as a file with its last content (from the local object store, or fetched), as a new change that the next 'fprep sync' commits and pushes.
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "The item, as 'fprep trash' lists it.")
    var path: String

    func run() throws {
        let restored = try replica.open("restore", exclusive: true).restore(path, relativeTo: replica.baseDirectory)
        print("restored \(restored) (run 'fprep sync' to share it)")
    }
}
