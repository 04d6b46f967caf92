import CSQLite
import FoundationEssentials
import Glibc
import FprepGit

/// The replica's own state in `.fprep/state.db` (SQLite, WAL,
/// `synchronous=FULL`): the anchor and settings, the size manifest as far as
/// it was read, the materialized set and the journal of operations under way.
final class StateStore {
    let database: Database

    /// One record of the journal: an operation that started and has not
    /// finished; the next command finishes or undoes it.
    struct JournalRecord {
        let id: Int64
        let operation: String
        let payload: [UInt8]
    }

    /// A materialized item as the store remembers it.
    struct MaterializedRecord {
        let path: RepoPath
        let blob: ObjectID
        let materializedAt: Int64
        let lastUsedAt: Int64
    }

    static let schemaVersion = 5

    /// The database's write-ahead log and its index were both gone when it
    /// was opened: harmless after another SQLite program closed it, data
    /// lost if they were deleted after a crash (see `Replica.init`).
    let logWasRemoved: Bool
    /// The file as `StateFileCheck` found its pages sound at open (nil: not looked at).
    private var foundSound: String?

    /// Opens (or, unless `existing`, creates) the store at `path`. An
    /// existing replica's store is checked first (`StateFileCheck`): damage
    /// is reported by the next command, whatever it reads.
    init(path: String, existing: Bool = false) throws {
        logWasRemoved = existing && StateFileCheck.logRemoved(at: path)
        if existing {
            switch StateFileCheck.verdict(at: path) {
            case .damaged(let problem): throw FprepError.damagedState(path, reason: problem)
            case .sound(let stamp): foundSound = stamp
            }
            let folder = parentFolder(of: path)
            for target in [folder, path] where access(target, W_OK) != 0 && errno != ENOENT {
                throw FprepError.readOnlyState(folder, reason: String(cString: strerror(errno)).lowercased())
            }
        }
        do {
            database = try Database(path: path)
            // Pages are read with a read call each, not through a mapping: a
            // fault on a cold page of a mapped file reads the device's whole
            // read-ahead window around it (8 MB here), so a `sync
            // --incoming` at 10^6 files that looks up a few dozen rows read
            // all 37 MB of the database; with reads, 0.9 MB.
            try database.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA mmap_size=0;")
            if existing, try database.userVersion == 0 {
                throw FprepError.damagedState(path, reason: "it holds none of fprep's tables")
            }
            try migrate()
        } catch let error as DatabaseError {
            throw FprepError.storage(error, root: nil)
                ?? FprepError("cannot open the state database '\(path)': \(error.message)")
        }
    }

    deinit {
        // A connection SQLite found damage on leaves the file to be scanned.
        guard let foundSound, !database.sawDamage else { return }
        let database = database
        StateFileCheck.restamp(database.path, foundSound: foundSound) { database.closeUnlessInUse() }
    }

    private func migrate() throws {
        let version = try database.userVersion
        if version > Self.schemaVersion {
            throw FprepError("the state database was written by a newer fprep (schema \(version)); upgrade fprep")
        }
        guard version < Self.schemaVersion else { return }
        // Every step in one transaction: one wait for the disk (a new
        // store's five cost a clone 5–13 ms), and no store is left between
        // two versions. The version is read again inside: another process
        // may have migrated the store since.
        try database.transaction {
            let current = try database.userVersion
            if current < Self.schemaVersion { try migrate(from: current) }
        }
    }

    private func migrate(from version: Int) throws {
        if version < 1 { try createVersion1() }
        if version < 2 { try createVersion2() }
        if version < 3 {
            try database.writing {
                try database.execute("""
                    CREATE TABLE meta_ops(seq INTEGER PRIMARY KEY AUTOINCREMENT, operation BLOB NOT NULL);
                    PRAGMA user_version = 3;
                    """)
            }
        }
        if version < 4 {
            // The device's pins (see `PinSet`).
            try database.writing {
                try database.execute("""
                    CREATE TABLE IF NOT EXISTS pins(path BLOB PRIMARY KEY, created_at INTEGER NOT NULL) WITHOUT ROWID;
                    PRAGMA user_version = 4;
                    """)
            }
        }
        if version < 5 {
            // Old versions of files a sync swapped out while a program had
            // them open for writing (see `HeldFile`).
            try database.writing {
                try database.execute("""
                    CREATE TABLE IF NOT EXISTS held_files(location BLOB PRIMARY KEY, item BLOB NOT NULL, oid BLOB NOT NULL,
                        inode INTEGER NOT NULL, dataless INTEGER NOT NULL, since INTEGER NOT NULL) WITHOUT ROWID;
                    PRAGMA user_version = 5;
                    """)
            }
        }
    }

