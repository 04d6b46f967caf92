import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore

struct Clone: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "clone",
        abstract: "Make a dataless replica of a git remote.",
        discussion: """
            Fetches commits and trees only (a blob:none partial clone), then lays out every file as a placeholder: a sparse file with the real size and date and no data blocks, marked with user.fprep.* extended attributes. Folders and symlinks are laid out as they are; submodules show as empty folders and are reported as unsupported. 'git status' and 'git log' work in the replica.

            URL is a path, file://, git://, ssh or https URL of a remote that allows partial clone; a remote that does not (uploadpack.allowFilter off) would send every file's content, so it is refused before anything is fetched unless --full is given. A clone that is interrupted is finished by running the same command again; run on a folder that already is a replica of URL, it changes nothing and says so.

            Example: fprep clone git://127.0.0.1/photos.git ~/photos
            """
    )

    @OptionGroup var output: OutputOptions

    @Argument(help: "The remote's URL or path.")
    var url: String

    @Argument(help: "The replica's folder (default: the remote's name); must be new or empty.")
    var directory: String?

    @Option(name: [.short, .long], help: "The branch to follow (default: the remote's HEAD).")
    var branch: String?

    @Flag(help: "Clone a remote that does not allow partial clone all the same, fetching the content of every file (without it, such a remote is refused before anything is fetched).")
    var full = false

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        let progress = TerminalProgress.make()
        let result = try Cloner.clone(url: url, into: directory, branch: branch, full: full, progress: progress,
                                      showGitProgress: !json && !Verbosity.quiet && isatty(STDERR_FILENO) == 1)
        if json { return try JSONOutput.print(result) }
        if result.resumed == "existing" {
            print("\(result.root) already is a replica of \(result.url); nothing to do (anchor \(result.anchor ?? "none"))")
            return
        }
        print(result.resumed == "finished" ? "finished the interrupted clone of \(result.url) into \(result.root)"
                                           : "cloned \(result.url) into \(result.root)")
        print("  domain \(result.domain), branch \(result.branch), anchor \(result.anchor ?? "(empty remote)")")
        print("  \(count(result.files, "file")) (\(humanSize(result.logicalSize)), all dataless), \(count(result.folders, "folder")), \(count(result.symlinks, "symlink"))")
        if result.unknownSizes > 0 {
            print("  size unknown for \(count(result.unknownSizes, "file")): \(UnknownSizes.hint(result.unknownSizes))")
        }
        for submodule in result.unsupportedSubmodules {
            print("  unsupported: submodule '\(submodule)' is shown as an empty folder")
        }
    }
}
