import CFprepSys
import FprepCore
import Glibc
import Synchronization

/// The placeholders the agent watches, by file, and their marks. Marking
/// runs on whichever thread lists placeholders (the start, a rescan), so the
/// event loop never waits on a walk of the replica; the loop only looks up.
final class Watchlist: @unchecked Sendable {
    private let group: FanotifyGroup
    private let rootFD: Int32
    private let log: AgentLog
    /// Put before a path in the log (see `EventLoop`).
    private let prefix: String
    private let files = Mutex<[FileKey: WatchedPlaceholder]>([:])
    /// Files a command asked to be watched before it makes them
    /// placeholders (see `AgentLink`), with its process id: its own
    /// accesses to them (the eviction's punch, a check that reads) go on
    /// unanswered by a fill, which would wait for the lock it holds.
    /// Cleared by the next full listing (the command has let the replica go).
    private let exempt = Mutex<[FileKey: pid_t]>([:])
    /// Only the replica owner's files are marked (nil: anyone's).
    private let owner: ReplicaOwner?

    init(group: FanotifyGroup, rootFD: Int32, log: AgentLog, prefix: String = "", owner: ReplicaOwner? = nil) {
        self.group = group
        self.owner = owner
        self.prefix = prefix
        self.rootFD = rootFD
        self.log = log
    }

    var count: Int { files.withLock { $0.count } }

    func placeholder(_ key: FileKey) -> WatchedPlaceholder? { files.withLock { $0[key] } }

    /// No longer watched: hydrated, or found not to be a placeholder.
    func forget(_ key: FileKey) {
        _ = files.withLock { $0.removeValue(forKey: key) }
        _ = exempt.withLock { $0.removeValue(forKey: key) }
    }

    /// Whether `pid` asked for `key` to be watched before making it a placeholder.
    func isExempt(_ key: FileKey, _ pid: Int32) -> Bool { exempt.withLock { $0[key] == pid } }

    /// A listing's changes since the one before (see `PlaceholderListing`):
    /// files at the paths that went are forgotten, the new placeholders
    /// watched; returns how many it marked. Exemptions end with it, as with
    /// a full listing: the command that asked for them has let the replica go.
    @discardableResult
    func apply(_ changes: PlaceholderListing.Changes) -> Int {
        watch(changes.watch, complete: false, endingExemptions: true, forgetting: Set(changes.gone))
    }

    /// Marks the `placeholders` not yet watched; returns how many it marked.
    /// A file already watched takes the listing's path and blob: a sync
    /// that moved a placeholder moved its inode, and the mark with it, so
    /// the next access must be filled at the new path (at the old one it is
    /// no placeholder any more). With `complete` (a full listing), files no
    /// longer listed are forgotten: a materialize replaced them (their marks
    /// stay on inodes nothing names any more, until the agent exits).
    @discardableResult
    /// `gone`: paths whose files are forgotten unless listed again (under
    /// the same lock as the new ones are added: a file both gone from its
    /// entry and listed again, as an evicted one is, is never unwatched in
    /// between, when an access to it would read zeros).
    func watch(_ placeholders: [WatchedPlaceholder], complete: Bool, exempting requester: pid_t = 0,
               endingExemptions: Bool = false, forgetting gone: Set<RepoPath> = []) -> Int {
        var listed: [FileKey: WatchedPlaceholder] = [:]
        var marked: [FileKey: WatchedPlaceholder] = [:]
        for placeholder in placeholders {
            var bytes = (placeholder.markAt ?? placeholder.path).bytes.map { CChar(bitPattern: $0) }
            bytes.append(0)
            // Never through a symlink, never outside the replica: a folder
            // swapped for a symlink must not make the agent watch a file elsewhere.
            let fd = fprep_open_for_mark(rootFD, bytes)
            guard fd >= 0 else {
                // Gone meanwhile is no news; anything else leaves a placeholder unwatched.
                if errno != ENOENT { log.write(.warning, "cannot watch \(prefix)\(placeholder.path): \(String(cString: strerror(errno)))") }
                continue
            }
            // Closed before the next is opened: a replica holds more
            // placeholders than a process may hold descriptors.
            defer { close(fd) }
            // The worker listed it, and the worker is the owner's: a file
            // of someone else's (a hard link) is never written through
            // the descriptor the kernel opens for the agent.
            if let owner, !owner.owns(fd) {
                log.write(.warning, "not watching \(prefix)\(placeholder.path): it does not belong to the replica's owner (\(ReplicaOwner.userName(Int64(owner.uid))))")
                continue
            }
            guard let key = FileKey(fd: fd) else { continue }
            listed[key] = placeholder
            guard files.withLock({ $0[key] == nil }), marked[key] == nil else { continue }
            guard group.mark(fd) else {
                log.write(.warning, "cannot watch \(prefix)\(placeholder.path): \(String(cString: strerror(errno)))")
                continue
            }
            marked[key] = placeholder
        }
        exempt.withLock { exempt in
            if complete || endingExemptions { exempt = [:] }
            if requester > 0 { for key in listed.keys { exempt[key] = requester } }
        }
        files.withLock { files in
            if complete { files = files.filter { listed[$0.key] != nil } }
            if !gone.isEmpty { files = files.filter { listed[$0.key] != nil || !gone.contains($0.value.path) } }
            for (key, placeholder) in listed where files[key] != nil { files[key] = placeholder }
            files.merge(marked) { old, _ in old }
        }
        return marked.count
    }
}
