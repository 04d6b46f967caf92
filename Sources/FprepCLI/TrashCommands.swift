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
        if json { return try JSONOutput.print(["items": items]) }
        for item in items {
            print("\(item.deleted)  \(item.size.map(String.init) ?? "-")  \(item.identifier)\(item.commit == nil ? "  (deleted here, not synced)" : "")")
        }
    }
}

struct Restore: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Bring back a deleted item, or an earlier version of a file.",
        discussion: """
            Without --version: the item 'fprep trash' lists (a folder: every deleted item under it) comes back with its last content, from the local object store or fetched. With --version COMMIT (as 'fprep versions PATH' lists, or a unique prefix of it): that version of the file takes its name, replacing what is there only when nothing of yours is in it (a placeholder, or the anchor's version; local changes are never overwritten). Either way the result is a new local change that the next 'fprep sync' commits and pushes.

            Examples:
              fprep restore notes.txt
              fprep restore --version 3f2a9c1 report.odt
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "The item, as 'fprep trash' or 'fprep versions' lists it.")
    var path: String

    @Option(help: ArgumentHelp("The commit whose version of the file to bring back.", valueName: "COMMIT"))
    var version: String?

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        let opened = try replica.open("restore", exclusive: true)
        let restored: [String]
        if let version {
            restored = [try opened.restore(path, relativeTo: replica.baseDirectory, version: version)]
        } else {
            restored = try opened.restore(path, relativeTo: replica.baseDirectory)
        }
        if json { return try JSONOutput.print(["restored": restored]) }
        for item in restored { print("restored \(Console.escaped(item))") }
        print("run 'fprep sync' to share \(restored.count == 1 ? "it" : "them")")
    }
}

struct Versions: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "versions",
        abstract: "List the versions of a file in the replica's history.",
        discussion: """
            Newest first: each commit that changed what the path holds, with its date, author, size and content version. The history is local; no network is needed. 'fprep restore --version COMMIT PATH' brings one back.

            Example: fprep versions docs/report.md
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "The file, relative to the current folder (or to -C DIR).")
    var path: String

    @Option(help: "How many versions at most.")
    var limit = 20

    @Flag(help: "Print the list as JSON.")
    var json = false

    func validate() throws {
        guard limit >= 1 else { throw ValidationError("--limit must be at least 1") }
    }

    func run() throws {
        let versions = try replica.open("versions", exclusive: false).versions(path, relativeTo: replica.baseDirectory, limit: limit)
        if json { return try JSONOutput.print(["versions": versions]) }
        for version in versions {
            let size = version.kind == "deleted" ? "deleted" : version.size.map { humanSize($0) } ?? "?"
            print("\(version.commit.prefix(12))  \(version.date)  \(size)  \(Console.escaped(version.author))  \(Console.escaped(version.summary))")
        }
    }
}
