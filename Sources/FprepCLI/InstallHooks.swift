import ArgumentParser
import FoundationEssentials
import FprepCore
import FprepPush
import Glibc

struct InstallHooks: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "install-hooks",
        abstract: "Make an existing bare repository an fprep remote: hooks, partial clone, domain, sizes.",
        discussion: """
            Allows partial clone (uploadpack.allowFilter, uploadpack.allowAnySHA1InWant), records the domain (--domain, default: the folder's name) and the branch devices follow (HEAD's), builds the size manifest for the existing branches when the repository has none, makes the secret the hook authenticates to the push service with (fprep/hook-secret, mode 0600), and installs the post-receive hook. Running it again refreshes the hooks and settings.

            Example: fprep install-hooks /srv/git/photos.git --domain photos
            """
    )

    @OptionGroup var output: OutputOptions

    @Argument(help: "The bare repository.")
    var path: String

    @Option(help: "Domain identifier (default: the folder name without .git).")
    var domain: String?

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        let adoption = try Remote.adopt(at: path, domain: domain, fprepBinary: currentExecutablePath())
        try PushFolder(remote: adoption.path).ensureSecret()
        if json { return try JSONOutput.print(adoption) }
        print("fprep remote \(adoption.path) (domain \(adoption.domain), branch \(adoption.branch)): hooks \(adoption.hooks.joined(separator: ", ")), \(count(adoption.blobsListed, "blob")) added to the size manifest")
    }
}
