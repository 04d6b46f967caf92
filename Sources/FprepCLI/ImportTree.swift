import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore

struct ImportTree: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import-tree",
        abstract: "Commit an ordinary folder's files into an fprep remote.",
        discussion: """
            Makes one commit on the remote's branch whose tree is the folder's files, folders and symlinks (executable bits kept; .git and .fprep folders, empty folders and special files left out and listed), and records every file's size in the remote's size manifest. Devices see the import on their next clone or sync.

            Example: fprep import-tree ~/Pictures --into ~/remotes/photos.git
            """
    )

    @Argument(help: "The folder to import.")
    var folder: String

    @Option(name: .customLong("into"), help: ArgumentHelp("The fprep remote (made by init-remote).", valueName: "PATH"))
    var remote: String

    @Option(name: [.short, .long], help: "Commit message.")
    var message: String?

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        let result = try TreeImporter.importFolder(folder, into: remote, message: message)
        if json { return try JSONOutput.print(result) }
        print("imported \(count(result.files, "file")) and \(count(result.symlinks, "symlink")) (\(humanSize(result.bytes))) as \(result.commit.prefix(12)) on \(result.branch)")
        for skipped in result.skipped { print("  skipped \(skipped)") }
    }
}
