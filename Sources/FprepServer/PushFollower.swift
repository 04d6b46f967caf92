import FoundationEssentials
import FprepCore
import FprepPush
import NIOCore
import NIOPosix

/// The push service as the agent's worker follows it: when the replica has
/// a service recorded (`fprep watch --service URL` once), its event stream
/// stays open, and each push of the replica's domain that moves it calls
/// `onPush` (the worker's scheduler then syncs). The last event taken is
/// kept in the replica's state as it comes, so the stream resumes after it;
/// a push missed while no agent ran is caught up by the sync the worker runs
/// when it starts.
public final class PushFollower: @unchecked Sendable {
    private let group: MultiThreadedEventLoopGroup
    private let client: HTTPClient
    private let task: Task<Void, Never>

    /// Starts following; nil when the replica has no push service recorded.
    /// `note`: one line for the agent's log (connected, lost, registered).
    /// `connection`: the stream opened (nil) or was lost (why), for the agent's status.
    public static func start(root: String, onPush: @escaping @Sendable () -> Void,
                             connection: @escaping @Sendable (_ service: String, _ lost: String?) -> Void = { _, _ in },
                             note: @escaping @Sendable (String) -> Void) throws -> PushFollower? {
        let (settings, domain, branch) = try withReplica(root, command: "agent") { replica in (try replica.pushSettings(), replica.domain, replica.branch) }
        guard let address = settings.service, let url = ServiceURL(address) else { return nil }
        connection(address, "connecting")
        return PushFollower(url: url, settings: settings, root: root, domain: domain, branch: branch, onPush: onPush,
                            connection: { connection(address, $0) }, note: note)
    }

    private init(url: ServiceURL, settings: PushSettings, root: String, domain: String, branch: String,
                 onPush: @escaping @Sendable () -> Void, connection: @escaping @Sendable (String?) -> Void,
                 note: @escaping @Sendable (String) -> Void) {
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        client = HTTPClient(group: group, caFile: settings.ca)
        let stream = ServiceStream(device: DeviceClient(service: url, client: client), root: root, domain: domain, branch: branch,
                                   replicated: false, name: "fprep agent \(root)", maxBackoff: .seconds(10), idleTimeout: .seconds(65),
                                   output: note, withReplica: { try withReplica($0, command: "agent", $1) })
        let shared = Locked(settings)
        let connected = Locked(false)
        task = Task {
            let failure = await stream.follow(shared, onOpen: {
                connected.set(true)
                connection(nil)
                note("connected to the push service \(url)")
            }, onPush: { event in
                guard let payload = try? JSONCoding.decode(PushPayload.self, from: Array(event.data.utf8)), payload.domain == domain else { return }
                if let id = event.id.flatMap({ Int64($0) }) {
                    shared.update { $0.lastEventID = max($0.lastEventID ?? 0, id) }
                    // Never waits for a sync under way: a push not recorded
                    // now is replayed later, and a replayed push syncs nothing.
                    let saved = shared.get()
                    try? withReplica(root, command: "agent", wait: false) { try $0.savePushSettings(saved) }
                }
                onPush()
            }, onDrop: { reason in
                if connected.get() { note("lost the push service (\(reason)); polling the remote until it is back") }
                connected.set(false)
                connection(reason)
            })
            // A certificate refused: said once; the worker polls the remote as without a service.
            if let failure {
                note("not following the push service \(url): \(failure)")
                connection(failure.description)
            }
        }
    }

    /// Stops following (the stream closes).
    public func stop() {
        task.cancel()
        let (task, client, group) = (self.task, self.client, self.group)
        _ = try? runBlocking {
            await task.value
            await client.shutdown()
            try? await group.shutdownGracefully()
        }
    }
}
