import Foundation
import Glibc
import Testing

// Issue 13.6 and 13.8 end to end: several `fprep serve --database
// postgres://…` instances on one real PostgreSQL server (PostgresCluster),
// real remotes and hooks, webhook receivers in Python on 127.0.0.1.

extension Sandbox {
    /// Starts one `fprep serve` instance on the shared database.
    func startInstance(_ remote: String, database: String, poll: String = "0.5", extra: [String] = []) throws -> PushService {
        try startService(remote, extra: ["--database", database, "--poll-interval", poll] + extra, enrollWith: ["--database", database])
    }
}

/// What the webhook requests to each path say: per device path, its events
/// as (delivery id, event id, old anchor, new anchor), in the order received.
func deliveries(_ recorder: Recorder) -> [String: [(delivery: String, seq: Int, old: String, new: String)]] {
    var result: [String: [(String, Int, String, String)]] = [:]
    for request in recorder.requests() {
        let headers = request["headers"] as? [String: String] ?? [:]
        let payload = answer(request["body"] as? String ?? "")
        result[request["path"] as? String ?? "", default: []].append((
            headers["x-fprep-delivery"] ?? "", Int(headers["x-fprep-event-id"] ?? "") ?? 0,
            payload["old-anchor"] as? String ?? "", payload["new-anchor"] as? String ?? ""))
    }
    return result
}

/// Whether a device's distinct events, by sequence number, chain from
/// `start` to `end` with no gap (every push covered, in order).
func chains(_ events: [(delivery: String, seq: Int, old: String, new: String)], from start: String, to end: String) -> Bool {
    var bySeq: [Int: (old: String, new: String)] = [:]
    for event in events { bySeq[event.seq] = (event.old, event.new) }
    var anchor = start
    for seq in bySeq.keys.sorted() {
        guard bySeq[seq]?.old == anchor, let next = bySeq[seq]?.new else { return false }
        anchor = next
    }
    return anchor == end
}

@Suite("fprep serve on PostgreSQL: several instances", .serialized)
struct PostgresServiceTests {
    @Test("two instances on one database: every webhook device gets every push exactly once, whichever instance it registered at")
    func twoInstancesDeliverOnce() throws {
        try withSandbox { box in
            try withPostgres(box) { postgres in
                let remote = try box.makeRemote()
                let domain = try box.gitOK(["config", "--get", "fprep.domain"], cwd: remote.path)
                let start = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
                let first = try box.startInstance(remote.path, database: postgres.url)
                let second = try box.startInstance(remote.path, database: postgres.url)
                let recorder = try box.startRecorder()
                defer { _ = recorder.process.kill9() }
                let devices = 6
                for n in 0..<devices {
                    let at = n % 2 == 0 ? first : second
                    let registered = try box.register(at: at, domain: domain, enrollment: first.enrollment,
                                                      channel: Sandbox.webhook(recorder.url("/device-\(n)")))
                    #expect(registered.status == 201, "\(registered)")
                }
                let listed = try box.fprepJSON(["serve", "devices", "--remote", remote.path, "--database", postgres.url]).array("devices")
                #expect(listed.count == devices, "\(listed)")

                let work = box.at("work")
                try box.gitOK(["clone", "-q", remote.path, work])
                // One push at a time, then a burst that dispatches may coalesce.
                var last = start
                for round in 1...3 {
                    (last, _) = try box.commitAndPush(work, file: "one-\(round).txt", content: "\(round)\n")
                    let commit = last
                    #expect(waitUntil { deliveries(recorder).values.filter { $0.contains { $0.new == commit } }.count == devices },
                            "round \(round): \(deliveries(recorder))")
                }
                for round in 1...4 { (last, _) = try box.commitAndPush(work, file: "burst-\(round).txt", content: "\(round)\n") }
                let end = last
                #expect(waitUntil { deliveries(recorder).values.filter { $0.contains { $0.new == end } }.count == devices },
                        "\(deliveries(recorder))")
                // Anything sent twice would have come by now.
                usleep(1_500_000)
                let received = deliveries(recorder)
                #expect(received.count == devices, "\(received.keys.sorted())")
                for (path, events) in received {
                    #expect(Set(events.map(\.delivery)).count == events.count, "\(path) got a delivery twice: \(events)")
                    #expect(chains(events, from: start, to: end), "\(path) missed a push: \(events)")
                }
                let logs = [first.stop(), second.stop()]
                for log in logs { #expect(log.status == 0 && !looksLikeCrash(log.stderr), "\(log)") }
                // Each push was read into events once, by one instance or the other.
                let dispatched = logs.map { $0.stderr.components(separatedBy: "\n").filter { $0.contains(": push ") && $0.contains(" to webhooks and APNs: ") && $0.hasSuffix(", \(devices) devices") }.count }
                #expect(dispatched.reduce(0, +) == 7, "\(logs.map(\.stderr))")
                for log in logs { #expect(!log.stderr.contains("ERROR") && !log.stderr.contains("cannot"), "\(log.stderr)") }
            }
        }
    }

