import FoundationEssentials
import Glibc
import FprepGit

/// A signal: "the items of this container changed", for the consumers that
/// enumerate it (File Provider's `signalEnumerator(for:)`).
public struct Signal: Sendable, Codable, Equatable {
    public let seq: Int64
    public let container: String
    public let domain: String
    public let anchor: String
    public let reason: String
    public let created: Int64
}

/// Why an item is in the working set.
public enum WorkingSetReason: String, Sendable, Codable {
    case materialized, recent, tagged, favorite, recentlyDeleted
}

/// One working-set item.
public struct WorkingSetItem: Sendable, Encodable {
    public let identifier: String
    public let reasons: [WorkingSetReason]
    public let tags: [String]
}

/// The working set: materialized items, recently used items (last used
/// within the window, by fprep or by the file's access time), tagged items,
/// favorites, and items a sync deleted within the window. A folder in it
/// brings its subfolders along when it was materialized as a whole.
struct WorkingSet {
    static let window: Int64 = 30 * 24 * 3600

    private(set) var members: [RepoPath: Set<WorkingSetReason>] = [:]
    private(set) var tagsByPath: [RepoPath: [String]] = [:]

    static func load(_ store: StateStore, root: FolderHandle, now: Int64) throws -> WorkingSet {
        var set = WorkingSet()
        let since = now - window
        for record in try store.materializedRecords() {
            set.add(record.path, .materialized)
            if record.lastUsedAt >= since { set.add(record.path, .recent) }
            else if let stat = root.stat(record.path), stat.atime.0 >= since { set.add(record.path, .recent) }
        }
        for (path, _) in try store.recents(since: since) { set.add(path, .recent) }
        for (path, name) in try store.tags() {
            set.add(path, .tagged)
            set.tagsByPath[path, default: []].append(name)
        }
        for path in try store.favorites() { set.add(path, .favorite) }
        for record in try store.trash(since: since) { set.add(record.path, .recentlyDeleted) }
        return set
    }

    mutating func add(_ path: RepoPath, _ reason: WorkingSetReason) {
        members[path, default: []].insert(reason)
    }

    func contains(_ path: RepoPath) -> Bool { members[path] != nil }

    var items: [WorkingSetItem] {
        members.keys.sorted().map { path in
            WorkingSetItem(identifier: path.description,
                           reasons: members[path, default: []].sorted { $0.rawValue < $1.rawValue },
                           tags: (tagsByPath[path] ?? []).sorted())
        }
    }
}

/// Whether items are in the working set, asked of a few paths: what a
/// sync's signals and a working-set enumerator's filter need. Each path
/// is one indexed query of the state (materialized, recent, tagged,
/// favorite, deleted within the window), so a sync of 100 changes asks
/// about 200 paths; `WorkingSet.load` read every materialized record and
/// looked at each file's access time (10^5 records and 10^5 stats at
/// 10^5 materialized files) to answer the same. Past `wholeSetAbove`
/// questions it reads the members once, without looking at any file (an
/// access time only makes a member recent, never one).
final class WorkingSetMembership {
    static let wholeSetAbove = 4096

    private let store: StateStore
    private let since: Int64
    private var asked = 0
    private var known: [RepoPath: Bool] = [:]
    private var whole: Set<RepoPath>?
    private var statement: Statement?

    init(_ store: StateStore, now: Int64) {
        self.store = store
        since = now - WorkingSet.window
    }

    func contains(_ path: RepoPath) throws -> Bool {
        if let whole { return whole.contains(path) }
        if let answer = known[path] { return answer }
        asked += 1
        if asked > Self.wholeSetAbove {
            let members = try store.workingSetMembers(since: since)
            whole = members
            known = [:]
            return members.contains(path)
        }
        let query = try statement ?? store.database.prepare("""
            SELECT 1 FROM materialized WHERE path = ?1
            UNION ALL SELECT 1 FROM recents WHERE path = ?1 AND last_used_at >= ?2
            UNION ALL SELECT 1 FROM tags WHERE path = ?1
            UNION ALL SELECT 1 FROM favorites WHERE path = ?1
            UNION ALL SELECT 1 FROM trash WHERE path = ?1 AND deleted_at >= ?2
            LIMIT 1
            """)
        statement = query
        let answer = try query.bind(.blob(path.bytes), .int(since)).step()
        known[path] = answer
        return answer
    }
}

extension StateStore {
    /// Every path in the working set since `since` (see `WorkingSet.load`,
    /// which also says why each is).
    func workingSetMembers(since: Int64) throws -> Set<RepoPath> {
        var members = Set<RepoPath>()
        for sql in ["SELECT path FROM materialized", "SELECT path FROM recents WHERE last_used_at >= ?1",
                    "SELECT path FROM tags", "SELECT path FROM favorites", "SELECT path FROM trash WHERE deleted_at >= ?1"] {
            let statement = try database.prepare(sql)
            if sql.contains("?1") { try statement.bind(.int(since)) }
            while try statement.step() { members.insert(RepoPath(bytes: statement.blob(0))) }
        }
        return members
    }
}