    private func createVersion1() throws {
        try database.writing {
            try database.execute("""
                CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
                CREATE TABLE blob_info(oid BLOB PRIMARY KEY, size INTEGER NOT NULL, mtime INTEGER NOT NULL) WITHOUT ROWID;
                CREATE TABLE materialized(path BLOB PRIMARY KEY, oid BLOB NOT NULL,
                    materialized_at INTEGER NOT NULL, last_used_at INTEGER NOT NULL) WITHOUT ROWID;
                CREATE TABLE journal(id INTEGER PRIMARY KEY, operation TEXT NOT NULL,
                    payload BLOB NOT NULL, started_at INTEGER NOT NULL);
                PRAGMA user_version = 1;
                """)
        }
    }

    /// The working set's own parts and the signal log.
    private func createVersion2() throws {
        try database.writing {
            try database.execute("""
                CREATE TABLE recents(path BLOB PRIMARY KEY, last_used_at INTEGER NOT NULL) WITHOUT ROWID;
                CREATE TABLE tags(path BLOB NOT NULL, name TEXT NOT NULL, created_at INTEGER NOT NULL,
                    PRIMARY KEY(path, name)) WITHOUT ROWID;
                CREATE TABLE favorites(path BLOB PRIMARY KEY, created_at INTEGER NOT NULL) WITHOUT ROWID;
                CREATE TABLE trash(path BLOB PRIMARY KEY, oid BLOB NOT NULL, mode INTEGER NOT NULL,
                    deleted_at INTEGER NOT NULL, anchor TEXT NOT NULL) WITHOUT ROWID;
                CREATE TABLE signals(seq INTEGER PRIMARY KEY AUTOINCREMENT, container TEXT NOT NULL,
                    domain TEXT NOT NULL, anchor TEXT NOT NULL, reason TEXT NOT NULL, created_at INTEGER NOT NULL);
                PRAGMA user_version = 2;
                """)
        }
    }

    func transaction<R>(durability: CommitDurability = .beforeReturning, _ body: () throws -> R) throws -> R {
        try database.transaction(durability: durability, body)
    }

    // MARK: meta

    /// Runs `body`'s reads in one read transaction.
    func reading<R>(_ body: () throws -> R) throws -> R { try database.reading(body) }

    func meta(_ key: String) throws -> String? {
        let statement = try database.prepare("SELECT value FROM meta WHERE key = ?1").bind(.text(key))
        return try statement.step() ? statement.text(0) : nil
    }

    func setMeta(_ key: String, _ value: String) throws {
        try database.prepare("INSERT INTO meta(key, value) VALUES(?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value")
            .bind(.text(key), .text(value)).run()
    }

    // MARK: blob sizes and dates

    /// Records sizes and dates of blobs; a blob already known keeps its first date.
    func recordBlobInfo(_ entries: [(ObjectID, BlobInfo)]) throws {
        let statement = try database.prepare("INSERT OR IGNORE INTO blob_info(oid, size, mtime) VALUES(?1, ?2, ?3)")
        for (id, info) in entries {
            try statement.bind(.blob(id.bytes), .int(info.size), .int(info.mtime)).run()
        }
    }

    /// Looks `ids` up on several connections at once, so that inserting
    /// them finds the pages where they go in the kernel's cache: on a cold
    /// disk each insert into the table of 10^6 blobs waited for a page of
    /// its own, one after another (60 of them, 20–30 ms), where side by side
    /// those reads take a few milliseconds. A hint: a connection that
    /// cannot open or read only leaves its pages cold.
    func warmBlobInfo(_ ids: [ObjectID], threads: Int = 8) {
        // A clone's whole manifest fills the table in order; a sync's few
        // ids land on pages all over it.
        guard ids.count >= 2 * threads, ids.count <= 4096 else { return }
        let sorted = ids.sorted()
        let share = (sorted.count + threads - 1) / threads
        let path = database.path
        parallelFor(threads, threads: threads) { part in
            let mine = sorted[min(sorted.count, part * share)..<min(sorted.count, (part + 1) * share)]
            guard !mine.isEmpty, let connection = try? Database(path: path),
                  let lookup = try? connection.prepare("SELECT 1 FROM blob_info WHERE oid = ?1") else { return }
            for id in mine {
                _ = try? lookup.bind(.blob(id.bytes)).step()
            }
        }
    }

    /// A reusable lookup for many blobs in a row.
    func blobInfoLookup() throws -> (ObjectID) throws -> BlobInfo? {
        try Self.blobInfoLookup(on: database)
    }

    /// The same lookup on a connection of another thread's own (see
    /// `EarlyPlaceholders`).
    static func blobInfoLookup(on database: Database) throws -> (ObjectID) throws -> BlobInfo? {
        let statement = try database.prepare("SELECT size, mtime FROM blob_info WHERE oid = ?1")
        return { id in
            try statement.bind(.blob(id.bytes))
            return try statement.step() ? BlobInfo(size: statement.int(0), mtime: statement.int(1)) : nil
        }
    }

