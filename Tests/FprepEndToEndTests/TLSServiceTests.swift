import Foundation
import Glibc
import Testing

// The service's own API over TLS: a real `fprep serve --tls-cert/--tls-key`
// on 127.0.0.1 with a certificate from a test CA made by the openssl command,
// curl checking HTTP/2 and HTTP/1.1 by ALPN, and `fprep watch --ca` syncing
// on a push over https.

/// A test CA, a second CA that signed nothing, and a server certificate
/// for 127.0.0.1 and localhost signed by the first.
struct TestCertificates {
    let folder: String
    var caFile: String { folder + "/ca.pem" }
    var otherCAFile: String { folder + "/other-ca.pem" }
    var certificateFile: String { folder + "/server.pem" }
    var keyFile: String { folder + "/server.key" }

    static func make(in folder: String) throws -> TestCertificates {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
            .write(toFile: folder + "/server.ext", atomically: true, encoding: .utf8)
        let curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        for argv in [
            ["req", "-x509"] + curve + ["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=fprep test CA"],
            ["req", "-x509"] + curve + ["-keyout", "other-ca.key", "-out", "other-ca.pem", "-days", "2", "-subj", "/CN=fprep other CA"],
            ["req"] + curve + ["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"],
            ["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.pem",
             "-days", "2", "-extfile", "server.ext"],
        ] {
            let result = try Shell.run(["openssl"] + argv, cwd: folder)
            guard result.status == 0 else { throw HarnessError("openssl failed: \(result)") }
        }
        return TestCertificates(folder: folder)
    }
}

@Suite("fprep serve over TLS", .serialized)
struct TLSServiceTests {
    @Test("serve --tls-cert speaks HTTP/2 and HTTP/1.1 by ALPN; watch --ca syncs on a push over https")
    func watchOverTLS() throws {
        try withSandbox { box in
            let certificates = try TestCertificates.make(in: box.at("certs"))
            let remote = try box.makeRemote(domain: "tlsdomain")
            let replica = box.at("B")
            _ = try box.clone(remote.path, replica)
            let service = try box.startService(remote.path, extra: ["--tls-cert", certificates.certificateFile,
                                                                    "--tls-key", certificates.keyFile])
            let url = "https://127.0.0.1:\(service.port)"
            for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
                let curl = try Shell.run(["curl", "-sS", flag, "--cacert", certificates.caFile, "-o", "/dev/null",
                                          "-w", "%{http_version} %{http_code}", url + "/v1/health"])
                #expect(curl.stdout == "\(version) 200", "\(curl)")
            }
            // The event stream over HTTP/2: a device registered with curl reads its first comment.
            let registered = try Shell.run(["curl", "-sS", "--http2", "--cacert", certificates.caFile, "-H", "content-type: application/json",
                                            "-d", #"{"domain":"tlsdomain","enrollment":"\#(service.enrollment)","channel":{"kind":"stream"}}"#,
                                            url + "/v1/devices"])
            let token = try #require((try? JSONSerialization.jsonObject(with: Data(registered.stdout.utf8)) as? [String: Any])?["token"] as? String,
                                     "\(registered)")
            let events = try Shell.run(["curl", "-sS", "--http2", "-N", "--max-time", "3", "--cacert", certificates.caFile,
                                        "-w", "%{http_version}", "-H", "authorization: Bearer \(token)", url + "/v1/events"])
            #expect(events.stdout.hasPrefix(": fprep push stream for dev-") && events.stdout.hasSuffix("\n2"), "\(events)")
            // Plain HTTP to the TLS port gets nothing served.
            let plain = try Shell.run(["curl", "-sS", "--max-time", "10", "http://127.0.0.1:\(service.port)/v1/health"])
            #expect(plain.status != 0 && !plain.stdout.contains("ok"), "\(plain)")

            let watch = try box.spawnFprep(["watch", "-C", replica, "--service", url, "--ca", certificates.caFile,
                                            "--enroll", service.enrollment, "--fallback-interval", "600"])
            #expect(waitUntil { streamOpen(to: service.port) }, "the watcher never opened its stream")
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            let (commit, push) = try box.commitAndPush(work, file: "docs/over-tls.md", content: "over TLS\n")
            #expect(push.status == 0, "\(push)")
            #expect(waitUntil { replicaHead(replica) == commit }, "the replica did not sync \(commit) on the push")

            watch.signal(SIGTERM)
            let watched = watch.wait(timeout: 60)
            #expect(watched.status == 0, "\(watched)")
            #expect(watched.stdout.contains("connected to \(url)"), "\(watched)")
            // Later runs (and the agent) use the recorded service and CA.
            let again = try box.spawnFprep(["watch", "-C", replica, "--fallback-interval", "600"])
            #expect(waitUntil { again.stdoutSoFar.contains("connected to \(url)") }, "the recorded CA was not used")
            again.signal(SIGTERM)
            #expect(again.wait(timeout: 60).status == 0)
            let served = service.stop()
            #expect(served.status == 0, "\(served)")
            #expect(served.stderr.contains("(TLS: HTTP/1.1 and HTTP/2)"), "\(served)")
        }
    }

    @Test("a certificate the watcher does not trust ends it in one line; clear text off loopback and half a TLS pair are refused")
    func refusals() throws {
        try withSandbox { box in
            let certificates = try TestCertificates.make(in: box.at("certs"))
            let remote = try box.makeRemote()
            let service = try box.startService(remote.path, extra: ["--tls-cert", certificates.certificateFile,
                                                                    "--tls-key", certificates.keyFile])
            let url = "https://127.0.0.1:\(service.port)"
            for (name, ca) in [("B", [String]?.some(["--ca", certificates.otherCAFile])), ("C", nil)] {
                let replica = box.at(name)
                _ = try box.clone(remote.path, replica)
                let result = try box.fprep(["watch", "-C", replica, "--service", url, "--enroll", service.enrollment] + (ca ?? []))
                expectOneLineError(result, status: 1, mentioning: ["certificate", "not trusted", "--ca"])
            }
            expectOneLineError(try box.fprep(["watch", "-C", box.at("B"), "--ca", box.at("missing.pem")]), status: 64,
                               mentioning: ["--ca"])
            _ = service.stop()
            expectOneLineError(try box.fprep(["serve", "--remote", remote.path, "--listen", "0.0.0.0:0"]), status: 64,
                               mentioning: ["clear text", "--tls-cert", "--insecure-listen"])
            expectOneLineError(try box.fprep(["serve", "--remote", remote.path, "--tls-cert", certificates.certificateFile]),
                               status: 64, mentioning: ["--tls-key"])
            expectOneLineError(try box.fprep(["serve", "--remote", remote.path, "--tls-cert", certificates.caFile,
                                              "--tls-key", certificates.otherCAFile.replacingOccurrences(of: ".pem", with: ".missing")]),
                               status: 64, mentioning: ["private key"])
            expectOneLineError(try box.fprep(["serve", "--remote", remote.path, "--apns-endpoint", "http://127.0.0.1:1"]),
                               status: 64, mentioning: ["--apns-host"])
        }
    }
}
