import Foundation
import FprepTestSupport
import Glibc
import Testing

// Issue 13.2 and 13.3 end to end: who may register with `fprep serve`
// (enrollment secrets, revocation, domains) and where its webhooks may go
// (the destination policy, signatures a receiver checks and replays it
// catches). Real `fprep serve` and `fprep watch` processes, curl as the
// device, Python http.server as webhook receivers, all on 127.0.0.1.

/// A webhook receiver that records every request (path, headers, body) as a
/// JSON line, and answers 200.
struct Recorder {
    let process: Spawned
    let port: UInt16
    let log: String

    func url(_ path: String, host: String = "127.0.0.1") -> String { "http://\(host):\(port)\(path)" }

    /// The requests received so far.
    func requests() -> [[String: Any]] {
        guard let data = contents(log) else { return [] }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }
}

extension Sandbox {
    static let recorderScript = """
        import http.server, json, sys, time
        class Recorder(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                line = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body.decode()}
                with open(sys.argv[2], "a") as log:
                    log.write(json.dumps(line) + "\\n")
                time.sleep(float(sys.argv[3]))
                self.send_response(200)
                self.end_headers()
            def log_message(self, *args):
                pass
        http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Recorder).serve_forever()
        """

    /// Starts a recording webhook receiver and waits until it listens;
    /// with a `delay`, it answers each request only after that many
    /// seconds, one at a time (a slow endpoint).
    func startRecorder(delay: Double = 0) throws -> Recorder {
        let port = try GitDaemon.freePort()
        let log = at("recorder-\(port).jsonl")
        let process = try spawn(["/usr/bin/python3", "-c", Self.recorderScript, String(port), log, String(delay)])
        guard waitUntil({ isListening(port: port, by: process.pid) || !process.isRunning }), process.isRunning else {
            throw HarnessError("the recorder did not listen: \(process.kill9())")
        }
        return Recorder(process: process, port: port, log: log)
    }

