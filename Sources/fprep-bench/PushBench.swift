import ArgumentParser
import Foundation
import FprepPush
import FprepServer
import Glibc
import NIOCore
import NIOHTTP1
import NIOPosix

/// `fprep-bench push`: the push service under load. 10,000 devices register
/// through the API with webhook channels pointing at a loopback sink (in
/// this process); one more device is a real replica running `fprep watch`.
/// Each push is a commit pushed with plain git into the fprep remote; the
/// figures are the webhook deliveries per second until all devices got the
/// push, and the latency from `git push` returning to the replica's sync done.
struct PushBench: ParsableCommand {
    static let mode = "push"

    static let configuration = CommandConfiguration(
        commandName: "fprep-bench \(mode)",
        abstract: "Push deliveries per second to many registered devices, and push → synced latency.",
        discussion: """
        Makes a small fprep remote in WORK (init-remote + import-tree), a replica of it (fprep clone) \
        and a plain git clone to push from; starts `fprep serve` (no rate limit) and a webhook sink on \
        127.0.0.1 in this process; registers --devices devices through POST /v1/devices with webhook \
        channels pointing at the sink (--concurrency requests in flight), then starts `fprep watch` on \
        the replica. Each of --pushes rounds commits one file and runs `git push`; timed from the moment \
        `git push` returns: until the sink has the push's payload for every device (deliveries per second \
        = devices / that time), and until the replica's branch has moved (the sync done). Every process \
        it starts is stopped at the end.

        With --postgres it first makes a PostgreSQL cluster in WORK/postgres (Debian's initdb and postgres, \
        run as the postgres user when this runs as root) on a free port, and runs --instances `fprep serve \
        --database` processes on it: registrations go to them in turn, the replica watches the first, and \
        the hook pokes the last started.
        """)

    @Option(help: "Registered webhook devices.")
    var devices = 10_000

    @Option(help: "Pushes to time.")
    var pushes = 5

    @Option(help: "Registration requests in flight.")
    var concurrency = 64

    @Option(name: .customLong("debounce-ms"), help: "fprep watch's debounce (its default: 0, a sync at once on a push).")
    var debounceMilliseconds = 0

    @Flag(help: "Keep the service's state in a PostgreSQL cluster this run makes in WORK/postgres.")
    var postgres = false

    @Option(help: "fprep serve instances on the PostgreSQL cluster (with --postgres).")
    var instances = 1

    @Option(help: ArgumentHelp("Working folder (emptied first).", valueName: "dir"))
    var work = "/tmp/fprep-bench-push"

    @Option(help: ArgumentHelp("fprep binary (default: the one next to this executable).", valueName: "path"))
    var fprep: String?

    static func main(_ arguments: [String]) {
        do {
            var command = try parseAsRoot(arguments)
            try command.run()
        } catch {
            exit(withError: error)
        }
    }

    func validate() throws {
        guard devices > 0, pushes > 0, concurrency > 0 else { throw ValidationError("--devices, --pushes and --concurrency must be positive") }
        guard instances >= 1, instances == 1 || postgres else { throw ValidationError("--instances above 1 needs --postgres (one database they share)") }
    }

