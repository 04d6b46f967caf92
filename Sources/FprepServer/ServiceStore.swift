import FoundationEssentials
import FprepCore
import FprepPush

/// The service's state in the remote (`fprep/service.db`, SQLite, WAL):
/// devices and token hashes, active enumerators, each device's numbered
/// events (a stream resumes from them after a reconnect or a restart), and
/// the enrollment secrets' hashes. The service and the admin commands
/// (`fprep serve enroll`, `devices`, `revoke`) each open it.
/// `synchronous=NORMAL`: a power cut may lose the last events, which a
/// device then sees as a gap in the anchors and answers with a full sync.
final class ServiceStore: ServiceStorage {
    private let database: Database
    /// The last `PRAGMA data_version` read (see `changedElsewhere`).
    private var seenDataVersion: Int64?

    init(path: String) throws {
        do {
            database = try Database(path: path)
            try database.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
            // In one IMMEDIATE transaction: the service and an admin command
            // (`fprep serve enroll`) may open the state at the same moment.
            try database.transaction {
                if try database.userVersion < 1 {
                    try database.execute("""
                        CREATE TABLE devices(id TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, domain TEXT NOT NULL,
                            branch TEXT NOT NULL, replicated INTEGER NOT NULL, channel TEXT NOT NULL, target TEXT NOT NULL,
                            secret TEXT NOT NULL, name TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
                            last_seq INTEGER NOT NULL, acked_seq INTEGER NOT NULL);
                        CREATE TABLE enumerators(device TEXT NOT NULL, container TEXT NOT NULL, expires_at INTEGER NOT NULL,
                            PRIMARY KEY(device, container)) WITHOUT ROWID;
                        CREATE TABLE events(device TEXT NOT NULL, seq INTEGER NOT NULL, payload BLOB NOT NULL,
                            created_at INTEGER NOT NULL, PRIMARY KEY(device, seq)) WITHOUT ROWID;
                        PRAGMA user_version = 1;
                        """)
                }
                if try database.userVersion < 2 {
                    // Enrollment secrets (issue 13.2): their hashes, and which
                    // one each device registered with; when a device was last heard from.
                    try database.execute("""
                        CREATE TABLE enrollments(id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, domain TEXT NOT NULL,
                            created_at INTEGER NOT NULL, expires_at INTEGER, revoked_at INTEGER);
                        ALTER TABLE devices ADD COLUMN enrollment TEXT NOT NULL DEFAULT '';
                        ALTER TABLE devices ADD COLUMN last_seen INTEGER NOT NULL DEFAULT 0;
                        PRAGMA user_version = 2;
                        """)
                }
            }
            _ = try changedElsewhere()
        } catch let error as DatabaseError {
            throw FprepError("cannot open the push service state '\(path)': \(error.message)")
        }
    }

    // MARK: devices

    func devices() throws -> [Device] {
        try devices(where: "")
    }

    func device(tokenHash: String) throws -> Device? {
        try devices(where: "WHERE token_hash = ?1", .text(tokenHash)).first
    }

    private func devices(where clause: String, _ values: SQLValue...) throws -> [Device] {
        let statement = try database.prepare("""
            SELECT id, token_hash, domain, branch, replicated, channel, target, secret, name, created_at, expires_at,
                last_seq, acked_seq, enrollment, last_seen FROM devices \(clause) ORDER BY created_at, id
            """).bind(values)
        var result: [Device] = []
        while try statement.step() {
            let channel: DeliveryChannel
            switch statement.text(5) {
            case "webhook":
                guard let url = ServiceURL(statement.text(6)) else { continue }
                channel = .webhook(url: url, secret: statement.text(7))
            case "apns": channel = .apns(deviceToken: statement.text(6))
            default: channel = .stream
            }
            result.append(Device(id: statement.text(0), tokenHash: statement.text(1), domain: statement.text(2),
                                 branch: statement.text(3), replicated: statement.int(4) != 0, channel: channel,
                                 name: statement.text(8), created: statement.int(9), expires: statement.int(10),
                                 lastSeq: statement.int(11), ackedSeq: statement.int(12), enrollment: statement.text(13),
                                 lastSeen: statement.int(14)))
        }
        return result
    }

