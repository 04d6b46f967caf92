import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCLI
import FprepCore
import FprepServer

struct Watch: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: FullCommands.watchAbstract,
        discussion: """
            Registers the replica with the remote's push service ('fprep serve') the first time, showing the enrollment secret the service's admin minted with 'fprep serve enroll' (--enroll; the service's address, the secret and the device's token are kept in the replica's state, so later runs need no options, and the device registers anew with the secret when its token expires or is revoked), keeps its event stream open, and syncs shortly after each push (--debounce-ms; pushes that arrive meanwhile join the same sync). A push whose anchors show nothing new is dropped; one whose old anchor is not the replica's shows a gap, and the sync catches up all the same. When the stream drops, it reconnects with growing pauses (up to 10 s) and resumes after the last push it acted on; while the service is unreachable it syncs every --fallback-interval seconds. The replica is locked only while a sync runs.

            A service served over TLS ('fprep serve --tls-cert') is given as https://HOST[:PORT]; its certificate must be trusted by the system's store, or signed by the CA in --ca FILE (recorded too, so later runs and the agent use it). A certificate that is not trusted ends the watch with one line saying so: the bearer token is never sent to it.

            Stop with SIGINT or SIGTERM.

            Example: fprep watch -C ~/photos --service http://127.0.0.1:7411 --enroll enr-1a2b3c4d5e6f7081.SECRET
            Example: fprep watch -C ~/photos --service https://push.example.com:7411 --ca ~/.config/fprep/ca.pem --enroll enr-1a2b3c4d5e6f7081.SECRET
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Option(help: ArgumentHelp("The push service to use from now on (recorded in the replica).", valueName: "URL"))
    var service: String?

    @Option(help: ArgumentHelp("Check an https service's certificate against the CA certificates in FILE (PEM; recorded in the replica) instead of the system's trust store.", valueName: "FILE"))
    var ca: String?

    @Option(help: ArgumentHelp("The enrollment secret to register with (printed by 'fprep serve enroll'; recorded in the replica).", valueName: "SECRET"))
    var enroll: String?

    @Flag(help: "Register as a replicated device: only working-set pushes, never per-folder ones.")
    var replicated = false

    @Option(name: .customLong("debounce-ms"), help: "How long after a push the sync starts (0: at once; pushes that arrive during a sync make one more after it).")
    var debounceMilliseconds = 0

    @Option(name: .customLong("fallback-interval"), help: "Seconds between syncs while the service is unreachable.")
    var fallbackSeconds = 30.0

    func run() throws {
        guard debounceMilliseconds >= 0, fallbackSeconds > 0 else {
            throw FprepError(.usage, "--debounce-ms must be 0 or more and --fallback-interval positive")
        }
        Verbosity.verbose = replica.verbose
        var options = Watcher.Options(replica: replica.baseDirectory)
        options.service = service
        options.enrollment = enroll
        options.ca = ca
        options.replicated = replicated
        options.debounce = .milliseconds(debounceMilliseconds)
        options.fallbackInterval = .milliseconds(Int64(fallbackSeconds * 1000))
        let watcher = Watcher(options)
        try runBlocking { try await watcher.run() }
    }
}
