import CFprepSys
import FoundationEssentials
import Glibc
import FprepGit

/// A placeholder an agent watches: a dataless file and the blob that fills it.
public struct WatchedPlaceholder: Sendable {
    public let path: RepoPath
    public let blob: ObjectID
    /// Where the file is when the agent marks it, if not at `path`: a
    /// placeholder made under a temporary name, watched before it is
    /// renamed to `path` (see `AgentLink`).
    public var markAt: RepoPath?

    public init(path: RepoPath, blob: ObjectID, markAt: RepoPath? = nil) {
        self.path = path
        self.blob = blob
        self.markAt = markAt
    }
}

/// What became of a file the agent was asked to fill.
public enum InPlaceOutcome: Sendable, Equatable {
    /// Its content was written through the given descriptor; the file is materialized.
    case hydrated(bytes: Int64)
    /// It is not (or no longer) a placeholder; nothing was written. Why, for the log.
    case notAPlaceholder(String)
}

/// The core's side of hydration on access (`fprep agent`): which files to
/// watch, content fetched without the replica's lock, and a file filled in
/// place through the descriptor the kernel gave the agent, recorded exactly
/// as `fprep materialize` leaves it.
public enum InPlaceHydration {
    /// The prefix of the agent's fetch quarantines in `.fprep/`. Not
    /// `fetch-`: other commands remove those whole, and an agent's fetch
    /// runs without the replica's lock.
    static let quarantinePrefix = "agent-fetch-"

    /// Tests only (`FPREP_TEST_KILL_AGENT_AFTER_BYTES`): the agent kills
    /// itself (-9) after writing this many bytes of a file's content.
    static let testKillAfterBytes: Int? = getenv("FPREP_TEST_KILL_AGENT_AFTER_BYTES").flatMap { Int(String(cString: $0)) }
    /// How that kill is done: the agent's worker, which writes, has the
    /// agent killed instead (set once, before any hydration).
    nonisolated(unsafe) public static var killForTest: @Sendable () -> Void = { _ = raise(SIGKILL) }
    /// Fetches `blobs` from the replica's remote into a new quarantine and
    /// returns its token (see `hydrate`). Takes no lock: it only adds a
    /// folder of objects under `.fprep/`.
    public static func fetch(_ blobs: [ObjectID], replicaRoot: String) throws -> String {
        let token = ContentOperations.newToken()
        let quarantine = replicaRoot + "/" + Replica.stateFolderName + "/" + quarantinePrefix + token
        Trace.start()
        defer { Trace.mark("agent fetch of \(blobs.count) blobs") }
        do {
            _ = try Transport.fetchObjects(blobs, gitDirectory: replicaRoot + "/.git", quarantine: quarantine)
        } catch let error as GitCommandError {
            try? FileManager.default.removeItem(atPath: quarantine)
            throw FprepError("cannot fetch content: \(error.reason)", detail: error.standardError)
        } catch {
            try? FileManager.default.removeItem(atPath: quarantine)
            throw error
        }
        return token
    }

    /// Removes the quarantine of `token` (after a hydration, or a failed one).
    /// Whether `text` has the shape of a fetch's token (what `fetch`
    /// returns): no path can be made of anything else.
    public static func isToken(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 32 && text.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x7A) }
    }

    public static func removeQuarantine(_ token: String, replicaRoot: String) {
        try? FileManager.default.removeItem(atPath: replicaRoot + "/" + Replica.stateFolderName + "/" + quarantinePrefix + token)
    }

    /// `.fprep/agent.pid`: the serving agent's process id, under a lock the
    /// agent holds for as long as it runs (a killed agent's goes with it).
    public static func agentFile(replicaRoot: String) -> String {
        replicaRoot + "/" + Replica.stateFolderName + "/agent.pid"
    }

    /// The process id of the agent serving the replica, or nil when none runs.
    public static func servingAgent(replicaRoot: String) -> Int32? {
        // Never through a symlink, and a FIFO a user put there never waits
        // (root's `fprep agent status` reads every registered replica's).
        let fd = open(agentFile(replicaRoot: replicaRoot), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 { return nil }  // nobody holds it
        guard errno == EWOULDBLOCK else { return nil }
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        // Empty while the agent starts: it writes its id once it watches.
        guard count > 0 else { return nil }
        return Int32(String(decoding: buffer[0..<count], as: UTF8.self).trimmed)
    }

    /// Removes every agent quarantine: at an agent's start, after recovery
    /// settled whatever a killed agent journaled.
    public static func removeAllQuarantines(replicaRoot: String) {
        let folder = replicaRoot + "/" + Replica.stateFolderName
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] where name.hasPrefix(quarantinePrefix) {
            try? FileManager.default.removeItem(atPath: folder + "/" + name)
        }
    }
}