    // MARK: materialized set

    func recordMaterialized(_ items: [(RepoPath, ObjectID)], at time: Int64) throws {
        let statement = try database.prepare("""
            INSERT INTO materialized(path, oid, materialized_at, last_used_at) VALUES(?1, ?2, ?3, ?3)
            ON CONFLICT(path) DO UPDATE SET oid = excluded.oid, last_used_at = excluded.last_used_at
            """)
        for (path, id) in items {
            try statement.bind(.blob(path.bytes), .blob(id.bytes), .int(time)).run()
        }
    }

    func forgetMaterialized(_ paths: [RepoPath]) throws {
        let statement = try database.prepare("DELETE FROM materialized WHERE path = ?1")
        for path in paths { try statement.bind(.blob(path.bytes)).run() }
    }

    /// Which of `paths` the store lists as materialized.
    func materialized(among paths: [RepoPath]) throws -> Set<RepoPath> {
        let statement = try database.prepare("SELECT 1 FROM materialized WHERE path = ?1")
        var result = Set<RepoPath>()
        for path in paths {
            try statement.bind(.blob(path.bytes))
            if try statement.step() { result.insert(path) }
        }
        return result
    }

    /// The paths of the materialized files in byte order, or nil when
    /// there are more than `limit`; on a connection of its own (`database`,
    /// another thread's).
    static func materializedPaths(_ database: Database, atMost limit: Int) throws -> [RepoPath]? {
        let statement = try database.prepare("SELECT path FROM materialized ORDER BY path LIMIT ?1").bind(.int(Int64(limit) + 1))
        var result: [RepoPath] = []
        while try statement.step() {
            guard result.count < limit else { return nil }
            result.append(RepoPath(bytes: statement.blob(0)))
        }
        return result
    }

    func materializedRecords() throws -> [MaterializedRecord] {
        let statement = try database.prepare("SELECT path, oid, materialized_at, last_used_at FROM materialized ORDER BY path")
        var result: [MaterializedRecord] = []
        while try statement.step() {
            guard let id = ObjectID(bytes: statement.blob(1)) else { continue }
            result.append(MaterializedRecord(path: RepoPath(bytes: statement.blob(0)), blob: id,
                                             materializedAt: statement.int(2), lastUsedAt: statement.int(3)))
        }
        return result
    }

    // MARK: journal

    /// Notes that an operation starts; the record stays until `endOperation`.
    func beginOperation(_ operation: String, payload: [UInt8]) throws -> Int64 {
        // One commit for the token and the record: each waits for the disk.
        try database.writing {
            // The token names the operation's temporary files; it is kept past
            // the operation's end, so a temporary a killed run left where its
            // recovery does not look (the user moved its folder) is still
            // known as fprep's, never taken for a file of the user's.
            if let token = ContentOperations.temporaryToken(ofOperation: operation, payload: payload) {
                let kept = (try meta("recent_tokens") ?? "").split(separator: " ").suffix(31).map(String.init)
                try setMeta("recent_tokens", (kept + [token]).joined(separator: " "))
            }
            try database.prepare("INSERT INTO journal(operation, payload, started_at) VALUES(?1, ?2, ?3)")
                .bind(.text(operation), .blob(payload), .int(Int64(Date().timeIntervalSince1970))).run()
            let statement = try database.prepare("SELECT last_insert_rowid()")
            _ = try statement.step()
            return statement.int(0)
        }
    }

    func updateOperation(_ id: Int64, payload: [UInt8]) throws {
        try database.prepare("UPDATE journal SET payload = ?2 WHERE id = ?1").bind(.int(id), .blob(payload)).run()
    }

    func touchMaterialized(_ paths: [RepoPath], at time: Int64) throws {
        let statement = try database.prepare("UPDATE materialized SET last_used_at = ?2 WHERE path = ?1")
        for path in paths { try statement.bind(.blob(path.bytes), .int(time)).run() }
    }

    func endOperation(_ id: Int64) throws {
        try database.prepare("DELETE FROM journal WHERE id = ?1").bind(.int(id)).run()
    }

    func pendingOperations() throws -> [JournalRecord] {
        let statement = try database.prepare("SELECT id, operation, payload FROM journal ORDER BY id")
        var result: [JournalRecord] = []
        while try statement.step() {
            result.append(JournalRecord(id: statement.int(0), operation: statement.text(1), payload: statement.blob(2)))
        }
        return result
    }

    /// Folds the WAL back into the database file so `.fprep` does not keep
    /// the space a large write took.
    func checkpoint() {
        try? database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }
}

/// The size and date of a blob, from the size manifest or the remote's
/// object headers. `mtime` is when that content reached the remote.
public struct BlobInfo: Sendable, Equatable {
    public var size: Int64
    public var mtime: Int64
}
