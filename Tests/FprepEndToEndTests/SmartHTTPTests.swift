import Foundation
import FprepTestSupport
import Glibc
import Testing

// A real smart-HTTP git server: `git http-backend` behind lighttpd on
// 127.0.0.1, with HTTP basic auth; clients authenticate through a git
// credential helper, as with a hosted remote.

/// lighttpd serving the bare repositories under `root` at /git/, for the
/// user `alice` with password `secret`; stopped when the test ends.
final class SmartHTTPServer {
    let port: UInt16
    private let process: Spawned

    static let lighttpd = ["/usr/sbin/lighttpd", "/usr/bin/lighttpd"].first { FileManager.default.isExecutableFile(atPath: $0) }

    init(serving root: String, box: Sandbox) throws {
        guard let lighttpd = Self.lighttpd else {
            throw HarnessError("lighttpd is not installed: run scripts/setup.sh (the smart-HTTP tests need a real web server)")
        }
        let backend = try box.gitOK(["--exec-path"]) + "/git-http-backend"
        let folder = box.at("http")
        try FileManager.default.createDirectory(atPath: folder + "/www", withIntermediateDirectories: true)
        try "alice:secret\n".write(toFile: folder + "/users", atomically: true, encoding: .utf8)
        var lastError = ""
        for _ in 0..<5 {
            let port = try GitDaemon.freePort()
            let config = """
                server.document-root = "\(folder)/www"
                server.port = \(port)
                server.bind = "127.0.0.1"
                server.modules += ( "mod_auth", "mod_authn_file", "mod_cgi", "mod_setenv", "mod_alias" )
                server.errorlog = "\(folder)/error.log"
                alias.url += ( "/git" => "\(backend)" )
                $HTTP["url"] =~ "^/git" {
                  cgi.assign = ( "" => "" )
                  setenv.add-environment = ( "GIT_PROJECT_ROOT" => "\(root)", "GIT_HTTP_EXPORT_ALL" => "" )
                }
                auth.backend = "plain"
                auth.backend.plain.userfile = "\(folder)/users"
                auth.require = ( "/git" => ( "method" => "basic", "realm" => "git", "require" => "valid-user" ) )

                """
            try config.write(toFile: folder + "/lighttpd.conf", atomically: true, encoding: .utf8)
            let process = try box.spawn([lighttpd, "-D", "-f", folder + "/lighttpd.conf"])
            let deadline = monotonicSeconds() + patienceSeconds
            while process.isRunning && !isListening(port: port, by: process.pid) && monotonicSeconds() < deadline { usleep(10_000) }
            if isListening(port: port, by: process.pid) {
                self.port = port
                self.process = process
                return
            }
            _ = process.kill9()
            lastError = process.wait(timeout: 60).stderr + ((try? String(contentsOfFile: folder + "/error.log", encoding: .utf8)) ?? "")
        }
        throw HarnessError("lighttpd did not start: \(lastError)")
    }

    func url(_ name: String) -> String { "http://127.0.0.1:\(port)/git/\(name)" }

    deinit { _ = process.kill9() }
}

@Suite("smart HTTP with credentials")
struct SmartHTTPTests {
    @Test("clone, materialize and sync through git http-backend with basic auth and a credential helper; another device sees sizes and content")
    func cloneSyncPushOverHTTP() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let server = try SmartHTTPServer(serving: (remote.path as NSString).deletingLastPathComponent, box: box)
            let url = server.url((remote.path as NSString).lastPathComponent)
            let one = box.at("one"), two = box.at("two")

            // No credentials: one clear line, at once (no prompt), nothing left behind.
            let refused = try box.fprep(["clone", url, one], env: ["GIT_TERMINAL_PROMPT": "0"])
            expectOneLineError(refused, mentioning: ["127.0.0.1"])
            #expect(!FileManager.default.fileExists(atPath: one), "a failed clone left \(one)")

            // A credential helper, as a user of a hosted remote has.
            try "http://alice:secret@127.0.0.1:\(server.port)\n".write(toFile: box.home + "/credentials", atomically: true, encoding: .utf8)
            try "[credential]\n\thelper = store --file=\(box.home)/credentials\n"
                .write(toFile: box.home + "/.gitconfig", atomically: true, encoding: .utf8)
            _ = try box.clone(url, one)
            let listing = try box.fprepJSON(["ls"], cwd: one).objects("items")
            #expect(listing.first { $0.string("identifier") == "bin.dat" }?.int("size") == 10_000, "\(listing)")
            try box.fprepOK(["materialize", "bin.dat"], cwd: one)
            #expect(contents(one + "/bin.dat") == remote.files["bin.dat"])

            // A push through the server; its sizes reach the other device.
            let added = pseudoRandomBytes(4321, seed: 44)
            try added.write(to: URL(fileURLWithPath: one + "/added.bin"))
            let synced = try box.fprepOK(["sync"], cwd: one)
            #expect(!synced.stdout.contains("note:"), "\(synced.stdout)")
            #expect(try box.remoteTree(remote.path)["added.bin"] != nil)
            _ = try box.clone(url, two)
            let item = try box.fprepJSON(["ls", "added.bin"], cwd: two).objects("items").first
            #expect(item?.int("size") == 4321, "\(String(describing: item))")
            try box.fprepOK(["materialize", "added.bin"], cwd: two)
            #expect(contents(two + "/added.bin") == added)
        }
    }

    @Test("an ssh remote (host:path): clone, sync and push through git's ssh transport")
    func sshRemote() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            // What ssh would run on the host, run here: git's ssh transport
            // end to end, without an sshd (the host name is not resolved).
            let ssh = box.at("fake-ssh")
            try writeExecutable("#!/bin/sh\n[ \"$1\" = \"-o\" ] && shift 2\nshift\nexec sh -c \"$*\"\n", to: ssh)
            let env = ["GIT_SSH_COMMAND": ssh]
            let one = box.at("one"), two = box.at("two")
            let url = "devhost:" + remote.path
            try box.fprepOK(["clone", url, one], env: env)
            #expect(try box.fprepJSON(["ls", "bin.dat"], cwd: one).objects("items").first?.int("size") == 10_000)
            try box.fprepOK(["materialize", "a.txt"], cwd: one, env: env)
            #expect(contents(one + "/a.txt") == remote.files["a.txt"])
            try "over ssh\n".write(toFile: one + "/ssh.txt", atomically: true, encoding: .utf8)
            try box.fprepOK(["sync"], cwd: one, env: env)
            try box.fprepOK(["clone", url, two], env: env)
            try box.fprepOK(["materialize", "ssh.txt"], cwd: two, env: env)
            #expect(contents(two + "/ssh.txt") == Data("over ssh\n".utf8))
        }
    }
}