/// A record of the trash: an item a sync or the user deleted.
struct TrashRecord {
    let path: RepoPath
    let blob: ObjectID
    let mode: UInt32
    let deletedAt: Int64
    let anchor: String
}

extension StateStore {
    func recordRecent(_ paths: [RepoPath], at time: Int64) throws {
        let statement = try database.prepare("INSERT INTO recents(path, last_used_at) VALUES(?1, ?2) ON CONFLICT(path) DO UPDATE SET last_used_at = excluded.last_used_at")
        for path in paths { try statement.bind(.blob(path.bytes), .int(time)).run() }
    }

    func recents(since: Int64) throws -> [(RepoPath, Int64)] {
        let statement = try database.prepare("SELECT path, last_used_at FROM recents WHERE last_used_at >= ?1").bind(.int(since))
        var result: [(RepoPath, Int64)] = []
        while try statement.step() { result.append((RepoPath(bytes: statement.blob(0)), statement.int(1))) }
        return result
    }

    func setTag(_ path: RepoPath, _ name: String, present: Bool, at time: Int64) throws {
        if present {
            try database.prepare("INSERT OR IGNORE INTO tags(path, name, created_at) VALUES(?1, ?2, ?3)")
                .bind(.blob(path.bytes), .text(name), .int(time)).run()
        } else {
            try database.prepare("DELETE FROM tags WHERE path = ?1 AND name = ?2").bind(.blob(path.bytes), .text(name)).run()
        }
    }

    func tags() throws -> [(RepoPath, String)] {
        let statement = try database.prepare("SELECT path, name FROM tags ORDER BY path, name")
        var result: [(RepoPath, String)] = []
        while try statement.step() { result.append((RepoPath(bytes: statement.blob(0)), statement.text(1))) }
        return result
    }

    func setFavorite(_ path: RepoPath, present: Bool, at time: Int64) throws {
        if present {
            try database.prepare("INSERT OR IGNORE INTO favorites(path, created_at) VALUES(?1, ?2)").bind(.blob(path.bytes), .int(time)).run()
        } else {
            try database.prepare("DELETE FROM favorites WHERE path = ?1").bind(.blob(path.bytes)).run()
        }
    }

    func favorites() throws -> [RepoPath] {
        let statement = try database.prepare("SELECT path FROM favorites ORDER BY path")
        var result: [RepoPath] = []
        while try statement.step() { result.append(RepoPath(bytes: statement.blob(0))) }
        return result
    }

    func recordTrash(_ records: [TrashRecord]) throws {
        let statement = try database.prepare("INSERT OR REPLACE INTO trash(path, oid, mode, deleted_at, anchor) VALUES(?1, ?2, ?3, ?4, ?5)")
        for record in records {
            try statement.bind(.blob(record.path.bytes), .blob(record.blob.bytes), .int(Int64(record.mode)),
                               .int(record.deletedAt), .text(record.anchor)).run()
        }
    }

    func forgetTrash(_ paths: [RepoPath]) throws {
        let statement = try database.prepare("DELETE FROM trash WHERE path = ?1")
        for path in paths { try statement.bind(.blob(path.bytes)).run() }
    }

    func trash(since: Int64) throws -> [TrashRecord] {
        let statement = try database.prepare("SELECT path, oid, mode, deleted_at, anchor FROM trash WHERE deleted_at >= ?1 ORDER BY path").bind(.int(since))
        var result: [TrashRecord] = []
        while try statement.step() {
            guard let id = ObjectID(bytes: statement.blob(1)) else { continue }
            result.append(TrashRecord(path: RepoPath(bytes: statement.blob(0)), blob: id, mode: UInt32(statement.int(2)),
                                      deletedAt: statement.int(3), anchor: statement.text(4)))
        }
        return result
    }

    /// Whether a tag or favorite is on `path` or below it: only then does a
    /// move of it need an operation in the shared metadata log.
    func hasSharedMetadata(atOrUnder path: RepoPath) throws -> Bool {
        for table in ["tags", "favorites"] {
            let select = try database.prepare("SELECT 1 FROM \(table) WHERE path = ?1 OR (path >= ?2 AND path < ?3) LIMIT 1")
                .bind(.blob(path.bytes), .blob(path.bytes + [0x2F]), .blob(path.bytes + [0x30]))
            if try select.step() { return true }
        }
        return false
    }

    /// Carries every per-path record from `from` (and below) to `to` after a move.
    func moveRecords(from: RepoPath, to: RepoPath) throws {
        for table in ["materialized", "recents", "tags", "favorites", "pins"] {
            let select = try database.prepare("SELECT path FROM \(table) WHERE path = ?1 OR (path >= ?2 AND path < ?3)")
                .bind(.blob(from.bytes), .blob(from.bytes + [0x2F]), .blob(from.bytes + [0x30]))
            var paths: [[UInt8]] = []
            while try select.step() { paths.append(select.blob(0)) }
            let update = try database.prepare("UPDATE OR REPLACE \(table) SET path = ?2 WHERE path = ?1")
            for path in paths {
                try update.bind(.blob(path), .blob(to.bytes + Array(path.dropFirst(from.bytes.count)))).run()
            }
        }
    }

