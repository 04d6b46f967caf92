import FoundationEssentials
import Glibc
import FprepGit

/// An open replica: the user's tree, its git directory and fprep's state,
/// with the replica's lock held for as long as the object lives.
public final class Replica {
    /// The replica's root folder (an absolute, physical path).
    public let root: String
    let rootFolder: FolderHandle
    let store: StateStore
    let repository: Repository
    private var lock: ReplicaLock?
    /// The agent serving the replica, asked to watch placeholders before
    /// they are made (see `AgentLink`); looked for once per command.
    lazy var agentWatch: AgentLink.Need = AgentLink.need(replicaRoot: root)
    let progress: any ProgressReporter
    /// The root with every symlink resolved, which a user's path may start
    /// with instead; resolved once, not for each path named.
    private lazy var physicalRoot: String = realPath(root == "/" ? "/" : root)

    public let remoteURL: String
    public let branch: String
    public let domain: String
    /// The commit the replica's tree was laid out from; nil for an empty remote.
    public internal(set) var anchor: ObjectID?

    static let stateFolderName = ".fprep"
    /// The replica's lock (see `ReplicaLock`): whoever holds it may be waited for by a fill.
    public static func lockFile(replicaRoot: String) -> String { replicaRoot + "/" + stateFolderName + "/lock" }
    var stateFolder: String { root + "/" + Self.stateFolderName }
    var gitDirectory: String { root + "/.git" }

    /// How a command opens the replica.
    public struct Access: Sendable {
        /// The command's name, shown to another command that waits for the lock.
        public var command: String
        /// Commands that change the replica take the lock alone; readers share it.
        public var exclusive: Bool
        /// Wait for a busy lock (saying who holds it) instead of failing.
        public var wait: Bool
        public var progress: any ProgressReporter
        public var onWait: @Sendable (String) -> Void
        /// The command can run while an interrupted operation waits to be
        /// finished because the disk is full: it only reads, or (evict) it
        /// frees space. Others stop with the disk-full error.
        public var runsOnFullDisk: Bool

        public init(command: String, exclusive: Bool, wait: Bool = true,
                    progress: any ProgressReporter = SilentProgress(),
                    onWait: @escaping @Sendable (String) -> Void = { _ in }, runsOnFullDisk: Bool = false) {
            self.command = command
            self.exclusive = exclusive
            self.wait = wait
            self.progress = progress
            self.onWait = onWait
            self.runsOnFullDisk = runsOnFullDisk
        }
    }

    /// Why an interrupted operation is still waiting to be finished (the
    /// disk was full when this command tried), nil when none is.
    public internal(set) var unfinished: String?

    /// The root of the replica that holds `path` (walking up), or nil.
    public static func findRoot(from path: String) -> String? {
        var current = realPath(Remote.absolute(path))
        while true {
            if isFolder(current + "/" + stateFolderName), access(current + "/.git", F_OK) == 0 { return current }
            let parent = parentFolder(of: current)
            if parent == current || parent.isEmpty { return nil }
            current = parent
        }
    }

    /// Opens the replica that holds `path`, takes its lock, and finishes or
    /// undoes whatever an interrupted command left in its journal.
    public static func open(containing path: String, access: Access) throws -> Replica {
        try open(containing: path, access: access, layoutPlan: nil, beforeReady: {})
    }

    static func open(containing path: String, access: Access, layoutPlan: LayoutPlan?,
                     beforeReady: () throws -> Void) throws -> Replica {
        guard let root = findRoot(from: path) else { throw FprepError.notAReplica(path) }
        StorageFailure.commandRoot = root
        var replica: Replica? = try Replica(root: root, access: access, exclusive: access.exclusive)
        let recoveryNeeded = try !access.exclusive && replica?.needsRecovery() == true
        if recoveryNeeded {
            // Recovery writes: give the shared lock back first (flock would
            // otherwise wait on our own shared lock), then take it alone.
            // No other reference to the shared replica may live on here.
            replica = nil
            replica = try Replica(root: root, access: access, exclusive: true)
        }
        guard let opened = replica else { throw FprepError("cannot open the replica at '\(root)'") }
        if access.exclusive || recoveryNeeded {
            try opened.removeStaleGitLocks()
            SpaceReserve.ensure(in: opened.stateFolder)
        }
        do {
            try opened.recover(layoutPlan: layoutPlan, beforeReady: beforeReady)
        } catch {
            // A full disk must not wedge the replica: what frees space
            // (evict) and what only reads still run; the journal keeps the
            // operation, and the next command with space finishes it.
            guard access.runsOnFullDisk, let full = FprepError.storage(error, root: root), full.isDiskFull else { throw error }
            opened.unfinished = full.message
        }
        Trace.mark("open")
        return opened
    }

