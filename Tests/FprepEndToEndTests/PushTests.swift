import Foundation
import FprepTestSupport
import Glibc
import Testing

// End-to-end tests of push signals: real `fprep serve`, `fprep watch` and
// `fprep changes --follow` processes, commits pushed with plain git into a
// remote whose post-receive hook runs fprep, all on 127.0.0.1.

/// A running `fprep serve`.
struct PushService {
    let process: Spawned
    let port: UInt16
    /// An enrollment secret of the remote's domain (`fprep serve enroll`),
    /// for `fprep watch --enroll` and registrations.
    let enrollment: String
    var url: String { "http://127.0.0.1:\(port)" }

    /// Stops it with SIGTERM and returns what it did.
    func stop() -> RunResult {
        process.signal(SIGTERM)
        return process.wait(timeout: 60)
    }
}

extension Sandbox {
    /// Starts `fprep serve` for `remote` on `port` (a free one when nil),
    /// waits until it listens, and mints an enrollment secret. Webhooks may
    /// go to 127.0.0.1 (the tests' receivers) unless `allowLoopbackWebhooks` is false.
    /// `enrollWith`: more arguments for `fprep serve enroll` (the service's `--database`).
    func startService(_ remote: String, port: UInt16? = nil, extra: [String] = [],
                      allowLoopbackWebhooks: Bool = true, enrollWith: [String] = []) throws -> PushService {
        let allow = allowLoopbackWebhooks ? ["--allow-webhook-host", "127.0.0.1"] : []
        // A port picked free can be taken by another test before the
        // service binds it: then the service exits, and (unless the test
        // named the port) starts again on another.
        var attempt = 0
        var started: (process: Spawned, port: UInt16)?
        while started == nil {
            attempt += 1
            let candidate = try port ?? GitDaemon.freePort()
            let process = try spawnFprep(["serve", "--remote", remote, "--listen", "127.0.0.1:\(candidate)"] + allow + extra)
            let deadline = monotonicSeconds() + patienceSeconds
            while process.isRunning && !isListening(port: candidate, by: process.pid) && monotonicSeconds() < deadline { usleep(10_000) }
            if isListening(port: candidate, by: process.pid) {
                started = (process, candidate)
            } else if process.isRunning || port != nil || attempt == 5 {
                throw HarnessError("fprep serve did not listen on port \(candidate): \(process.kill9())")
            }
        }
        guard let (process, port) = started else { throw HarnessError("fprep serve did not start") }
        // After it listens: a mirror's folder exists only once the service made it.
        let enrollment = try fprepOK(["serve", "enroll", "--remote", remote] + enrollWith).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        return PushService(process: process, port: port, enrollment: enrollment)
    }

    /// Commits a new file in the plain clone `work` and pushes it; returns
    /// the commit and how long `git push` took.
    func commitAndPush(_ work: String, file: String, content: String) throws -> (commit: String, push: RunResult) {
        let path = work + "/" + file
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: path, contents: Data(content.utf8))
        try gitOK(["add", "-A"], cwd: work)
        try gitOK(["commit", "-q", "-m", "add \(file)"], cwd: work)
        let push = try git(["push", "-q", "origin", "HEAD:main"], cwd: work)
        return (try gitOK(["rev-parse", "HEAD"], cwd: work), push)
    }
}

/// Whether a 127.0.0.1 socket is in `state` (0A listening, 01 established)
/// with that local or remote port, from /proc/net/tcp.
func tcpSocket(local: UInt16? = nil, remote: UInt16? = nil, state: String) -> Bool {
    let table = String(decoding: readWholeFile("/proc/net/tcp"), as: UTF8.self)
    return table.split(separator: "\n").contains { line in
        let fields = line.split(separator: " ")
        guard fields.count > 3, fields[3] == state else { return false }
        if let local { return fields[1] == "0100007F:" + String(format: "%04X", Int(local)) }
        if let remote { return fields[2] == "0100007F:" + String(format: "%04X", Int(remote)) }
        return false
    }
}

/// Whether the watcher's event stream (a client connection to the port) is open.
func streamOpen(to port: UInt16) -> Bool { tcpSocket(remote: port, state: "01") }

