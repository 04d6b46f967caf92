import FoundationEssentials
import FprepCore
import FprepGit
import FprepPush
import FprepServer
import Glibc

/// `fprep serve --mirror URL`: the service's companion that keeps the local
/// mirror of a hosted remote, takes the host's push webhook and sweeps the
/// host for pushes it never announced.
public final class HostedMirror: ServiceCompanion {
    /// What `--mirror` was given.
    public struct Options: Sendable {
        /// The host's clone URL (any URL git fetches and pushes).
        public var url: String
        /// The mirror's folder (the service's `--remote`).
        public var path: String
        /// The webhook's shared secret.
        public var secret: String
        /// Time between sweeps of the host's refs.
        public var sweepInterval: Duration = .seconds(300)

        public init(url: String, path: String, secret: String) {
            self.url = url
            self.path = path
            self.secret = secret
        }
    }

    /// Webhook bodies are read whole: GitHub caps a delivery at 25 MB.
    public static let maxBodyBytes = 25 * 1024 * 1024

    public let paths: Set<String> = [WebhookEndpoint.path]
    private let options: Options
    private let worker: MirrorWorker
    private let endpoint: WebhookEndpoint
    private let logLine = Locked<@Sendable (String) -> Void>({ Console.error("fprep serve: \($0)\n") })

    /// Makes or opens the mirror and fetches the host once (so that a URL
    /// that cannot be fetched fails before the service starts).
    public init(_ options: Options) throws {
        self.options = options
        let mirror = try MirrorRepository.open(url: options.url, path: options.path)
        let folder = PushFolder(remote: mirror.gitDirectory)
        try folder.ensureFolder()
        let store = try MirrorStore(path: folder.folder + "/mirror.db")
        let logLine = self.logLine
        let log: @Sendable (String) -> Void = { line in logLine.get()(line) }
        worker = MirrorWorker(pass: MirrorPass(mirror: mirror, store: store, log: log), log: log)
        endpoint = WebhookEndpoint(verifier: WebhookVerifier(secret: options.secret), store: store, worker: worker, log: log)
    }

    /// Reads the webhook secret from `path`: its first line, which must be
    /// 16 or more characters.
    public static func readSecret(path: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            let reason = access(path, F_OK) == 0 ? "it cannot be read" : "no such file"
            throw FprepError(.usage, "cannot read the webhook secret file '\(path)': \(reason) (write the secret you gave the host's webhook into it)")
        }
        let secret = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).first.map(String.init)?
            .trimmed ?? ""
        guard secret.count >= 16 else {
            throw FprepError(.usage, "the webhook secret in '\(path)' is shorter than 16 characters (make one with 'openssl rand -hex 32')")
        }
        return secret
    }

    public func handle(_ request: HTTPRequest) async -> HTTPResponse {
        endpoint.handle(request)
    }

    public func start(readOutbox: @escaping @Sendable () async -> Void, log: @escaping @Sendable (String) -> Void) {
        logLine.set(log)
        log("mirroring \(options.url) into \(options.path); webhook at \(WebhookEndpoint.path), sweep every \(options.sweepInterval.components.seconds) s")
        worker.start(sweepInterval: options.sweepInterval, readOutbox: readOutbox)
        // What the host got while the service was down.
        worker.request()
    }

    public func stop() async {
        await worker.stop()
    }
}
