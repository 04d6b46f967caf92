import Foundation
import FprepTestSupport
import Glibc
import Testing

/// A real PostgreSQL server for one test: a cluster made with Debian's
/// `initdb` in a temporary folder, started with `postgres` on a free port of
/// 127.0.0.1 (password authentication, scram-sha-256), stopped and removed
/// by `withPostgres` however the test ends. PostgreSQL refuses to run as
/// root, so as root the folder belongs to the `postgres` user and the
/// programs run as that user (`runuser`). The server's binaries come from
/// the `postgresql` package (scripts/setup.sh installs it); without them
/// the test fails saying so.
final class PostgresCluster {
    let folder: String
    let port: UInt16
    let password = "fprep-test-password"
    private let bin: String
    private let process: Spawned
    private let asPostgres: [String]

    /// The URL `fprep serve --database` takes.
    var url: String { "postgres://postgres:\(password)@127.0.0.1:\(port)/postgres" }

    /// The server's program folder: `pg_config --bindir`, else the newest /usr/lib/postgresql/N/bin.
    static func binaries() throws -> String {
        if let bindir = try? Shell.run(["/bin/sh", "-c", "pg_config --bindir 2>/dev/null"]).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines), !bindir.isEmpty, access(bindir + "/initdb", X_OK) == 0 {
            return bindir
        }
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .compactMap(Int.init).sorted()
        for version in versions.reversed() where access("/usr/lib/postgresql/\(version)/bin/initdb", X_OK) == 0 {
            return "/usr/lib/postgresql/\(version)/bin"
        }
        throw HarnessError("""
            no PostgreSQL server binaries (initdb, postgres) in /usr/lib/postgresql/*/bin: \
            install Debian's postgresql package (bash scripts/setup.sh does)
            """)
    }

    init(_ box: Sandbox) throws {
        bin = try Self.binaries()
        var template = Array("/tmp/fprep-pg-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw HarnessError("mkdtemp failed") }
        folder = String(cString: made)
        asPostgres = getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : []
        let passwordFile = folder + "/password"
        try Data((password + "\n").utf8).write(to: URL(fileURLWithPath: passwordFile))
        if getuid() == 0 {
            _ = try Shell.run(["/bin/chown", "-R", "postgres:postgres", folder], ioFolder: box.io)
        }
        let initdb = try Shell.run(asPostgres + [bin + "/initdb", "-D", folder + "/data", "-U", "postgres", "--auth=scram-sha-256",
                                                 "--pwfile=" + passwordFile, "--no-sync", "-E", "UTF8"],
                                   env: ["LC_ALL": "C"], timeout: 120, ioFolder: box.io)
        guard initdb.status == 0 else {
            try? FileManager.default.removeItem(atPath: folder)
            throw HarnessError("initdb failed: \(initdb)")
        }
        // Ready when it listens on its port itself (another test's socket
        // may take a port picked free first: postgres then exits, and starts
        // again on another) and answers (pg_isready), within a deadline.
        var attempt = 0
        while true {
            attempt += 1
            let port = try GitDaemon.freePort()
            let process = try box.spawn(asPostgres + [bin + "/postgres", "-D", folder + "/data", "-k", folder, "-p", String(port),
                                                      "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200"])
            let deadline = monotonicSeconds() + patienceSeconds
            var ready = false
            while process.isRunning && monotonicSeconds() < deadline {
                if isListening(port: port, by: process.pid),
                   try Shell.run([bin + "/pg_isready", "-q", "-h", "127.0.0.1", "-p", String(port)], ioFolder: box.io).status == 0 {
                    ready = true
                    break
                }
                usleep(50_000)
            }
            if ready {
                self.port = port
                self.process = process
                return
            }
            let log = process.isRunning ? process.kill9().stderr : process.stderrSoFar
            if attempt == 5 || monotonicSeconds() >= deadline {
                try? FileManager.default.removeItem(atPath: folder)
                throw HarnessError("PostgreSQL did not start on port \(port): \(log)")
            }
        }
    }

    /// Runs SQL with psql; its output, unaligned, without headers.
    func sql(_ box: Sandbox, _ statement: String) throws -> String {
        let result = try Shell.run([bin + "/psql", "-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p", String(port), "-U", "postgres",
                                    "-d", "postgres", "-c", statement], env: ["PGPASSWORD": password], ioFolder: box.io)
        guard result.status == 0 else { throw HarnessError("psql failed: \(result)") }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Stops the server (fast shutdown, then SIGKILL) and removes its folder.
    func stop() {
        if process.isRunning {
            _ = try? Shell.run(asPostgres + [bin + "/pg_ctl", "-D", folder + "/data", "-m", "immediate", "-w", "stop"], timeout: 60)
        }
        if process.isRunning { _ = process.kill9() } else { _ = process.wait(timeout: 10) }
        try? FileManager.default.removeItem(atPath: folder)
    }
}

/// Runs `body` with a PostgreSQL server started for it, stopped after.
func withPostgres<T>(_ box: Sandbox, _ body: (PostgresCluster) throws -> T) throws -> T {
    let cluster = try PostgresCluster(box)
    defer { cluster.stop() }
    return try body(cluster)
}
