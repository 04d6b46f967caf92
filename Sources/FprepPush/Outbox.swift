import FoundationEssentials
import Glibc
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

        package init(seq: Int64, domain: String, reference: String, old: String, new: String, containers: [String], created: Int64) {
            self.seq = seq
            self.domain = domain
            self.reference = reference
            self.old = old
            self.new = new
            self.containers = containers
            self.created = created
        }
    }

    private let database: Database

    /// Where pushes wait when the outbox could not take them at once (see
    /// `spool`): one file each, moved into the outbox by the next writer or
    /// the service.
    public let spoolFolder: String

    /// `busyMilliseconds`: how long to wait for another process that holds
    /// the outbox (the hook waits briefly, then spools).
    public init(path: String, busyMilliseconds: Int32 = 10_000) throws {
        spoolFolder = path + "-spool"
        do {
            database = try Database(path: path, busyMilliseconds: busyMilliseconds)
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
            if try database.userVersion < 2 {
                // The spool file a push came from: taken in once, however
                // often a crash makes it be read again.
                try database.transaction {
                    try database.execute("""
                        ALTER TABLE pushes ADD COLUMN spool TEXT;
                        CREATE UNIQUE INDEX IF NOT EXISTS pushes_spool ON pushes(spool) WHERE spool IS NOT NULL;
                        PRAGMA user_version = 2;
                        """)
                }
            }
        } catch let error as DatabaseError {
            throw FprepError("cannot open the push outbox '\(path)': \(error.message)")
        }
    }

    /// One spooled push file's content.
    private struct Spooled: Codable {
        var domain: String, reference: String, old: String, new: String, containers: [String], created: Int64
    }

    /// Writes `pushes` beside the outbox at `path` without touching it (it
    /// is held by another process, or cannot be written): one file per
    /// push, written whole under a temporary name, synced, then renamed,
    /// named so that they sort in the order they came. Never waits on a lock.
    public static func spool(_ pushes: [(domain: String, reference: String, old: String, new: String, containers: [String])],
                             at time: Int64, path: String) throws {
        let folder = path + "-spool"
        if mkdir(folder, 0o755) != 0 && errno != EEXIST {
            throw FprepError("cannot make the outbox spool '\(folder)': \(String(cString: strerror(errno)))")
        }
        for (n, push) in pushes.enumerated() {
            func padded(_ value: Int64, _ width: Int) -> String {
                let digits = String(value)
                return String(repeating: "0", count: max(width - digits.count, 0)) + digits
            }
            let name = padded(time, 12) + "-" + padded(Int64(getpid()), 8) + "-" + padded(Int64(n), 4) + "-"
                + String(UInt64.random(in: 0...UInt64.max), radix: 36)
            let data = try JSONEncoder().encode(Spooled(domain: push.domain, reference: push.reference, old: push.old, new: push.new,
                                                        containers: push.containers, created: time))
            let temporary = folder + "/.tmp-" + name
            let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw FprepError("cannot spool a push in '\(folder)': \(String(cString: strerror(errno)))") }
            let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            let synced = fsync(fd)
            close(fd)
            guard written == data.count, synced == 0, rename(temporary, folder + "/" + name + ".push") == 0 else {
                let why = String(cString: strerror(errno))
                unlink(temporary)
                throw FprepError("cannot spool a push in '\(folder)': \(why)")
            }
        }
        let dir = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dir >= 0 { _ = fsync(dir); close(dir) }
    }

    /// Moves spooled pushes into the outbox, oldest first, each exactly once
    /// (its file name is kept with it); returns how many came in.
    @discardableResult
    public func drainSpool() throws -> Int {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: spoolFolder)) ?? [])
            .filter { $0.hasSuffix(".push") && !$0.hasPrefix(".") }.sorted()
        guard !names.isEmpty else { return 0 }
        var taken = 0
        try database.transaction {
            let insert = try database.prepare("""
                INSERT OR IGNORE INTO pushes(domain, ref, old, new, containers, created_at, spool) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)
                """)
            for name in names {
                guard let data = FileManager.default.contents(atPath: spoolFolder + "/" + name),
                      let push = try? JSONDecoder().decode(Spooled.self, from: data) else { continue }
                try insert.bind(.text(push.domain), .text(push.reference), .text(push.old), .text(push.new),
                                .text(push.containers.joined(separator: "\n")), .int(push.created), .text(name)).run()
                taken += 1
            }
        }
        // In the outbox now (and kept there once, by name): the files go.
        for name in names { unlink(spoolFolder + "/" + name) }
        return taken
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
