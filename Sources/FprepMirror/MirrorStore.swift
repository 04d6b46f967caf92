import FoundationEssentials
import FprepCore

/// The mirror's own state beside the service's (`fprep/mirror.db`, SQLite,
/// WAL): the webhook deliveries taken (a redelivery is answered and dropped)
/// and, per branch, the tip whose push signals and sizes are done (a pass
/// that dies midway does that branch again). Shared by the request handler
/// and the worker thread, behind one lock.
final class MirrorStore: @unchecked Sendable {
    private let database: Database
    private let lock = Lock()
    /// Deliveries are remembered this long (hosts redeliver within hours).
    static let deliveryRetention: Int64 = 30 * 24 * 3600

    init(path: String) throws {
        do {
            database = try Database(path: path)
            try database.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
            if try database.userVersion < 1 {
                try database.transaction {
                    try database.execute("""
                        CREATE TABLE deliveries(id TEXT PRIMARY KEY, host TEXT NOT NULL, received_at INTEGER NOT NULL);
                        CREATE INDEX deliveries_age ON deliveries(received_at);
                        CREATE TABLE tips(reference TEXT PRIMARY KEY, tip TEXT NOT NULL) WITHOUT ROWID;
                        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
                        PRAGMA user_version = 1;
                        """)
                }
            }
        } catch let error as DatabaseError {
            throw FprepError("cannot open the mirror's state '\(path)': \(error.message)")
        }
    }

    /// Records a delivery id; false when it was recorded before (a redelivery).
    func firstDelivery(_ id: String, host: WebhookHost, at time: Int64) throws -> Bool {
        try locked {
            try database.prepare("DELETE FROM deliveries WHERE received_at < ?1")
                .bind(.int(time - Self.deliveryRetention)).run()
            try database.prepare("INSERT OR IGNORE INTO deliveries(id, host, received_at) VALUES(?1, ?2, ?3)")
                .bind(.text(host.rawValue + ":" + id), .text(host.rawValue), .int(time)).run()
            return database.changes > 0
        }
    }

    /// The branch tips done, by full ref name; nil before the first pass.
    func doneTips() throws -> [String: String]? {
        try locked {
            let initialized = try database.prepare("SELECT value FROM meta WHERE key = 'initialized'")
            guard try initialized.step() else { return nil }
            let statement = try database.prepare("SELECT reference, tip FROM tips")
            var result: [String: String] = [:]
            while try statement.step() { result[statement.text(0)] = statement.text(1) }
            return result
        }
    }

    /// Replaces the done tips with `tips` (branches gone from the host go).
    func setDoneTips(_ tips: [String: String]) throws {
        try locked {
            try database.transaction {
                try database.execute("DELETE FROM tips")
                let insert = try database.prepare("INSERT INTO tips(reference, tip) VALUES(?1, ?2)")
                for (reference, tip) in tips { try insert.bind(.text(reference), .text(tip)).run() }
                try database.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('initialized', '1')")
            }
        }
    }

    private func locked<R>(_ body: () throws -> R) throws -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }
}
