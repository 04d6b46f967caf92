import ArgumentParser
import FoundationEssentials
import FprepCLI
import FprepCore
import FprepMirror
import FprepPush
import FprepServer
import FprepServicePostgres
import Glibc

struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: FullCommands.serveAbstract,
        discussion: """
            The remote's post-receive hook writes each push's affected containers to an outbox in the remote (fprep/outbox.db) and pokes this service, whose address it finds in the remote's config (fprep.service, recorded when the service starts and taken back when it stops; with several instances each records its own, and the hook pokes the one started last that answers). The service reads the outbox (also at start and every few seconds, so nothing is lost while it was down) and sends each registered device what the File Provider rules give it: a container only while the device actively enumerates it, the working set always, and to a replicated device the working set only; pushes to one device are coalesced and throttled. Every payload is {"container-identifier", "domain", "old-anchor", "new-anchor"}.

            A device registers with an enrollment secret of the remote's domain, which an admin mints with 'fprep serve enroll' (only its hash is kept); 'fprep serve devices' lists the devices and secrets, 'fprep serve revoke' revokes a device's token or a secret. A device only ever hears about its own domain.

            Devices receive pushes over a server-sent event stream (what 'fprep watch' uses; Last-Event-ID resumes it), as webhook POSTs, or through APNs: the service keeps one HTTP/2 connection over TLS to --apns-host (api.push.apple.com:443, or with --apns-sandbox api.sandbox.push.apple.com:443) and sends each push on a stream of it as POST /3/device/TOKEN with apns-topic BUNDLE.pushkit.fileprovider, apns-push-type fileprovider, apns-priority 5, apns-expiration an hour on, and an ES256 provider token (renewed every 40 minutes) made with --apns-key. APNs' 410 Unregistered (unless the device registered again after its timestamp) and 400 BadDeviceToken unregister the device; 429 and 5xx are tried again with growing pauses; a request with no answer in 5 s is given up alone.

            A webhook POST carries x-fprep-timestamp (seconds since 1970), x-fprep-delivery (an id kept on retries) and x-fprep-signature: sha256= and the hex HMAC-SHA256, keyed with the device's webhook secret, of TIMESTAMP.DELIVERY.BODY; a receiver refuses old timestamps and ids it saw. Webhooks go only to public addresses: the URL's host is resolved once, every address checked, and the checked address connected to. Loopback, link-local, private, unspecified, multicast and reserved addresses are refused (at registration for a literal address, at delivery for a name) unless --allow-webhook-host names the URL's host; cloud metadata addresses (169.254.169.254, fd00:ec2::254) always.

            The API speaks plain HTTP on loopback only. On any other address it needs TLS: --tls-cert FILE and --tls-key FILE (PEM) serve HTTP/1.1 and HTTP/2, chosen by ALPN, and devices reach it as https://HOST:PORT ('fprep watch --ca FILE' when a private CA signed the certificate); the hook then pokes the service on a second, loopback-only listener. --insecure-listen serves plain HTTP on any address, for a TLS proxy in front.

            State (devices, token hashes, enrollment secrets' hashes, active enumerators, numbered events) is in fprep/service.db and survives a restart. Stop with SIGINT or SIGTERM.

            Several instances: with --database postgres://USER:PASSWORD@HOST:PORT/DATABASE the state is in PostgreSQL instead, and any number of 'fprep serve' processes for the remote may run on it at once (each on its own --listen address; put them behind one address for the devices). Each copies the remote's outbox into the database; one transaction turns each push into the devices' events, once in all; every instance is told (LISTEN/NOTIFY) and sends the events of its own event streams, and each webhook or APNs device is sent to by one live instance. An instance killed mid-delivery loses nothing: within a few poll intervals another takes its devices over and sends what they had not acknowledged (a delivery it sent just before dying may come twice; the x-fprep-delivery id tells). Give the admin commands the same --database.

            A hosted remote (GitHub, GitLab, Gitea, Forgejo) runs no hook: with --mirror URL the service keeps --remote PATH as a bare mirror of URL (made when missing, with every blob) and takes the host's push webhook at POST /v1/webhook, content type application/json, verified with the secret in --webhook-secret-file (GitHub's X-Hub-Signature-256, GitLab's X-Gitlab-Token, Gitea's and Forgejo's X-Gitea-Signature). Each delivery is answered at once and queues a pass: fetch the host, publish the pushed blobs' sizes to the host's size manifest (refs/fprep/sizes), and record push signals in the mirror's outbox as the hook does. A redelivered id does nothing; a sweep fetches every --sweep-interval seconds for pushes the host never announced. git's credentials (a credential helper, an ssh key) must let the service fetch and push URL.

            Example: fprep serve --remote ~/remotes/photos.git --listen 127.0.0.1:7411
            Example: fprep serve enroll --remote ~/remotes/photos.git --expires 30d
            Example: fprep serve --remote ~/remotes/photos.git --listen 0.0.0.0:7411 --tls-cert /etc/fprep/push.pem --tls-key /etc/fprep/push.key
            Example: fprep serve --remote ~/remotes/photos.git --apns-bundle-id com.example.Photos --apns-key-id ABC123DEFG --apns-team-id DEF123GHIJ --apns-key AuthKey_ABC123DEFG.p8
            Example: fprep serve --mirror https://github.com/me/photos.git --remote ~/mirrors/photos.git --webhook-secret-file ~/.config/fprep/photos.secret --listen 0.0.0.0:7411 --tls-cert /etc/fprep/push.pem --tls-key /etc/fprep/push.key
            Example: fprep serve --remote ~/remotes/photos.git --database postgres://fprep:secret@db.internal/fprep --listen 0.0.0.0:7411 --tls-cert /etc/fprep/push.pem --tls-key /etc/fprep/push.key
            """,
        subcommands: [ServeEnroll.self, ServeDevices.self, ServeRevoke.self]
    )

    @OptionGroup var output: OutputOptions

    @OptionGroup var state: ServiceStateOptions


    @Option(help: ArgumentHelp("Serve a hosted remote: keep --remote PATH as its mirror and take its push webhook.", valueName: "URL"))
    var mirror: String?

    @Option(name: .customLong("webhook-secret-file"), help: ArgumentHelp("The file holding the secret given to the host's webhook (with --mirror).", valueName: "FILE"))
    var webhookSecretFile: String?

    @Option(name: .customLong("sweep-interval"), help: "Seconds between fetches of the host that catch pushes without a webhook (with --mirror).")
    var sweepSeconds = 300.0

    @Option(help: ArgumentHelp("Address to listen on; port 0 lets the system choose.", valueName: "HOST:PORT"))
    var listen = "127.0.0.1:7411"

    @Option(name: .customLong("tls-cert"), help: ArgumentHelp("Serve the API over TLS (HTTP/1.1 and HTTP/2) with this PEM certificate chain, the server's certificate first.", valueName: "FILE"))
    var tlsCertificate: String?

    @Option(name: .customLong("tls-key"), help: ArgumentHelp("The PEM private key of --tls-cert.", valueName: "FILE"))
    var tlsKey: String?

    @Flag(name: .customLong("insecure-listen"), help: "Serve plain HTTP on an address other than loopback (only behind a TLS proxy: bearer tokens cross the network).")
    var insecureListen = false

    @Option(name: .customLong("rate-limit"), help: "Requests a second each client address may make (0: no limit).")
    var rateLimit: Double = 50

    @Option(help: "Requests a client may make in a burst above the rate.")
    var burst: Double = 100

    @Option(name: .customLong("coalesce-ms"), help: "How long a device's first push waits for more to join it.")
    var coalesceMilliseconds = 25

    @Option(name: .customLong("throttle-ms"), help: "At most one batch of pushes per device per this many milliseconds.")
    var throttleMilliseconds = 250

    @Option(name: .customLong("heartbeat"), help: "Seconds between keep-alive comments on event streams.")
    var heartbeatSeconds = 15

    @Option(name: .customLong("poll-interval"), help: "Seconds between outbox reads when no poke came.")
    var pollSeconds = 2.0

    @Option(name: .customLong("token-lifetime"), help: "Seconds a device token stays valid.")
    var tokenLifetime: Int64 = 30 * 24 * 3600

    @Option(name: .customLong("allow-webhook-host"),
            help: ArgumentHelp("Let webhooks go to HOST (a name or address, as in the URL) even where it is loopback or private; repeatable.", valueName: "HOST"))
    var allowWebhookHosts: [String] = []

    @Option(name: .customLong("apns-host"), help: ArgumentHelp("The APNs server (default api.push.apple.com:443).", valueName: "HOST[:PORT]"))
    var apnsHost: String?

    @Flag(name: .customLong("apns-sandbox"), help: "Send to APNs' development server, api.sandbox.push.apple.com:443 (apps built for development).")
    var apnsSandbox = false

    @Option(name: .customLong("apns-ca"), help: ArgumentHelp("Trust only the CA certificates in FILE (PEM) for the APNs server, instead of the system's (a test server).", valueName: "FILE"))
    var apnsCA: String?

    @Option(name: .customLong("apns-endpoint"), help: .hidden)
    var apnsEndpoint: String?

    @Option(name: .customLong("apns-bundle-id"), help: "The app's bundle identifier (the topic is BUNDLE.pushkit.fileprovider).")
    var apnsBundleID: String?

    @Option(name: .customLong("apns-key-id"), help: "The APNs key's identifier (the JWT's kid).")
    var apnsKeyID: String?

    @Option(name: .customLong("apns-team-id"), help: "The developer team's identifier (the JWT's iss).")
    var apnsTeamID: String?

    @Option(name: .customLong("apns-key"), help: ArgumentHelp("The APNs signing key (.p8, PEM).", valueName: "FILE"))
    var apnsKey: String?

    func run() throws {
        let remote = try state.path()
        guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]),
              (0...65535).contains(port), colon > listen.startIndex else {
            throw FprepError(.usage, "'\(listen)' is not HOST:PORT for --listen")
        }
        if apnsEndpoint != nil {
            throw FprepError(.usage, "--apns-endpoint is gone: the service speaks HTTP/2 over TLS to APNs itself (use --apns-host HOST[:PORT] or --apns-sandbox)")
        }
        let apnsValues = [apnsHost, apnsCA, apnsBundleID, apnsKeyID, apnsTeamID, apnsKey]
        let apns: APNsConfiguration?
        if apnsValues.contains(where: { $0 != nil }) || apnsSandbox {
            guard let apnsBundleID, let apnsKeyID, let apnsTeamID, let apnsKey else {
                throw FprepError(.usage, "APNs needs all of --apns-bundle-id, --apns-key-id, --apns-team-id and --apns-key")
            }
            if apnsSandbox && apnsHost != nil { throw FprepError(.usage, "give --apns-host or --apns-sandbox, not both") }
            let server = apnsHost ?? (apnsSandbox ? APNsConfiguration.sandbox : APNsConfiguration.production)
            apns = try APNsConfiguration(server: server, caFile: apnsCA, bundleID: apnsBundleID, keyID: apnsKeyID,
                                         teamID: apnsTeamID, keyFile: apnsKey)
        } else {
            apns = nil
        }
        guard coalesceMilliseconds >= 0, throttleMilliseconds >= 0, heartbeatSeconds > 0, pollSeconds > 0, tokenLifetime > 0 else {
            throw FprepError(.usage, "the intervals and the token lifetime must be positive")
        }
        guard sweepSeconds > 0 else { throw FprepError(.usage, "--sweep-interval must be positive") }
        for host in allowWebhookHosts where host.isEmpty || host.contains(where: { $0 == "/" || $0 == " " || $0 == "@" }) {
            throw FprepError(.usage, "'\(host)' is not a host for --allow-webhook-host (a name or an address, without scheme or port)")
        }
        let policy = WebhookPolicy(allowedHosts: allowWebhookHosts)
        var options = PushServer.Options(remote: remote)
        if let mirror {
            guard let webhookSecretFile else {
                throw FprepError(.usage, "--mirror needs --webhook-secret-file FILE, a file holding the secret given to the host's webhook")
            }
            var settings = HostedMirror.Options(url: mirror, path: remote, secret: try HostedMirror.readSecret(path: webhookSecretFile))
            settings.sweepInterval = .milliseconds(Int64(sweepSeconds * 1000))
            options.companion = try HostedMirror(settings)
            options.maxBodyBytes = HostedMirror.maxBodyBytes
        } else if webhookSecretFile != nil {
            throw FprepError(.usage, "--webhook-secret-file is for --mirror URL (a hosted remote's webhook)")
        }
        options.host = String(listen[..<colon]).trimmingBrackets
        options.port = port
        options.tlsCertificate = tlsCertificate
        options.tlsKey = tlsKey
        options.insecureListen = insecureListen
        options.rateLimit = rateLimit
        options.rateBurst = burst
        options.pollInterval = .milliseconds(Int64(pollSeconds * 1000))
        if let database = state.database {
            // Checked now, so that a bad URL is one line before anything starts.
            try PostgresServiceStore(url: database, listen: false).close()
            options.openSharedStorage = { _ in try PostgresServiceStore(url: database) }
        }
        let lease = max(3, Int64((pollSeconds * 3).rounded(.up)))
        let (coalesce, throttle, heartbeat, lifetime, verbose) = (coalesceMilliseconds, throttleMilliseconds, heartbeatSeconds, tokenLifetime, output.verbose)
        options.configure = { configuration in
            configuration.coalesceWindow = .milliseconds(coalesce)
            configuration.minimumInterval = .milliseconds(throttle)
            configuration.heartbeat = .seconds(heartbeat)
            configuration.tokenLifetime = lifetime
            configuration.apns = apns
            configuration.webhookPolicy = policy
            configuration.verbose = verbose
            configuration.senderLease = lease
        }
        let settings = options
        try runBlocking {
            try await PushServer.run(settings) { url in Console.output("listening on \(url)\n") }
        }
    }
}

extension String {
    /// `[::1]` → `::1`, for a bracketed IPv6 host.
    fileprivate var trimmingBrackets: String {
        hasPrefix("[") && hasSuffix("]") ? String(dropFirst().dropLast()) : self
    }
}