    private init(root: String, access: Access, exclusive: Bool) throws {
        let stateFolder = root + "/" + Self.stateFolderName
        lock = try ReplicaLock(path: Self.lockFile(replicaRoot: root), mode: exclusive ? .exclusive : .shared,
                               command: access.command, wait: access.wait, onWait: access.onWait)
        self.root = root
        progress = access.progress
        guard FileManager.default.fileExists(atPath: stateFolder + "/state.db") else {
            throw FprepError("the state database of the replica '\(root)' is missing; run 'fprep repair \(root)' to rebuild it from git")
        }
        let store = try StateStore(path: stateFolder + "/state.db", existing: true)
        self.store = store
        let (phase, url, storedBranch, storedDomain, storedAnchor) = try store.reading {
            (try store.meta("phase"), try store.meta("remote_url") ?? "", try store.meta("branch"),
             try store.meta("domain") ?? "", try store.meta("anchor"))
        }
        guard phase != "fetching", let branch = storedBranch else {
            throw FprepError("the clone into '\(root)' did not finish; run 'fprep clone \(url) \(root)' again to finish it")
        }
        do {
            repository = try Repository(openingAt: root)
        } catch {
            throw FprepError.git("cannot open the git directory of the replica '\(root)'", error)
        }
        // With the log gone, what it held is lost unless the database agrees
        // with git: the branch is where the anchor recorded last says.
        if store.logWasRemoved, (try? repository.referenceTarget("refs/heads/" + branch))??.hex ?? "" != storedAnchor ?? "" {
            let problem = "its write-ahead log is gone and its anchor is not the branch's commit"
            StateFileCheck.markDamaged(stateFolder + "/state.db", problem)
            throw FprepError.damagedState(stateFolder + "/state.db", reason: problem)
        }
        rootFolder = try FolderHandle(root: root)
        remoteURL = url
        self.branch = branch
        domain = storedDomain
        anchor = storedAnchor.flatMap(ObjectID.init(hex:))
    }

    /// Opens in this process wait for one another (the agent's worker,
    /// which opens the replica from several threads): see `ReplicaLock`.
    public static func oneOpenAtATime() { ReplicaLock.onePerProcess = true }

    deinit {
        // The object database goes with the replica: the fetch folders it
        // kept as alternates (emptied) can go too.
        removeFetchQuarantines(closing: true)
    }

    func needsRecovery() throws -> Bool {
        try store.meta("phase") != "ready" || !store.pendingOperations().isEmpty
    }