    /// Appends signals to the durable log; returns them with their sequence numbers.
    func appendSignals(_ signals: [(container: String, reason: String)], domain: String, anchor: String, at time: Int64) throws -> [Signal] {
        let insert = try database.prepare("INSERT INTO signals(container, domain, anchor, reason, created_at) VALUES(?1, ?2, ?3, ?4, ?5)")
        let last = try database.prepare("SELECT last_insert_rowid()")
        var result: [Signal] = []
        for signal in signals {
            try insert.bind(.text(signal.container), .text(domain), .text(anchor), .text(signal.reason), .int(time)).run()
            try last.bind()
            _ = try last.step()
            result.append(Signal(seq: last.int(0), container: signal.container, domain: domain, anchor: anchor,
                                 reason: signal.reason, created: time))
        }
        return result
    }

    func signals(after seq: Int64, limit: Int = 10_000) throws -> [Signal] {
        let statement = try database.prepare("SELECT seq, container, domain, anchor, reason, created_at FROM signals WHERE seq > ?1 ORDER BY seq LIMIT ?2")
            .bind(.int(seq), .int(Int64(limit)))
        var result: [Signal] = []
        while try statement.step() {
            result.append(Signal(seq: statement.int(0), container: statement.text(1), domain: statement.text(2),
                                 anchor: statement.text(3), reason: statement.text(4), created: statement.int(5)))
        }
        return result
    }
}

extension Replica {
    /// The item a user path names, checked to be in the replica.
    func existingItem(_ userPath: String, relativeTo directory: String) throws -> RepoPath {
        let item = try itemPath(for: userPath, relativeTo: directory)
        if item.isRoot { return item }
        let index = try repository.index()
        if index.entry(path: item.bytes) != nil || index.firstPosition(withPrefix: item.bytes + [0x2F]) != nil { return item }
        throw FprepError.notInReplica(userPath)
    }

    /// Tags or untags an item (a folder or a file).
    public func setTag(_ userPath: String, relativeTo directory: String, name: String, present: Bool) throws {
        let trimmed = name.trimmed
        guard !trimmed.isEmpty, trimmed.count <= 200, !trimmed.contains("\n") else {
            throw FprepError(.usage, "a tag is 1-200 characters on one line")
        }
        let item = try existingItem(userPath, relativeTo: directory)
        let now = Int64(Date().timeIntervalSince1970)
        try store.transaction {
            try store.setTag(item, trimmed, present: present, at: now)
            try SharedMetadata.record(MetadataOperation(kind: present ? .tag : .untag, path: item.description, name: trimmed,
                                                        to: nil, time: now, device: DeviceName.current), in: store)
        }
    }

    /// Marks or unmarks an item as a favorite.
    public func setFavorite(_ userPath: String, relativeTo directory: String, present: Bool) throws {
        let item = try existingItem(userPath, relativeTo: directory)
        let now = Int64(Date().timeIntervalSince1970)
        try store.transaction {
            try store.setFavorite(item, present: present, at: now)
            try SharedMetadata.record(MetadataOperation(kind: present ? .favorite : .unfavorite, path: item.description, name: nil,
                                                        to: nil, time: now, device: DeviceName.current), in: store)
        }
    }

    /// Materializes an item, records it as used now, and returns its path on disk.
    public func open(_ userPath: String, relativeTo directory: String) throws -> (path: String, result: MaterializeResult) {
        let item = try existingItem(userPath, relativeTo: directory)
        let result = try materialize([userPath], relativeTo: directory)
        try store.recordRecent([item], at: Int64(Date().timeIntervalSince1970))
        return (item.isRoot ? root : root + "/" + item.description, result)
    }

    /// The working set now.
    public func workingSetItems() throws -> [WorkingSetItem] {
        try WorkingSet.load(store, root: rootFolder, now: Int64(Date().timeIntervalSince1970)).items
    }

    /// Signals logged after sequence number `seq`.
    public func signals(after seq: Int64) throws -> [Signal] { try store.signals(after: seq) }
}

/// Reads a replica's signal log without holding the replica's lock, so a
/// consumer can follow it while syncs run.
public final class SignalLogReader {
    private let store: StateStore

    public init(containing path: String) throws {
        guard let root = Replica.findRoot(from: path) else { throw FprepError.notAReplica(path) }
        let database = root + "/" + Replica.stateFolderName + "/state.db"
        guard FileManager.default.fileExists(atPath: database) else {
            throw FprepError("the state database of the replica '\(root)' is missing; run 'fprep repair \(root)'")
        }
        store = try StateStore(path: database)
    }

    public func signals(after seq: Int64) throws -> [Signal] { try store.signals(after: seq) }
}
