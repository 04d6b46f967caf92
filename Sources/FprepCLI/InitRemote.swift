import ArgumentParser
import FoundationEssentials
import FprepCore
import FprepPush
import Glibc

struct InitRemote: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init-remote",
        abstract: "Create a bare git repository to serve as an fprep remote.",
        discussion: """
            The repository allows partial clone (uploadpack.allowFilter, uploadpack.allowAnySHA1InWant), records its domain identifier (carried in every push signal), and gets fprep's server-side hooks, which keep the size manifest that lets devices see file sizes without fetching content.

            Serve it as a path, file://, git daemon, ssh or HTTPS. Run again on an existing fprep remote to reinstall its hooks; any other non-empty folder is refused.

            Example: fprep init-remote ~/remotes/photos.git --domain photos
            """
    )

    @OptionGroup var output: OutputOptions

    @Argument(help: "Folder for the new bare repository (created if missing).")
    var path: String

    @Option(help: "Domain identifier (default: the folder name without .git).")
    var domain: String?

    @Option(help: "The branch devices follow.")
    var branch = "main"

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        let setup = try Remote.create(at: path, domain: domain, branch: branch, fprepBinary: currentExecutablePath())
        // The secret the hook authenticates to the push service with.
        try PushFolder(remote: setup.path).ensureSecret()
        if json { return try JSONOutput.print(setup) }
        let verb = setup.created ? "created fprep remote" : "already an fprep remote; hooks reinstalled:"
        print("\(verb) \(setup.path) (domain \(setup.domain), branch \(setup.branch))")
    }
}
