import Foundation
import Glibc
import Testing

// `fprep agent run`: one process serving every replica registered with
// `fprep agent add`, following the registry while it runs, with the real
// kernel (fanotify pre-content events: Linux 6.14 or later, as root). The
// state folder is the sandbox's own (FPREP_AGENT_STATE_DIR).

extension Sandbox {
    /// The agent's state folder for this test.
    var agentState: String { at("agent-state") }

    /// fprep with the test's agent state folder.
    @discardableResult
    /// `fprep agent ARGS` with the sandbox's state folder. A replica added
    /// does not sync by itself (`agentSyncs`) unless `syncs`.
    func agentCommand(_ args: [String], syncs: Bool = false) throws -> RunResult {
        if args.first == "add", args.count == 2, exists(args[1] + "/.git") || exists(args[1] + "/../.git") { try agentSyncs(args[1], syncs) }
        return try fprep(["agent"] + args, env: ["FPREP_AGENT_STATE_DIR": agentState])
    }

    /// Turns the agent's own syncs of `replica` on or off (`fprep.agent.sync`).
    /// Written as root, the config is given back to the replica's owner
    /// (git replaces the file, and a user's replica must stay theirs).
    /// `journal`: whether the agent keeps its change journal (its default
    /// follows `on`; tests keep it, so status and sync read it; nil: unset).
    func agentSyncs(_ replica: String, _ on: Bool, journal: Bool? = true) throws {
        let gitDir = try gitOK(["-c", "safe.directory=*", "-C", replica, "rev-parse", "--absolute-git-dir"])
            .trimmingCharacters(in: .whitespacesAndNewlines)
        try gitOK(["-c", "safe.directory=*", "-C", replica, "config", "fprep.agent.sync", on ? "true" : "false"])
        if let journal {
            try gitOK(["-c", "safe.directory=*", "-C", replica, "config", "fprep.agent.journal", journal ? "true" : "false"])
        } else {
            _ = try git(["-c", "safe.directory=*", "-C", replica, "config", "--unset", "fprep.agent.journal"])
        }
        var owner = stat()
        guard stat(gitDir, &owner) == 0, chown(gitDir + "/config", owner.st_uid, owner.st_gid) == 0 else {
            throw HarnessError("cannot give \(gitDir)/config back to its owner")
        }
    }

    /// Starts `fprep agent run` and waits until it follows the registry
    /// (its pid is in the state folder's `agent.pid`).
    func startAgentDaemon(extra: [String] = [], env: [String: String] = [:], sourceLocation: SourceLocation = #_sourceLocation) throws -> Spawned {
        let agent = try spawnFprep(["agent", "run"] + extra, env: env.merging(["FPREP_AGENT_STATE_DIR": agentState]) { _, new in new })
        let ready = waitUntil { !agent.isRunning || pidFile(agentState + "/agent.pid") == agent.pid }
        guard ready, agent.isRunning else {
            let result = agent.isRunning ? agent.kill9() : agent.wait()
            Issue.record("fprep agent run did not start (it needs fanotify pre-content events: Linux 6.14 or later, as root): \(result)",
                         sourceLocation: sourceLocation)
            throw HarnessError("fprep agent run did not start")
        }
        return agent
    }

    /// What `fprep agent status --json` says of `replica` (nil: not listed).
    func agentReplicaStatus(_ replica: String) throws -> [String: Any]? {
        let status = try fprepJSON(["agent", "status"], env: ["FPREP_AGENT_STATE_DIR": agentState])
        return (status["replicas"] as? [[String: Any]])?.first { $0["path"] as? String == replica }
    }
}