    func run() throws {
        signal(SIGPIPE, SIG_IGN)
        let fprepPath = try resolveFprep(fprep)
        let libc = try LibC.load()
        let subprocess = Subprocess(libc: libc)
        let work = absolutePath(self.work)
        let note: (String) -> Void = { FileHandle.standardError.write(Data("fprep-bench: \($0)\n".utf8)) }
        _ = try? FileManager.default.removeItem(atPath: work)
        try FileManager.default.createDirectory(atPath: work + "/src/docs", withIntermediateDirectories: true)
        for index in 0..<20 {
            try Data("file \(index)\n".utf8).write(to: URL(fileURLWithPath: work + "/src/\(index % 2 == 0 ? "docs/" : "")f\(index).txt"))
        }
        let remote = work + "/remote.git", replica = work + "/replica", clone = work + "/clone"
        try subprocess.run(Command([fprepPath, "init-remote", remote]))
        try subprocess.run(Command([fprepPath, "import-tree", work + "/src", "--into", remote, "-m", "base"]))
        try subprocess.run(Command([fprepPath, "clone", remote, replica]))
        try subprocess.run(Command(["git", "clone", "-q", remote, clone]))

        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let sink = try runBlocking { try await WebhookSink.start(group: group) }
        let ports = try (0..<instances).map { _ in try freeLoopbackPort() }
        let urls = ports.map { "http://127.0.0.1:\($0)" }
        let url = urls[0]
        let processes = ChildProcesses(subprocess: subprocess, work: work)
        defer {
            processes.stopAll()
            try? runBlocking { await sink.server.stop() }
            try? group.syncShutdownGracefully()
        }
        var database: [String] = []
        if postgres {
            database = ["--database", try startPostgres(in: work, processes: processes, subprocess: subprocess)]
            note("PostgreSQL cluster in \(work)/postgres, \(instances) fprep serve instance(s) on it")
        }
        // Registering needs an enrollment secret; the sink is on loopback, which webhooks reach only when allowed.
        let enrollment = try subprocess.run(Command([fprepPath, "serve", "enroll", "--remote", remote] + database)).stdoutText
            .trimmingCharacters(in: .whitespacesAndNewlines)
        for (index, port) in ports.enumerated() {
            let name = instances == 1 ? "serve" : "serve-\(index + 1)"
            try processes.start(name, [fprepPath, "serve", "--remote", remote, "--listen", "127.0.0.1:\(port)", "--rate-limit", "0",
                                       "--allow-webhook-host", "127.0.0.1"] + database)
            guard waitFor(20, { tcpState(localPort: port, state: "0A") }) else { throw BenchError.message("fprep serve did not listen (log: \(work)/\(name).log)") }
        }

        note("registering \(devices) webhook devices")
        let registration = try runBlocking { [devices, concurrency] in
            try await registerDevices(devices, services: urls, enrollment: enrollment, sink: sink.url, concurrency: concurrency, group: group)
        }
        note("registered \(devices) devices in \(String(format: "%.2f", registration)) s (\(Int(Double(devices) / registration)) a second)")
        try processes.start("watch", [fprepPath, "watch", "-C", replica, "--service", url, "--enroll", enrollment, "--fallback-interval", "600",
                                      "--debounce-ms", String(debounceMilliseconds)])
        guard waitFor(20, { tcpState(remotePort: ports[0], state: "01") }) else { throw BenchError.message("fprep watch did not connect (log: \(work)/watch.log)") }

        var rows: [(rate: Double, all: Double, synced: Double, push: Double)] = []
        for round in 1...pushes {
            try Data("round \(round)\n".utf8).write(to: URL(fileURLWithPath: clone + "/docs/round-\(round).txt"))
            try subprocess.run(Command(["git", "add", "-A"], directory: clone))
            try subprocess.run(Command(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q", "-m", "round \(round)"], directory: clone))
            let push = try subprocess.run(Command(["git", "push", "-q", "origin", "HEAD:main"], directory: clone))
            let pushed = monotonicSeconds()
            let commit = try subprocess.run(Command(["git", "rev-parse", "HEAD"], directory: clone)).stdoutText
                .trimmingCharacters(in: .whitespacesAndNewlines)
            var synced: Double?
            var delivered: Double?
            let deadline = pushed + 120
            while (synced == nil || delivered == nil) && monotonicSeconds() < deadline {
                if synced == nil, (try? String(contentsOfFile: replica + "/.git/refs/heads/main", encoding: .utf8))?
                    .trimmingCharacters(in: .whitespacesAndNewlines) == commit { synced = monotonicSeconds() - pushed }
                if delivered == nil, sink.count(for: commit) >= devices { delivered = monotonicSeconds() - pushed }
                usleep(1_000)
            }
            guard let synced, let delivered else {
                throw BenchError.message("round \(round): \(sink.count(for: commit)) of \(devices) deliveries, replica synced: \(synced != nil) after 120 s")
            }
            rows.append((Double(devices) / delivered, delivered, synced, push.seconds))
            note("round \(round): \(devices) deliveries in \(ms(delivered)), replica synced \(ms(synced)) after git push returned")
            usleep(300_000)
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        print("""
            push service: \(devices) webhook devices (loopback sink in fprep-bench) + 1 fprep watch replica (event stream), \(pushes) pushes, \(postgres ? "PostgreSQL, \(instances) instance(s)" : "SQLite, 1 instance")
            registration           \(Int(Double(devices) / registration)) devices/s
            deliveries per second  median \(Int(median(rows.map(\.rate))))  (min \(Int(rows.map(\.rate).min() ?? 0)), max \(Int(rows.map(\.rate).max() ?? 0)))
            push → all delivered   median \(ms(median(rows.map(\.all))))  (min \(ms(rows.map(\.all).min() ?? 0)), max \(ms(rows.map(\.all).max() ?? 0)))
            push → replica synced  median \(ms(median(rows.map(\.synced))))  (min \(ms(rows.map(\.synced).min() ?? 0)), max \(ms(rows.map(\.synced).max() ?? 0)))  watch --debounce-ms \(debounceMilliseconds)
            git push (with hook)   median \(ms(median(rows.map(\.push))))
            """)
    }

    private func ms(_ seconds: Double) -> String { "\(Int((seconds * 1000).rounded())) ms" }
}

/// Registers `count` webhook devices, `concurrency` requests at a time; returns the seconds it took.
private func registerDevices(_ count: Int, services: [String], enrollment: String, sink: String, concurrency: Int,
                             group: any EventLoopGroup) async throws -> Double {
    let urls = try services.map { service in
        guard let url = ServiceURL(service + "/v1/devices") else { throw BenchError.message("bad service URL \(service)") }
        return url
    }
    let client = HTTPClient(group: group)
    let domain = "remote"
    let started = monotonicSeconds()
    try await withThrowingTaskGroup(of: Void.self) { tasks in
        for index in 0..<count {
            if index >= concurrency { try await tasks.next() }
            tasks.addTask {
                let body = #"{"domain":"\#(domain)","enrollment":"\#(enrollment)","name":"bench-\#(index)","channel":{"kind":"webhook","url":"\#(sink)","secret":"bench-secret-0123456789"}}"#
                let response = try await client.send(ClientRequest(.POST, urls[index % urls.count], headers: ["content-type": "application/json"],
                                                                   body: Array(body.utf8)), timeout: .seconds(10))
                guard response.status == 201 else { throw BenchError.message("registration \(index): \(response.status) \(response.text)") }
            }
        }
        try await tasks.waitForAll()
    }
    await client.shutdown()
    return monotonicSeconds() - started
}

/// Makes a PostgreSQL cluster in WORK/postgres (password authentication),
/// starts it on a free loopback port with the processes, waits until it
/// answers, and returns its URL. PostgreSQL refuses root: as root, the
/// folder is the postgres user's and its programs run as that user.
private func startPostgres(in work: String, processes: ChildProcesses, subprocess: Subprocess) throws -> String {
    let versions = ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []).compactMap(Int.init).sorted()
    guard let bin = versions.reversed().map({ "/usr/lib/postgresql/\($0)/bin" }).first(where: { access($0 + "/initdb", X_OK) == 0 }) else {
        throw BenchError.message("--postgres needs PostgreSQL's server programs in /usr/lib/postgresql/*/bin (bash scripts/setup.sh installs them)")
    }
    let folder = work + "/postgres", password = "bench-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    try Data((password + "\n").utf8).write(to: URL(fileURLWithPath: folder + "/password"))
    let asPostgres = getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : []
    if getuid() == 0 { try subprocess.run(Command(["/bin/chown", "-R", "postgres:postgres", folder])) }
    try subprocess.run(Command(asPostgres + [bin + "/initdb", "-D", folder + "/data", "-U", "postgres", "--auth=scram-sha-256",
                                             "--pwfile=" + folder + "/password", "--no-sync", "-E", "UTF8"], environment: ["LC_ALL": "C"]))
    let port = try freeLoopbackPort()
    try processes.start("postgres", asPostgres + [bin + "/postgres", "-D", folder + "/data", "-k", folder, "-p", String(port),
                                                  "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200"])
    let ready = waitFor(60) {
        (try? subprocess.run(Command([bin + "/pg_isready", "-q", "-h", "127.0.0.1", "-p", String(port)]))) != nil
    }
    guard ready else { throw BenchError.message("PostgreSQL did not start (log: \(work)/postgres.log)") }
    return "postgres://postgres:\(password)@127.0.0.1:\(port)/postgres"
}

/// The webhook sink: counts deliveries per new anchor.
private final class WebhookSink: Sendable {
    let server: HTTPServer
    private let counts = Locked<[String: Int]>([:])

    private init(server: HTTPServer) { self.server = server }

    static func start(group: any EventLoopGroup) async throws -> WebhookSink {
        let holder = Locked<WebhookSink?>(nil)
        let server = try await HTTPServer.start(host: "127.0.0.1", port: 0, group: group) { request in
            if let payload = try? JSONCoding.decode(PushPayload.self, from: Array(request.body.readableBytesView)) {
                holder.get()?.counts.update { $0[payload.new, default: 0] += 1 }
            }
            return HTTPResponse(status: .noContent)
        }
        let sink = WebhookSink(server: server)
        holder.set(sink)
        return sink
    }

    var url: String { "http://127.0.0.1:\(server.port)/hook" }

    func count(for anchor: String) -> Int { counts.get()[anchor] ?? 0 }
}

/// The fprep processes the benchmark starts, each logging to WORK/NAME.log,
/// all stopped (SIGTERM, then SIGKILL) at the end.
private final class ChildProcesses {
    private let subprocess: Subprocess
    private let work: String
    private var pids: [pid_t] = []

    init(subprocess: Subprocess, work: String) {
        self.subprocess = subprocess
        self.work = work
    }

    func start(_ name: String, _ argv: [String]) throws {
        let log = open(work + "/\(name).log", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { close(log); close(null) }
        pids.append(try subprocess.spawn(Command(argv), stdin: null, stdout: log, stderr: log))
    }

    func stopAll() {
        for pid in pids.reversed() {
            kill(pid, SIGTERM)
            var status: Int32 = 0
            var reaped = false
            for _ in 0..<250 where !reaped {
                reaped = waitpid(pid, &status, WNOHANG) == pid
                if !reaped { usleep(20_000) }
            }
            if !reaped {
                kill(pid, SIGKILL)
                _ = Subprocess.wait(pid)
            }
        }
        pids = []
    }
}

/// A port free on 127.0.0.1 right now.
private func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw BenchError.message("socket: \(errnoText())") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw BenchError.message("bind 127.0.0.1:0: \(errnoText())") }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Whether /proc/net/tcp has a 127.0.0.1 socket with that local (or remote) port in `state` (0A listen, 01 established).
private func tcpState(localPort: Int? = nil, remotePort: Int? = nil, state: String) -> Bool {
    // Read to the end: /proc files give a page per read, and
    // String(contentsOfFile:) stops after the first (~26 sockets).
    guard let handle = FileHandle(forReadingAtPath: "/proc/net/tcp") else { return false }
    defer { try? handle.close() }
    var data = Data()
    while let chunk = try? handle.read(upToCount: 65_536), !chunk.isEmpty { data += chunk }
    let table = String(decoding: data, as: UTF8.self)
    return table.split(separator: "\n").contains { line in
        let fields = line.split(separator: " ")
        guard fields.count > 3, fields[3] == state else { return false }
        if let localPort { return fields[1] == "0100007F:" + String(format: "%04X", localPort) }
        if let remotePort { return fields[2] == "0100007F:" + String(format: "%04X", remotePort) }
        return false
    }
}

private func waitFor(_ seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = monotonicSeconds() + seconds
    while !condition() {
        if monotonicSeconds() > deadline { return false }
        usleep(5_000)
    }
    return true
}
