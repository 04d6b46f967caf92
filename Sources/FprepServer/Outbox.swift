import FoundationEssentials
import FprepCore

/// The durable outbox in the remote (`fprep/outbox.db`, SQLite, WAL,
/// `synchronous=FULL`): the hook appends one entry per pushed branch, the
/// service reads what it has not delivered yet and marks it. Whatever
/// happens to the service, a push's signals wait here until it is back.
public final class Outbox {
    /// One push of one branch.
    public struct Entry: Sendable, Equatable {
        public let seq: Int64
        public let domain: String
        public let reference: String
        public let old: String
        public let new: String
        public let containers: [String]
        public let created: Int64
    }

    private let database: Database

    public init(path: String) throws {
        do {
            database = try Database(path: path)
            try database.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
            if try database.userVersion < 1 {
                try database.transaction {
                    try database.execute("""
                        CREATE TABLE IF NOT EXISTS pushes(seq INTEGER PRIMARY KEY AUTOINCREMENT, domain TEXT NOT NULL,
                            ref TEXT NOT NULL, old TEXT NOT NULL, new TEXT NOT NULL, containers TEXT NOT NULL,
                            created_at INTEGER NOT NULL, delivered_at INTEGER);
                        CREATE INDEX IF NOT EXISTS pushes_pending ON pushes(seq) WHERE delivered_at IS NULL;
                        PRAGMA user_version = 1;
                        """)
                }
            }
        } catch let error as DatabaseError {
            throw FprepError("cannot open the push outbox '\(path)': \(error.message)")
        }
    }

    /// Appends pushes in one transaction; returns their sequence numbers.
    @discardableResult
    public func append(_ pushes: [(domain: String, reference: String, old: String, new: String, containers: [String])],
                       at time: Int64) throws -> [Int64] {
        try database.transaction {
            let insert = try database.prepare("INSERT INTO pushes(domain, ref, old, new, containers, created_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6)")
            let last = try database.prepare("SELECT last_insert_rowid()")
            var seqs: [Int64] = []
            for push in pushes {
                // Identifiers may hold any character but a line break is
                // never in a git path, so lines separate them.
                try insert.bind(.text(push.domain), .text(push.reference), .text(push.old), .text(push.new),
                                .text(push.containers.joined(separator: "\n")), .int(time)).run()
                try last.bind()
                _ = try last.step()
                seqs.append(last.int(0))
            }
            return seqs
        }
    }

    /// Undelivered pushes, oldest first.
    public func pending(limit: Int = 1000) throws -> [Entry] {
        let statement = try database.prepare("""
            SELECT seq, domain, ref, old, new, containers, created_at FROM pushes
            WHERE delivered_at IS NULL ORDER BY seq LIMIT ?1
            """).bind(.int(Int64(limit)))
        var result: [Entry] = []
        while try statement.step() {
            let containers = statement.text(5)
            result.append(Entry(seq: statement.int(0), domain: statement.text(1), reference: statement.text(2),
                                old: statement.text(3), new: statement.text(4),
                                containers: containers.isEmpty ? [] : containers.split(separator: "\n").map(String.init),
                                created: statement.int(6)))
        }
        return result
    }

    /// Marks pushes as handed to the devices' queues.
    public func markDelivered(_ seqs: [Int64], at time: Int64) throws {
        try database.transaction {
            let update = try database.prepare("UPDATE pushes SET delivered_at = ?2 WHERE seq = ?1")
            for seq in seqs { try update.bind(.int(seq), .int(time)).run() }
        }
    }

    /// Forgets delivered pushes older than `time`.
    public func prune(deliveredBefore time: Int64) throws {
        try database.prepare("DELETE FROM pushes WHERE delivered_at IS NOT NULL AND delivered_at < ?1").bind(.int(time)).run()
    }

    /// How many pushes wait.
    public func pendingCount() throws -> Int {
        let statement = try database.prepare("SELECT count(*) FROM pushes WHERE delivered_at IS NULL")
        return try statement.step() ? Int(statement.int(0)) : 0
    }
}
