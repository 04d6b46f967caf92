import FoundationEssentials
import FprepCore
import FprepPush
import FprepServer
import Glibc
import NIOCore
import NIOPosix
import PostgresNIO

/// The push service's state in PostgreSQL (`fprep serve --database
/// postgres://…`), shared by every instance that names the same database.
///
/// How several instances deliver each push once (see `SharedServiceStorage`):
/// - each instance copies the remote's outbox into `fprep_pushes`, unique by
///   (remote, outbox sequence number), so a copy made twice is kept once;
/// - `dispatch` runs in one transaction under an advisory lock (dispatches
///   of all instances take turns): it claims undispatched pushes with
///   `FOR UPDATE SKIP LOCKED`, numbers each device's events by raising its
///   `last_seq`, stores them with the batch number, marks the pushes with
///   it, and `NOTIFY`s `fprep` with `events BATCH`. Committed or not at all:
///   an instance killed mid-dispatch leaves the pushes for the next one;
/// - a webhook or APNs device's `sender` is the instance that sends its
///   events: first the one it registered at. Dispatch keeps a live sender
///   and names itself otherwise; each
///   instance renews its row in `fprep_instances` (`heartbeat`) and takes
///   over the devices whose sender's lease ran out and still have events
///   they did not acknowledge. Acknowledgements are saved every few seconds,
///   so a takeover after a kill may send again what the dead instance sent
///   last: delivery is at least once then, exactly once otherwise;
/// - every instance `LISTEN`s on `fprep` on a connection of its own, and
///   reads a batch when it is announced: its event streams get it at once,
///   whichever instance dispatched it.
///
/// Synchronous: each call waits for its query on the store's own event
/// loop thread, never on the concurrency pool's. One caller at a time (the
/// service's actor, or an admin command).
package final class PostgresServiceStore: SharedServiceStorage, @unchecked Sendable {
    package let instance: String
    package let notifications: AsyncStream<ServiceNotification>
    private let continuation: AsyncStream<ServiceNotification>.Continuation
    private let group: MultiThreadedEventLoopGroup
    private let settings: PostgresConnection.Configuration
    private let address: String
    private var connection: PostgresConnection
    private let listening = Locked<PostgresConnection?>(nil)
    private let closed = Locked(false)
    private let leaseRenewal = Locked<RepeatedTask?>(nil)
    private var logger: Logger

    /// Connects to the database `url` names (`postgres://USER:PASSWORD@HOST:PORT/DATABASE`),
    /// makes the tables when missing, and listens for the other instances.
    /// `listen`: false for an admin command, which only reads and writes.
    package init(url: String, listen: Bool = true) throws {
        let parsed = try PostgresURL(url)
        address = parsed.address
        settings = parsed.configuration
        var logger = Logger(label: "fprep.postgres")
        logger.logLevel = .critical
        self.logger = logger
        instance = "ins-" + Token.random(bytes: 8)
        (notifications, continuation) = AsyncStream.makeStream(of: ServiceNotification.self, bufferingPolicy: .unbounded)
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            connection = try Self.connect(settings, on: group, logger: logger, address: address)
        } catch {
            try? group.syncShutdownGracefully()
            throw error
        }
        do {
            try migrate()
            if listen { try startListening() }
        } catch {
            close()
            throw error
        }
    }

    deinit {
        if !closed.get() { close() }
    }

    package func close() {
        let wasClosed = closed.update { value in
            defer { value = true }
            return value
        }
        guard !wasClosed else { return }
        leaseRenewal.get()?.cancel()
        continuation.finish()
        // Gone at once rather than when the lease runs out: another instance takes its devices now.
        if !connection.isClosed {
            _ = try? connection.query("DELETE FROM fprep_instances WHERE id = \(instance)", logger: logger).wait()
        }
        try? connection.close().wait()
        if let listener = listening.get() { try? listener.close().wait() }
        try? group.syncShutdownGracefully()
    }

    // MARK: connections

    private static func connect(_ settings: PostgresConnection.Configuration, on group: MultiThreadedEventLoopGroup,
                                logger: Logger, address: String) throws -> PostgresConnection {
        do {
            return try PostgresConnection.connect(on: group.next(), configuration: settings, id: 1, logger: logger).wait()
        } catch {
            throw FprepError("cannot connect to the database at \(address): \(Self.describe(error))")
        }
    }

    /// One line for a PostgreSQL or connection error: the server's message when it sent one.
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return message }
            if let underlying = error.underlying { return describe(underlying) }
            switch error.code {
            case .serverClosedConnection, .clientClosedConnection: return "the connection closed"
            case .authMechanismRequiresPassword: return "the server asks for a password (put it in the URL, postgres://USER:PASSWORD@HOST/DATABASE, or in PGPASSWORD)"
            default: return "\(error.code)"
            }
        }
        if let error = error as? NIOConnectionError, let first = error.connectionErrors.first { return describe(first.error) }
        if let error = error as? IOError { return String(cString: strerror(error.errnoCode)).lowercased() }
        let text = "\(error)"
        return text.contains("\n") ? String(text.prefix { $0 != "\n" }) : text
    }

    /// The connection, opened again when the server closed it.
    private func live() throws -> PostgresConnection {
        guard !closed.get() else { throw FprepError("the connection to the database at \(address) is closed") }
        if connection.isClosed { connection = try Self.connect(settings, on: group, logger: logger, address: address) }
        return connection
    }

    @discardableResult
    private func run(_ query: PostgresQuery) throws -> [PostgresRow] {
        do {
            return try live().query(query, logger: logger).wait().rows
        } catch let error as FprepError {
            throw error
        } catch {
            throw FprepError("the database at \(address) refused a query: \(Self.describe(error))")
        }
    }

    /// Runs `body` in a transaction; rolled back when it throws.
    private func transaction<T>(_ body: () throws -> T) throws -> T {
        try run("BEGIN")
        do {
            let result = try body()
            try run("COMMIT")
            return result
        } catch {
            _ = try? run("ROLLBACK")
            throw error
        }
    }

    /// A second connection that only listens; reconnects while the store is open.
    private func startListening() throws {
        let listener = try Self.connect(settings, on: group, logger: logger, address: address)
        let continuation = continuation
        listener.addListener(channel: "fprep") { _, message in
            let words = message.payload.split(separator: " ", maxSplits: 1).map(String.init)
            switch (words.first, words.count == 2 ? words[1] : nil) {
            case ("events", let batch?): if let batch = Int64(batch) { continuation.yield(.events(batch: batch)) }
            case ("revoked", let device?): continuation.yield(.revoked(device))
            default: break
            }
        }
        do {
            _ = try listener.query("LISTEN fprep", logger: logger).wait()
        } catch {
            try? listener.close().wait()
            throw FprepError("cannot listen for the other instances at \(address): \(Self.describe(error))")
        }
        listening.set(listener)
        listener.closeFuture.whenComplete { [weak self] _ in self?.listenAgain() }
    }

    /// See `SharedServiceStorage.renewLease`. On the listening connection,
    /// which no query of the actor's waits behind, from the store's event
    /// loop, never blocking it: a renewal that fails (the server away) is
    /// tried again at the next tick. It only extends a lease the actor
    /// made (`heartbeat`), and a closed store's lease is gone at once.
    package func renewLease(every interval: Duration, for lease: Int64) {
        let (seconds, attoseconds) = interval.components
        let tick = TimeAmount.nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
        let loop = group.next()
        let task = loop.scheduleRepeatedAsyncTask(initialDelay: tick, delay: tick) { [weak self] _ in
            guard let self, !self.closed.get(), let listener = self.listening.get(), !listener.isClosed else {
                return loop.makeSucceededVoidFuture()
            }
            let until = Int64(Date().timeIntervalSince1970) + lease
            return listener.query("UPDATE fprep_instances SET alive_until = GREATEST(alive_until, \(until)) WHERE id = \(self.instance)",
                                  logger: self.logger)
                .map { _ in }
                .recover { _ in }
        }
        leaseRenewal.set(task)
    }

    /// The server went away: listen again once it is back, trying every second.
    private func listenAgain() {
        guard !closed.get() else { return }
        group.next().scheduleTask(in: .seconds(1)) { [weak self] in
            guard let self, !self.closed.get() else { return }
            do { try self.startListening() } catch { self.listenAgain() }
        }
    }

    // MARK: schema

    private func migrate() throws {
        try transaction {
            // Instances starting together make the tables once.
            try run("SELECT pg_advisory_xact_lock(7411001)")
            let exists = try run("SELECT to_regclass('fprep_schema')::text").first?.decode(String?.self) ?? nil
            if exists == nil {
                for statement in [
                    "CREATE TABLE fprep_schema(version INTEGER NOT NULL)",
                    "INSERT INTO fprep_schema(version) VALUES(1)",
                    """
                    CREATE TABLE fprep_devices(id TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, domain TEXT NOT NULL,
                        branch TEXT NOT NULL, replicated BOOLEAN NOT NULL, channel TEXT NOT NULL, target TEXT NOT NULL,
                        secret TEXT NOT NULL, name TEXT NOT NULL, created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL,
                        last_seq BIGINT NOT NULL, acked_seq BIGINT NOT NULL, enrollment TEXT NOT NULL, last_seen BIGINT NOT NULL,
                        sender TEXT)
                    """,
                    """
                    CREATE TABLE fprep_enumerators(device TEXT NOT NULL, container TEXT NOT NULL, expires_at BIGINT NOT NULL,
                        PRIMARY KEY(device, container))
                    """,
                    """
                    CREATE TABLE fprep_events(device TEXT NOT NULL, seq BIGINT NOT NULL, payload TEXT NOT NULL,
                        created_at BIGINT NOT NULL, batch BIGINT NOT NULL, PRIMARY KEY(device, seq))
                    """,
                    "CREATE INDEX fprep_events_batch ON fprep_events(batch)",
                    "CREATE INDEX fprep_events_created ON fprep_events(created_at)",
                    """
                    CREATE TABLE fprep_enrollments(id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, domain TEXT NOT NULL,
                        created_at BIGINT NOT NULL, expires_at BIGINT, revoked_at BIGINT)
                    """,
                    """
                    CREATE TABLE fprep_pushes(id BIGSERIAL PRIMARY KEY, source TEXT NOT NULL, source_seq BIGINT NOT NULL,
                        domain TEXT NOT NULL, ref TEXT NOT NULL, old TEXT NOT NULL, new TEXT NOT NULL, containers TEXT NOT NULL,
                        created_at BIGINT NOT NULL, batch BIGINT, UNIQUE(source, source_seq))
                    """,
                    "CREATE INDEX fprep_pushes_pending ON fprep_pushes(id) WHERE batch IS NULL",
                    "CREATE TABLE fprep_instances(id TEXT PRIMARY KEY, alive_until BIGINT NOT NULL)",
                    "CREATE SEQUENCE fprep_batches",
                ] {
                    try run(PostgresQuery(unsafeSQL: statement))
                }
            }
            let version = try run("SELECT version FROM fprep_schema").first?.decode(Int32.self) ?? 1
            if version < 2 {
                // Version 2: a push is dispatched to devices on an event
                // stream first (`stream_batch`), then to webhook and APNs
                // devices (`batch`). Pushes dispatched before had both.
                for statement in [
                    "ALTER TABLE fprep_pushes ADD COLUMN stream_batch BIGINT",
                    "UPDATE fprep_pushes SET stream_batch = batch WHERE batch IS NOT NULL",
                    "CREATE INDEX fprep_pushes_unstreamed ON fprep_pushes(id) WHERE stream_batch IS NULL",
                    "UPDATE fprep_schema SET version = 2",
                ] {
                    try run(PostgresQuery(unsafeSQL: statement))
                }
            }
        }
    }

    // MARK: devices

    private static let deviceColumns = """
        id, token_hash, domain, branch, replicated, channel, target, secret, name, created_at, expires_at, last_seq,
        acked_seq, enrollment, last_seen
        """

    private static func device(_ row: PostgresRow) throws -> Device? {
        let (id, tokenHash, domain, branch, replicated, kind, target, secret, name, created, expires, lastSeq, ackedSeq,
             enrollment, lastSeen) = try row.decode((String, String, String, String, Bool, String, String, String, String, Int64,
                                                     Int64, Int64, Int64, String, Int64).self)
        let channel: DeliveryChannel
        switch kind {
        case "webhook":
            guard let url = ServiceURL(target) else { return nil }
            channel = .webhook(url: url, secret: secret)
        case "apns": channel = .apns(deviceToken: target)
        default: channel = .stream
        }
        return Device(id: id, tokenHash: tokenHash, domain: domain, branch: branch, replicated: replicated, channel: channel,
                      name: name, created: created, expires: expires, lastSeq: lastSeq, ackedSeq: ackedSeq,
                      enrollment: enrollment, lastSeen: lastSeen)
    }

    package func devices() throws -> [Device] {
        try run(PostgresQuery(unsafeSQL: "SELECT \(Self.deviceColumns) FROM fprep_devices ORDER BY created_at, id"))
            .compactMap(Self.device)
    }

    package func device(tokenHash: String) throws -> Device? {
        var binds = PostgresBindings()
        binds.append(tokenHash)
        return try run(PostgresQuery(unsafeSQL: "SELECT \(Self.deviceColumns) FROM fprep_devices WHERE token_hash = $1", binds: binds))
            .compactMap(Self.device).first
    }

    /// The instance a device registers at sends to it (while it lives), so
    /// that instances share the sending as they share the registrations.
    package func insert(_ device: Device) throws {
        let sender: String? = device.channel == .stream ? nil : instance
        let (target, secret): (String, String) = switch device.channel {
        case .stream: ("", "")
        case .webhook(let url, let secret): (url.description, secret)
        case .apns(let token): (token, "")
        }
        try run("""
            INSERT INTO fprep_devices(id, token_hash, domain, branch, replicated, channel, target, secret, name, created_at,
                expires_at, last_seq, acked_seq, enrollment, last_seen, sender)
            VALUES(\(device.id), \(device.tokenHash), \(device.domain), \(device.branch), \(device.replicated),
                \(device.channel.kind), \(target), \(secret), \(device.name), \(device.created), \(device.expires),
                \(device.lastSeq), \(device.ackedSeq), \(device.enrollment), \(device.lastSeen), \(sender))
            """)
    }

    package func delete(device id: String) throws -> Bool {
        try transaction {
            let known = try !run("DELETE FROM fprep_devices WHERE id = \(id) RETURNING id").isEmpty
            try run("DELETE FROM fprep_enumerators WHERE device = \(id)")
            try run("DELETE FROM fprep_events WHERE device = \(id)")
            // Every instance ends its streams and forgets its token (sent at commit).
            if known { try run("SELECT pg_notify('fprep', \("revoked " + id))") }
            return known
        }
    }

    /// Revocations come as notifications, not by polling.
    package func changedElsewhere() throws -> Bool { false }

    package func saveLastSeen(_ times: [String: Int64]) throws {
        guard !times.isEmpty else { return }
        let ids = Array(times.keys)
        try run("""
            UPDATE fprep_devices d SET last_seen = v.seen FROM unnest(\(ids)::text[], \(ids.map { times[$0] ?? 0 })::bigint[]) AS v(id, seen)
            WHERE d.id = v.id AND d.last_seen < v.seen
            """)
    }

    // MARK: enrollments

    package func insert(_ enrollment: Enrollment) throws {
        try run("""
            INSERT INTO fprep_enrollments(id, secret_hash, domain, created_at, expires_at, revoked_at)
            VALUES(\(enrollment.id), \(enrollment.secretHash), \(enrollment.domain), \(enrollment.created), \(enrollment.expires), NULL)
            """)
    }

    private func enrollments(_ rows: [PostgresRow]) throws -> [Enrollment] {
        try rows.map { row in
            let (id, hash, domain, created, expires, revoked) = try row.decode((String, String, String, Int64, Int64?, Int64?).self)
            return Enrollment(id: id, domain: domain, secretHash: hash, created: created, expires: expires, revoked: revoked)
        }
    }

    package func enrollment(id: String) throws -> Enrollment? {
        try enrollments(run("""
            SELECT id, secret_hash, domain, created_at, expires_at, revoked_at FROM fprep_enrollments WHERE id = \(id)
            """)).first
    }

    package func enrollments() throws -> [Enrollment] {
        try enrollments(run("""
            SELECT id, secret_hash, domain, created_at, expires_at, revoked_at FROM fprep_enrollments ORDER BY created_at, id
            """))
    }

    package func revoke(enrollment id: String, at time: Int64) throws -> Bool {
        try transaction {
            guard try enrollment(id: id) != nil else { return false }
            try run("UPDATE fprep_enrollments SET revoked_at = \(time) WHERE id = \(id) AND revoked_at IS NULL")
            return true
        }
    }

    // MARK: enumerators and events

    package func enumerators() throws -> [(device: String, container: String, expires: Int64)] {
        try run("SELECT device, container, expires_at FROM fprep_enumerators").map {
            let (device, container, expires) = try $0.decode((String, String, Int64).self)
            return (device, container, expires)
        }
    }

    package func setEnumerator(device: String, container: String, expires: Int64?) throws {
        if let expires {
            try run("""
                INSERT INTO fprep_enumerators(device, container, expires_at) VALUES(\(device), \(container), \(expires))
                ON CONFLICT (device, container) DO UPDATE SET expires_at = EXCLUDED.expires_at
                """)
        } else {
            try run("DELETE FROM fprep_enumerators WHERE device = \(device) AND container = \(container)")
        }
    }

    /// Events are stored by `dispatch` here; this is for completeness (batch 0).
    package func append(_ events: [(device: String, event: DeviceEvent)], at time: Int64) throws {
        guard !events.isEmpty else { return }
        try transaction {
            try store(events, at: time, batch: 0)
        }
    }

    private func store(_ events: [(device: String, event: DeviceEvent)], at time: Int64, batch: Int64) throws {
        try run("""
            INSERT INTO fprep_events(device, seq, payload, created_at, batch)
            SELECT v.device, v.seq, v.payload, \(time), \(batch)
            FROM unnest(\(events.map(\.device))::text[], \(events.map(\.event.seq))::bigint[],
                        \(events.map { String(decoding: $0.event.payload, as: UTF8.self) })::text[]) AS v(device, seq, payload)
            ON CONFLICT (device, seq) DO UPDATE SET payload = EXCLUDED.payload, batch = EXCLUDED.batch
            """)
    }

    package func events(device: String, after seq: Int64, limit: Int) throws -> [DeviceEvent] {
        try run("""
            SELECT seq, payload FROM fprep_events WHERE device = \(device) AND seq > \(seq) ORDER BY seq LIMIT \(Int64(limit))
            """).map {
            let (seq, payload) = try $0.decode((Int64, String).self)
            return DeviceEvent(seq: seq, payload: Array(payload.utf8))
        }
    }

    package func saveAcknowledgements(_ acks: [String: Int64]) throws {
        guard !acks.isEmpty else { return }
        let ids = Array(acks.keys)
        try run("""
            UPDATE fprep_devices d SET acked_seq = v.seq FROM unnest(\(ids)::text[], \(ids.map { acks[$0] ?? 0 })::bigint[]) AS v(id, seq)
            WHERE d.id = v.id AND d.acked_seq < v.seq
            """)
    }

    package func prune(eventsBefore: Int64, devicesExpiredBefore: Int64, now: Int64) throws {
        try transaction {
            try run("DELETE FROM fprep_events WHERE created_at < \(eventsBefore)")
            try run("DELETE FROM fprep_enumerators WHERE expires_at < \(now)")
            try run("DELETE FROM fprep_pushes WHERE batch IS NOT NULL AND created_at < \(eventsBefore)")
            let gone = try run("DELETE FROM fprep_devices WHERE expires_at < \(devicesExpiredBefore) RETURNING id").map { try $0.decode(String.self) }
            if !gone.isEmpty {
                try run("DELETE FROM fprep_enumerators WHERE device = ANY(\(gone)::text[])")
                try run("DELETE FROM fprep_events WHERE device = ANY(\(gone)::text[])")
            }
        }
    }

    // MARK: several instances

    package func ingest(_ entries: [Outbox.Entry], source: String) throws {
        guard !entries.isEmpty else { return }
        try run("""
            INSERT INTO fprep_pushes(source, source_seq, domain, ref, old, new, containers, created_at)
            SELECT \(source), v.seq, v.domain, v.ref, v.old, v.new, v.containers, v.created
            FROM unnest(\(entries.map(\.seq))::bigint[], \(entries.map(\.domain))::text[], \(entries.map(\.reference))::text[],
                        \(entries.map(\.old))::text[], \(entries.map(\.new))::text[],
                        \(entries.map { $0.containers.joined(separator: "\n") })::text[], \(entries.map(\.created))::bigint[])
                AS v(seq, domain, ref, old, new, containers, created)
            ON CONFLICT (source, source_seq) DO NOTHING
            """)
    }

    package func dispatch(limit: Int, now: Int64, streams: Bool,
                          plan: (_ pushes: [Outbox.Entry], _ devices: [Device], _ active: [String: [String]]) -> [(device: String, payloads: [[UInt8]])])
        throws -> Dispatched {
        try transaction {
            // Dispatches take turns: each device's sequence numbers grow in
            // push order, and two instances never wait on each other's rows.
            try run("SELECT pg_advisory_xact_lock(7411002)")
            // A push reaches stream devices first, then the others: the
            // second step only takes pushes the first one finished.
            let pending = streams ? "stream_batch IS NULL" : "batch IS NULL AND stream_batch IS NOT NULL"
            let claimed = try run(PostgresQuery(unsafeSQL: """
                SELECT id, source_seq, domain, ref, old, new, containers, created_at FROM fprep_pushes
                WHERE \(pending) ORDER BY id LIMIT \(limit) FOR UPDATE SKIP LOCKED
                """))
            guard !claimed.isEmpty else { return Dispatched(pushes: [], events: []) }
            var ids: [Int64] = []
            let pushes = try claimed.map { row in
                let (id, seq, domain, ref, old, new, containers, created) = try row.decode(
                    (Int64, Int64, String, String, String, String, String, Int64).self)
                ids.append(id)
                return Outbox.Entry(seq: seq, domain: domain, reference: ref, old: old, new: new,
                                    containers: containers.isEmpty ? [] : containers.split(separator: "\n").map(String.init),
                                    created: created)
            }
            let batch = try run("SELECT nextval('fprep_batches')").first?.decode(Int64.self) ?? 0
            var active: [String: [String]] = [:]
            for row in try run("SELECT device, container FROM fprep_enumerators WHERE expires_at > \(now) ORDER BY device, container") {
                let (device, container) = try row.decode((String, String).self)
                active[device, default: []].append(container)
            }
            // Only the step's devices are read: 10^4 webhook devices are
            // not read to find the one on a stream.
            let step = try run(PostgresQuery(unsafeSQL: """
                SELECT \(Self.deviceColumns) FROM fprep_devices WHERE channel \(streams ? "=" : "<>") 'stream' ORDER BY created_at, id
                """)).compactMap(Self.device)
            let planned = plan(pushes, step, active)
            var events: [(device: String, event: DeviceEvent)] = []
            if !planned.isEmpty {
                // Numbers for each device's new events, and its sender: a live one stays.
                let numbered = try run("""
                    UPDATE fprep_devices d SET last_seq = d.last_seq + v.n,
                        sender = CASE WHEN d.channel = 'stream' THEN NULL
                                      WHEN d.sender IS NOT NULL AND EXISTS (SELECT 1 FROM fprep_instances i
                                          WHERE i.id = d.sender AND i.alive_until >= \(now)) THEN d.sender
                                      ELSE \(instance) END
                    FROM unnest(\(planned.map(\.device))::text[], \(planned.map { Int64($0.payloads.count) })::bigint[]) AS v(id, n)
                    WHERE d.id = v.id RETURNING d.id, d.last_seq
                    """)
                var last: [String: Int64] = [:]
                for row in numbered {
                    let (id, seq) = try row.decode((String, Int64).self)
                    last[id] = seq
                }
                for (device, payloads) in planned {
                    guard let end = last[device] else { continue }
                    let first = end - Int64(payloads.count) + 1
                    for (offset, payload) in payloads.enumerated() {
                        events.append((device, DeviceEvent(seq: first + Int64(offset), payload: payload)))
                    }
                }
                try store(events, at: now, batch: batch)
            }
            if streams {
                try run("UPDATE fprep_pushes SET stream_batch = \(batch) WHERE id = ANY(\(ids)::bigint[])")
            } else {
                try run("UPDATE fprep_pushes SET batch = \(batch) WHERE id = ANY(\(ids)::bigint[])")
            }
            try run("SELECT pg_notify('fprep', \("events \(batch)"))")
            return Dispatched(pushes: pushes, events: events)
        }
    }

    package func events(batch: Int64) throws -> [(device: String, event: DeviceEvent, sender: String?)] {
        try run("""
            SELECT e.device, e.seq, e.payload, d.sender FROM fprep_events e JOIN fprep_devices d ON d.id = e.device
            WHERE e.batch = \(batch) ORDER BY e.device, e.seq
            """).map {
            let (device, seq, payload, sender) = try $0.decode((String, Int64, String, String?).self)
            return (device, DeviceEvent(seq: seq, payload: Array(payload.utf8)), sender)
        }
    }

    package func heartbeat(until: Int64, now: Int64) throws -> [Device] {
        try transaction {
            try run("""
                INSERT INTO fprep_instances(id, alive_until) VALUES(\(instance), \(until))
                ON CONFLICT (id) DO UPDATE SET alive_until = EXCLUDED.alive_until
                """)
            try run("DELETE FROM fprep_instances WHERE alive_until < \(now - 3600)")
            return try run(PostgresQuery(unsafeSQL: """
                UPDATE fprep_devices d SET sender = $1
                WHERE d.channel <> 'stream' AND d.last_seq > d.acked_seq AND (d.sender IS NULL OR NOT EXISTS
                    (SELECT 1 FROM fprep_instances i WHERE i.id = d.sender AND i.alive_until >= $2))
                RETURNING d.id, d.token_hash, d.domain, d.branch, d.replicated, d.channel, d.target, d.secret, d.name,
                    d.created_at, d.expires_at, d.last_seq, d.acked_seq, d.enrollment, d.last_seen
                """, binds: {
                var binds = PostgresBindings()
                binds.append(instance)
                binds.append(now)
                return binds
            }())).compactMap(Self.device)
        }
    }
}

