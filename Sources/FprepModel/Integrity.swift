import CSQLite

/// `pragma integrity_check` on a state database, opened read-only (a WAL
/// database is read with its log, as fprep's next command would).
func integrityCheck(_ path: String) -> String {
    var db: OpaquePointer?
    defer { sqlite3_close(db) }
    guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else {
        return "cannot open: " + String(cString: sqlite3_errmsg(db))
    }
    sqlite3_busy_timeout(db, 5000)
    var statement: OpaquePointer?
    defer { sqlite3_finalize(statement) }
    guard sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &statement, nil) == SQLITE_OK else {
        return "cannot check: " + String(cString: sqlite3_errmsg(db))
    }
    var lines: [String] = []
    while true {
        let rc = sqlite3_step(statement)
        if rc == SQLITE_ROW, let text = sqlite3_column_text(statement, 0) { lines.append(String(cString: text)); continue }
        if rc != SQLITE_DONE { lines.append("error: " + String(cString: sqlite3_errmsg(db))) }
        break
    }
    return lines.joined(separator: "; ")
}