    /// Removes git lock files a killed fprep command left (a commit of the
    /// index, a ref update). fprep holds the replica's lock here, so such a
    /// file is either stale or a user's own git command at work. git makes
    /// its lock files with O_EXCL and holds them open while it writes; some
    /// it keeps closed for longer (`git commit PATH` while its editor or
    /// hooks run). So a lock is live while a process has it open or a git
    /// process works in the replica: never removed then (fprep waits a
    /// little, then refuses, naming the process). Otherwise one that stays
    /// for two seconds is stale.
    func removeStaleGitLocks() throws {
        var candidates = ["index.lock", "HEAD.lock", "config.lock", "packed-refs.lock", "shallow.lock",
                          "refs/heads/\(branch).lock", SharedIndexFile.temporaryName]
        // Every ref a fetch updates: the followed branch and fprep's own
        // (a lock left on the size manifest's would fail every later fetch).
        for folder in ["refs/remotes/origin", "refs/remotes/origin-fprep"] {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: gitDirectory + "/" + folder)) ?? []
            where name.hasSuffix(".lock") {
                candidates.append(folder + "/" + name)
            }
        }
        for name in candidates {
            let path = gitDirectory + "/" + name
            var info = stat()
            guard lstat(path, &info) == 0 else { continue }
            var waited = 0.0
            while lstat(path, &info) == 0 {
                let age = Double(time(nil)) - Double(info.st_mtim.tv_sec)
                let holder = GitLockHolder.process(holding: info, workingIn: root)
                if holder == nil && age >= 2 {
                    // Still the same lock file (not one a git made since).
                    var now = stat()
                    if lstat(path, &now) == 0, now.st_ino == info.st_ino, now.st_dev == info.st_dev { unlink(path) }
                    break
                }
                if let holder, waited >= 2 {
                    throw FprepError(.busy, "git is running in the replica ('.git/\(name)' held by pid \(holder)); let it finish, then run the command again")
                }
                usleep(50_000)
                waited += 0.05
            }
        }
    }

    /// Finishes an interrupted layout and settles journaled operations.
    func recover(layoutPlan: LayoutPlan? = nil, beforeReady: () throws -> Void = {}) throws {
        if try store.meta("phase") == "layout" {
            try Cloner.finishLayout(self, plan: layoutPlan, beforeReady: beforeReady)
        }
        for record in try store.pendingOperations() {
            try ContentOperations(self).settle(record)
        }
    }

    // MARK: paths

    /// The item a user's path names: relative paths start at `directory`;
    /// the path is taken as written (symlinks are not resolved), and must
    /// lie inside the replica but outside `.git` and `.fprep`.
    public func itemPath(for userPath: String, relativeTo directory: String) throws -> RepoPath {
        if let encoded = RepoPath(encodedIdentifier: userPath) {
            // An identifier in the encoded form, as fprep printed it (a name
            // that is not UTF-8); it names the item from the replica's root.
            return encoded
        }
        let rootPath = root == "/" ? "" : root
        // A plain path from the replica's root (no ".", ".." or empty part),
        // what a list of paths mostly holds, is the item's path as it is:
        // taken apart and joined again below, 1,000 of them cost 12 ms of a
        // materialize.
        if directory == root || directory == physicalRoot, let plain = Self.plainRelativePath(userPath) {
            return try Self.itemOutsideState(plain, named: userPath)
        }
        let base = userPath.hasPrefix("/") ? "" : directory
        var parts: [Substring] = []
        for part in (base + "/" + userPath).split(separator: "/") {
            switch part {
            case ".": continue
            case "..": if !parts.isEmpty { parts.removeLast() }
            default: parts.append(part)
            }
        }
        let absolutePath = "/" + parts.joined(separator: "/")
        var relative: String?
        for candidate in [rootPath, physicalRoot] {
            if absolutePath == candidate { relative = ""; break }
            if absolutePath.hasPrefix(candidate + "/") { relative = String(absolutePath.dropFirst(candidate.count + 1)); break }
        }
        guard let relative else { throw FprepError.outsideReplica(userPath, root: root) }
        return try Self.itemOutsideState(RepoPath(relative), named: userPath)
    }

    /// `text` as a path relative to the folder it is read from when it is
    /// plainly one: not absolute, no empty, "." or ".." part; nil otherwise.
    static func plainRelativePath(_ text: String) -> RepoPath? {
        let bytes = Array(text.utf8)
        var start = 0
        while start <= bytes.count {
            var end = start
            while end < bytes.count, bytes[end] != 0x2F { end += 1 }
            let length = end - start
            if length == 0 || (bytes[start] == 0x2E && (length == 1 || (length == 2 && bytes[start + 1] == 0x2E))) { return nil }
            start = end + 1
        }
        return RepoPath(bytes: bytes)
    }

    /// `item`, unless it is in `.git` or fprep's state folder.
    private static func itemOutsideState(_ item: RepoPath, named userPath: String) throws -> RepoPath {
        let first = item.bytes.split(separator: 0x2F, maxSplits: 1, omittingEmptySubsequences: false).first ?? []
        if first.elementsEqual(".git".utf8) || first.elementsEqual(stateFolderName.utf8) {
            throw FprepError.insideState(userPath)
        }
        return item
    }

    /// The index entries at or below `item`: the file itself, or every file
    /// of a folder. Throws when `item` names nothing in the replica.
    func indexEntries(under item: RepoPath, in index: Index, shown: String) throws -> [IndexEntry] {
        if item.isRoot {
            return (0..<index.count).compactMap { index.entry(at: $0) }
        }
        if let exact = index.entry(path: item.bytes) { return [exact] }
        let result = index.entries(withPrefix: item.bytes + [0x2F])
        if result.isEmpty { throw FprepError.notInReplica(shown) }
        return result
    }
}

/// Finds a live holder of a git lock file in `/proc`: a process that has
/// it open, or a git process whose working folder is in the replica.
enum GitLockHolder {
    /// The id of such a process (not this one), or nil.
    static func process(holding info: stat, workingIn root: String) -> Int32? {
        let own = getpid()
        guard let processes = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return nil }
        var gitInReplica: Int32?
        for entry in processes {
            guard let pid = Int32(entry), pid != own else { continue }
            for descriptor in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(entry)/fd")) ?? [] {
                var target = stat()
                guard stat("/proc/\(entry)/fd/\(descriptor)", &target) == 0 else { continue }
                if target.st_ino == info.st_ino && target.st_dev == info.st_dev { return pid }
            }
            if gitInReplica == nil, isGit(entry), let folder = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(entry)/cwd"),
               folder == root || folder.hasPrefix(root + "/") {
                gitInReplica = pid
            }
        }
        return gitInReplica
    }

    /// Whether the process's command name is git's (`git`, `git-…`).
    private static func isGit(_ pid: String) -> Bool {
        // procfs files show size 0: read them, never size a read from stat.
        let fd = open("/proc/\(pid)/comm", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var name = [UInt8](repeating: 0, count: 64)
        let count = read(fd, &name, name.count)
        return count >= 3 && name.starts(with: Array("git".utf8))
    }
}