/// A `postgres://` URL: USER[:PASSWORD]@HOST[:PORT][/DATABASE], nothing else.
struct PostgresURL {
    let configuration: PostgresConnection.Configuration
    /// HOST:PORT/DATABASE, for messages (never the password).
    let address: String

    init(_ text: String) throws {
        let usage = "(write postgres://USER:PASSWORD@HOST:PORT/DATABASE)"
        guard let schemeEnd = text.range(of: "://"), ["postgres", "postgresql"].contains(String(text[..<schemeEnd.lowerBound])) else {
            throw FprepError(.usage, "'\(Self.redacted(text))' is not a postgres:// URL for --database \(usage)")
        }
        var rest = String(text[schemeEnd.upperBound...])
        if let query = rest.firstIndex(of: "?") {
            let parameters = rest[rest.index(after: query)...]
            guard parameters.isEmpty || parameters == "sslmode=disable" else {
                throw FprepError(.usage, "--database takes no parameters but sslmode=disable: fprep connects without TLS (keep the database on a private network)")
            }
            rest = String(rest[..<query])
        }
        var user = "postgres"
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at]
            rest = String(rest[rest.index(after: at)...])
            if let colon = credentials.firstIndex(of: ":") {
                user = Self.decoded(credentials[..<colon])
                password = Self.decoded(credentials[credentials.index(after: colon)...])
            } else {
                user = Self.decoded(credentials)
            }
        }
        // A password left out of the URL (and so out of `ps`) may come from PGPASSWORD, as with psql.
        if password == nil, let fromEnvironment = getenv("PGPASSWORD") { password = String(cString: fromEnvironment) }
        var database: String?
        if let slash = rest.firstIndex(of: "/") {
            let name = Self.decoded(rest[rest.index(after: slash)...])
            database = name.isEmpty ? nil : name
            rest = String(rest[..<slash])
        }
        var host = rest
        var port = 5432
        if let colon = rest.lastIndex(of: ":"), !rest.hasSuffix("]") {
            guard let number = Int(rest[rest.index(after: colon)...]), (1...65535).contains(number) else {
                throw FprepError(.usage, "'\(Self.redacted(text))' has no valid port for --database \(usage)")
            }
            port = number
            host = String(rest[..<colon])
        }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty, !user.isEmpty else {
            throw FprepError(.usage, "'\(Self.redacted(text))' names no host for --database \(usage)")
        }
        var configuration = PostgresConnection.Configuration(host: host, port: port, username: user, password: password,
                                                             database: database ?? user, tls: .disable)
        configuration.options.connectTimeout = .seconds(5)
        self.configuration = configuration
        address = "\(host):\(port)/\(database ?? user)"
    }

    /// `%40` → `@` in a user name or password.
    private static func decoded(_ part: Substring) -> String {
        var bytes: [UInt8] = []
        var index = part.utf8.startIndex
        let utf8 = part.utf8
        while index < utf8.endIndex {
            let byte = utf8[index]
            if byte == UInt8(ascii: "%"), let high = utf8.index(index, offsetBy: 1, limitedBy: utf8.endIndex), high < utf8.endIndex,
               let low = utf8.index(index, offsetBy: 2, limitedBy: utf8.endIndex), low < utf8.endIndex,
               let value = UInt8(String(decoding: [utf8[high], utf8[low]], as: UTF8.self), radix: 16) {
                bytes.append(value)
                index = utf8.index(index, offsetBy: 3)
            } else {
                bytes.append(byte)
                index = utf8.index(after: index)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The URL without its password, for a message.
    static func redacted(_ text: String) -> String {
        guard let schemeEnd = text.range(of: "://"), let at = text.lastIndex(of: "@"), at > schemeEnd.upperBound,
              let colon = text[schemeEnd.upperBound..<at].firstIndex(of: ":") else { return text }
        return String(text[..<text.index(after: colon)]) + "***" + String(text[at...])
    }
}