    /// POSTs `body` (JSON) with curl; the status and the answer.
    func post(_ url: String, body: String, headers: [String: String] = [:], method: String = "POST") throws -> (status: Int, body: String) {
        let bodyFile = at(".io/post-\(UUID().uuidString)")
        try Data(body.utf8).write(to: URL(fileURLWithPath: bodyFile))
        var argv = ["/usr/bin/curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method, "-H", "Content-Type: application/json"]
        if method == "POST" { argv += ["--data-binary", "@" + bodyFile] }
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { argv += ["-H", "\(name): \(value)"] }
        argv.append(url)
        let result = try Shell.run(argv, env: baseEnvironment, ioFolder: io)
        guard result.status == 0, let last = result.stdout.split(separator: "\n").last, let status = Int(last) else {
            throw HarnessError("curl failed: \(result)")
        }
        return (status, String(result.stdout.dropLast(last.count + 1)))
    }

    /// Registers a device at `service` with `enrollment` (nil: none) and a
    /// channel (JSON); the status and the answer.
    func register(at service: PushService, domain: String, enrollment: String?, channel: String = #"{"kind":"stream"}"#,
                  name: String = "test device") throws -> (status: Int, body: String) {
        let secret = enrollment.map { #","enrollment":"\#($0)""# } ?? ""
        return try post(service.url + "/v1/devices", body: #"{"domain":"\#(domain)"\#(secret),"name":"\#(name)","channel":\#(channel)}"#)
    }

    /// A webhook channel to `url` with a known secret.
    static func webhook(_ url: String, secret: String = "receiver-secret-0123456789") -> String {
        #"{"kind":"webhook","url":"\#(url)","secret":"\#(secret)"}"#
    }

    /// `fprep serve devices --json`'s devices.
    func listedDevices(_ remote: String) throws -> [[String: Any]] {
        try fprepJSON(["serve", "devices", "--remote", remote]).array("devices").compactMap { $0 as? [String: Any] }
    }
}

/// The JSON object in a service answer.
func answer(_ text: String) -> [String: Any] {
    (try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]) ?? [:]
}

@Suite("fprep serve: enrollment and webhook destinations", .serialized)
struct ServiceAuthTests {
    @Test("registering needs a valid, unexpired, unrevoked enrollment secret of the domain; devices lists what registered")
    func registrationNeedsEnrollment() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(domain: "photos")
            let service = try box.startService(remote.path)
            func expectRefused(_ enrollment: String?, _ words: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
                let (status, body) = try box.register(at: service, domain: "photos", enrollment: enrollment)
                #expect(status == 401, "\(status) \(body)", sourceLocation: sourceLocation)
                let message = answer(body)["error"] as? String ?? ""
                #expect(message.contains(words) && !message.contains("\n"), "\(body)", sourceLocation: sourceLocation)
            }
            try expectRefused(nil, "registering needs an enrollment secret for domain 'photos'")
            try expectRefused("nonsense", "not one 'fprep serve enroll' printed")
            // The right id with another secret, and a made-up id.
            let good = service.enrollment
            let id = String(good.prefix { $0 != "." })
            try expectRefused(id + "." + String(repeating: "0", count: 64), "unknown enrollment secret")
            try expectRefused("enr-0000000000000000." + String(repeating: "a", count: 64), "unknown enrollment secret")

            let expiring = try box.fprepOK(["serve", "enroll", "--remote", remote.path, "--expires", "1s"]).stdout
                .trimmingCharacters(in: .whitespacesAndNewlines)
            usleep(2_100_000)
            try expectRefused(expiring, "expired")

            let revoked = try box.fprepJSON(["serve", "enroll", "--remote", remote.path, "--domain", "photos"])
            let revokedID = try #require(revoked.string("enrollment"))
            try box.fprepOK(["serve", "revoke", "--remote", remote.path, "--enrollment", revokedID])
            try expectRefused(revoked.string("secret"), "was revoked")

            let (status, body) = try box.register(at: service, domain: "photos", enrollment: good, name: "laptop")
            #expect(status == 201, "\(body)")
            let device = try #require(answer(body)["device"] as? String)
            // Another domain with this domain's secret.
            let other = try box.register(at: service, domain: "music", enrollment: good)
            #expect(other.status == 401 && other.body.contains("for domain 'photos', not 'music'"), "\(other)")

            let listed = try box.listedDevices(remote.path)
            #expect(listed.count == 1, "\(listed)")
            #expect(listed.first?["id"] as? String == device && listed.first?["name"] as? String == "laptop"
                    && listed.first?["kind"] as? String == "stream" && listed.first?["domain"] as? String == "photos", "\(listed)")
            #expect((listed.first?["registered"] as? String)?.hasSuffix("Z") == true, "\(listed)")
            let enrollments = try box.fprepJSON(["serve", "devices", "--remote", remote.path]).array("enrollments")
                .compactMap { ($0 as? [String: Any])?["state"] as? String }
            #expect(enrollments.sorted() == ["expired", "revoked", "valid"], "\(enrollments)")
            let text = try box.fprepOK(["serve", "devices", "--remote", remote.path]).stdout
            #expect(text.contains(device) && text.contains("laptop") && text.contains("registered "), "\(text)")

            expectOneLineError(try box.fprep(["serve", "enroll", "--remote", remote.path, "--domain", "music"]), status: 64,
                               mentioning: ["serves domain 'photos', not 'music'"])
            expectOneLineError(try box.fprep(["serve", "enroll", "--remote", remote.path, "--expires", "soon"]), status: 64,
                               mentioning: ["--expires"])
            expectOneLineError(try box.fprep(["serve", "revoke", "--remote", remote.path, "dev-nobody"]), status: 64,
                               mentioning: ["no device 'dev-nobody'"])

            // fprep watch without a secret says why it cannot register, once.
            let replica = box.at("B")
            _ = try box.clone(remote.path, replica)
            let watch = try box.spawnFprep(["watch", "-C", replica, "--service", service.url, "--fallback-interval", "600"])
            #expect(waitUntil { watch.stdoutSoFar.contains("refused to register this replica") }, "\(watch.stdoutSoFar)")
            watch.signal(SIGTERM)
            let watched = watch.wait(timeout: 60)
            #expect(watched.stdout.components(separatedBy: "refused to register").count == 2, "\(watched)")
            #expect(service.stop().status == 0)
        }
    }

    @Test("a device of domain A never hears of domain B's pushes, and B's service refuses A's secret")
    func devicesHearOnlyTheirDomain() throws {
        try withSandbox { box in
            let alpha = try box.makeRemote("alpha.git", domain: "alpha")
            let beta = try box.makeRemote("beta.git", domain: "beta")
            let alphaService = try box.startService(alpha.path)
            let betaService = try box.startService(beta.path)
            let recorder = try box.startRecorder()
            defer { _ = recorder.process.kill9() }
            #expect(try box.register(at: alphaService, domain: "alpha", enrollment: alphaService.enrollment,
                                     channel: Sandbox.webhook(recorder.url("/alpha"))).status == 201)
            #expect(try box.register(at: betaService, domain: "beta", enrollment: betaService.enrollment,
                                     channel: Sandbox.webhook(recorder.url("/beta"))).status == 201)
            let crossed = try box.register(at: betaService, domain: "beta", enrollment: alphaService.enrollment,
                                           channel: Sandbox.webhook(recorder.url("/alpha")))
            #expect(crossed.status == 401, "\(crossed)")
            let foreign = try box.register(at: betaService, domain: "alpha", enrollment: alphaService.enrollment,
                                           channel: Sandbox.webhook(recorder.url("/alpha")))
            #expect(foreign.status == 401, "\(foreign)")

            // A push of domain beta recorded in alpha's outbox (as a confused
            // hook would) reaches no alpha device.
            let script = "import sqlite3,sys\nc=sqlite3.connect(sys.argv[1])\nc.execute(\"insert into pushes(domain,ref,old,new,containers,created_at) values('beta','refs/heads/main',?,?,'',0)\",('0'*40,'1'*40))\nc.commit()"
            _ = try Shell.run(["/usr/bin/python3", "-c", script, alpha.path + "/fprep/outbox.db"], env: box.baseEnvironment, ioFolder: box.io)

            let betaWork = box.at("beta-work")
            try box.gitOK(["clone", "-q", beta.path, betaWork])
            _ = try box.commitAndPush(betaWork, file: "b.txt", content: "beta\n")
            #expect(waitUntil { recorder.requests().contains { $0["path"] as? String == "/beta" } })
            let alphaWork = box.at("alpha-work")
            try box.gitOK(["clone", "-q", alpha.path, alphaWork])
            let (alphaCommit, _) = try box.commitAndPush(alphaWork, file: "a.txt", content: "alpha\n")
            #expect(waitUntil { recorder.requests().contains { $0["path"] as? String == "/alpha" } })
            usleep(500_000)

            for request in recorder.requests() {
                let path = request["path"] as? String ?? ""
                let payload = answer(request["body"] as? String ?? "")
                #expect(payload["domain"] as? String == String(path.dropFirst()), "a push of another domain: \(request)")
                if path == "/alpha" { #expect(payload["new-anchor"] as? String == alphaCommit, "\(request)") }
            }
            let alphaLog = alphaService.stop().stderr
            #expect(alphaLog.contains(String(repeating: "1", count: 12) + ", 0 containers, 0 devices"), "\(alphaLog)")
            _ = betaService.stop()
        }
    }

    @Test("a revoked device's stream ends and its token gets 401; with its enrollment revoked too it cannot come back")
    func revokedDevice() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("B")
            _ = try box.clone(remote.path, replica)
            let service = try box.startService(remote.path)
            let watch = try box.spawnFprep(["watch", "-C", replica, "--service", service.url, "--enroll", service.enrollment,
                                            "--fallback-interval", "600"])
            #expect(waitUntil { streamOpen(to: service.port) }, "the watcher never opened its stream")
            let device = try #require(try box.listedDevices(remote.path).first?["id"] as? String)
            let tokenScript = "import sqlite3,sys\nprint(sqlite3.connect(sys.argv[1]).execute(\"select value from meta where key='push_token'\").fetchone()[0])"
            let token = try Shell.run(["/usr/bin/python3", "-c", tokenScript, replica + "/.fprep/state.db"], env: box.baseEnvironment,
                                      ioFolder: box.io).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(try box.post(service.url + "/v1/devices/me", body: "", headers: ["Authorization": "Bearer \(token)"],
                                 method: "GET").status == 200)

            let enrollment = String(service.enrollment.prefix { $0 != "." })
            try box.fprepOK(["serve", "revoke", "--remote", remote.path, "--enrollment", enrollment])
            try box.fprepOK(["serve", "revoke", "--remote", remote.path, device])
            // The service ended the stream (the watcher's keep-alive
            // connections stay, so the socket table cannot tell).
            #expect(waitUntil { watch.stdoutSoFar.contains("lost the push service (the stream ended)") }, "\(watch.stdoutSoFar)")
            let me = try box.post(service.url + "/v1/devices/me", body: "", headers: ["Authorization": "Bearer \(token)"], method: "GET")
            #expect(me.status == 401, "\(me)")
            #expect(waitUntil { watch.stdoutSoFar.contains("refused to register this replica") && watch.stdoutSoFar.contains("was revoked") },
                    "\(watch.stdoutSoFar)")
            #expect(try box.listedDevices(remote.path).isEmpty)
            watch.signal(SIGTERM)
            _ = watch.wait(timeout: 60)
            let served = service.stop()
            #expect(served.stderr.contains("device \(device) was revoked"), "\(served)")
        }
    }

    @Test("webhooks: loopback refused unless allowed, metadata always, a name resolving to loopback refused at delivery")
    func webhookDestinations() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let domain = try box.gitOK(["config", "--get", "fprep.domain"], cwd: remote.path)
            let recorder = try box.startRecorder()
            defer { _ = recorder.process.kill9() }

            let strict = try box.startService(remote.path, allowLoopbackWebhooks: false)
            for (url, words) in [(recorder.url("/hook"), "loopback"), ("http://127.1:\(recorder.port)/hook", "loopback"),
                                 ("http://[::ffff:127.0.0.1]:\(recorder.port)/hook", "loopback"),
                                 ("http://10.1.2.3/hook", "private"), ("http://[fc00::1]/hook", "private"),
                                 ("http://0.0.0.0:\(recorder.port)/hook", "unspecified"),
                                 ("http://169.254.169.254/latest/meta-data", "cloud metadata"),
                                 ("http://[fd00:ec2::254]/latest", "cloud metadata")] {
                let (status, body) = try box.register(at: strict, domain: domain, enrollment: strict.enrollment, channel: Sandbox.webhook(url))
                #expect(status == 403, "\(url): \(status) \(body)")
                #expect(body.contains(words), "\(url): \(body)")
            }
            let https = try box.register(at: strict, domain: domain, enrollment: strict.enrollment,
                                         channel: Sandbox.webhook("https://example.com/hook"))
            #expect(https.status == 400 && https.body.contains("plain HTTP"), "\(https)")
            _ = strict.stop()

            let allowing = try box.startService(remote.path, extra: ["--allow-webhook-host", "169.254.169.254"])
            let metadata = try box.register(at: allowing, domain: domain, enrollment: allowing.enrollment,
                                            channel: Sandbox.webhook("http://169.254.169.254/latest/meta-data"))
            #expect(metadata.status == 403 && metadata.body.contains("cloud metadata"), "\(metadata)")
            #expect(try box.register(at: allowing, domain: domain, enrollment: allowing.enrollment,
                                     channel: Sandbox.webhook(recorder.url("/allowed"))).status == 201)
            // A name is taken at registration and checked when resolved: localhost is loopback, not allowed.
            let named = try box.register(at: allowing, domain: domain, enrollment: allowing.enrollment,
                                         channel: Sandbox.webhook(recorder.url("/by-name", host: "localhost")))
            #expect(named.status == 201, "\(named)")

            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            _ = try box.commitAndPush(work, file: "x.txt", content: "x\n")
            #expect(waitUntil { recorder.requests().contains { $0["path"] as? String == "/allowed" } })
            #expect(waitUntil { allowing.process.stderrSoFar.contains("refused: 127.0.0.1 is a loopback address (localhost resolves to it)")
                || allowing.process.stderrSoFar.contains("refused: ::1 is a loopback address (localhost resolves to it)") },
                    "\(allowing.process.stderrSoFar)")
            usleep(300_000)
            #expect(!recorder.requests().contains { $0["path"] as? String == "/by-name" }, "\(recorder.requests())")
            let served = allowing.stop()
            #expect(served.stderr.contains("dropped: webhook http://localhost:\(recorder.port)/by-name refused"), "\(served)")
            #expect(!served.stderr.contains("169.254.169.254/latest"), "a metadata webhook was ever tried: \(served)")
            expectOneLineError(try box.fprep(["serve", "--remote", remote.path, "--allow-webhook-host", "http://x/"]), status: 64,
                               mentioning: ["--allow-webhook-host"])
        }
    }

    @Test("a delivery's signature covers its timestamp and id: the README's receiver accepts it once, and tells a replay, a forgery and a stale one")
    func signedDeliveries() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let domain = try box.gitOK(["config", "--get", "fprep.domain"], cwd: remote.path)
            let service = try box.startService(remote.path)
            let recorder = try box.startRecorder()
            defer { _ = recorder.process.kill9() }
            let secret = "receiver-secret-0123456789"
            let registered = try box.register(at: service, domain: domain, enrollment: service.enrollment,
                                              channel: Sandbox.webhook(recorder.url("/hook"), secret: secret))
            let device = try #require(answer(registered.body)["device"] as? String)
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            let before = Int64(Date().timeIntervalSince1970)
            _ = try box.commitAndPush(work, file: "x.txt", content: "x\n")
            #expect(waitUntil { !recorder.requests().isEmpty })
            let after = Int64(Date().timeIntervalSince1970)
            let captured = try #require(recorder.requests().first)
            let headers = try #require(captured["headers"] as? [String: String])
            let body = try #require(captured["body"] as? String)
            #expect(headers["x-fprep-delivery"] == "\(device)-1", "\(headers)")
            let timestamp = try #require(headers["x-fprep-timestamp"].flatMap { Int64($0) })
            #expect((before - 1...after + 1).contains(timestamp), "\(timestamp) not in \(before)...\(after)")

            // The receiver the README shows, run as it is written there.
            let readme = try String(contentsOf: ReadmeTests.packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
            let start = try #require(readme.range(of: "```python\n"))
            let end = try #require(readme.range(of: "```", range: start.upperBound..<readme.endIndex))
            let script = box.at("receiver.py")
            try String(readme[start.upperBound..<end.lowerBound]).write(toFile: script, atomically: true, encoding: .utf8)
            let port = try GitDaemon.freePort()
            let receiver = try box.spawn(["/usr/bin/python3", script], env: ["FPREP_WEBHOOK_SECRET": secret, "PORT": String(port)])
            defer { _ = receiver.kill9() }
            #expect(waitUntil { isListening(port: port, by: receiver.pid) })
            let signed = ["x-fprep-timestamp", "x-fprep-delivery", "x-fprep-signature"].reduce(into: [String: String]()) {
                $0[$1] = headers[$1]
            }
            let url = "http://127.0.0.1:\(port)/hook"
            let first = try box.post(url, body: body, headers: signed)
            #expect(first.status == 200 && first.body.contains("accepted \(device)-1"), "\(first)")
            let replay = try box.post(url, body: body, headers: signed)
            #expect(replay.status == 200 && replay.body.contains("replayed delivery \(device)-1"), "\(replay)")
            let forged = try box.post(url, body: body.replacingOccurrences(of: "}", with: ",\"x\":1}"), headers: signed)
            #expect(forged.status == 401 && forged.body.contains("bad signature"), "\(forged)")
            // The same body and id under another timestamp: the old signature no longer fits.
            var moved = signed
            moved["x-fprep-timestamp"] = String(timestamp + 1)
            let retimed = try box.post(url, body: body, headers: moved)
            #expect(retimed.status == 401 && retimed.body.contains("bad signature"), "\(retimed)")
            // Signed correctly but 10 minutes old.
            let old = String(timestamp - 600)
            let signScript = "import hmac,hashlib,sys\nprint(hmac.new(sys.argv[1].encode(), sys.argv[2].encode(), hashlib.sha256).hexdigest())"
            let mac = try Shell.run(["/usr/bin/python3", "-c", signScript, secret, "\(old).\(device)-9.\(body)"], env: box.baseEnvironment,
                                    ioFolder: box.io).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let stale = try box.post(url, body: body, headers: ["x-fprep-timestamp": old, "x-fprep-delivery": "\(device)-9",
                                                                 "x-fprep-signature": "sha256=" + mac])
            #expect(stale.status == 401 && stale.body.contains("stale timestamp"), "\(stale)")
            #expect(receiver.stdoutSoFar.components(separatedBy: "push \(device)-1").count == 2, "\(receiver.stdoutSoFar)")
            _ = service.stop()
        }
    }
}
