import FoundationEssentials
import FprepCore
import FprepGit

/// The hook's push step: for each updated branch, the containers the push
/// affects go into the remote's outbox, then the service gets one short
/// poke. The outbox write is the only durable part; the poke may fail (the
/// service picks the outbox up when it starts, and every few seconds).
public enum PushHook {
    /// What the hook did, for its log line.
    public struct Result: Sendable {
        public let recorded: Int
        public let poked: Bool
    }

    /// Records the push signals of `updates` in `gitDirectory`'s outbox and
    /// pokes the service recorded in its config.
    @discardableResult
    public static func run(gitDirectory: String, updates: [PostReceive.Update],
                           pokeTimeoutMilliseconds: Int = 200) throws -> Result {
        let branches = updates.filter { $0.reference.hasPrefix("refs/heads/") && !$0.new.isZero }
        guard !branches.isEmpty else { return Result(recorded: 0, poked: false) }
        let repository = try Repository(openingAt: gitDirectory)
        let config = try repository.config()
        let domain = try config.string("fprep.domain") ?? RemoteInfo.defaultDomain(forFolder: gitDirectory)
        var pushes: [(domain: String, reference: String, old: String, new: String, containers: [String])] = []
        for update in branches {
            let containers = try PushSignals.containers(repository, from: update.old, to: update.new)
            pushes.append((domain, update.reference, update.old.hex, update.new.hex, containers))
        }
        let folder = PushFolder(remote: repository.gitDirectory)
        try folder.ensureFolder()
        try Outbox(path: folder.outboxPath).append(pushes, at: Int64(Date().timeIntervalSince1970))
        guard let address = try config.string(PushFolder.serviceKey), let url = ServiceURL(address),
              let secret = folder.secret() else { return Result(recorded: pushes.count, poked: false) }
        let poked = Poke.send(url.with(path: "/v1/outbox/poke"), bearer: secret, timeoutMilliseconds: pokeTimeoutMilliseconds)
        return Result(recorded: pushes.count, poked: poked)
    }
}
