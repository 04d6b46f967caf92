import Foundation
import FprepTestSupport
import Glibc
import Testing

// The agent runs as root (fanotify needs it), but everything it does in a
// replica runs as the replica's owner: a user's git configuration and
// hooks never run as root, and what the agent writes in `.fprep` and
// `.git` stays the owner's. Real kernel, real users (`nobody`, or one made
// with useradd), real git.

/// An unprivileged account to own replicas: `nobody`, else one made for the tests.
struct TestUser {
    let name: String
    let uid: uid_t
    let gid: gid_t

    static func find(sourceLocation: SourceLocation = #_sourceLocation) throws -> TestUser {
        for name in ["nobody", "fprep-e2e-owner"] {
            if let entry = getpwnam(name) { return TestUser(name: name, uid: entry.pointee.pw_uid, gid: entry.pointee.pw_gid) }
            if name == "fprep-e2e-owner" {
                _ = try? Shell.run(["/usr/sbin/useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
                if let entry = getpwnam(name) { return TestUser(name: name, uid: entry.pointee.pw_uid, gid: entry.pointee.pw_gid) }
            }
        }
        Issue.record("these tests need an unprivileged user: neither 'nobody' exists nor could 'useradd fprep-e2e-owner' make one (run them as root)",
                     sourceLocation: sourceLocation)
        throw HarnessError("no unprivileged user")
    }
}

extension Sandbox {
    /// Runs `argv` as `user` (its uid, gid and groups), as that user would.
    func run(as user: TestUser, _ argv: [String], cwd: String? = nil) throws -> RunResult {
        try Shell.run(["/usr/bin/setpriv", "--reuid=\(user.uid)", "--regid=\(user.gid)", "--init-groups"] + argv,
                      cwd: cwd ?? path, env: baseEnvironment, timeout: 120, ioFolder: io)
    }

    /// A closed test gate (see `TestGate`) in a folder anyone may write, for
    /// a command that runs as another user than the test.
    func closedGateAnyoneMayOpen(_ name: String) throws -> String {
        let gates = at("gates")
        try FileManager.default.createDirectory(atPath: gates, withIntermediateDirectories: true)
        chmod(gates, 0o777)
        let gate = gates + "/" + name
        guard FileManager.default.createFile(atPath: gate, contents: Data()) else { throw HarnessError("cannot make the gate \(gate)") }
        return gate
    }

    /// A replica `user` cloned (and a remote it owns), whose git
    /// configuration and hooks run a program that appends the uid it runs
    /// as to `uids`: the remote's upload-pack (every fetch of content runs
    /// it), core.fsmonitor, core.sshCommand and the hooks.
    func replicaOwned(by user: TestUser) throws -> (replica: String, remote: Remote, uids: String) {
        // The sandbox is root's 0700 folder: let the user in.
        chmod(path, 0o755)
        let remote = try makeRemote()
        _ = try Shell.run(["/bin/chown", "-R", "\(user.uid):\(user.gid)", remote.path])
        let folder = at("user")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        chown(folder, user.uid, user.gid)
        let replica = folder + "/replica"
        let cloned = try run(as: user, [Binaries.fprep, "clone", remote.path, replica])
        guard cloned.status == 0 else { throw HarnessError("clone as \(user.name) failed: \(cloned)") }

        // Whoever runs the probe can write its record (root always could).
        let probe = at("probe")
        try FileManager.default.createDirectory(atPath: probe, withIntermediateDirectories: true)
        chmod(probe, 0o777)
        let uids = probe + "/uids"
        let record = probe + "/record"
        try writeExecutable("#!/bin/sh\nid -u >> '\(uids)'\n", to: record)
        for (key, value) in [("remote.origin.uploadpack", "\(record); git-upload-pack"), ("core.fsmonitor", record),
                             ("core.sshCommand", record)] {
            let set = try run(as: user, [Binaries.git, "-C", replica, "config", key, value])
            guard set.status == 0 else { throw HarnessError("git config as \(user.name) failed: \(set)") }
        }
        for hook in ["reference-transaction", "post-checkout", "post-merge", "pre-push", "post-index-change", "pre-auto-gc"] {
            let copied = try run(as: user, ["/bin/cp", record, replica + "/.git/hooks/" + hook])
            guard copied.status == 0 else { throw HarnessError("cp as \(user.name) failed: \(copied)") }
        }
        return (replica, remote, uids)
    }
}

/// The agent's worker processes (`fprep agent worker`), by their command line.
func agentWorkers(of agent: pid_t) -> [pid_t] {
    Shell.childProcesses(of: agent).filter { pid in
        (contents("/proc/\(pid)/cmdline").map { Array($0) } ?? []).split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
            .starts(with: ["fprep", "agent", "worker"])
    }
}

/// The uids the probe recorded, one per run.
func recordedUIDs(_ path: String) -> [String] {
    (contents(path).map { String(decoding: $0, as: UTF8.self) } ?? "").split(separator: "\n").map(String.init)
}

/// What in `.fprep` and `.git` does not belong to `user` (find's list).
func notOwned(_ replica: String, by user: TestUser) throws -> [String] {
    let found = try Shell.run(["/usr/bin/find", replica + "/.fprep", replica + "/.git", "!", "-uid", "\(user.uid)"])
    return found.stdout.split(separator: "\n").map(String.init)
}

@Suite("the agent acts for a replica as its owner, never as root", .serialized)
struct AgentPrivilegeTests {
    /// What each test checks once a file was hydrated under an agent.
    private func expectOwnerOnly(_ s: Sandbox, _ user: TestUser, replica: String, uids: String, agent: Spawned) throws {
        let read = try s.python(readProgram, ["bin.dat"], cwd: replica)
        #expect(read.status == 0 && read.stdoutData == pseudoRandomBytes(10_000, seed: 1), "\(read.status) \(agent.stderrSoFar)")
        let ran = recordedUIDs(uids)
        #expect(!ran.isEmpty, "the fetch ran the remote's upload-pack of the replica's config: \(agent.stderrSoFar)")
        #expect(ran.allSatisfy { $0 == "\(user.uid)" }, "the replica's git config ran as uid \(ran), not only as its owner \(user.uid)")
        #expect(try notOwned(replica, by: user) == [], "the agent left files its owner does not own")
        var hydrated = stat()
        #expect(lstat(replica + "/bin.dat", &hydrated) == 0 && hydrated.st_uid == user.uid, "the hydrated file is still the owner's")

        // The owner's own commands work alongside the agent.
        let status = try s.run(as: user, [Binaries.fprep, "status", "-C", replica, "--json"])
        #expect(status.status == 0, "\(status)")
        #expect(((try? status.json())?.int("agent")) == Int(agent.pid), "the owner's status names the agent: \(status)")
        let change = try s.run(as: user, ["/bin/sh", "-c", "echo 'the owner changed it' > a.txt"], cwd: replica)
        #expect(change.status == 0, "\(change)")
        let sync = try s.run(as: user, [Binaries.fprep, "sync", "-C", replica])
        #expect(sync.status == 0, "\(sync)")
        #expect(recordedUIDs(uids).allSatisfy { $0 == "\(user.uid)" }, "\(recordedUIDs(uids))")
    }

    @Test("fprep agent -C: a replica's git config that runs a command runs it as the replica's owner, never as root; what the agent writes in .fprep and .git is the owner's (what an agent running as root left root's is given back); the owner's status and sync work alongside")
    func foregroundAgentActsAsOwner() throws {
        let user = try TestUser.find()
        try withSandbox { s in
            let (replica, _, uids) = try s.replicaOwned(by: user)
            // As an agent that ran as root left them: its agent.pid, the index it wrote.
            #expect(FileManager.default.createFile(atPath: replica + "/.fprep/agent.pid", contents: Data()))
            chown(replica + "/.git/index", 0, 0)
            let agent = try s.startAgent(replica)
            #expect(agent.stderrSoFar.contains("gave 2 files of \(replica) that an agent running as root had left root's back to its owner"), "\(agent.stderrSoFar)")
            try expectOwnerOnly(s, user, replica: replica, uids: uids, agent: agent)
            let stopped = stopAgent(agent)
            #expect(stopped.status == 0, "\(stopped)")
            #expect(try notOwned(replica, by: user) == [], "after the agent stopped")
            let after = try s.run(as: user, [Binaries.fprep, "sync", "-C", replica])
            #expect(after.status == 0, "the owner's sync once the agent is gone: \(after)")
        }
    }

    @Test("fprep agent run: a registered replica owned by a user is served as that user")
    func daemonActsAsOwner() throws {
        let user = try TestUser.find()
        try withSandbox { s in
            let (replica, _, uids) = try s.replicaOwned(by: user)
            let added = try s.agentCommand(["add", replica])
            #expect(added.status == 0, "\(added)")
            let agent = try s.startAgentDaemon()
            #expect(waitUntil { served(replica, by: agent.pid) }, "\(agent.stderrSoFar)")
            try expectOwnerOnly(s, user, replica: replica, uids: uids, agent: agent)
            _ = stopAgent(agent)
            #expect(try notOwned(replica, by: user) == [], "after the agent stopped")
        }
    }

    @Test("a replica whose .git or .fprep belongs to another user than its folder is refused in one line")
    func mixedOwnersRefused() throws {
        let user = try TestUser.find()
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            chown(replica, user.uid, user.gid)
            let refused = try s.fprep(["agent", "-C", replica], timeout: 30)
            expectOneLineError(refused, mentioning: [".git", "belongs to uid 0", "uid \(user.uid)"])
            #expect(!FileManager.default.fileExists(atPath: replica + "/.fprep/agent.pid"), "nothing was touched")
        }
    }

    @Test("the owner kills the agent's worker: agent -C stops in one line, and agent run serves the replica again with a new worker")
    func workerKilled() throws {
        let user = try TestUser.find()
        try withSandbox { s in
            let (replica, _, _) = try s.replicaOwned(by: user)
            let agent = try s.startAgent(replica)
            let workers = agentWorkers(of: agent.pid)
            #expect(workers.count == 1, "one worker per replica: \(workers)")
            var owner = stat()
            #expect(workers.first.map { stat("/proc/\($0)", &owner) == 0 && owner.st_uid == user.uid } == true, "the worker runs as the owner")
            for worker in workers { kill(worker, SIGKILL) }
            let ended = agent.wait(timeout: 30)
            // Its log, then the one line of the error.
            let last = ended.stderr.split(separator: "\n").last.map(String.init) ?? ""
            #expect(ended.status == 1 && last.hasPrefix("fprep: the replica's worker process") && last.contains("killed by signal 9"),
                    "\(ended)")

            let added = try s.agentCommand(["add", replica])
            #expect(added.status == 0, "\(added)")
            let daemon = try s.startAgentDaemon(env: ["FPREP_TEST_AGENT_RETRY_SECONDS": "1"])
            #expect(waitUntil { served(replica, by: daemon.pid) && agentWorkers(of: daemon.pid).count == 1 }, "\(daemon.stderrSoFar)")
            let first = agentWorkers(of: daemon.pid)
            for worker in first { kill(worker, SIGKILL) }
            #expect(waitUntil { daemon.stderrSoFar.contains("cannot serve \(replica): the replica's worker process") }, "\(daemon.stderrSoFar)")
            #expect(waitUntil {
                let now = agentWorkers(of: daemon.pid)
                return now.count == 1 && now != first && (try? s.agentReplicaStatus(replica))?["state"] as? String == "serving"
            }, "served again: \(daemon.stderrSoFar)")
            let read = try s.python(readProgram, ["bin.dat"], cwd: replica)
            #expect(read.status == 0 && read.stdoutData == pseudoRandomBytes(10_000, seed: 1), "\(read.status) \(daemon.stderrSoFar)")
            _ = stopAgent(daemon)
        }
    }

    @Test("a file its owner made read-only is filled by the agent and evicted all the same (fprep writes it with the owner's permission) and keeps its mode")
    func readOnlyPlaceholderIsFilled() throws {
        let user = try TestUser.find()
        try withSandbox { s in
            let (replica, _, _) = try s.replicaOwned(by: user)
            #expect(chmod(replica + "/bin.dat", 0o444) == 0)
            let agent = try s.startAgent(replica)
            let read = try s.run(as: user, ["/usr/bin/python3", "-c", readProgram, "bin.dat"], cwd: replica)
            #expect(read.status == 0 && read.stdoutData == pseudoRandomBytes(10_000, seed: 1), "\(read.status) \(agent.stderrSoFar)")
            var filled = stat()
            #expect(lstat(replica + "/bin.dat", &filled) == 0 && filled.st_mode & 0o7777 == 0o444 && filled.st_uid == user.uid,
                    "the mode the owner gave it is kept")
            let status = try s.run(as: user, [Binaries.fprep, "status", "-C", replica, "--json"])
            #expect(status.status == 0 && (try? status.json())?.int("modified") ?? -1 == 0, "filling is no change of the user's: \(status)")
            _ = stopAgent(agent)
            // Evict writes into it too (the punch).
            let evicted = try s.run(as: user, [Binaries.fprep, "evict", "-C", replica, "bin.dat"])
            #expect(evicted.status == 0, "\(evicted)")
            #expect(lstat(replica + "/bin.dat", &filled) == 0 && filled.st_blocks == 0 && filled.st_mode & 0o7777 == 0o444,
                    "evicted, its mode kept")
        }
    }

    @Test("the agent killed while it fills a file its owner made read-only: the next command gives the file its mode back")
    func readOnlyModeComesBackAfterAKill() throws {
        let user = try TestUser.find()
        try withSandbox { s in
            let (replica, _, _) = try s.replicaOwned(by: user)
            #expect(chmod(replica + "/bin.dat", 0o444) == 0)
            // The worker runs as the owner: its gate is where the owner may write.
            let gate = try s.closedGateAnyoneMayOpen("fill")
            let agent = try s.startAgent(replica, env: ["FPREP_TEST_FILL_GATE": gate])
            let reader = try s.spawnPython(readProgram, ["bin.dat"], cwd: replica)
            #expect(waitUntil { exists(gate + ".waiting") }, "the fill holds the file, open for writing: \(agent.stderrSoFar)")
            var held = stat()
            #expect(lstat(replica + "/bin.dat", &held) == 0 && held.st_mode & 0o7777 == 0o644, "the fill gave the owner write permission")
            let workers = agentWorkers(of: agent.pid)
            _ = agent.kill9()
            for worker in workers { kill(worker, SIGKILL) }
            _ = reader.wait(timeout: patienceSeconds)
            let status = try s.run(as: user, [Binaries.fprep, "status", "-C", replica, "--json"])
            #expect(status.status == 0, "\(status)")
            var after = stat()
            #expect(lstat(replica + "/bin.dat", &after) == 0 && after.st_mode & 0o7777 == 0o444, "the mode the owner gave it is back")
            #expect(((try? status.json())?.objects("changes") ?? []).isEmpty, "nothing the user did: \(status)")
        }
    }

    @Test("evict killed while it punches a file its owner made read-only (the owner's write permission given for the punch): the next command gives the mode back")
    func readOnlyModeComesBackAfterAKilledEvict() throws {
        let user = try TestUser.find()
        try withSandbox { s in
            let (replica, _, _) = try s.replicaOwned(by: user)
            #expect(try s.run(as: user, [Binaries.fprep, "materialize", "-C", replica, "bin.dat"]).status == 0)
            #expect(chmod(replica + "/bin.dat", 0o444) == 0)
            // The evict runs as the owner: its gate is where the owner may write.
            let gate = try s.closedGateAnyoneMayOpen("punch")
            // setpriv execs fprep: the process killed is the evict itself.
            let evict = try s.spawn(["/usr/bin/setpriv", "--reuid=\(user.uid)", "--regid=\(user.gid)", "--init-groups",
                                     Binaries.fprep, "evict", "-C", replica, "bin.dat"], env: ["FPREP_TEST_PUNCH_GATE": gate])
            #expect(waitUntil { exists(gate + ".waiting") }, "the evict holds the file, open for writing: \(evict.stderrSoFar)")
            var held = stat()
            #expect(lstat(replica + "/bin.dat", &held) == 0 && held.st_mode & 0o7777 == 0o644, "the evict gave the owner write permission")
            _ = evict.kill9()
            let status = try s.run(as: user, [Binaries.fprep, "status", "-C", replica, "--json"])
            #expect(status.status == 0, "\(status)")
            var after = stat()
            #expect(lstat(replica + "/bin.dat", &after) == 0 && after.st_mode & 0o7777 == 0o444, "the mode the owner gave it is back")
            #expect(((try? status.json())?.objects("changes") ?? []).isEmpty, "nothing the user did: \(status)")
        }
    }

    @Test("a placeholder in a user's replica that belongs to someone else (root) is never watched, so the agent never writes where the owner could not")
    func othersFileNotWatched() throws {
        let user = try TestUser.find()
        try withSandbox { s in
            let (replica, _, _) = try s.replicaOwned(by: user)
            // As a hard link to root's file would be (were hard links to others' files allowed).
            chown(replica + "/docs/readme.md", 0, 0)
            let agent = try s.startAgent(replica)
            #expect(agent.stderrSoFar.contains("not watching docs/readme.md: it does not belong to the replica's owner (uid \(user.uid)"), "\(agent.stderrSoFar)")
            let read = try s.python(readProgram, ["docs/readme.md"], cwd: replica)
            #expect(read.stdoutData == Data(count: 22), "not hydrated: its placeholder's zeros, as without an agent")
            #expect(lstatInfo(replica + "/docs/readme.md")?.blocks == 0, "nothing was written into root's file")
            let other = try s.python(readProgram, ["a.txt"], cwd: replica)
            #expect(other.stdout == "hello\n", "the owner's files are served: \(agent.stderrSoFar)")
            _ = stopAgent(agent)
        }
    }
}
