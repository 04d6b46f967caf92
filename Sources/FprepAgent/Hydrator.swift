import CFprepSys
import FprepCore
import Glibc

/// Fills one watched placeholder of one replica: fetches its blob without
/// the replica's lock, then writes it in place through the event's
/// descriptor with the lock held (the core journals and records it).
struct Hydrator: Sendable {
    let root: String
    /// Told of each index write of the agent's own (the index's stat
    /// before and after, the replica's lock held), so a hydration does not
    /// look like a sync that brought placeholders.
    var indexWritten: @Sendable (_ before: fprep_stat, _ after: fprep_stat) -> Void = { _, _ in }
    /// The replica's worker, which does the work as the replica's owner
    /// (the agent's side); nil in the worker itself.
    var worker: WorkerClient? = nil

    enum Outcome: Sendable {
        /// Content in place: allow the access.
        case hydrated(bytes: Int64)
        /// Nothing to do (materialized meanwhile, or the user's bytes): allow.
        case notAPlaceholder(String)
        /// Fail the access with EIO, saying why.
        case failed(String)
    }

    func hydrate(_ placeholder: WatchedPlaceholder, through fd: Int32) -> Outcome {
        if let worker { return worker.hydrate(placeholder, through: fd, indexWritten: indexWritten) }
        let token: String
        do {
            token = try InPlaceHydration.fetch([placeholder.blob], replicaRoot: root)
        } catch {
            return .failed(Self.reason(error))
        }
        defer { InPlaceHydration.removeQuarantine(token, replicaRoot: root) }
        do {
            let replica = try Replica.open(containing: root, access: Replica.Access(command: "agent", exclusive: true))
            let before = IndexWatcher.stat(root)
            switch try replica.hydrateInPlace(placeholder.path, through: fd, token: token) {
            case .hydrated(let bytes):
                indexWritten(before, IndexWatcher.stat(root))
                return .hydrated(bytes: bytes)
            case .notAPlaceholder(let why): return .notAPlaceholder(why)
            }
        } catch {
            return .failed(Self.reason(error))
        }
    }

    private static func reason(_ error: any Error) -> String {
        if let error = error as? FprepError { return error.message }
        return "\(error)"
    }
}
