import Crypto
import Foundation
import Glibc
import Testing

// `fprep serve --mirror URL`: a hosted remote's push webhook. The "host" is
// a plain bare repository (no hook, no fprep refs) served by git
// http-backend behind lighttpd on 127.0.0.1 (`SmartHTTPServer`), with basic
// auth that the service's git reaches through a credential helper, as with
// a real host. Pushes to it are plain `git push`; the deliveries are POSTed
// with curl in each host's documented format (`WebhookFixture`), signed
// with the test's secret.

/// A hosted remote: a plain bare repository behind smart HTTP.
struct HostedRemote {
    let server: SmartHTTPServer
    let path: String
    let url: String
    /// A plain git clone to push from.
    let work: String
}

/// One webhook delivery as a host sends it: headers and raw JSON body.
struct WebhookFixture {
    var headers: [String: String]
    var body: Data

    static func hmacHex(_ body: Data, secret: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: body, using: SymmetricKey(data: Data(secret.utf8)))
        return mac.map { String(format: "%02x", $0) }.joined()
    }

    /// GitHub: `X-GitHub-Event`, `X-GitHub-Delivery`, `X-Hub-Signature-256: sha256=HEX`
    /// (docs.github.com, "Webhook events and payloads", push).
    static func github(event: String = "push", delivery: String, ref: String = "refs/heads/main", before: String,
                       after: String, secret: String) -> WebhookFixture {
        let body = Data("""
            {"ref":"\(ref)","before":"\(before)","after":"\(after)","created":false,"deleted":false,"forced":false,\
            "base_ref":null,"compare":"https://github.com/me/photos/compare/\(before.prefix(12))...\(after.prefix(12))",\
            "commits":[{"id":"\(after)","message":"add a file","author":{"name":"E2E Tester","email":"e2e@example.com"}}],\
            "head_commit":{"id":"\(after)"},"repository":{"id":1,"name":"photos","full_name":"me/photos",\
            "clone_url":"https://github.com/me/photos.git","default_branch":"main"},"pusher":{"name":"me"},"sender":{"login":"me"}}
            """.utf8)
        return WebhookFixture(headers: ["X-GitHub-Event": event, "X-GitHub-Delivery": delivery,
                                        "X-GitHub-Hook-ID": "1", "User-Agent": "GitHub-Hookshot/e2e",
                                        "X-Hub-Signature-256": "sha256=" + hmacHex(body, secret: secret)], body: body)
    }

    /// GitLab: `X-Gitlab-Event: Push Hook`, the secret in `X-Gitlab-Token`,
    /// `X-Gitlab-Event-UUID` and `Idempotency-Key` (docs.gitlab.com, "Webhook events", push events).
    static func gitlab(delivery: String, before: String, after: String, token: String) -> WebhookFixture {
        let body = Data("""
            {"object_kind":"push","event_name":"push","before":"\(before)","after":"\(after)","ref":"refs/heads/main",\
            "ref_protected":true,"checkout_sha":"\(after)","user_username":"me","project_id":15,\
            "project":{"id":15,"name":"photos","path_with_namespace":"me/photos","default_branch":"main"},\
            "commits":[{"id":"\(after)","message":"add a file"}],"total_commits_count":1,"repository":{"name":"photos"}}
            """.utf8)
        return WebhookFixture(headers: ["X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": token,
                                        "X-Gitlab-Event-UUID": delivery, "Idempotency-Key": delivery,
                                        "X-Gitlab-Instance": "https://gitlab.example.com", "User-Agent": "GitLab/17.0.0"],
                               body: body)
    }

    /// Gitea (and Forgejo, which adds its own names): `X-Gitea-Event: push`,
    /// `X-Gitea-Delivery`, `X-Gitea-Signature: HEX` without a prefix; Gitea
    /// sends GitHub's headers as well (docs.gitea.com, "Webhooks").
    static func gitea(forgejo: Bool, delivery: String, before: String, after: String, secret: String) -> WebhookFixture {
        let body = Data("""
            {"ref":"refs/heads/main","before":"\(before)","after":"\(after)",\
            "compare_url":"https://gitea.example.com/me/photos/compare/\(before)...\(after)",\
            "commits":[{"id":"\(after)","message":"add a file\\n"}],"total_commits":1,\
            "repository":{"id":3,"name":"photos","full_name":"me/photos"},"pusher":{"login":"me"},"sender":{"login":"me"}}
            """.utf8)
        let signature = hmacHex(body, secret: secret)
        var headers = ["X-Gitea-Event": "push", "X-Gitea-Event-Type": "push", "X-Gitea-Delivery": delivery,
                       "X-Gitea-Signature": signature, "X-Gogs-Event": "push", "X-GitHub-Event": "push",
                       "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": "sha256=" + signature]
        if forgejo {
            headers["X-Forgejo-Event"] = "push"
            headers["X-Forgejo-Delivery"] = delivery
            headers["X-Forgejo-Signature"] = signature
        }
        return WebhookFixture(headers: headers, body: body)
    }
}