/// What an agent was told of a replica's placeholders at its last listing:
/// each dataless index entry as it was then, and whether its file was a
/// placeholder. The next listing probes only the entries that changed since
/// (a sync of 100 changes in a 10^5-file replica probes 100 files, and the
/// agent marks 100, where a full listing made both walk all 10^5 each time
/// the index changed: 2.3 s of CPU).
public struct PlaceholderListing: Sendable {
    /// The dataless file entries of the last listing, in the index's order
    /// (by path bytes): each one's path, its first 60 bytes as git lays
    /// them out (object id, mode and stat data: what a change to the entry
    /// changes), and whether its file was a placeholder. Compared by
    /// merging, as both sides are sorted (a dictionary of 10^5 paths cost
    /// more than the probes it saved), and in the index's own bytes, so only
    /// entries that changed are decoded (decoding all 10^5 after every
    /// index write was most of the agent's CPU after a sync).
    private var paths: [[UInt8]] = []
    private var fixed: [UInt8] = []
    private var watchable: [Bool] = []

    private static let fixedSize = 60

    public init() {}

    /// What changed since the listing before.
    public struct Changes: Sendable {
        /// Placeholders new or changed in the index since (all of them, the first time).
        public var watch: [WatchedPlaceholder] = []
        /// Paths watchable at the listing before whose entry changed or went.
        public var gone: [RepoPath] = []
        public init(watch: [WatchedPlaceholder] = [], gone: [RepoPath] = []) {
            self.watch = watch
            self.gone = gone
        }
    }

    /// One dataless file entry of the index being listed.
    private struct Listed {
        var path: [UInt8]
        var fixed: ArraySlice<UInt8>
        /// Its position in the index when it must be decoded (new or
        /// changed); nil when the listing before saw it as it is.
        var changedAt: Int?
        var watchableBefore = false
    }

    fileprivate mutating func update(_ index: Index, probe: ([IndexEntry]) -> [Bool]) -> Changes {
        var changes = Changes()
        let listed = Self.inPlace(index, against: self, gone: &changes.gone) ?? decoded(index, gone: &changes.gone)
        // Only the new and changed entries are decoded, and probed on disk.
        let changed = listed.indices.compactMap { k in listed[k].changedAt.flatMap { index.entry(at: $0) }.map { (k, $0) } }
        let probed = probe(changed.map(\.1))
        var newWatchable = listed.map(\.watchableBefore)
        for (n, (k, entry)) in changed.enumerated() where n < probed.count {
            newWatchable[k] = probed[n]
            if probed[n] { changes.watch.append(WatchedPlaceholder(path: RepoPath(bytes: entry.path), blob: entry.id)) }
        }
        var newPaths: [[UInt8]] = []
        var newFixed: [UInt8] = []
        newPaths.reserveCapacity(listed.count)
        newFixed.reserveCapacity(listed.count * Self.fixedSize)
        for item in listed {
            newPaths.append(item.path)
            newFixed += item.fixed
        }
        paths = newPaths
        fixed = newFixed
        watchable = newWatchable
        return changes
    }

