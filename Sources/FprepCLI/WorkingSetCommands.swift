import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore

struct WorkingSetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "working-set",
        abstract: "List the working set.",
        discussion: """
            The working set is what a device keeps close: materialized items, recently used items (used through fprep in the last 30 days, or read since, by the file's access time), tagged items, favorites, and items a sync deleted in the last 30 days. Changes to it are signalled as NSFileProviderWorkingSetContainerItemIdentifier.
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Flag(help: "Print the list as JSON.")
    var json = false

    func run() throws {
        let items = try replica.open("working-set", exclusive: false).workingSetItems()
        if json { return try JSONOutput.print(["items": items]) }
        for item in items {
            let tags = item.tags.isEmpty ? "" : "  [\(item.tags.joined(separator: ", "))]"
            print("\(item.identifier)  (\(item.reasons.map(\.rawValue).joined(separator: ", ")))\(tags)")
        }
    }
}

struct Tag: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "tag", abstract: "Tag an item; tagged items are in the working set.")
    @OptionGroup var replica: ReplicaOptions
    @Argument(help: "The item.") var path: String
    @Argument(help: "The tag.") var name: String
    @Flag(help: "Print the result as JSON.") var json = false

    func run() throws {
        try replica.open("tag", exclusive: true).setTag(path, relativeTo: replica.baseDirectory, name: name, present: true)
        if json { try JSONOutput.print(TagChange(item: path, tag: name, tagged: true)) }
    }
}

struct Untag: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "untag", abstract: "Remove a tag from an item.")
    @OptionGroup var replica: ReplicaOptions
    @Argument(help: "The item.") var path: String
    @Argument(help: "The tag.") var name: String
    @Flag(help: "Print the result as JSON.") var json = false

    func run() throws {
        try replica.open("untag", exclusive: true).setTag(path, relativeTo: replica.baseDirectory, name: name, present: false)
        if json { try JSONOutput.print(TagChange(item: path, tag: name, tagged: false)) }
    }
}

struct Favorite: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "favorite", abstract: "Mark an item as a favorite; favorites are in the working set.")
    @OptionGroup var replica: ReplicaOptions
    @Argument(help: "The item.") var path: String
    @Flag(help: "Print the result as JSON.") var json = false

    func run() throws {
        try replica.open("favorite", exclusive: true).setFavorite(path, relativeTo: replica.baseDirectory, present: true)
        if json { try JSONOutput.print(FavoriteChange(item: path, favorite: true)) }
    }
}

struct Unfavorite: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "unfavorite", abstract: "Unmark a favorite.")
    @OptionGroup var replica: ReplicaOptions
    @Argument(help: "The item.") var path: String
    @Flag(help: "Print the result as JSON.") var json = false

    func run() throws {
        try replica.open("unfavorite", exclusive: true).setFavorite(path, relativeTo: replica.baseDirectory, present: false)
        if json { try JSONOutput.print(FavoriteChange(item: path, favorite: false)) }
    }
}

struct Open: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open",
        abstract: "Materialize an item, record it as used, and print its path.",
        discussion: "For scripts: cat \"$(fprep open docs/report.txt)\"")
    @OptionGroup var replica: ReplicaOptions
    @Argument(help: "The item.") var path: String
    @Flag(help: "Print the result as JSON.") var json = false

    func run() throws {
        let opened = try replica.open("open", exclusive: true).open(path, relativeTo: replica.baseDirectory)
        if json { return try JSONOutput.print(["path": opened.path]) }
        print(opened.path)
    }
}

/// What `tag --json` / `untag --json` print.
struct TagChange: Encodable {
    let item: String
    let tag: String
    let tagged: Bool
}

/// What `favorite --json` / `unfavorite --json` print.
struct FavoriteChange: Encodable {
    let item: String
    let favorite: Bool
}

struct Signals: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "signals",
        abstract: "Read the signal log.",
        discussion: """
            Each signal has a sequence number, the container whose items changed, the domain, the anchor and the reason. --follow keeps printing new signals as later syncs write them (it holds no lock, so syncs run meanwhile).
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Option(help: ArgumentHelp("Only signals after this sequence number.", valueName: "SEQ"))
    var since: Int64 = 0

    @Flag(help: "Keep printing new signals until interrupted.")
    var follow = false

    @Flag(help: "One JSON object per signal, one a line.")
    var json = false

    func run() throws {
        let log = try SignalLogReader(containing: replica.baseDirectory)
        var last = since
        repeat {
            for signal in try log.signals(after: last) {
                if json {
                    let encoder = JSONEncoder()
                    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
                    print(String(decoding: try encoder.encode(signal), as: UTF8.self))
                } else {
                    print("\(signal.seq)  \(signal.container)  \(signal.anchor.prefix(12))  \(signal.reason)")
                }
                last = signal.seq
            }
            _ = fsync(1)
            if follow { usleep(200_000) }
        } while follow
    }
}