extension Sandbox {
    static let webhookSecret = "0f3c9a7e51d24b6e8c1a2f4d6b8e0a13"

    /// A plain bare repository with one file, behind smart HTTP with basic
    /// auth; this sandbox's git (the service's too) has the credentials.
    func makeHostedRemote() throws -> HostedRemote {
        let root = at("host")
        let path = root + "/photos.git"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        try gitOK(["init", "-q", "--bare", "-b", "main", path])
        // What a hosted remote allows: partial clone (fprep's blobless
        // clone), pushes of authenticated users.
        for (key, value) in [("uploadpack.allowFilter", "true"), ("uploadpack.allowAnySHA1InWant", "true"), ("http.receivepack", "true")] {
            try gitOK(["config", key, value], cwd: path)
        }
        let server = try SmartHTTPServer(serving: root, box: self)
        try "http://alice:secret@127.0.0.1:\(server.port)\n".write(toFile: home + "/credentials", atomically: true, encoding: .utf8)
        try "[credential]\n\thelper = store --file=\(home)/credentials\n"
            .write(toFile: home + "/.gitconfig", atomically: true, encoding: .utf8)
        let url = server.url("photos.git")
        let work = at("work")
        try gitOK(["clone", "-q", url, work])
        try "first\n".write(toFile: work + "/a.txt", atomically: true, encoding: .utf8)
        try gitOK(["add", "-A"], cwd: work)
        try gitOK(["commit", "-q", "-m", "first"], cwd: work)
        try gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)
        return HostedRemote(server: server, path: path, url: url, work: work)
    }

    /// Writes the webhook secret (mode 0600) and returns its file.
    func webhookSecretFile() throws -> String {
        let file = at("webhook.secret")
        try (Self.webhookSecret + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o600)
        return file
    }

    /// `fprep serve --mirror` of `host` into `mirror/photos.git`.
    func startMirrorService(_ host: HostedRemote, sweep: Double = 600) throws -> (service: PushService, mirror: String) {
        let mirror = at("mirror/photos.git")
        let service = try startService(mirror, extra: ["--mirror", host.url, "--webhook-secret-file", try webhookSecretFile(),
                                                       "--sweep-interval", String(sweep)])
        return (service, mirror)
    }

    /// POSTs `delivery` to the service's webhook with curl; returns the
    /// status and the answer's body.
    func deliver(_ delivery: WebhookFixture, to service: PushService) throws -> (status: Int, body: String) {
        let bodyFile = at(".io/webhook-\(UUID().uuidString).json")
        try delivery.body.write(to: URL(fileURLWithPath: bodyFile))
        var argv = ["/usr/bin/curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "-X", "POST",
                    "-H", "Content-Type: application/json", "--data-binary", "@" + bodyFile]
        for (name, value) in delivery.headers.sorted(by: { $0.key < $1.key }) { argv += ["-H", "\(name): \(value)"] }
        argv.append(service.url + "/v1/webhook")
        let result = try Shell.run(argv, env: baseEnvironment, ioFolder: io)
        guard result.status == 0, let last = result.stdout.split(separator: "\n").last, let status = Int(last) else {
            throw HarnessError("curl failed: \(result)")
        }
        return (status, String(result.stdout.dropLast(last.count + 1)))
    }

    /// Commits `content` as `file` in the host's work clone and pushes it
    /// with plain git; returns the old and the new tip.
    func pushToHost(_ host: HostedRemote, file: String, content: String) throws -> (before: String, after: String) {
        let before = try gitOK(["rev-parse", "HEAD"], cwd: host.work)
        let (after, push) = try commitAndPush(host.work, file: file, content: content)
        guard push.status == 0 else { throw HarnessError("push to the host failed: \(push)") }
        return (before, after)
    }

    /// The `<id> <size>` lines of the host's size manifest.
    func hostManifest(_ host: HostedRemote) -> [String] {
        guard let log = try? git(["log", "--format=%B", "refs/fprep/sizes"], cwd: host.path), log.status == 0 else { return [] }
        return log.stdout.split(separator: "\n").compactMap { line in
            let words = line.split(separator: " ")
            return words.count == 3 && words[0].count == 40 ? "\(words[0]) \(words[1])" : nil
        }
    }

    /// The blob id of `content`.
    func blobID(_ content: String) throws -> String { try gitOK(["hash-object", "--stdin"], stdin: Data(content.utf8)) }

    /// How many pushes the mirror's outbox holds.
    func outboxCount(_ mirror: String) -> Int {
        guard let result = try? Shell.run(["/usr/bin/sqlite3", mirror + "/fprep/outbox.db", "SELECT count(*) FROM pushes"],
                                          env: baseEnvironment, ioFolder: io), result.status == 0 else { return -1 }
        return Int(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }
}

