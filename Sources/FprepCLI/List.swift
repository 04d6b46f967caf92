import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore

struct List: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ls",
        abstract: "List a folder's items, a page at a time, as an enumerator does.",
        discussion: """
            Each item has its identifier (path), parent, filename, kind (file, folder, symlink), size, content version (blob or tree id), state (dataless, materialized, modified) and date. The root's identifier is NSFileProviderRootContainerItemIdentifier.

            When more items follow, the last line (or 'nextPage' in JSON) is the token for the next page: pass it with --page.

            Examples: fprep ls docs --page-size 50      fprep ls --json --page p1.Zm9v
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "The folder to list, relative to the current folder (default: the current folder; with -C DIR, DIR).")
    var path: String?

    @Option(help: "Items per page.")
    var pageSize = 1000

    @Option(name: .customLong("page"), help: ArgumentHelp("The token of the page to show.", valueName: "TOKEN"))
    var page: String?

    @Flag(help: "Print the page as JSON.")
    var json = false

    func validate() throws {
        guard pageSize >= 1 else { throw ValidationError("--page-size must be at least 1") }
    }

    func run() throws {
        let opened = try replica.open("ls", exclusive: false)
        let result = try opened.enumerate(path, relativeTo: replica.baseDirectory, pageSize: pageSize, token: page)
        if json { return try JSONOutput.print(result) }
        for item in result.items {
            let size = item.size.map { String($0) } ?? (item.kind == "folder" ? "-" : "?")
            let name = item.kind == "folder" ? item.filename + "/" : item.filename
            let note = (item.unsupported.map { "  (\($0), unsupported)" } ?? "") + (item.pinned == true ? "  (pinned)" : "")
            print("\(item.state.rawValue + String(repeating: " ", count: max(0, 12 - item.state.rawValue.count))) \(String(repeating: " ", count: max(0, 12 - size.count)))\(size)  \(item.modified)  \(name)\(note)")
        }
        if let next = result.nextPage { print("next page: \(next)") }
    }
}
