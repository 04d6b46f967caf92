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
        public var poked: Bool
        /// The outbox was held: the signals wait in its spool.
        public var spooled = false
        /// The remote's git directory as libgit2 resolved it.
        var gitDirectory: String
    }

    /// How long the hook waits for an outbox another process holds.
    public static let busyMilliseconds: Int32 = 300

    /// Records the push signals of `updates` in `gitDirectory`'s outbox and
    /// pokes the service recorded in its config.
    @discardableResult
    public static func run(gitDirectory: String, updates: [PostReceive.Update],
                           pokeTimeoutMilliseconds: Int = 200) throws -> Result {
        let recorded = try record(gitDirectory: gitDirectory, updates: updates)
        guard recorded.recorded > 0 else { return recorded }
        let folder = PushFolder(remote: recorded.gitDirectory)
        guard let secret = folder.secret() else { return recorded }
        var result = recorded
        result.poked = Poke.first(of: folder.serviceURLs(), bearer: secret, timeoutMilliseconds: pokeTimeoutMilliseconds)
        return result
    }

    /// Records the push signals of `updates` in `gitDirectory`'s outbox (or
    /// its spool), without the poke: the hook's durable part, which a
    /// mirror of a hosted remote runs inside the service it would poke.
    public static func record(gitDirectory: String, updates: [PostReceive.Update]) throws -> Result {
        let branches = updates.filter { $0.reference.hasPrefix("refs/heads/") && !$0.new.isZero }
        guard !branches.isEmpty else { return Result(recorded: 0, poked: false, spooled: false, gitDirectory: gitDirectory) }
        let repository = try Repository(openingAt: gitDirectory)
        let domain = try repository.config().string("fprep.domain") ?? RemoteInfo.defaultDomain(forFolder: gitDirectory)
        var pushes: [(domain: String, reference: String, old: String, new: String, containers: [String])] = []
        for update in branches {
            let containers = try PushSignals.containers(repository, from: update.old, to: update.new)
            pushes.append((domain, update.reference, update.old.hex, update.new.hex, containers))
        }
        let folder = PushFolder(remote: repository.gitDirectory)
        try folder.ensureFolder()
        let now = Int64(Date().timeIntervalSince1970)
        // A push never waits on the outbox: held by another process (or
        // unwritable), the push's signals are spooled beside it, and the
        // next writer or the service takes them in.
        var spooled = false
        do {
            let outbox = try Outbox(path: folder.outboxPath, busyMilliseconds: busyMilliseconds)
            try outbox.drainSpool()
            try outbox.append(pushes, at: now)
        } catch {
            try Outbox.spool(pushes, at: now, path: folder.outboxPath)
            spooled = true
        }
        return Result(recorded: pushes.count, poked: false, spooled: spooled, gitDirectory: repository.gitDirectory)
    }
}