@Suite("fprep serve --mirror: a hosted remote's webhook", .serialized)
struct MirrorModeTests {
    @Test("a GitHub push delivery reaches a device's fprep watch; the pushed file has its real size; a redelivery does nothing")
    func githubDeliveryReachesDevice() throws {
        try withSandbox { box in
            let host = try box.makeHostedRemote()
            let replica = box.at("B"), other = box.at("C")
            _ = try box.clone(host.url, replica)
            _ = try box.clone(host.url, other)
            let (service, mirror) = try box.startMirrorService(host)
            let watch = try box.spawnFprep(["watch", "-C", replica, "--service", service.url, "--enroll", service.enrollment, "--fallback-interval", "600"])
            #expect(waitUntil { streamOpen(to: service.port) }, "the watcher never opened its stream")

            let ping = try box.deliver(.github(event: "ping", delivery: "ping-1", before: String(repeating: "0", count: 40),
                                               after: String(repeating: "0", count: 40), secret: Sandbox.webhookSecret), to: service)
            #expect(ping.status == 200, "\(ping)")

            let content = String(repeating: "hosted bytes\n", count: 100)
            let (before, after) = try box.pushToHost(host, file: "docs/hosted.txt", content: content)
            let delivery = WebhookFixture.github(delivery: "72d3162e-cc78-11e3-81ab-4c9367dc0958", before: before, after: after,
                                                 secret: Sandbox.webhookSecret)
            let answer = try box.deliver(delivery, to: service)
            #expect(answer.status == 202, "\(answer)")
            #expect(waitUntil { replicaHead(replica) == after }, "replica B did not sync \(after) on the push signal")
            #expect(lstatInfo(replica + "/docs/hosted.txt")?.size == Int64(content.utf8.count), "B's placeholder lacks the real size")
            #expect(try box.hostManifest(host).contains("\(box.blobID(content)) \(content.utf8.count)"), "the host's manifest lacks the blob")

            // Another replica of the host learns the size on its next sync.
            try box.fprepOK(["sync"], cwd: other)
            let item = try box.fprepJSON(["ls", "docs/hosted.txt"], cwd: other).objects("items").first
            #expect(item?.int("size") == content.utf8.count, "\(String(describing: item))")

            // The host delivers the same id again: answered, nothing done.
            #expect(waitUntil { box.outboxCount(mirror) == 1 }, "outbox: \(box.outboxCount(mirror))")
            let again = try box.deliver(delivery, to: service)
            #expect(again.status == 200 && again.body.contains("already received"), "\(again)")
            #expect(box.outboxCount(mirror) == 1)

            watch.signal(SIGTERM)
            #expect(watch.wait(timeout: 60).status == 0)
            let served = service.stop()
            #expect(served.status == 0, "\(served)")
            #expect(served.stderr.contains("received before; nothing to do"), "\(served)")
            #expect(served.stderr.components(separatedBy: "host push: refs/heads/main").count == 2, "one push, once: \(served)")
        }
    }