/// The process id in a pid file, if any.
func pidFile(_ path: String) -> Int32? {
    contents(path).flatMap { Int32(String(decoding: $0, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) }
}

/// Whether the agent `pid` serves `replica` (its lock file names it, as `fprep status` reads it).
func served(_ replica: String, by pid: Int32) -> Bool { pidFile(replica + "/.fprep/agent.pid") == pid }

@Suite("fprep agent run: one agent, every registered replica", .serialized)
struct AgentDaemonTests {
    @Test("add, list and remove keep the registry; the running agent serves what is added and stops serving what is removed, without a restart")
    func registryFollowedWhileRunning() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let first = s.at("first"), second = s.at("second")
            _ = try s.clone(remote.path, first)
            _ = try s.clone(remote.path, second)
            let added = try s.agentCommand(["add", first + "/docs"])
            #expect(added.status == 0 && added.stdout.hasPrefix("added \(first); no agent runs"), "any folder inside names the replica: \(added)")
            let again = try s.agentCommand(["add", first])
            #expect(again.status == 0 && again.stdout.contains("registered already"), "\(again)")
            expectOneLineError(try s.agentCommand(["add", s.path]), mentioning: ["not inside an fprep replica"])
            let notRunning = try s.fprepJSON(["agent", "status"], env: ["FPREP_AGENT_STATE_DIR": s.agentState])
            #expect(notRunning["running"] as? Bool == false, "\(notRunning)")
            #expect((notRunning["replicas"] as? [[String: Any]])?.first?["state"] as? String == "not served", "\(notRunning)")

            let agent = try s.startAgentDaemon()
            #expect(waitUntil { served(first, by: agent.pid) }, "\(agent.stderrSoFar)")
            let status = try s.fprepJSON(["status", "-C", first])
            #expect(status.int("agent") == Int(agent.pid), "fprep status names the agent that serves the replica: \(status)")
            let cat = try Shell.run(["/bin/cat", "a.txt"], cwd: first, env: s.baseEnvironment, ioFolder: s.io)
            #expect(cat.status == 0 && cat.stdout == "hello\n", "\(cat)")
            #expect(try s.fprepJSON(["status", "-C", second])["agent"] == nil, "an unregistered replica is not served")
            let twice = try s.fprep(["agent", "run"], env: ["FPREP_AGENT_STATE_DIR": s.agentState], timeout: 30)
            expectOneLineError(twice, mentioning: ["already runs", "pid \(agent.pid)"])

            // Added while it runs: served without a restart.
            let addSecond = try s.agentCommand(["add", second])
            #expect(addSecond.stdout == "added \(second); the agent (pid \(agent.pid)) serves it\n", "\(addSecond)")
            #expect(waitUntil { served(second, by: agent.pid) }, "\(agent.stderrSoFar)")
            let binary = try s.python(readProgram, ["bin.dat"], cwd: second)
            #expect(binary.stdoutData == pseudoRandomBytes(10_000, seed: 1))
            let list = try s.fprepJSON(["agent", "list"], env: ["FPREP_AGENT_STATE_DIR": s.agentState])
            #expect(list["replicas"] as? [String] == [first, second], "\(list)")
            #expect(try s.agentCommand(["list"]).stdout == "\(first)\n\(second)\n")

            // Removed while it runs: no longer served, the other one still is.
            let removed = try s.agentCommand(["remove", first])
            #expect(removed.status == 0 && removed.stdout == "removed \(first)\n", "\(removed)")
            #expect(waitUntil { (try? s.fprepJSON(["status", "-C", first])).map { $0["agent"] == nil } ?? false }, "\(agent.stderrSoFar)")
            #expect(agent.stderrSoFar.contains("info no longer serving \(first): removed from the registry"), "\(agent.stderrSoFar)")
            let zeros = try s.python(readProgram, ["docs/readme.md"], cwd: first)
            #expect(zeros.stdoutData == Data(count: 22), "no agent serves the removed replica: its placeholders read as zeros")
            let nested = try s.python(readProgram, ["docs/deep/nested.txt"], cwd: second)
            #expect(nested.stdoutData == pseudoRandomBytes(5_000, seed: 2), "the other replica is still served")
            expectOneLineError(try s.agentCommand(["remove", first]), mentioning: ["not registered"])
            #expect(try s.agentCommand(["list"]).stdout == "\(second)\n")

            let log = stopAgent(agent)
            #expect(log.status == 0 && log.stderr.contains("info agent stopped"), "\(log)")
            #expect(log.stderr.contains("info hydrated \(first)/a.txt ("), "the log names files with their replica: \(log.stderr)")
            #expect(log.stderr.contains("info hydrated \(second)/bin.dat ("), "\(log.stderr)")
            #expect(log.stderr.contains("info stopped serving \(second)"), "\(log.stderr)")
            #expect(try s.fprepJSON(["status", "-C", second])["agent"] == nil)
        }
    }

    @Test("a replica that cannot be served (deleted, not a replica any more, on tmpfs, or deleted while served) is logged and skipped; the others are served")
    func failingReplicasNeverStopTheOthers() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let good = s.at("good"), deleted = s.at("deleted"), stripped = s.at("stripped"), doomed = s.at("doomed")
            var template = Array("/dev/shm/fprep-e2e-XXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else { throw HarnessError("mkdtemp in /dev/shm failed") }
            let shm = String(cString: made)
            defer { try? FileManager.default.removeItem(atPath: shm) }
            let tmpfs = shm + "/replica"
            for replica in [deleted, stripped, tmpfs, good, doomed] {
                _ = try s.clone(remote.path, replica)
                try s.agentCommand(["add", replica])
            }
            try FileManager.default.removeItem(atPath: deleted)
            try FileManager.default.removeItem(atPath: stripped + "/.fprep")

            let agent = try s.startAgentDaemon()
            #expect(waitUntil { served(good, by: agent.pid) && served(doomed, by: agent.pid) }, "\(agent.stderrSoFar)")
            #expect(waitUntil {
                (try? s.agentReplicaStatus(tmpfs))?["state"] as? String == "failed"
                    && (try? s.agentReplicaStatus(deleted))?["state"] as? String == "failed"
                    && (try? s.agentReplicaStatus(stripped))?["state"] as? String == "failed"
            }, "\(agent.stderrSoFar)")
            let cat = try Shell.run(["/bin/cat", "a.txt"], cwd: good, env: s.baseEnvironment, ioFolder: s.io)
            #expect(cat.status == 0 && cat.stdout == "hello\n", "\(cat)")
            let shown = try s.agentReplicaStatus(tmpfs)
            #expect((shown?["lastError"] as? String)?.contains("has no fanotify pre-content events") == true, "\(shown ?? [:])")
            #expect((try s.agentReplicaStatus(deleted)?["lastError"] as? String)?.contains("not inside an fprep replica") == true)

            // Deleted while served: it stops, the others go on.
            try FileManager.default.removeItem(atPath: doomed)
            #expect(waitUntil { (try? s.agentReplicaStatus(doomed))?["state"] as? String == "failed" }, "\(agent.stderrSoFar)")
            let nested = try s.python(readProgram, ["docs/deep/nested.txt"], cwd: good)
            #expect(nested.stdoutData == pseudoRandomBytes(5_000, seed: 2))
            #expect(agent.isRunning)

            let log = stopAgent(agent)
            #expect(log.status == 0, "\(log)")
            for replica in [deleted, stripped, tmpfs, doomed] {
                let lines = log.stderrLines.filter { $0.contains(" error cannot serve \(replica): ") }
                #expect(lines.count == 1, "one line per replica that cannot be served (\(replica)): \(log.stderr)")
            }
            let line = try Regex(#"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ error cannot serve /dev/shm/\S+/replica: "#)
            #expect(log.stderrLines.contains { $0.firstMatch(of: line) != nil }, "\(log.stderr)")
        }
    }

    @Test("a replica another agent serves is taken over once that agent stops; one that appears later is served once it is there")
    func failedReplicasAreTriedAgain() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let taken = s.at("taken"), later = s.at("later")
            _ = try s.clone(remote.path, taken)
            _ = try s.clone(remote.path, later)
            for replica in [taken, later] { try s.agentCommand(["add", replica]) }
            try FileManager.default.moveItem(atPath: later, toPath: s.at("elsewhere"))
            let foreground = try s.startAgent(taken)
            let elsewhere = try s.agentCommand(["status"])
            #expect(elsewhere.stdout.contains("\(taken): not served; served by another agent (pid \(foreground.pid), 'fprep agent -C')"), "\(elsewhere)")
            let agent = try s.startAgentDaemon(env: ["FPREP_TEST_AGENT_RETRY_SECONDS": "1"])
            #expect(waitUntil { agent.stderrSoFar.contains("error cannot serve \(taken): an agent already serves") }, "\(agent.stderrSoFar)")
            #expect(waitUntil { agent.stderrSoFar.contains("error cannot serve \(later): ") }, "\(agent.stderrSoFar)")
            _ = stopAgent(foreground)
            try FileManager.default.moveItem(atPath: s.at("elsewhere"), toPath: later)
            #expect(waitUntil { served(taken, by: agent.pid) && served(later, by: agent.pid) }, "\(agent.stderrSoFar)")
            let cat = try Shell.run(["/bin/cat", "a.txt"], cwd: later, env: s.baseEnvironment, ioFolder: s.io)
            #expect(cat.status == 0 && cat.stdout == "hello\n", "\(cat)")
            let log = stopAgent(agent)
            let refusals = log.stderrLines.filter { $0.contains("error cannot serve \(taken):") }
            #expect(refusals.count == 1, "a refusal is logged once, however often it is tried again: \(log.stderr)")
        }
    }

    @Test("agent status: pid, replicas served, placeholders watched, hydrations served and failed, last error with its time")
    func statusCounts() throws {
        try withSandbox { s in
            let (daemon, replica, _) = try s.daemonReplica()
            try s.agentCommand(["add", replica])
            let agent = try s.startAgentDaemon(extra: ["--timeout", "2"])
            #expect(waitUntil { (try? s.agentReplicaStatus(replica))?["state"] as? String == "serving" }, "\(agent.stderrSoFar)")
            let start = try s.agentReplicaStatus(replica) ?? [:]
            #expect(start.int("placeholders") == 7 && start.int("hydrated") == 0 && start.int("failed") == 0 && start["lastError"] == nil, "\(start)")

            let cat = try Shell.run(["/bin/cat", "a.txt"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(cat.stdout == "hello\n", "\(cat)")
            daemon.stop()
            let offline = try Shell.run(["/bin/cat", "bin.dat"], cwd: replica, env: s.baseEnvironment, timeout: 30, ioFolder: s.io)
            #expect(offline.status != 0 && offline.stderr.contains("Input/output error"), "\(offline)")
            #expect(waitUntil {
                let now = try? s.agentReplicaStatus(replica)
                return now?.int("hydrated") == 1 && now?.int("failed") == 1
            }, "\(agent.stderrSoFar)")
            let after = try s.agentReplicaStatus(replica) ?? [:]
            #expect(after.int("placeholders") == 6, "a.txt is no longer watched: \(after)")
            #expect((after["lastError"] as? String)?.hasPrefix("cannot hydrate \(replica)/bin.dat: ") == true, "\(after)")
            #expect((after["lastErrorAt"] as? String)?.wholeMatch(of: try Regex(#"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"#)) != nil, "\(after)")
            let whole = try s.fprepJSON(["agent", "status"], env: ["FPREP_AGENT_STATE_DIR": s.agentState])
            #expect(whole["running"] as? Bool == true && whole.int("pid") == Int(agent.pid), "\(whole)")

            let text = try s.agentCommand(["status"])
            #expect(text.status == 0, "\(text)")
            #expect(text.stdout.hasPrefix("agent:  running, pid \(agent.pid) since "), "\(text.stdout)")
            #expect(text.stdout.contains("\(replica): serving, 6 placeholders watched, 1 hydrated, 1 failed\n  last error at "), "\(text.stdout)")
            _ = stopAgent(agent)
            let stopped = try s.agentCommand(["status"])
            #expect(stopped.stdout.hasPrefix("agent:  not running") && stopped.stdout.contains("\(replica): not served"), "\(stopped.stdout)")
        }
    }

    /// Two replicas of a `git daemon` remote served by one `agent run`, the
    /// remote paused, and a reader of `bin.dat` waiting on the agent in each.
    private func twoReplicasWithReadersWaiting(_ s: Sandbox) throws
        -> (daemon: GitDaemon, agent: Spawned, first: String, second: String, readers: [Spawned]) {
        _ = try s.makeRemote()
        let daemon = try s.startDaemon(base: s.path)
        let first = s.at("first"), second = s.at("second")
        _ = try s.clone(daemon.url("remote.git"), first)
        _ = try s.clone(daemon.url("remote.git"), second)
        for replica in [first, second] { try s.agentCommand(["add", replica]) }
        let agent = try s.startAgentDaemon()
        #expect(waitUntil { served(first, by: agent.pid) && served(second, by: agent.pid) }, "\(agent.stderrSoFar)")
        daemon.pause()
        let readers = try [first, second].map { try s.spawnPython(readProgram, ["bin.dat"], cwd: $0) }
        #expect(waitUntil { readers.allSatisfy { waitsOnFanotify($0.pid) } }, "both readers wait for the agent")
        return (daemon, agent, first, second, readers)
    }

    @Test("syncs that change, move, delete and add placeholders while the agent serves: it then watches exactly the replica's placeholders (it lists only what changed), and each reads its new content")
    func watchesWhatSyncsChange() throws {
        try withSandbox { s in
            let nodes: [String: Node] = ["docs/a.md": .text("a\n"), "docs/b.md": .text("b\n"), "src/c.txt": .text("c\n"),
                                         "src/d.txt": .text("d\n"), "e.txt": .text("e\n")]
            let remote = try s.makeRemote(nodes: nodes)
            let replica = s.at("replica"), other = s.at("other")
            _ = try s.clone(remote.path, replica)
            _ = try s.clone(remote.path, other)
            // Content to edit (bytes written into a placeholder would be kept as a conflict copy).
            try s.fprepOK(["materialize", "-C", other, "."])
            try s.agentCommand(["add", replica])
            let agent = try s.startAgentDaemon()
            #expect(waitUntil { (try? s.agentReplicaStatus(replica))?.int("placeholders") == 5 }, "\(agent.stderrSoFar)")
            for round in 0..<3 {
                try Data("a, round \(round)\n".utf8).write(to: URL(fileURLWithPath: other + "/docs/a.md"))
                try FileManager.default.moveItem(atPath: other + (round == 0 ? "/src/c.txt" : "/src/c\(round - 1).txt"), toPath: other + "/src/c\(round).txt")
                try Data("new \(round)\n".utf8).write(to: URL(fileURLWithPath: other + "/docs/new\(round).md"))
                if round == 0 { try FileManager.default.removeItem(atPath: other + "/e.txt") }
                try s.fprepOK(["sync", "-C", other])
                try s.fprepOK(["sync", "-C", replica])
                let dataless = try s.fprepJSON(["status", "-C", replica]).int("dataless") ?? -1
                #expect(waitUntil { (try? s.agentReplicaStatus(replica))?.int("placeholders") == dataless },
                        "round \(round): \(dataless) placeholders, watched: \(String(describing: try? s.agentReplicaStatus(replica)))\n\(agent.stderrSoFar)")
            }
            let expected = ["docs/a.md": "a, round 2\n", "docs/b.md": "b\n", "src/c2.txt": "c\n", "src/d.txt": "d\n",
                            "docs/new0.md": "new 0\n", "docs/new1.md": "new 1\n", "docs/new2.md": "new 2\n"]
            for (path, text) in expected {
                let cat = try Shell.run(["/bin/cat", path], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
                #expect(cat.status == 0 && cat.stdout == text, "\(path): \(cat)")
            }
            #expect(waitUntil { (try? s.agentReplicaStatus(replica))?.int("placeholders") == 0 }, "\(agent.stderrSoFar)")
            _ = stopAgent(agent)
        }
    }

    @Test("kill -9 of the agent while readers of two replicas wait: each gets EIO, never zeros; started again, it serves both")
    func killedAndStartedAgain() throws {
        try withSandbox { s in
            let (daemon, agent, first, second, readers) = try twoReplicasWithReadersWaiting(s)
            kill(agent.pid, SIGKILL)  // the agent only (not its keepers), as a user's kill -9
            _ = agent.wait(timeout: 30)
            for reader in readers {
                let read = reader.wait(timeout: 60)
                #expect(!read.timedOut && read.status != 0 && read.stdoutData.isEmpty && read.stderr.contains("Input/output error"), "\(read)")
            }
            let stopped = try s.fprepJSON(["agent", "status"], env: ["FPREP_AGENT_STATE_DIR": s.agentState])
            #expect(stopped["running"] as? Bool == false, "a killed agent is not running: \(stopped)")
            daemon.resume()

            let again = try s.startAgentDaemon()
            #expect(waitUntil { served(first, by: again.pid) && served(second, by: again.pid) }, "\(again.stderrSoFar)")
            for replica in [first, second] {
                let read = try s.python(readProgram, ["bin.dat"], cwd: replica)
                #expect(read.stdoutData == pseudoRandomBytes(10_000, seed: 1), "\(replica): \(read.status) \(read.stderr)")
            }
            let log = stopAgent(again)
            #expect(log.status == 0, "\(log)")
        }
    }

    @Test("the git a hydration runs holds no file the agent holds for a reader (of its replica or another): a hung fetch keeps nothing of anyone else's open")
    func fetchesInheritNothing() throws {
        try withSandbox { s in
            let (daemon, agent, first, second, readers) = try twoReplicasWithReadersWaiting(s)
            // Both fetches under way (each runs git, which hangs on the paused remote).
            func gits() -> [pid_t] {
                var found: [pid_t] = [], queue = Shell.childProcesses(of: agent.pid)
                while let pid = queue.popLast() {
                    queue += Shell.childProcesses(of: pid)
                    if (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?.hasPrefix("git") == true { found.append(pid) }
                }
                return found
            }
            #expect(waitUntil { gits().count >= 2 }, "two fetches run")
            let held = gits().flatMap { pid -> [String] in
                let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
                return fds.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)") }
            }
            let placeholders = held.filter { $0 == first + "/bin.dat" || $0 == second + "/bin.dat" }
            #expect(placeholders.isEmpty, "a fetch's git holds files the agent holds for readers: \(placeholders)")
            daemon.resume()
            for reader in readers {
                let read = reader.wait(timeout: 30)
                #expect(read.stdoutData == pseudoRandomBytes(10_000, seed: 1), "\(read.status) \(read.stderr)")
            }
            _ = stopAgent(agent)
        }
    }

    @Test("a file a program opened under the agent is used now: recent in the working set, and still recent once evicted")
    func openFeedsTheWorkingSet() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            try s.agentCommand(["add", replica])
            let agent = try s.startAgentDaemon()
            #expect(waitUntil { served(replica, by: agent.pid) }, "\(agent.stderrSoFar)")
            let cat = try Shell.run(["/bin/cat", "docs/readme.md"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(cat.status == 0, "\(cat)")
            _ = stopAgent(agent)
            try s.fprepOK(["evict", "-C", replica, "docs/readme.md"])
            let listing = try s.fprepOK(["working-set", "-C", replica, "--json"])
            let items = (try JSONSerialization.jsonObject(with: listing.stdoutData) as? [String: Any])?["items"] as? [[String: Any]] ?? []
            let reasons = Dictionary(items.compactMap { item in (item["identifier"] as? String).map { ($0, item["reasons"] as? [String] ?? []) } },
                                     uniquingKeysWith: { a, _ in a })
            #expect(reasons["docs/readme.md"] == ["recent"], "opened, then evicted: still used recently: \(listing.stdout)")
            #expect(reasons["a.txt"] == nil, "never opened: \(listing.stdout)")
        }
    }

    @Test("the systemd unit in the repository runs 'fprep agent run', a subcommand that exists")
    func systemdUnitNamesARealSubcommand() throws {
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let unit = try String(contentsOf: packageRoot.appendingPathComponent("contrib/systemd/fprep-agent.service"), encoding: .utf8)
        var settings: [String: String] = [:]
        for line in unit.split(separator: "\n") where !line.hasPrefix("#") && !line.hasPrefix("[") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            settings[line[..<equals].trimmingCharacters(in: .whitespaces)] = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
        }
        #expect(settings["Type"] == "simple" && settings["Restart"] == "on-failure" && settings["KillSignal"] == "SIGTERM", "\(settings)")
        let command = settings["ExecStart"]?.split(separator: " ").map(String.init) ?? []
        #expect(command.first == "/usr/local/bin/fprep", "\(command)")
        try withSandbox { s in
            let help = try s.fprep(Array(command.dropFirst()) + ["--help"])
            #expect(help.status == 0 && help.stdout.contains("USAGE: fprep \(command.dropFirst().joined(separator: " ")) "), "\(help)")
            let bogus = try s.fprep(["agent", "bogus", "--help"])
            #expect(!bogus.stdout.contains("USAGE: fprep agent bogus"), "the check tells a missing subcommand: \(bogus)")
        }
    }

    @Test("without root the agent refuses in one line (agent run, and plain agent without -C, which is agent run)")
    func refusesWithoutPrivilege() throws {
        try withSandbox { s in
            let unprivileged = try Shell.run(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                              Binaries.fprep, "agent", "run", "--state-dir", s.agentState],
                                             env: s.baseEnvironment, timeout: 30, ioFolder: s.io)
            expectOneLineError(unprivileged, mentioning: ["root", "sudo fprep agent run"])
            let plain = try Shell.run(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                       Binaries.fprep, "agent", "--state-dir", s.agentState],
                                      env: s.baseEnvironment, timeout: 30, ioFolder: s.io)
            expectOneLineError(plain, mentioning: ["root", "sudo fprep agent run"])
        }
    }
}
