/// A part that runs inside `fprep serve` beside the push service (the
/// mirror of a hosted remote): it answers the requests of its own paths
/// (the host's webhook), and may make the service read its outbox at once
/// after it recorded pushes there. It lives in a module above this one;
/// the service knows it only by this protocol.
public protocol ServiceCompanion: Sendable {
    /// The request paths it answers, e.g. `/v1/webhook`.
    var paths: Set<String> { get }

    /// Answers one request to one of `paths`; it must answer at once (long
    /// work is queued, never done while the client waits).
    func handle(_ request: HTTPRequest) async -> HTTPResponse

    /// Starts its own work once the service listens. `readOutbox` makes the
    /// service read the outbox now; `log` writes one line to the service's log.
    func start(readOutbox: @escaping @Sendable () async -> Void, log: @escaping @Sendable (String) -> Void)

    /// Stops its work (the service stops); waits for work in flight.
    func stop() async
}