    @Test("GitLab, Gitea and Forgejo deliveries in their own formats each publish the pushed sizes and signal the push")
    func gitlabGiteaForgejoDeliveries() throws {
        try withSandbox { box in
            let host = try box.makeHostedRemote()
            let (service, mirror) = try box.startMirrorService(host)
            let hosts: [(name: String, make: (String, String) -> WebhookFixture)] = [
                ("gitlab", { .gitlab(delivery: "gl-1", before: $0, after: $1, token: Sandbox.webhookSecret) }),
                ("gitea", { .gitea(forgejo: false, delivery: "gt-1", before: $0, after: $1, secret: Sandbox.webhookSecret) }),
                ("forgejo", { .gitea(forgejo: true, delivery: "fj-1", before: $0, after: $1, secret: Sandbox.webhookSecret) }),
            ]
            for (index, (name, make)) in hosts.enumerated() {
                let content = "pushed for \(name)\n"
                let (before, after) = try box.pushToHost(host, file: "\(name).txt", content: content)
                let answer = try box.deliver(make(before, after), to: service)
                #expect(answer.status == 202, "\(name): \(answer)")
                let line = "\(try box.blobID(content)) \(content.utf8.count)"
                #expect(waitUntil { box.hostManifest(host).contains(line) }, "\(name): the host's manifest lacks \(line)")
                #expect(waitUntil { box.outboxCount(mirror) == index + 1 }, "\(name): outbox \(box.outboxCount(mirror))")
            }
            // A GitLab token that is not the secret.
            var forged = WebhookFixture.gitlab(delivery: "gl-2", before: String(repeating: "1", count: 40),
                                               after: String(repeating: "2", count: 40), token: "not-the-secret-at-all")
            #expect(try box.deliver(forged, to: service).status == 401)
            forged.headers["X-Gitlab-Token"] = nil
            #expect(try box.deliver(forged, to: service).status == 401)
            #expect(service.stop().status == 0)
        }
    }

    @Test("a bad or missing signature gets 401 and nothing is fetched; an event the mirror does not use is ignored")
    func badSignatureDoesNothing() throws {
        try withSandbox { box in
            let host = try box.makeHostedRemote()
            let (service, mirror) = try box.startMirrorService(host)
            let first = try box.gitOK(["rev-parse", "HEAD"], cwd: host.work)
            #expect(waitUntil { (try? box.gitOK(["rev-parse", "refs/heads/main"], cwd: mirror)) == first })
            let (before, after) = try box.pushToHost(host, file: "b.txt", content: "b\n")
            var forged = WebhookFixture.github(delivery: "d-1", before: before, after: after, secret: "another secret of 32 characters!")
            let refused = try box.deliver(forged, to: service)
            #expect(refused.status == 401 && refused.body.contains("X-Hub-Signature-256"), "\(refused)")
            forged.headers["X-Hub-Signature-256"] = nil
            #expect(try box.deliver(forged, to: service).status == 401)
            var gitea = WebhookFixture.gitea(forgejo: false, delivery: "d-2", before: before, after: after, secret: "another secret of 32 characters!")
            gitea.body.append(contentsOf: Array(" ".utf8))
            #expect(try box.deliver(gitea, to: service).status == 401)
            // Signed right, but not a push: ignored.
            let issue = try box.deliver(.github(event: "issues", delivery: "d-3", before: before, after: after,
                                                secret: Sandbox.webhookSecret), to: service)
            #expect(issue.status == 202 && issue.body.contains("ignored"), "\(issue)")
            // None of them queued a fetch (the sweep is 600 s away).
            #expect(try box.gitOK(["rev-parse", "refs/heads/main"], cwd: mirror) == first)
            #expect(box.outboxCount(mirror) == 0)
            // The first pass listed the host's first file; b.txt is not listed.
            #expect(!box.hostManifest(host).contains("\(try box.blobID("b\n")) 2"), "\(box.hostManifest(host))")
            let served = service.stop()
            #expect(served.status == 0)
            #expect(served.stderr.contains("refused: the GitHub signature"), "\(served)")
            #expect(served.stderr.contains("event 'issues' ignored"), "\(served)")
        }
    }