    /// The merge, in the index's bytes; nil when they cannot be read in
    /// place or are out of order (git keeps the index sorted; one that is
    /// not is not trusted to be, and is decoded and sorted).
    private static func inPlace(_ index: Index, against before: PlaceholderListing, gone: inout [RepoPath]) -> [Listed]? {
        var listed: [Listed] = []
        listed.reserveCapacity(before.paths.count)
        var goneHere: [RepoPath] = []
        var previous = 0
        var last: UnsafeBufferPointer<UInt8>?
        let complete = index.forEachEntryInPlace { position, entryBytes, path in
            if let last, !Index.precedes(last, path) { return false }
            last = path
            let fields = Index.EntryFields(entryBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
            guard fields.skipWorktree, FileMode(raw: fields.mode).isFile else { return true }
            while previous < before.paths.count, before.paths[previous].withUnsafeBufferPointer({ Index.precedes($0, path) }) {
                if before.watchable[previous] { goneHere.append(RepoPath(bytes: before.paths[previous])) }
                previous += 1
            }
            if previous < before.paths.count, before.paths[previous].elementsEqual(path) {
                let start = previous * fixedSize
                let kept = before.fixed[start..<start + fixedSize]
                let same = kept.withUnsafeBytes { memcmp($0.baseAddress!, entryBytes.baseAddress!, fixedSize) == 0 }
                if same {
                    listed.append(Listed(path: before.paths[previous], fixed: kept, changedAt: nil, watchableBefore: before.watchable[previous]))
                } else {
                    if before.watchable[previous] { goneHere.append(RepoPath(bytes: before.paths[previous])) }
                    listed.append(Listed(path: before.paths[previous], fixed: ArraySlice(entryBytes), changedAt: position))
                }
                previous += 1
            } else {
                listed.append(Listed(path: Array(path), fixed: ArraySlice(entryBytes), changedAt: position))
            }
            return true
        }
        guard complete == true else { return nil }
        for rest in previous..<before.paths.count where before.watchable[rest] { goneHere.append(RepoPath(bytes: before.paths[rest])) }
        gone += goneHere
        return listed
    }

    /// The same merge over decoded entries, sorted first.
    private func decoded(_ index: Index, gone: inout [RepoPath]) -> [Listed] {
        var entries: [(position: Int, entry: IndexEntry)] = []
        entries.reserveCapacity(paths.count)
        for position in 0..<index.count {
            guard let entry = index.entry(at: position), entry.skipWorktree, FileMode(raw: entry.mode).isFile else { continue }
            entries.append((position, entry))
        }
        entries.sort { $0.entry.path.lexicographicallyPrecedes($1.entry.path) }
        var listed: [Listed] = []
        var previous = 0
        for (position, entry) in entries {
            while previous < paths.count, paths[previous].lexicographicallyPrecedes(entry.path) {
                if watchable[previous] { gone.append(RepoPath(bytes: paths[previous])) }
                previous += 1
            }
            let bytes = ArraySlice(Self.fixedBytes(of: entry))
            if previous < paths.count, paths[previous] == entry.path {
                let start = previous * Self.fixedSize
                if fixed[start..<start + Self.fixedSize] == bytes {
                    listed.append(Listed(path: entry.path, fixed: bytes, changedAt: nil, watchableBefore: watchable[previous]))
                } else {
                    if watchable[previous] { gone.append(RepoPath(bytes: entry.path)) }
                    listed.append(Listed(path: entry.path, fixed: bytes, changedAt: position))
                }
                previous += 1
            } else {
                listed.append(Listed(path: entry.path, fixed: bytes, changedAt: position))
            }
        }
        for rest in previous..<paths.count where watchable[rest] { gone.append(RepoPath(bytes: paths[rest])) }
        return listed
    }

    /// An entry's first 60 bytes as git lays them out.
    private static func fixedBytes(of entry: IndexEntry) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(fixedSize)
        func put(_ value: UInt32) { withUnsafeBytes(of: value.bigEndian) { bytes += $0 } }
        let stat = entry.stat
        put(UInt32(bitPattern: stat.ctimeSeconds)); put(stat.ctimeNanoseconds)
        put(UInt32(bitPattern: stat.mtimeSeconds)); put(stat.mtimeNanoseconds)
        put(stat.device); put(stat.inode); put(entry.mode); put(stat.uid); put(stat.gid); put(stat.fileSize)
        bytes += entry.id.bytes
        return bytes
    }
}

extension Replica {
    /// The files an agent watches: index entries with the skip-worktree bit
    /// whose file is still a placeholder holding no data. A placeholder a
    /// program wrote into holds the user's bytes and is never watched.
    public func watchablePlaceholders() throws -> [WatchedPlaceholder] {
        var listing = PlaceholderListing()
        return try watchablePlaceholders(since: &listing).watch
    }

    /// The watchable placeholders that changed since `listing` (see
    /// `PlaceholderListing`), which is brought up to date.
    public func watchablePlaceholders(since listing: inout PlaceholderListing) throws -> PlaceholderListing.Changes {
        let index = try repository.index()
        return listing.update(index) { probeWatchable($0) }
    }

    /// Whether the file of each entry is a placeholder holding no data.
    private func probeWatchable(_ candidates: [IndexEntry]) -> [Bool] {
        guard !candidates.isEmpty else { return [] }
        var probes = [fprep_probe](repeating: fprep_probe(), count: candidates.count)
        let paths = candidates.map { strdup(cPath($0.path)) }
        defer { paths.forEach { free($0) } }
        paths.map { UnsafePointer($0) }.withUnsafeBufferPointer { buffer in
            probes.withUnsafeMutableBufferPointer { results in
                fprep_probe_paths(rootFolder.fd, buffer.baseAddress, candidates.count, 2, results.baseAddress)
            }
        }
        return zip(candidates, probes).map { entry, probe in
            guard probe.found != 0, probe.marked_dataless != 0 else { return false }
            let stat = FileStat(probe.stat)
            return stat.isRegular && ContentOperations.holdsNoData(rootFolder, RepoPath(bytes: entry.path), stat)
        }
    }

