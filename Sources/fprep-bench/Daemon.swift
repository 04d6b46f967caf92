import Dispatch
import Foundation
import Glibc

/// `git daemon` serving WORK on a free port of 127.0.0.1, for the `daemon` transport.
///
/// It runs in a process group of its own and is stopped by `stop()` (called
/// from a `defer`, so also after an error) or by the SIGINT/SIGTERM/SIGHUP
/// handler installed while it runs, so no daemon outlives the benchmark.
final class GitDaemon {
    let port: UInt16
    private let pid: pid_t
    private var running = true
    private var signalSources: [DispatchSourceSignal] = []

    /// Starts the daemon and waits until it accepts connections;
    /// `acceptPushes`: it also serves `git push` (receive-pack).
    init(work: String, subprocess: Subprocess, acceptPushes: Bool = false) throws {
        port = try GitDaemon.freePort()
        let logPath = "\(work)/git-daemon.log"
        let log = open(logPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard log >= 0 else { throw BenchError.message("open \(logPath): \(errnoText())") }
        defer { close(log) }
        let devNull = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { close(devNull) }
        let command = Command(["git", "daemon", "--reuseaddr", "--export-all", "--base-path=\(work)"]
                              + (acceptPushes ? ["--enable=receive-pack"] : []) + ["--listen=127.0.0.1", "--port=\(port)", work])
        pid = try subprocess.spawn(command, stdin: devNull, stdout: log, stderr: log, newProcessGroup: true)
        installSignalHandlers()

        let deadline = monotonicSeconds() + 10
        while !GitDaemon.listening(port: port) {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                running = false
                let tail = BenchError.tail(of: Array(FileManager.default.contents(atPath: logPath) ?? Data()))
                throw BenchError.commandFailed(command: command.description,
                                               status: Subprocess.failure(status) ?? "exited early", stderrTail: tail)
            }
            if monotonicSeconds() > deadline {
                stop()
                throw BenchError.message("git daemon did not accept connections on 127.0.0.1:\(port) within 10 s (log: \(logPath))")
            }
            usleep(20_000)
        }
    }

    deinit { stop() }

    /// URL of a repository below WORK.
    func url(for name: String) -> String { "git://127.0.0.1:\(port)/\(name)" }

    /// Terminates the daemon's whole group and reaps it; safe to call twice.
    func stop() {
        for source in signalSources { source.cancel() }
        if !signalSources.isEmpty {
            for sig in [SIGINT, SIGTERM, SIGHUP] { signal(sig, SIG_DFL) }
        }
        signalSources = []
        guard running else { return }
        running = false
        kill(-pid, SIGTERM)
        var status: Int32 = 0
        for _ in 0..<100 {
            if waitpid(pid, &status, WNOHANG) == pid { return }
            usleep(20_000)
        }
        kill(-pid, SIGKILL)
        _ = Subprocess.wait(pid)
    }

    /// On ^C (or a termination request) kill the daemon group, then leave
    /// with the conventional 128+signal status. The handler captures only the pid.
    private func installSignalHandlers() {
        let group = pid
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler {
                kill(-group, SIGTERM)
                let text = "fprep-bench: interrupted by signal \(sig); git daemon stopped\n"
                _ = text.withCString { write(2, $0, strlen($0)) }
                _exit(128 + sig)
            }
            source.resume()
            signalSources.append(source)
        }
    }

    /// A port the kernel considers free right now (bind to port 0, read it back).
    private static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BenchError.message("socket: \(errnoText())") }
        defer { close(fd) }
        var address = loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw BenchError.message("bind 127.0.0.1:0: \(errnoText())") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw BenchError.message("getsockname: \(errnoText())") }
        return UInt16(bigEndian: address.sin_port)
    }

    /// True when 127.0.0.1:port is in LISTEN state. Read from /proc/net/tcp
    /// rather than by connecting: a probe connection makes the daemon fork a
    /// child that logs "the remote end hung up unexpectedly".
    private static func listening(port: UInt16) -> Bool {
        // Read to the end: procfs files report size 0, and a read sized from
        // that returns only the first page of sockets.
        guard let handle = FileHandle(forReadingAtPath: "/proc/net/tcp") else { return false }
        defer { try? handle.close() }
        let table = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
        // Columns: sl local_address rem_address st …; 0100007F is 127.0.0.1, 0A is LISTEN.
        let local = "0100007F:" + String(format: "%04X", Int(port))
        return table.split(separator: "\n").contains { line in
            let fields = line.split(separator: " ")
            return fields.count > 3 && fields[1] == local && fields[3] == "0A"
        }
    }

    private static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }
}