    @Test("a push the host never delivered is caught by the sweep and reaches the device")
    func sweepCatchesUndeliveredPush() throws {
        try withSandbox { box in
            let host = try box.makeHostedRemote()
            let replica = box.at("B")
            _ = try box.clone(host.url, replica)
            let (service, _) = try box.startMirrorService(host, sweep: 1)
            let watch = try box.spawnFprep(["watch", "-C", replica, "--service", service.url, "--enroll", service.enrollment, "--fallback-interval", "600"])
            #expect(waitUntil { streamOpen(to: service.port) }, "the watcher never opened its stream")
            let content = "never announced\n"
            let (_, after) = try box.pushToHost(host, file: "quiet.txt", content: content)
            #expect(waitUntil { replicaHead(replica) == after }, "the sweep did not signal \(after)")
            #expect(lstatInfo(replica + "/quiet.txt")?.size == Int64(content.utf8.count))
            #expect(try box.hostManifest(host).contains("\(box.blobID(content)) \(content.utf8.count)"))
            watch.signal(SIGTERM)
            _ = watch.wait(timeout: 60)
            #expect(service.stop().status == 0)
        }
    }

    @Test("bad input: an unreachable URL, a missing secret file, --mirror without a secret: one line and a non-zero exit")
    func badInput() throws {
        try withSandbox { box in
            let secret = try box.webhookSecretFile()
            let port = try GitDaemon.freePort()
            let unreachable = "http://127.0.0.1:\(port)/nothing.git"
            let mirror = box.at("m.git")
            let down = try box.fprep(["serve", "--mirror", unreachable, "--remote", mirror, "--webhook-secret-file", secret,
                                      "--listen", "127.0.0.1:0"])
            expectOneLineError(down, mentioning: [unreachable])
            #expect(down.stderr.contains(unreachable) && down.stderr.contains("credentials"), "\(down)")
            #expect(!exists(mirror), "a failed start left the mirror folder")

            let missing = try box.fprep(["serve", "--mirror", unreachable, "--remote", mirror, "--webhook-secret-file", box.at("nope"),
                                         "--listen", "127.0.0.1:0"])
            expectOneLineError(missing, status: 64)
            #expect(missing.stderr.contains("webhook secret file") && missing.stderr.contains(box.at("nope")), "\(missing)")

            let noSecret = try box.fprep(["serve", "--mirror", unreachable, "--remote", mirror, "--listen", "127.0.0.1:0"])
            expectOneLineError(noSecret, status: 64)
            #expect(noSecret.stderr.contains("--webhook-secret-file"), "\(noSecret)")

            try "short\n".write(toFile: box.at("short.secret"), atomically: true, encoding: .utf8)
            let short = try box.fprep(["serve", "--mirror", unreachable, "--remote", mirror, "--webhook-secret-file", box.at("short.secret")])
            expectOneLineError(short, status: 64)
        }
    }
}
