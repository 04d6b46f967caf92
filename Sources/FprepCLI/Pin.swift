import ArgumentParser
import FoundationEssentials
import FprepCore

struct Pin: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pin",
        abstract: "Always keep files or folders on this device (materialized, never evicted).",
        discussion: """
            A pinned file, or every file below a pinned folder, gets its content now and keeps it: a sync that brings new or changed files under a pin fetches their content, and 'fprep evict' refuses them. Pins belong to this device (they are not synced) and follow the moves a sync makes. With no path, lists the pins; 'fprep ls' and 'fprep status' show them too. A pin is recorded even when the content cannot be fetched now (exit 1): the next sync brings it.

            Examples: fprep pin docs      fprep pin .      fprep unpin docs
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "Files or folders, relative to the current folder (or to -C DIR); none: list the pins.")
    var paths: [String] = []

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        guard !paths.isEmpty else {
            let pins = try replica.open("pin", exclusive: false).pins()
            if json { return try JSONOutput.print(["pins": pins]) }
            if pins.isEmpty { print("nothing pinned (pin with 'fprep pin PATH')") }
            for pin in pins { print(Console.escaped(pin)) }
            return
        }
        let opened = try replica.open("pin", exclusive: true)
        let result = try opened.pin(paths, relativeTo: replica.baseDirectory)
        if json { return try JSONOutput.print(result) }
        for path in result.pinned { print("pinned \(Console.escaped(path))") }
        for path in result.alreadyPinned { print("already pinned: \(Console.escaped(path))") }
        let content = result.materialize
        print("materialized \(count(content.materialized.count, "file")) (\(humanSize(content.bytesWritten)), \(content.fetchedBlobs) fetched); \(content.alreadyMaterialized) already materialized")
        for skipped in content.skipped { print("  left as is: \(Console.escaped(skipped.path)): \(skipped.reason)") }
    }
}

struct Unpin: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unpin",
        abstract: "Stop keeping pinned files or folders on this device; their content stays until evicted.",
        discussion: """
            Only a path pinned itself can be unpinned (a file pinned through its folder says which folder to unpin; exit 2).

            Example: fprep unpin docs && fprep evict docs
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "Pinned files or folders, relative to the current folder (or to -C DIR).")
    var paths: [String]

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        let opened = try replica.open("unpin", exclusive: true)
        let result = try opened.unpin(paths, relativeTo: replica.baseDirectory)
        if json {
            try JSONOutput.print(result)
        } else {
            for path in result.unpinned { print("unpinned \(Console.escaped(path))") }
            for refused in result.refused { printError("fprep: cannot unpin '\(Console.escaped(refused.path))': \(refused.reason)") }
        }
        if !result.refused.isEmpty { throw ExitCode(2) }
    }
}