    func insert(_ device: Device) throws {
        let (target, secret): (String, String) = switch device.channel {
        case .stream: ("", "")
        case .webhook(let url, let secret): (url.description, secret)
        case .apns(let token): (token, "")
        }
        try database.prepare("""
            INSERT INTO devices(id, token_hash, domain, branch, replicated, channel, target, secret, name, created_at,
                expires_at, last_seq, acked_seq, enrollment, last_seen)
                VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
            """).bind(.text(device.id), .text(device.tokenHash), .text(device.domain), .text(device.branch),
                      .int(device.replicated ? 1 : 0), .text(device.channel.kind), .text(target), .text(secret),
                      .text(device.name), .int(device.created), .int(device.expires), .int(device.lastSeq),
                      .int(device.ackedSeq), .text(device.enrollment), .int(device.lastSeen)).run()
    }

    /// Forgets a device; false when there was none by that id.
    @discardableResult
    func delete(device id: String) throws -> Bool {
        try database.transaction {
            let known = try database.prepare("SELECT 1 FROM devices WHERE id = ?1").bind(.text(id)).step()
            try deleteRows(of: id)
            return known
        }
    }

    /// The ids of the devices recorded now (an admin command may have
    /// revoked some since the service read them).
    func deviceIDs() throws -> Set<String> {
        let statement = try database.prepare("SELECT id FROM devices")
        var ids = Set<String>()
        while try statement.step() { ids.insert(statement.text(0)) }
        return ids
    }

    /// Whether another connection (an admin command) committed a change
    /// since the last call: SQLite's `PRAGMA data_version`, which only
    /// other connections' commits move.
    func changedElsewhere() throws -> Bool {
        let statement = try database.prepare("PRAGMA data_version")
        guard try statement.step() else { return false }
        let version = statement.int(0)
        defer { seenDataVersion = version }
        return seenDataVersion != nil && seenDataVersion != version
    }

    /// Records when devices were last heard from.
    func saveLastSeen(_ times: [String: Int64]) throws {
        guard !times.isEmpty else { return }
        try database.transaction {
            let update = try database.prepare("UPDATE devices SET last_seen = ?2 WHERE id = ?1 AND last_seen < ?2")
            for (device, time) in times { try update.bind(.text(device), .int(time)).run() }
        }
    }

    // MARK: enrollments

    func insert(_ enrollment: Enrollment) throws {
        try database.prepare("""
            INSERT INTO enrollments(id, secret_hash, domain, created_at, expires_at, revoked_at) VALUES(?1, ?2, ?3, ?4, ?5, NULL)
            """).bind(.text(enrollment.id), .text(enrollment.secretHash), .text(enrollment.domain), .int(enrollment.created),
                      enrollment.expires.map { .int($0) } ?? .null).run()
    }

    /// The enrollment with this id, or nil.
    func enrollment(id: String) throws -> Enrollment? {
        try enrollments(where: "WHERE id = ?1", .text(id)).first
    }

    /// Every enrollment, oldest first.
    func enrollments() throws -> [Enrollment] {
        try enrollments(where: "")
    }

    private func enrollments(where clause: String, _ values: SQLValue...) throws -> [Enrollment] {
        let statement = try database.prepare("""
            SELECT id, secret_hash, domain, created_at, expires_at, revoked_at FROM enrollments \(clause) ORDER BY created_at, id
            """).bind(values)
        var result: [Enrollment] = []
        while try statement.step() {
            result.append(Enrollment(id: statement.text(0), domain: statement.text(2), secretHash: statement.text(1),
                                     created: statement.int(3), expires: statement.isNull(4) ? nil : statement.int(4),
                                     revoked: statement.isNull(5) ? nil : statement.int(5)))
        }
        return result
    }