/// The commit a replica's branch points at (what a finished sync wrote),
/// read from git's loose ref, so that polling costs no process.
func replicaHead(_ replica: String) -> String? {
    guard let data = FileManager.default.contents(atPath: replica + "/.git/refs/heads/main") else { return nil }
    return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
}

@Suite("push signals end to end", .serialized)
struct PushTests {
    /// The push → synced time is printed here and measured by the benchmark
    /// (a timed assertion would fail on a loaded machine). What this test
    /// holds is the mechanism: the watcher's fallback interval is 600 s, far
    /// past the test's patience, so only the push signal can have synced it.
    @Test("a git push reaches another replica's fprep watch, which syncs long before its fallback interval")
    func pushReachesWatcher() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("B")
            _ = try box.clone(remote.path, replica)
            let service = try box.startService(remote.path)
            let watch = try box.spawnFprep(["watch", "-C", replica, "--service", service.url, "--enroll", service.enrollment, "--fallback-interval", "600"])
            #expect(waitUntil { streamOpen(to: service.port) }, "the watcher never opened its stream")
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])

            var timings: [Double] = []
            for round in 1...3 {
                let (commit, push) = try box.commitAndPush(work, file: "docs/new-\(round).md", content: "round \(round)\n")
                let pushed = monotonicSeconds()
                #expect(push.status == 0, "\(push)")
                #expect(!push.stderr.contains("fprep hook:"), "\(push)")
                let synced = waitUntil { replicaHead(replica) == commit }
                let elapsed = monotonicSeconds() - pushed
                #expect(synced, "replica B did not sync \(commit)")
                timings.append(elapsed)
                print("push → replica B synced: \(Int(elapsed * 1000)) ms (git push took \(Int(push.seconds * 1000)) ms)")
            }
            #expect(try box.fprepOK(["anchor", "-C", replica]).stdout.trimmingCharacters(in: .whitespacesAndNewlines) == replicaHead(replica))
            let info = try #require(lstatInfo(replica + "/docs/new-3.md"))
            #expect(info.size == 8 && info.blocks == 0, "a placeholder with the real size")

            watch.signal(SIGTERM)
            let watched = watch.wait(timeout: 60)
            #expect(watched.status == 0, "\(watched)")
            #expect(watched.stdout.contains("registered as dev-") && watched.stdout.contains("connected to"), "\(watched)")
            let served = service.stop()
            #expect(served.status == 0, "\(served)")
            #expect(served.stderr.contains("1 device\n") || served.stderr.contains("1 device "), "\(served)")
            print("push → synced over 3 pushes: \(timings.map { "\(Int($0 * 1000)) ms" }.joined(separator: ", "))")
        }
    }

    @Test("with the service stopped during the push, the replica gets the change when the service is back")
    func serviceDownDuringPush() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("B")
            _ = try box.clone(remote.path, replica)
            let service = try box.startService(remote.path)
            let watch = try box.spawnFprep(["watch", "-C", replica, "--service", service.url, "--enroll", service.enrollment, "--fallback-interval", "600"])
            #expect(waitUntil { streamOpen(to: service.port) })
            let stopped = service.stop()
            #expect(stopped.status == 0, "\(stopped)")

            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            let (commit, push) = try box.commitAndPush(work, file: "while-down.txt", content: "written while the service was down\n")
            #expect(push.status == 0, "\(push)")
            #expect(!push.stderr.contains("fprep hook:"), "\(push)")
            usleep(1_000_000)
            #expect(replicaHead(replica) != commit, "no service and no fallback sync yet: the replica must not have moved")

            let restarted = try box.startService(remote.path, port: service.port)
            let back = monotonicSeconds()
            // The watcher retries with pauses growing to 10 s while the
            // service is down: allow one full pause, then the sync, on a busy machine.
            #expect(waitUntil { replicaHead(replica) == commit }, "the push never arrived after the restart")
            print("service back → replica B synced: \(Int((monotonicSeconds() - back) * 1000)) ms")
            #expect(exists(replica + "/while-down.txt"))
            watch.signal(SIGTERM)
            #expect(watch.wait(timeout: 60).status == 0)
            #expect(restarted.stop().status == 0)
        }
    }

    @Test("fprep changes --follow prints each sync's changes and holds an enumerator open while it runs")
    func changesFollow() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("B")
            _ = try box.clone(remote.path, replica)
            let start = try box.fprepOK(["anchor", "-C", replica]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let service = try box.startService(remote.path, extra: ["--verbose"])
            let watch = try box.spawnFprep(["watch", "-C", replica, "--service", service.url, "--enroll", service.enrollment, "--fallback-interval", "600"])
            #expect(waitUntil { streamOpen(to: service.port) })
            let follow = try box.spawnFprep(["changes", "--follow", "--from", start, "--container", "docs", "-C", replica])
            // Its first batch is printed once its enumerator is registered; a push before that would not reach this device.
            #expect(waitUntil { follow.stdoutSoFar.contains("anchor: \(start)") })
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            let (commit, _) = try box.commitAndPush(work, file: "docs/followed.md", content: "followed\n")
            #expect(waitUntil { replicaHead(replica) == commit })
            usleep(600_000)
            follow.signal(SIGTERM)
            let followed = follow.wait(timeout: 60)
            #expect(followed.status == 0, "\(followed)")
            #expect(followed.stdout.contains("updated  docs/followed.md"), "\(followed)")
            #expect(followed.stdout.contains("anchor: \(commit)"), "\(followed)")
            watch.signal(SIGTERM)
            _ = watch.wait(timeout: 60)
            let served = service.stop()
            #expect(served.stderr.contains("opened docs") && served.stderr.contains("closed docs"), "\(served)")
        }
    }

    @Test("the hook never fails a push: a broken outbox is logged, the push goes through")
    func hookNeverFails() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            // A folder where the outbox database should be (the import made one).
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: remote.path + "/fprep/outbox.db" + suffix) }
            try FileManager.default.createDirectory(atPath: remote.path + "/fprep/outbox.db", withIntermediateDirectories: true)
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            let (commit, push) = try box.commitAndPush(work, file: "x.txt", content: "x\n")
            #expect(push.status == 0, "\(push)")
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == commit)
            // The outbox cannot be opened: the push's signals wait in its spool.
            let spooled = (try? FileManager.default.contentsOfDirectory(atPath: remote.path + "/fprep/outbox.db-spool")) ?? []
            #expect(spooled.filter { $0.hasSuffix(".push") }.count == 1, "\(spooled)")
            // Garbage on standard input and a folder that is no repository: still 0.
            let hook = try box.fprep(["hook", "post-receive"], env: ["GIT_DIR": box.at("nothing-here")],
                                     stdin: Data("garbage\n\(String(repeating: "0", count: 40)) 1234 refs/heads/main\n".utf8))
            #expect(hook.status == 0, "\(hook)")
        }
    }

    /// The pushes the outbox holds, as "old new" pairs in order.
    static func outboxPushes(_ box: Sandbox, _ remote: String) throws -> [String] {
        let script = "import sqlite3,sys\nc=sqlite3.connect(sys.argv[1])\nfor o,n in c.execute('select old,new from pushes order by seq'): print(o,n)"
        return try Shell.run(["/usr/bin/python3", "-c", script, remote + "/fprep/outbox.db"], env: box.baseEnvironment, ioFolder: box.io)
            .stdout.split(separator: "\n").map(String.init)
    }

    @Test("a push never waits on an outbox another process holds: it is spooled at once and taken in, exactly once, by the next push")
    func heldOutboxSpools() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            _ = try box.commitAndPush(work, file: "first.txt", content: "1\n")
            let before = try Self.outboxPushes(box, remote.path)
            // Another process holds the outbox's write lock.
            let holder = try box.spawn(["/usr/bin/python3", "-c", """
                import sqlite3,sys,time
                c=sqlite3.connect(sys.argv[1], isolation_level=None)
                c.execute('BEGIN IMMEDIATE')
                print('locked', flush=True)
                time.sleep(3600)
                """, remote.path + "/fprep/outbox.db"])
            #expect(waitUntil { holder.stdoutSoFar.contains("locked") })
            // The holder never lets go until it is killed: a push that
            // returns at all did not wait for it.
            let (held, push) = try box.commitAndPush(work, file: "second.txt", content: "2\n")
            #expect(push.status == 0 && !push.timedOut, "\(push)")
            let spool = remote.path + "/fprep/outbox.db-spool"
            let spooled = ((try? FileManager.default.contentsOfDirectory(atPath: spool)) ?? []).filter { $0.hasSuffix(".push") }
            #expect(spooled.count == 1, "\(spooled)")
            _ = holder.kill9()

            // A copy of the spool file, as a crash between the outbox's
            // commit and the file's removal would leave it.
            let copy = spooled.first.flatMap { contents(spool + "/" + $0) }
            let (third, _) = try box.commitAndPush(work, file: "third.txt", content: "3\n")
            let after = try Self.outboxPushes(box, remote.path)
            #expect(after.count == before.count + 2, "\(after)")
            #expect(after.contains { $0.hasSuffix(held) } && after.contains { $0.hasSuffix(third) }, "\(after)")
            #expect(((try? FileManager.default.contentsOfDirectory(atPath: spool)) ?? []).filter { $0.hasSuffix(".push") }.isEmpty)
            if let name = spooled.first, let copy {
                try copy.write(to: URL(fileURLWithPath: spool + "/" + name))
                _ = try box.commitAndPush(work, file: "fourth.txt", content: "4\n")
                let again = try Self.outboxPushes(box, remote.path)
                #expect(again.filter { $0.hasSuffix(held) }.count == 1, "a spooled push was taken in twice: \(again)")
            }
        }
    }

    @Test("install-hooks makes a plain bare repository an fprep remote: config, sizes, hook, secret")
    func installHooks() throws {
        try withSandbox { box in
            let bare = box.at("plain.git")
            try box.gitOK(["init", "-q", "--bare", "-b", "main", bare])
            let work = box.at("work")
            try box.gitOK(["clone", "-q", bare, work])
            let (commit, push) = try box.commitAndPush(work, file: "docs/a.bin", content: String(repeating: "a", count: 4321))
            #expect(push.status == 0)
            let installed = try box.fprepJSON(["install-hooks", bare, "--domain", "plain"])
            #expect(installed.string("domain") == "plain" && installed.string("branch") == "main")
            #expect(installed.int("blobsListed") == 1)
            #expect(try box.gitOK(["config", "--get", "fprep.domain"], cwd: bare) == "plain")
            #expect(try box.gitOK(["config", "--get", "uploadpack.allowFilter"], cwd: bare) == "true")
            #expect(try box.gitOK(["config", "--get", "uploadpack.allowAnySHA1InWant"], cwd: bare) == "true")
            #expect((lstatInfo(bare + "/hooks/post-receive")?.permissions ?? 0) & 0o111 != 0)
            #expect(lstatInfo(bare + "/fprep/hook-secret")?.permissions == 0o600)
            let replica = box.at("R")
            let clone = try box.clone(bare, replica)
            #expect(clone.int("unknownSizes") == 0)
            #expect(clone.string("anchor") == commit)
            #expect(lstatInfo(replica + "/docs/a.bin")?.size == 4321)
            // Again: nothing new to list, the hooks refreshed.
            #expect(try box.fprepJSON(["install-hooks", bare]).int("blobsListed") == 0)
            expectOneLineError(try box.fprep(["install-hooks", box.at("not-a-repo")]), status: 64, mentioning: ["not a bare git repository"])
            expectOneLineError(try box.fprep(["install-hooks", bare, "--domain", "other"]), status: 64, mentioning: ["already"])
        }
    }

    @Test("serve and watch refuse bad options in one line")
    func badOptions() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            expectOneLineError(try box.fprep(["serve", "--remote", box.at("missing.git")]), status: 64, mentioning: ["not a bare git repository"])
            expectOneLineError(try box.fprep(["serve", "--remote", remote.path, "--listen", "nonsense"]), status: 64, mentioning: ["HOST:PORT"])
            let replica = box.at("B")
            _ = try box.clone(remote.path, replica)
            expectOneLineError(try box.fprep(["watch", "-C", replica]), status: 64, mentioning: ["--service"])
            expectOneLineError(try box.fprep(["watch", "-C", replica, "--service", "ftp://x"]), status: 64, mentioning: ["http://"])
            #expect(lstatInfo(remote.path + "/fprep/hook-secret")?.permissions == 0o600, "init-remote makes the hook secret")
        }
    }
}
