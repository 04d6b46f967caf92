import Dispatch
import FoundationEssentials
import FprepCore
import FprepGit
import FprepPush
import Glibc
import NIOCore
import NIOPosix
import NIOSSL

/// `fprep serve`: the push service of one remote, run until SIGINT/SIGTERM.
public enum PushServer {
    /// What `fprep serve` was asked for.
    public struct Options: Sendable {
        public var remote: String
        public var host = "127.0.0.1"
        public var port = 0
        /// Requests a second per client address (0: no limit), and the burst.
        public var rateLimit: Double = 50
        public var rateBurst: Double = 100
        /// How often the outbox is read without a poke.
        public var pollInterval: Duration = .seconds(2)
        public var maxBodyBytes = 64 * 1024
        /// TLS for the API: a PEM certificate chain and its key (HTTP/1.1 and HTTP/2 by ALPN).
        public var tlsCertificate: String?
        public var tlsKey: String?
        /// Serve plain HTTP on an address other than loopback (behind a TLS proxy).
        public var insecureListen = false
        public var configure: @Sendable (inout ServiceConfiguration) -> Void = { _ in }
        /// A part run beside the service (a hosted remote's mirror), started
        /// once the service listens and stopped before it.
        public var companion: (any ServiceCompanion)?
        /// Opens a store that several instances share (`--database`); nil:
        /// the remote's own SQLite state, one instance at a time.
        package var openSharedStorage: (@Sendable (PushFolder) throws -> any ServiceStorage)?

        public init(remote: String) { self.remote = remote }
    }

    /// Opens the remote's service state, listens, records the address for
    /// the hook, reads the outbox, and serves until a termination signal.
    /// `onListening` gets the service's URL once it accepts connections.
    public static func run(_ options: Options, onListening: @Sendable (String) -> Void) async throws {
        let signals = TerminationSignals()
        let tls = try tlsContext(options)
        let (folder, domain) = try ServedRemote.open(options.remote)
        let secret = try folder.ensureSecret()
        // Instances on a shared store run side by side; on the remote's own state, one at a time.
        let lock = options.openSharedStorage == nil ? try ServiceLock(path: folder.lockPath, remote: options.remote) : nil
        defer { withExtendedLifetime(lock) {} }

        var configuration = ServiceConfiguration(domain: domain)
        options.configure(&configuration)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, min(2, System.coreCount)))
        let client = HTTPClient(group: group)
        let service: PushService
        do {
            service = try await PushService(configuration: configuration, folder: folder, client: client,
                                            openStorage: options.openSharedStorage ?? { try ServiceStore(path: $0.servicePath) })
        } catch {
            await client.shutdown()
            try? await group.shutdownGracefully()
            throw error
        }
        let api = ServiceAPI(service: service, hookSecret: secret,
                             limiter: RateLimiter(rate: options.rateLimit, burst: options.rateBurst),
                             companion: options.companion)
        let server: HTTPServer
        // With TLS, the hook (on this machine, without TLS) pokes a second
        // listener on loopback that answers the poke alone.
        var hookServer: HTTPServer?
        do {
            server = try await HTTPServer.start(host: options.host, port: options.port, group: group,
                                                maxBodyBytes: options.maxBodyBytes,
                                                idleTimeout: .seconds(Int64(configuration.heartbeat.components.seconds * 4 + 5)),
                                                tls: tls, handler: api.handle)
            if tls != nil {
                hookServer = try await HTTPServer.start(host: "127.0.0.1", port: 0, group: group, maxBodyBytes: 1024) { request in
                    guard request.path == "/v1/outbox/poke" else {
                        return .error(.notFound, "this loopback listener only takes the hook's poke; the API is at https")
                    }
                    return await api.handle(request)
                }
            }
        } catch {
            try? await group.shutdownGracefully()
            throw FprepError("cannot listen on \(options.host):\(options.port): \(error)")
        }
        let url = ServiceURL(host: options.host, port: server.port, path: "/", secure: tls != nil).description
        let hookAddress = hookServer.map { ServiceURL(host: "127.0.0.1", port: $0.port, path: "/").description } ?? url
        try folder.recordServiceURL(hookAddress)
        configuration.log("serving \(options.remote) (domain \(domain)) at \(url)\(tls != nil ? " (TLS: HTTP/1.1 and HTTP/2)" : "")")
        onListening(url)

        try await service.resumeDeliveries()
        await service.drainOutbox()
        let poller = Task {
            while await sleepUnlessCancelled(for: options.pollInterval) {
                await service.drainOutbox()
                await service.maintain()
            }
        }
        options.companion?.start(readOutbox: { await service.drainOutbox() }, log: configuration.log)
        let heart = Task {
            while await sleepUnlessCancelled(for: configuration.heartbeat) {
                await service.heartbeat()
            }
        }
        let signal = await signals.next()
        configuration.log("stopping (signal \(signal))")
        // The hook pokes the other instances from now on (their outbox
        // reads every poll interval catch what comes meanwhile).
        folder.forgetServiceURL(hookAddress)
        poller.cancel()
        heart.cancel()
        // Its last round ends before the store closes.
        await poller.value
        await options.companion?.stop()
        await service.shutdown()
        await server.stop()
        await hookServer?.stop()
        await service.maintain()
        await service.closeStore()
        await client.shutdown()
        try? await group.shutdownGracefully()
    }
}

/// The API's TLS context, or nil for plain HTTP, which only loopback may
/// serve unless asked: the bearer tokens and enrollment secrets must not
/// cross a network in clear text.
private func tlsContext(_ options: PushServer.Options) throws -> NIOSSLContext? {
    switch (options.tlsCertificate, options.tlsKey) {
    case (let certificate?, let key?):
        return try TLS.serverContext(certificateFile: certificate, keyFile: key, protocols: ["h2", "http/1.1"])
    case (nil, nil):
        let loopback = options.host == "localhost" || IPAddress(literal: options.host)?.kind == .loopback
        guard loopback || options.insecureListen else {
            throw FprepError(.usage, "refusing to serve in clear text on \(options.host): bearer tokens would cross the network unencrypted (give --tls-cert FILE --tls-key FILE, or --insecure-listen behind a TLS proxy)")
        }
        return nil
    default:
        throw FprepError(.usage, "TLS needs both --tls-cert FILE and --tls-key FILE")
    }
}

/// One service per remote: an flock on `fprep/serve.lock`, held while it runs.
final class ServiceLock {
    private let fd: Int32

    init(path: String, remote: String) throws {
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw FprepError("cannot open '\(path)': \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw FprepError(.busy, "another 'fprep serve' is running for '\(remote)'")
        }
    }

    deinit { close(fd) }
}

/// SIGINT and SIGTERM as an async wait. Unchecked: the sources are set
/// once in `init` and only kept alive after.
final class TerminationSignals: @unchecked Sendable {
    private let stream: AsyncStream<Int32>
    private let sources: [any DispatchSourceSignal]

    init() {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        self.stream = stream
        sources = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            return source
        }
    }

    func next() async -> Int32 {
        for await number in stream { return number }
        return SIGTERM
    }
}