    @Test("the hook pokes each instance's address in turn, the last started first: a push is dispatched at once after that one stopped or was killed")
    func hookPokesTheOthers() throws {
        try withSandbox { box in
            try withPostgres(box) { postgres in
                let remote = try box.makeRemote()
                let domain = try box.gitOK(["config", "--get", "fprep.domain"], cwd: remote.path)
                // No outbox reads but on a poke: a push is delivered only if the hook reached a live instance.
                let first = try box.startInstance(remote.path, database: postgres.url, poll: "600")
                let second = try box.startInstance(remote.path, database: postgres.url, poll: "600")
                func addresses() throws -> [String] {
                    try box.gitOK(["config", "--get-all", "fprep.service"], cwd: remote.path).split(separator: "\n").map(String.init)
                }
                // Recorded just after it listens.
                #expect(waitUntil { (try? addresses()) == [first.url, second.url] }, "each instance records its own address: \((try? addresses()) ?? [])")
                let recorder = try box.startRecorder()
                defer { _ = recorder.process.kill9() }
                let registered = try box.register(at: first, domain: domain, enrollment: first.enrollment,
                                                  channel: Sandbox.webhook(recorder.url("/device")))
                #expect(registered.status == 201, "\(registered)")
                let work = box.at("work")
                try box.gitOK(["clone", "-q", remote.path, work])
                func pushIsDelivered(_ file: String) throws -> Bool {
                    let (commit, push) = try box.commitAndPush(work, file: file, content: "\(file)\n")
                    #expect(push.status == 0, "\(push)")
                    return waitUntil { deliveries(recorder)["/device"]?.contains { $0.new == commit } == true }
                }
                // The last started stopped: it took its address back, the hook pokes the first.
                let stopped = second.stop()
                #expect(stopped.status == 0, "\(stopped)")
                #expect(try addresses() == [first.url])
                #expect(try pushIsDelivered("after-stop.txt"), "\(deliveries(recorder))")
                // One started after it, then killed: its address stays and refuses; the hook goes on to the first.
                let third = try box.startInstance(remote.path, database: postgres.url, poll: "600")
                #expect(waitUntil { (try? addresses()) == [first.url, third.url] }, "\((try? addresses()) ?? [])")
                _ = third.process.kill9()
                #expect(try pushIsDelivered("after-kill.txt"), "\(deliveries(recorder))")
                let log = first.stop()
                #expect(log.status == 0 && !looksLikeCrash(log.stderr), "\(log)")
            }
        }
    }