    /// Marks an enrollment revoked; false when there is none by that id.
    func revoke(enrollment id: String, at time: Int64) throws -> Bool {
        try database.transaction {
            guard try enrollment(id: id) != nil else { return false }
            try database.prepare("UPDATE enrollments SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL")
                .bind(.text(id), .int(time)).run()
            return true
        }
    }

    private func deleteRows(of device: String) throws {
        for table in ["devices WHERE id", "enumerators WHERE device", "events WHERE device"] {
            try database.prepare("DELETE FROM \(table) = ?1").bind(.text(device)).run()
        }
    }

    // MARK: enumerators

    func enumerators() throws -> [(device: String, container: String, expires: Int64)] {
        let statement = try database.prepare("SELECT device, container, expires_at FROM enumerators")
        var result: [(String, String, Int64)] = []
        while try statement.step() { result.append((statement.text(0), statement.text(1), statement.int(2))) }
        return result
    }

    func setEnumerator(device: String, container: String, expires: Int64?) throws {
        if let expires {
            try database.prepare("INSERT OR REPLACE INTO enumerators(device, container, expires_at) VALUES(?1, ?2, ?3)")
                .bind(.text(device), .text(container), .int(expires)).run()
        } else {
            try database.prepare("DELETE FROM enumerators WHERE device = ?1 AND container = ?2")
                .bind(.text(device), .text(container)).run()
        }
    }

    // MARK: events

    /// Stores new events and the devices' last sequence numbers in one transaction.
    func append(_ events: [(device: String, event: DeviceEvent)], at time: Int64) throws {
        guard !events.isEmpty else { return }
        try database.transaction {
            let insert = try database.prepare("INSERT OR REPLACE INTO events(device, seq, payload, created_at) VALUES(?1, ?2, ?3, ?4)")
            var last: [String: Int64] = [:]
            for (device, event) in events {
                try insert.bind(.text(device), .int(event.seq), .blob(event.payload), .int(time)).run()
                last[device] = max(last[device] ?? 0, event.seq)
            }
            let update = try database.prepare("UPDATE devices SET last_seq = ?2 WHERE id = ?1 AND last_seq < ?2")
            for (device, seq) in last { try update.bind(.text(device), .int(seq)).run() }
        }
    }

    /// A device's events after `seq`, oldest first.
    func events(device: String, after seq: Int64, limit: Int) throws -> [DeviceEvent] {
        let statement = try database.prepare("SELECT seq, payload FROM events WHERE device = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3")
            .bind(.text(device), .int(seq), .int(Int64(limit)))
        var result: [DeviceEvent] = []
        while try statement.step() { result.append(DeviceEvent(seq: statement.int(0), payload: statement.blob(1))) }
        return result
    }

    /// Records what webhook and APNs devices have received.
    func saveAcknowledgements(_ acks: [String: Int64]) throws {
        guard !acks.isEmpty else { return }
        try database.transaction {
            let update = try database.prepare("UPDATE devices SET acked_seq = ?2 WHERE id = ?1 AND acked_seq < ?2")
            for (device, seq) in acks { try update.bind(.text(device), .int(seq)).run() }
        }
    }

    /// Forgets old events (a device that was away longer resyncs in full),
    /// expired enumerators, and devices whose token expired long ago.
    func prune(eventsBefore: Int64, devicesExpiredBefore: Int64, now: Int64) throws {
        try database.transaction {
            try database.prepare("DELETE FROM events WHERE created_at < ?1").bind(.int(eventsBefore)).run()
            try database.prepare("DELETE FROM enumerators WHERE expires_at < ?1").bind(.int(now)).run()
            let gone = try database.prepare("SELECT id FROM devices WHERE expires_at < ?1").bind(.int(devicesExpiredBefore))
            var ids: [String] = []
            while try gone.step() { ids.append(gone.text(0)) }
            for id in ids { try deleteRows(of: id) }
        }
    }
}
