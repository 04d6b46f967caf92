import ArgumentParser
import FoundationEssentials
import FprepCore
import FprepGit
import FprepPush
import Glibc

struct ImportTree: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import-tree",
        abstract: "Commit an ordinary folder's files into an fprep remote.",
        discussion: """
            Makes one commit on the remote's branch whose tree is the folder's files, folders and symlinks (executable bits kept; .git and .fprep folders, empty folders and special files left out and listed), and records every file's size and modification time in the remote's size manifest (placeholders show the source's dates). Devices see the import on their next sync, and the push service signals them as for a push.

            Into a branch that already has files, say where the folder goes: --prefix DIR imports it as the folder DIR beside the rest; --replace makes it the whole tree (every file not in it is deleted on the branch). Without either, the import is refused and nothing changes. --dry-run shows what would be added, changed and deleted.

            Examples:
              fprep import-tree ~/Pictures --into ~/remotes/photos.git
              fprep import-tree ~/Scans --into ~/remotes/photos.git --prefix scans --dry-run
            """
    )

    @OptionGroup var output: OutputOptions

    @Argument(help: "The folder to import.")
    var folder: String

    @Option(name: .customLong("into"), help: ArgumentHelp("The fprep remote (made by init-remote).", valueName: "PATH"))
    var remote: String

    @Option(name: [.short, .long], help: "Commit message.")
    var message: String?

    @Option(help: ArgumentHelp("Import the folder as this folder of the tree, beside the files already there.", valueName: "DIR"))
    var prefix: String?

    @Flag(help: "Replace what is there (the whole tree, or the folder at --prefix); files not in the imported folder are deleted on the branch.")
    var replace = false

    @Flag(name: .customLong("dry-run"), help: "Show what the import would add, change and delete; change nothing.")
    var dryRun = false

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        let placement = TreeImporter.Placement(replace: replace, prefix: prefix, dryRun: dryRun)
        let result = try TreeImporter.importFolder(folder, into: remote, message: message, placement: placement)
        if let commit = result.commit.flatMap(ObjectID.init(hex:)) {
            // Devices learn of the import as of a push (the hook does not run:
            // no push happened). A failure only delays them to their next sync.
            let update = PostReceive.Update(old: result.previous.flatMap(ObjectID.init(hex:)) ?? .zero, new: commit,
                                            reference: "refs/heads/" + result.branch)
            _ = try? PushHook.run(gitDirectory: Remote.absolute(remote), updates: [update])
        }
        if json { return try JSONOutput.print(result) }
        let changes = "\(result.added) added, \(result.changed) changed, \(result.deleted) deleted"
        let place = result.prefix.map { " into '\($0)'" } ?? ""
        if result.dryRun {
            print("would import \(count(result.files, "file")) and \(count(result.symlinks, "symlink")) (\(humanSize(result.bytes)))\(place) on \(result.branch): \(changes); nothing was changed")
        } else {
            print("imported \(count(result.files, "file")) and \(count(result.symlinks, "symlink")) (\(humanSize(result.bytes)))\(place) as \(result.commit?.prefix(12) ?? "") on \(result.branch): \(changes)")
        }
        for skipped in result.skipped { print("  skipped \(Console.escaped(skipped))") }
    }
}