    @Test("an instance killed with -9 mid-delivery loses nothing: the other takes its devices over and sends the rest")
    func killedInstanceLosesNothing() throws {
        try withSandbox { box in
            try withPostgres(box) { postgres in
                let remote = try box.makeRemote()
                let domain = try box.gitOK(["config", "--get", "fprep.domain"], cwd: remote.path)
                let start = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
                // Only the first instance runs when the pushes come: it dispatches them and sends to every device.
                let doomed = try box.startInstance(remote.path, database: postgres.url)
                let slow = try box.startRecorder(delay: 0.6)
                defer { _ = slow.process.kill9() }
                let devices = 4
                for n in 0..<devices {
                    #expect(try box.register(at: doomed, domain: domain, enrollment: doomed.enrollment,
                                             channel: Sandbox.webhook(slow.url("/device-\(n)"))).status == 201)
                }
                let work = box.at("work")
                try box.gitOK(["clone", "-q", remote.path, work])
                var end = start
                for round in 1...3 {
                    (end, _) = try box.commitAndPush(work, file: "r\(round).txt", content: "\(round)\n")
                    let commit = end
                    #expect(waitUntil { try! postgres.sql(box, "SELECT count(*) FROM fprep_pushes WHERE new = '\(commit)' AND batch IS NOT NULL") == "1" })
                }
                let survivor = try box.startInstance(remote.path, database: postgres.url)
                // Mid-delivery: the slow receiver has taken some events, not all.
                #expect(waitUntil { slow.requests().count >= 2 }, "\(slow.requests())")
                let killed = doomed.process.kill9()
                let before = slow.requests().count
                #expect(before < devices * 3, "the deliveries were over before the kill: \(before)")

                #expect(waitUntil { deliveries(slow).count == devices && deliveries(slow).values.allSatisfy { chains($0, from: start, to: end) } },
                        "\(deliveries(slow)) \(survivor.process.stderrSoFar)")
                usleep(1_000_000)
                let received = deliveries(slow)
                let total = received.values.map(\.count).reduce(0, +)
                let distinct = received.values.map { Set($0.map(\.delivery)).count }.reduce(0, +)
                print("kill -9 mid-delivery: \(before) requests before the kill, \(total) in all, \(total - distinct) sent again after the takeover")
                let served = survivor.stop()
                #expect(served.stderr.contains("took over device"), "\(served)")
                #expect(served.status == 0 && !looksLikeCrash(killed.stderr + served.stderr), "\(served)")
            }
        }
    }

    @Test("an fprep watch connected to one instance is woken by a push the other instance dispatched; a revocation reaches both")
    func streamWokenByTheOtherInstance() throws {
        try withSandbox { box in
            try withPostgres(box) { postgres in
                let remote = try box.makeRemote()
                let replica = box.at("B")
                _ = try box.clone(remote.path, replica)
                // The first never reads the outbox by itself; the hook pokes the last instance started.
                let quiet = try box.startInstance(remote.path, database: postgres.url, poll: "600")
                let busy = try box.startInstance(remote.path, database: postgres.url)
                let watch = try box.spawnFprep(["watch", "-C", replica, "--service", quiet.url, "--enroll", quiet.enrollment,
                                                "--fallback-interval", "600"])
                #expect(waitUntil { streamOpen(to: quiet.port) }, "the watcher never opened its stream")
                let work = box.at("work")
                try box.gitOK(["clone", "-q", remote.path, work])
                let (commit, push) = try box.commitAndPush(work, file: "docs/woken.md", content: "woken\n")
                #expect(push.status == 0, "\(push)")
                #expect(waitUntil { replicaHead(replica) == commit }, "\(quiet.process.stderrSoFar) \(busy.process.stderrSoFar)")

                // Revoked with the admin command on the database: the stream on the quiet instance ends.
                let device = try #require(try box.fprepJSON(["serve", "devices", "--remote", remote.path, "--database", postgres.url])
                    .objects("devices").first?["id"] as? String)
                try box.fprepOK(["serve", "revoke", "--remote", remote.path, "--database", postgres.url, device])
                #expect(waitUntil { watch.stdoutSoFar.contains("lost the push service (the stream ended)") }, "\(watch.stdoutSoFar)")
                watch.signal(SIGTERM)
                _ = watch.wait(timeout: 60)
                let quietLog = quiet.stop().stderr
                let busyLog = busy.stop().stderr
                // Push 1 is the import's, before any device; push 2 is the one the watcher got.
                // The watcher's device heard of it in the dispatch's first step, the one for event streams.
                #expect(busyLog.split(separator: "\n").contains { $0.contains("push 2 to event streams: refs/heads/main") && $0.hasSuffix(", 1 device") }
                        && !quietLog.contains("push 2 "), "\(quietLog)\n\(busyLog)")
                #expect(quietLog.contains("device \(device) was revoked"), "\(quietLog)")
            }
        }
    }

    @Test("a registration flood is answered (created, or 429 with when to retry); revoked and expired secrets are refused; the service stays up and a registered device still gets its pushes")
    func registrationFlood() throws {
        try withSandbox { box in
            try withPostgres(box) { postgres in
                let remote = try box.makeRemote()
                let domain = try box.gitOK(["config", "--get", "fprep.domain"], cwd: remote.path)
                let service = try box.startInstance(remote.path, database: postgres.url)
                let recorder = try box.startRecorder()
                defer { _ = recorder.process.kill9() }
                #expect(try box.register(at: service, domain: domain, enrollment: service.enrollment,
                                         channel: Sandbox.webhook(recorder.url("/kept"))).status == 201)
                // 400 registrations as fast as one client can send them, on kept-alive connections.
                let flood = """
                    import http.client, json, sys, collections
                    statuses = collections.Counter(); refusal = ""
                    body = json.dumps({"domain": sys.argv[2], "enrollment": sys.argv[3], "channel": {"kind": "stream"}})
                    connection = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
                    for n in range(400):
                        connection.request("POST", "/v1/devices", body, {"content-type": "application/json"})
                        response = connection.getresponse(); answer = response.read()
                        statuses[response.status] += 1
                        if response.status == 429: refusal = answer.decode()
                        if response.getheader("connection", "").lower() == "close":
                            connection = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
                    print(json.dumps({"statuses": statuses, "refusal": refusal}))
                    """
                let run = try Shell.run(["/usr/bin/python3", "-c", flood, String(service.port), domain, service.enrollment],
                                        env: box.baseEnvironment, timeout: 120, ioFolder: box.io)
                #expect(run.status == 0, "\(run)")
                let outcome = answer(run.stdout)
                let statuses = (outcome["statuses"] as? [String: Int]) ?? [:]
                #expect(Set(statuses.keys).isSubset(of: ["201", "429"]) && statuses["201", default: 0] > 0 && statuses["429", default: 0] > 0,
                        "\(run.stdout)")
                let refusal = answer(outcome["refusal"] as? String ?? "")["error"] as? String ?? ""
                #expect(refusal.contains("too many requests; retry in"), "\(run.stdout)")
                #expect(service.process.isRunning)

                // A stolen secret, revoked on the database; one that expired: refused with why, at once.
                let stolen = String(service.enrollment.prefix { $0 != "." })
                try box.fprepOK(["serve", "revoke", "--remote", remote.path, "--database", postgres.url, "--enrollment", stolen])
                usleep(1_100_000)  // the rate limiter's bucket refills
                let refused = try box.register(at: service, domain: domain, enrollment: service.enrollment)
                #expect(refused.status == 401 && refused.body.contains("was revoked"), "\(refused)")
                let expiring = try box.fprepOK(["serve", "enroll", "--remote", remote.path, "--database", postgres.url, "--expires", "1s"])
                    .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
                usleep(2_100_000)
                let expired = try box.register(at: service, domain: domain, enrollment: expiring)
                #expect(expired.status == 401 && expired.body.contains("expired"), "\(expired)")

                let work = box.at("work")
                try box.gitOK(["clone", "-q", remote.path, work])
                let (commit, _) = try box.commitAndPush(work, file: "after-flood.txt", content: "still here\n")
                #expect(waitUntil { deliveries(recorder)["/kept"]?.contains { $0.new == commit } == true }, "\(service.process.stderrSoFar)")
                let served = service.stop()
                #expect(served.status == 0 && !looksLikeCrash(served.stderr), "\(served)")
            }
        }
    }

    @Test("a bad --database URL, an unreachable server and a wrong password: one clear line and a non-zero exit")
    func badDatabase() throws {
        try withSandbox { box in
            try withPostgres(box) { postgres in
                let remote = try box.makeRemote()
                let unused = try GitDaemon.freePort()
                expectOneLineError(try box.fprep(["serve", "--remote", remote.path, "--database", "mysql://x@y/z"]), status: 64,
                                   mentioning: ["is not a postgres:// URL for --database"])
                expectOneLineError(try box.fprep(["serve", "--remote", remote.path, "--database", "postgres://u:p@127.0.0.1:99999/x"]),
                                   status: 64, mentioning: ["no valid port", "u:***@"])
                expectOneLineError(try box.fprep(["serve", "--remote", remote.path, "--database", "postgres://postgres:pw@127.0.0.1:\(unused)/postgres"]),
                                   mentioning: ["cannot connect to the database at 127.0.0.1:\(unused)/postgres", "refused"])
                let wrong = "postgres://postgres:not-the-password@127.0.0.1:\(postgres.port)/postgres"
                for command in [["serve"], ["serve", "devices"], ["serve", "enroll"]] {
                    let result = try box.fprep(command + ["--remote", remote.path, "--database", wrong])
                    expectOneLineError(result, mentioning: ["cannot connect to the database", "password authentication failed"])
                    #expect(!result.stderr.contains("not-the-password"), "\(result)")
                }
            }
        }
    }
}
