import CFprepSQLite
import CSQLite
import FoundationEssentials
import Glibc
import FprepGit

/// An SQLite error with SQLite's own message.
package struct DatabaseError: Error, CustomStringConvertible {
    package let code: Int32
    package let message: String
    package let sql: String?
    /// The database file it concerns.
    package var path: String? = nil
    /// The errno of the system call that failed under an I/O error, or 0.
    package var systemErrno: Int32 = 0

    package var description: String { sql.map { "\(message) (in: \($0))" } ?? message }
}

/// When a transaction's commit is on the disk.
package enum CommitDurability: Sendable {
    /// Before the commit returns (the store's `synchronous=FULL`).
    case beforeReturning
    /// When the kernel writes it out, seconds later: the commit does not
    /// wait for the disk (WAL with `synchronous=NORMAL`) and the log is not
    /// folded into the file at close (a checkpoint waits for the disk too).
    /// A power cut may lose such a commit but never tears it, and loses
    /// every commit after it with it: the log is written in order, so the
    /// next commit that waits makes this one durable too. Only for records
    /// whose loss the next command repairs (see `Replica.applySync`).
    case whenWrittenOut
}

/// One SQLite connection; owns a `sqlite3` handle (closed with `sqlite3_close_v2`).
/// Used from one thread at a time. `package`: the push service keeps its
/// own databases in the remote with the same code.
package final class Database {
    private let handle: OpaquePointer
    package let path: String

    /// `busyMilliseconds`: how long a statement waits for another
    /// connection's lock before it fails as busy.
    package init(path: String, busyMilliseconds: Int32 = 10_000) throws {
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        // fprep's VFS (see CFprepSQLite): the unix one, safe on a full disk.
        let rc = fprep_sqlite_register_vfs() == SQLITE_OK
            ? sqlite3_open_v2(path, &db, flags, FPREP_SQLITE_VFS)
            : sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(db)
            throw DatabaseError(code: rc, message: message, sql: nil, path: path)
        }
        handle = db
        self.path = path
        sqlite3_busy_timeout(db, busyMilliseconds)
        // Keep the WAL and its index between connections (otherwise the last
        // connection of every command deletes both and the next one creates
        // and initializes them again), but empty: the last connection
        // truncates the WAL after its checkpoint. A WAL left full would be
        // read again by every open and copied again by every close.
        var persist: Int32 = 1
        sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist)
        sqlite3_exec(db, "PRAGMA journal_size_limit=0", nil, nil, nil)
    }

    private var closed = false
    /// SQLite reported a damaged or unreadable file on this connection.
    private(set) var sawDamage = false
    /// Statements done with, reset, by their SQL: compiling one costs more
    /// than most of the statements run (a sync's records of 16 moves
    /// prepared 192 statements, 2.2 ms). A statement is taken out while
    /// in use, so two uses of one SQL at once (a query inside a loop over
    /// the same query) each have their own.
    private var idleStatements: [String: [OpaquePointer]] = [:]
    private var idleCount = 0
    /// Statements kept at most (SQL built with a varying number of
    /// parameters would otherwise grow the cache without end).
    static let idleLimit = 64

    deinit {
        finalizeIdleStatements()
        if !closed { sqlite3_close_v2(handle) }
    }

    /// Closes the connection now (the last one checkpoints the log into the
    /// file and empties it), unless a statement of it is still alive: then
    /// it stays open for that statement, and false is returned. Nothing
    /// may use the connection after it closed.
    package func closeUnlessInUse() -> Bool {
        guard !closed else { return true }
        finalizeIdleStatements()
        guard sqlite3_next_stmt(handle, nil) == nil else { return false }
        closed = true
        return sqlite3_close_v2(handle) == SQLITE_OK
    }

    func check(_ rc: Int32, _ sql: String? = nil) throws {
        guard rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE else {
            noteDamage(rc)
            throw DatabaseError(code: rc, message: String(cString: sqlite3_errmsg(handle)), sql: sql, path: path,
                                systemErrno: sqlite3_system_errno(handle))
        }
    }

    /// Runs one or more statements that return no rows.
    package func execute(_ sql: String) throws {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        if rc != SQLITE_OK {
            noteDamage(rc)
            let message = errorMessage.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(errorMessage)
            throw DatabaseError(code: rc, message: message, sql: sql, path: path, systemErrno: sqlite3_system_errno(handle))
        }
    }

    private func noteDamage(_ rc: Int32) {
        let primary = rc & 0xFF
        if primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB || primary == SQLITE_IOERR { sawDamage = true }
    }

    package func prepare(_ sql: String) throws -> Statement {
        if let idle = idleStatements[sql]?.popLast() {
            idleCount -= 1
            return Statement(idle, database: self, sql: sql)
        }
        var statement: OpaquePointer?
        try check(sqlite3_prepare_v2(handle, sql, -1, &statement, nil), sql)
        guard let statement else { throw DatabaseError(code: SQLITE_MISUSE, message: "empty statement", sql: sql) }
        return Statement(statement, database: self, sql: sql)
    }

    /// A statement's end of use: reset (which ends its reads) and kept
    /// for the next `prepare` of its SQL, or finalized.
    fileprivate func giveBack(_ statement: OpaquePointer, sql: String) {
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
        guard !closed, idleCount < Self.idleLimit else {
            sqlite3_finalize(statement)
            return
        }
        idleStatements[sql, default: []].append(statement)
        idleCount += 1
    }

    private func finalizeIdleStatements() {
        for statement in idleStatements.values.joined() { sqlite3_finalize(statement) }
        idleStatements = [:]
        idleCount = 0
    }

    /// Runs `body` in one IMMEDIATE transaction: all of it or none of it.
    package func transaction<R>(durability: CommitDurability = .beforeReturning, _ body: () throws -> R) throws -> R {
        guard durability == .whenWrittenOut else { return try inTransaction("BEGIN IMMEDIATE", body) }
        let level = try {
            let setting = try prepare("PRAGMA synchronous")
            return try setting.step() ? setting.int(0) : 2
        }()
        try execute("PRAGMA synchronous=NORMAL")
        let result: R
        do {
            result = try inTransaction("BEGIN IMMEDIATE", body)
        } catch {
            try? execute("PRAGMA synchronous=\(level)")
            throw error
        }
        try execute("PRAGMA synchronous=\(level)")
        // A checkpoint waits for the disk as a commit does; the next
        // command's close folds the log in.
        _ = fprep_sqlite_no_checkpoint_on_close(handle)
        return result
    }

    /// Runs `body`'s writes in one transaction (or in the transaction
    /// already open): one commit, one wait for the disk, where each
    /// statement on its own would wait for it.
    package func writing<R>(_ body: () throws -> R) throws -> R {
        guard sqlite3_get_autocommit(handle) != 0 else { return try body() }
        return try inTransaction("BEGIN IMMEDIATE", body)
    }

    /// Runs `body` in one read transaction (or in the transaction already
    /// open): its reads see one state of the database, and SQLite takes its
    /// locks once instead of once a statement.
    package func reading<R>(_ body: () throws -> R) throws -> R {
        guard sqlite3_get_autocommit(handle) != 0 else { return try body() }
        return try inTransaction("BEGIN DEFERRED", body)
    }

    private func inTransaction<R>(_ begin: String, _ body: () throws -> R) throws -> R {
        try execute(begin)
        do {
            let result = try body()
            CrashPoint.reach()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Rows the last INSERT, UPDATE or DELETE changed (`sqlite3_changes`).
    package var changes: Int { Int(sqlite3_changes(handle)) }

    package var userVersion: Int {
        get throws {
            let statement = try prepare("PRAGMA user_version")
            return try statement.step() ? Int(statement.int(0)) : 0
        }
    }
}

/// A prepared statement; owns a `sqlite3_stmt` (given back to its
/// connection in deinit, see `Database.prepare`).
package final class Statement {
    private let handle: OpaquePointer
    private let database: Database
    private let sql: String

    init(_ handle: OpaquePointer, database: Database, sql: String) {
        self.handle = handle
        self.database = database
        self.sql = sql
    }

    deinit { database.giveBack(handle, sql: sql) }

    /// Binds values to `?1`, `?2`, … after resetting the statement.
    @discardableResult
    package func bind(_ values: SQLValue...) throws -> Statement {
        try bind(values)
    }

    @discardableResult
    package func bind(_ values: [SQLValue]) throws -> Statement {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let rc: Int32
            switch value {
            case .null: rc = sqlite3_bind_null(handle, index)
            case .int(let v): rc = sqlite3_bind_int64(handle, index, v)
            case .text(let v): rc = sqlite3_bind_text(handle, index, v, -1, fprep_sqlite_transient())
            case .blob(let v):
                rc = v.withUnsafeBytes { sqlite3_bind_blob(handle, index, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count), fprep_sqlite_transient()) }
            }
            try database.check(rc, sql)
        }
        return self
    }

    /// Advances; true while there is a row to read.
    package func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        try database.check(rc, sql)
        return false
    }

    /// Runs the statement to its end.
    package func run() throws {
        while try step() {}
    }

    package func int(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    package func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }

    package func text(_ column: Int32) -> String {
        guard let raw = sqlite3_column_text(handle, column) else { return "" }
        return String(cString: raw)
    }

    package func blob(_ column: Int32) -> [UInt8] {
        let count = Int(sqlite3_column_bytes(handle, column))
        guard count > 0, let raw = sqlite3_column_blob(handle, column) else { return [] }
        return Array(UnsafeRawBufferPointer(start: raw, count: count))
    }
}

/// A value bound to a statement parameter.
package enum SQLValue {
    case null
    case int(Int64)
    case text(String)
    case blob([UInt8])
}