    /// Fills the placeholder at `path` with its content, written through
    /// `fd` (the descriptor a fanotify pre-content event carries: writes
    /// through it raise no event), from the quarantine of `token` (see
    /// `InPlaceHydration.fetch`). Journaled first, so a crash midway is
    /// settled by the next command: a half-written file becomes a
    /// placeholder again, never content. Call with the replica opened
    /// exclusively.
    public func hydrateInPlace(_ path: RepoPath, through fd: Int32, token: String) throws -> InPlaceOutcome {
        // One mechanism for one file and for a read-ahead batch.
        try hydrateInPlace([(path, fd)], token: token)[0].get()
    }

    /// Writes `bytes` into the placeholder open as `fd` (of `size` bytes),
    /// with the item's date, durably, and takes its placeholder marks off.
    /// `flush: false`: the caller makes the batch durable at once (syncfs).
    /// A file made writable for the fill gets its mode back before the last look.
    func fill(_ file: WritableFile, with bytes: UnsafeRawBufferPointer, entry: IndexEntry, path: RepoPath, size: Int64,
              flush: Bool = true) throws -> fprep_stat {
        let fd = file.fd
        TestGate.fill.pass(path)
        if size != Int64(bytes.count), ftruncate(fd, off_t(bytes.count)) != 0 {
            throw SystemError("resize", path.description)
        }
        if bytes.count > 0, let base = bytes.baseAddress {
            if let limit = InPlaceHydration.testKillAfterBytes, limit < bytes.count {
                // Tests: a kill -9 in the middle of the write.
                _ = fprep_pwrite_all(fd, base, limit, 0)
                _ = fsync(fd)
                InPlaceHydration.killForTest()
            }
            guard fprep_pwrite_all(fd, base, bytes.count, 0) >= 0 else { throw SystemError("write", path.description) }
        }
        _ = fprep_set_mtime(fd, Int64(entry.stat.mtimeSeconds), Int(entry.stat.mtimeNanoseconds))
        guard !flush || fsync(fd) == 0 else { throw SystemError("flush", path.description) }
        guard fprep_clear_placeholder_marks(fd) == 0 else { throw SystemError("clear the placeholder marks of", path.description) }
        try file.giveBackMode(shown: path.description)
        var after = fprep_stat()
        guard fprep_fstat(fd, &after) == 0 else { throw SystemError("stat", path.description) }
        return after
    }

    /// Settles a file an agent was filling in place when it died: its bytes
    /// are the blob's or zeros wherever they are (nobody else wrote: fprep's
    /// own partial write), so it becomes a placeholder again. Returns false
    /// when some byte is neither: a program wrote into it, and those bytes
    /// are the user's (sync keeps them).
    func settlePartialInPlace(_ id: ObjectID, mtime: (seconds: Int64, nanoseconds: Int), path: RepoPath, token: String) throws -> Bool {
        let quarantine = stateFolder + "/" + InPlaceHydration.quarantinePrefix + token
        let odb = try repository.objectDatabase()
        if FileManager.default.fileExists(atPath: quarantine) { try odb.addAlternate(quarantine) }
        // Without the blob nothing tells fprep's bytes from the user's: keep them.
        guard let blob = try? repository.blob(id) else { return false }
        guard let (fd, stat) = try? rootFolder.openRegular(path, flags: O_RDWR) else { return false }
        defer { close(fd) }
        let onlyOurs = try blob.withContent { expected -> Bool in
            guard stat.size == Int64(expected.count) else { return false }
            let bytes = try readContent(fd, size: stat.size, shown: path.description)
            guard bytes.count == expected.count else { return false }
            for offset in 0..<bytes.count where bytes[offset] != 0 && bytes[offset] != expected[offset] { return false }
            return true
        }
        guard onlyOurs else { return false }
        var after = stat_t()
        let raw = id.bytes
        guard fprep_punch_to_placeholder(fd, raw, raw.count, mtime.seconds, mtime.nanoseconds, &after) == 0 else {
            throw SystemError("free the blocks of", path.description)
        }
        return true
    }
}

typealias stat_t = Glibc.stat
