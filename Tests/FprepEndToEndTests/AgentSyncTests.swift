import Foundation
import Glibc
import Testing

// The agent's own syncs (`fprep.agent.sync`, opt-in): a local save
// reaches the remote by itself, a push elsewhere comes in by the poll, and
// a file still open for writing is never pushed half-written.

/// Every version of `path` the remote's main has had, oldest first.
private func remoteVersions(_ box: Sandbox, _ remote: Remote, _ path: String) throws -> [String] {
    let commits = try box.gitOK(["log", "--format=%H", "--reverse", "main", "--", path], cwd: remote.path)
        .split(separator: "\n").map(String.init)
    return commits.compactMap { try? box.gitOK(["show", "\($0):\(path)"], cwd: remote.path) }
}

private func remoteHas(_ box: Sandbox, _ remote: Remote, _ path: String) -> Bool {
    (try? box.git(["cat-file", "-e", "main:" + path], cwd: remote.path).status) == 0
}

@Suite("the agent syncs by itself")
struct AgentSyncTests {
    /// A replica of a standard remote whose agent syncs 200 ms after the
    /// last change and polls the remote every `poll` seconds (0: never).
    private func syncingReplica(_ s: Sandbox, poll: Int = 0) throws -> (Remote, String) {
        let remote = try s.makeRemote()
        let replica = s.at("replica")
        _ = try s.clone(remote.path, replica)
        try s.gitOK(["-C", replica, "config", "fprep.agent.syncDelay", "200"])
        try s.gitOK(["-C", replica, "config", "fprep.agent.pollSeconds", String(poll)])
        return (remote, replica)
    }

    @Test("a file saved with the agent running reaches the remote by itself, and a new folder's files too")
    func localSaveIsPushed() throws {
        try withSandbox { s in
            let (remote, replica) = try syncingReplica(s)
            let agent = try s.startAgent(replica, syncs: true)
            try Data("written here\n".utf8).write(to: URL(fileURLWithPath: replica + "/saved.txt"))
            #expect(waitUntil { remoteHas(s, remote, "saved.txt") }, "\(agent.stderrSoFar)")
            #expect(try DamagedStateTests.remoteFile(s, remote, "saved.txt") == "written here")

            // A folder made now is followed from then on: a file written in
            // it later (after the first sync took the folder in) is pushed too.
            try FileManager.default.createDirectory(atPath: replica + "/made/deeper", withIntermediateDirectories: true)
            try Data("one\n".utf8).write(to: URL(fileURLWithPath: replica + "/made/deeper/one.txt"))
            #expect(waitUntil { remoteHas(s, remote, "made/deeper/one.txt") }, "\(agent.stderrSoFar)")
            try Data("two\n".utf8).write(to: URL(fileURLWithPath: replica + "/made/deeper/two.txt"))
            #expect(waitUntil { remoteHas(s, remote, "made/deeper/two.txt") }, "\(agent.stderrSoFar)")
            #expect(waitUntil { agent.stderrSoFar.contains("info synced: 1 local change committed") }, "\(agent.stderrSoFar)")

            let status = try s.fprepJSON(["status"], cwd: replica)
            #expect(status.objects("changes").isEmpty && status.string("waitingToPush") == nil, "\(status)")
            #expect(stopAgent(agent).status == 0)
        }
    }

    /// An index that lags the disk (an evict's index write lost to a power
    /// cut; here the index before the evict put back): the agent watches
    /// what its entries call content only once a sync has written them
    /// again, which its first sync does, and nothing is committed.
    @Test("a placeholder behind an entry that says content is watched after the agent's first sync, and a read gets its content")
    func placeholderBehindContentEntryIsWatched() throws {
        try withSandbox { s in
            let (remote, replica) = try syncingReplica(s)
            try s.fprepOK(["materialize", "bin.dat"], cwd: replica)
            let materializedIndex = try #require(contents(replica + "/.git/index"))
            try s.fprepOK(["evict", "bin.dat"], cwd: replica)
            try materializedIndex.write(to: URL(fileURLWithPath: replica + "/.git/index"))
            unlink(replica + "/.git/fprep-index-offsets")
            let head = try s.gitOK(["rev-parse", "main"], cwd: remote.path)
            let agent = try s.startAgent(replica, syncs: true)
            #expect(waitUntil { agent.stderrSoFar.contains("watching 1 new placeholder") }, "\(agent.stderrSoFar)")
            let read = try Shell.run(["/bin/cat", "bin.dat"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(read.status == 0 && read.stdoutData == remote.files["bin.dat"], "\(read)\n\(agent.stderrSoFar)")
            #expect(try s.gitOK(["rev-parse", "main"], cwd: remote.path) == head, "the agent's sync committed something")
            #expect(stopAgent(agent).status == 0)
        }
    }

    @Test("a change committed while the remote was away is pushed by a poll once the remote answers again, with nothing else changed anywhere")
    func offlineCommitIsPushedWhenTheRemoteIsBack() throws {
        try withSandbox { s in
            let (remote, replica) = try syncingReplica(s, poll: 1)
            let away = remote.path + ".away"
            try FileManager.default.moveItem(atPath: remote.path, toPath: away)
            let agent = try s.startAgent(replica, syncs: true)
            try Data("written offline\n".utf8).write(to: URL(fileURLWithPath: replica + "/offline.txt"))
            #expect(waitUntil { (try? s.fprepJSON(["status"], cwd: replica))?.string("waitingToPush") != nil }, "\(agent.stderrSoFar)")
            try FileManager.default.moveItem(atPath: away, toPath: remote.path)
            #expect(waitUntil { remoteHas(s, remote, "offline.txt") }, "\(agent.stderrSoFar)")
            #expect(try DamagedStateTests.remoteFile(s, remote, "offline.txt") == "written offline")
            #expect(stopAgent(agent).status == 0)
        }
    }

    @Test("offline, a placeholder overwritten with the agent syncing: the save fails at its open and nothing is set aside or pushed; once the remote is back the same save reaches it as the file's new version")
    func offlineOverwriteWithTheAgentSyncing() throws {
        try withSandbox { s in
            let (remote, replica) = try syncingReplica(s, poll: 1)
            let away = remote.path + ".away"
            try FileManager.default.moveItem(atPath: remote.path, toPath: away)
            let agent = try s.startAgent(replica, syncs: true)
            let save = try Shell.run(["/bin/sh", "-c", "echo mine > bin.dat"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(save.status != 0 && save.stderr.contains("Input/output error"), "\(save)")
            let status = try s.fprepJSON(["status"], cwd: replica)
            #expect(status.objects("changes").isEmpty && status.string("waitingToPush") == nil, "\(status)")
            try FileManager.default.moveItem(atPath: away, toPath: remote.path)
            let again = try Shell.run(["/bin/sh", "-c", "echo mine > bin.dat"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(again.status == 0, "\(again)")
            #expect(waitUntil { (try? DamagedStateTests.remoteFile(s, remote, "bin.dat")) == "mine" }, "\(agent.stderrSoFar)")
            let tree = try s.gitOK(["ls-tree", "--name-only", "main"], cwd: remote.path)
            #expect(!tree.contains("conflict"), "\(tree)")
            #expect(stopAgent(agent).status == 0)
        }
    }

    @Test("changes only to ignored items start no sync and never reach the remote; a tracked file a rule matches still syncs")
    func ignoredChangesStartNoSync() throws {
        try withSandbox { s in
            let (remote, replica) = try syncingReplica(s)
            try Data("*.swp\nbuild/\n*.md\n".utf8).write(to: URL(fileURLWithPath: replica + "/.gitignore"))
            try s.fprepOK(["sync"], cwd: replica)
            let agent = try s.startAgent(replica, syncs: true)
            try s.sh("echo swap > .a.txt.swp && mkdir -p build/out && echo o > build/out/x", cwd: replica)
            // The swap file is written again until a batch of events holds
            // nothing else: on a loaded machine the first one can also hold
            // the agent's start (one CI run waited 180 s for a batch that
            // never came), and a batch with anything else rightly syncs.
            var polls = 0
            #expect(waitUntil {
                polls += 1
                if polls % 100 == 0 { _ = try? s.sh("echo swap >> .a.txt.swp", cwd: replica) }
                return agent.stderrSoFar.contains("changes only to items the ignore rules leave out start no sync")
            }, "\(agent.stderrSoFar)")
            // A tracked file under a rule is still the user's work.
            try s.fprepOK(["materialize", "docs/readme.md"], cwd: replica)
            try s.sh("echo 'more words' >> docs/readme.md", cwd: replica)
            #expect(waitUntil { (try? DamagedStateTests.remoteFile(s, remote, "docs/readme.md"))?.hasSuffix("more words") == true },
                    "\(agent.stderrSoFar)")
            for left in [".a.txt.swp", "build/out/x"] { #expect(!remoteHas(s, remote, left), "\(left) reached the remote") }
            #expect(stopAgent(agent).status == 0)
        }
    }

    @Test("a file still open for writing is never pushed half-written: it waits for its writer to close it, other changes go on")
    func openFileWaitsForItsWriter() throws {
        try withSandbox { s in
            let (remote, replica) = try syncingReplica(s)
            let agent = try s.startAgent(replica, syncs: true)
            // A writer that writes half, waits to be told, writes the rest, closes.
            let go = s.at("go")
            let writer = try s.spawnPython("""
                import os, sys, time
                f = open('big.txt', 'w'); f.write('first half\\n'); f.flush()
                print('half', flush=True)
                while not os.path.exists(sys.argv[1]): time.sleep(0.01)
                f.write('second half\\n'); f.close()
                """, [go], cwd: replica)
            #expect(waitUntil { writer.stdoutSoFar.contains("half") })
            // Another save meanwhile: it syncs, the open file does not.
            try Data("meanwhile\n".utf8).write(to: URL(fileURLWithPath: replica + "/other.txt"))
            #expect(waitUntil { remoteHas(s, remote, "other.txt") }, "\(agent.stderrSoFar)")
            #expect(!remoteHas(s, remote, "big.txt"), "a file open for writing was pushed: \(agent.stderrSoFar)")
            // The log line comes when the sync's report reaches the agent, a moment after the push.
            #expect(waitUntil { agent.stderrSoFar.contains("left for later (open for writing): big.txt") }, "\(agent.stderrSoFar)")

            #expect(FileManager.default.createFile(atPath: go, contents: nil))
            #expect(writer.wait(timeout: patienceSeconds).status == 0)
            #expect(waitUntil { remoteHas(s, remote, "big.txt") }, "\(agent.stderrSoFar)")
            #expect(try remoteVersions(s, remote, "big.txt") == ["first half\nsecond half"], "only the whole file was ever pushed")
            #expect(stopAgent(agent).status == 0)
        }
    }

    @Test("a program holding a file open for writing while the agent takes in the remote's change of it: the remote's version takes the name and nothing is pushed; what the program writes into its file later reaches the remote by itself, as a conflict copy, once it closes it")
    func heldFileWrittenLaterReachesTheRemote() throws {
        try withSandbox { s in
            let (remote, replica) = try syncingReplica(s, poll: 1)
            try s.fprepOK(["materialize", "a.txt"], cwd: replica)
            let agent = try s.startAgent(replica, syncs: true)
            let go = s.at("go")
            let writer = try s.spawnPython("""
                import os, sys, time
                f = open('a.txt', 'r+b')
                print('open', flush=True)
                while not os.path.exists(sys.argv[1]): time.sleep(0.01)
                f.seek(0, 2); f.write(b'LATE-WRITE\\n'); f.close()
                """, [go], cwd: replica)
            #expect(waitUntil { writer.stdoutSoFar.contains("open") })
            try s.pushToRemote(remote, ["a.txt": Data("the remote's\n".utf8)], message: "elsewhere")
            let tip = try s.gitOK(["rev-parse", "main"], cwd: remote.path)
            #expect(waitUntil { (try? s.fprepOK(["anchor"], cwd: replica).stdout.trimmingCharacters(in: .whitespacesAndNewlines)) == tip },
                    "\(agent.stderrSoFar)")
            #expect(contents(replica + "/a.txt") == Data("the remote's\n".utf8))
            let names = (try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? []
            #expect(!names.contains { $0.contains("conflict") }, "\(names)")
            #expect(try s.gitOK(["rev-parse", "main"], cwd: remote.path) == tip, "nothing pushed while the program holds it")
            #expect(FileManager.default.createFile(atPath: go, contents: nil))
            #expect(writer.wait(timeout: patienceSeconds).status == 0)
            #expect(waitUntil { (try? s.git(["grep", "-q", "-F", "LATE-WRITE", "main"], cwd: remote.path))?.status == 0 },
                    "the late write reached the remote: \(agent.stderrSoFar)")
            #expect(try DamagedStateTests.remoteFile(s, remote, "a.txt") == "the remote's")
            #expect(stopAgent(agent).status == 0)
        }
    }

    @Test("a push from elsewhere comes in by the poll, as a placeholder the agent watches")
    func pollTakesInPushes() throws {
        try withSandbox { s in
            let (remote, replica) = try syncingReplica(s, poll: 1)
            let agent = try s.startAgent(replica, syncs: true)
            try s.pushToRemote(remote, ["from-elsewhere.txt": Data("pushed elsewhere\n".utf8)], message: "elsewhere")
            let tip = try s.gitOK(["rev-parse", "main"], cwd: remote.path)
            #expect(waitUntil { (try? s.fprepOK(["anchor"], cwd: replica).stdout.trimmingCharacters(in: .whitespacesAndNewlines)) == tip },
                    "\(agent.stderrSoFar)")
            // The new placeholder is watched from the moment it has its name
            // (the sync had the agent mark it first): read at once, it hydrates.
            let read = try Shell.run(["/bin/cat", "from-elsewhere.txt"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(read.stdout == "pushed elsewhere\n", "\(read)")
            #expect(agent.stderrSoFar.contains("hydrated from-elsewhere.txt"), "\(agent.stderrSoFar)")
            #expect(stopAgent(agent).status == 0)
        }
    }

    @Test("with a push service recorded, a push reaches the agent's replica on the service's signal, with no poll")
    func pushSignalTakesInPushes() throws {
        try withSandbox { s in
            let (remote, replica) = try syncingReplica(s, poll: 0)
            let service = try s.startService(remote.path)
            // The service is recorded once (fprep watch --service), as a user does.
            let watch = try s.spawnFprep(["watch", "-C", replica, "--service", service.url, "--enroll", service.enrollment])
            #expect(waitUntil { watch.stdoutSoFar.contains("connected to") }, "\(watch.stdoutSoFar)")
            watch.signal(SIGTERM)
            #expect(watch.wait(timeout: patienceSeconds).status == 0)

            let agent = try s.startAgent(replica, syncs: true)
            #expect(waitUntil { agent.stderrSoFar.contains("connected to the push service") || !agent.isRunning }, "\(agent.stderrSoFar)")
            #expect(agent.stderrSoFar.contains("connected to the push service"), "\(agent.stderrSoFar)")
            let work = s.at("work")
            try s.gitOK(["clone", "-q", remote.path, work])
            let (commit, push) = try s.commitAndPush(work, file: "signalled.txt", content: "came by a push signal\n")
            #expect(push.status == 0, "\(push)")
            // The poll is off: only the push signal can bring it.
            #expect(waitUntil { replicaHead(replica) == commit }, "\(agent.stderrSoFar)")
            #expect(exists(replica + "/signalled.txt"))
            #expect(stopAgent(agent).status == 0)
        }
    }

    @Test("over TLS: the agent follows an https service with the CA fprep watch --ca recorded")
    func pushSignalOverTLS() throws {
        try withSandbox { s in
            let (remote, replica) = try syncingReplica(s, poll: 0)
            let certificates = try TestCertificates.make(in: s.at("certs"))
            let service = try s.startService(remote.path, extra: ["--tls-cert", certificates.certificateFile,
                                                                  "--tls-key", certificates.keyFile])
            let url = "https://127.0.0.1:\(service.port)"
            let watch = try s.spawnFprep(["watch", "-C", replica, "--service", url, "--ca", certificates.caFile,
                                          "--enroll", service.enrollment])
            #expect(waitUntil { watch.stdoutSoFar.contains("connected to") }, "\(watch.stdoutSoFar)")
            watch.signal(SIGTERM)
            #expect(watch.wait(timeout: patienceSeconds).status == 0)

            let agent = try s.startAgent(replica, syncs: true)
            #expect(waitUntil { agent.stderrSoFar.contains("connected to the push service \(url)") || !agent.isRunning },
                    "\(agent.stderrSoFar)")
            let work = s.at("work")
            try s.gitOK(["clone", "-q", remote.path, work])
            let (commit, push) = try s.commitAndPush(work, file: "signalled.txt", content: "came by a push signal over TLS\n")
            #expect(push.status == 0, "\(push)")
            #expect(waitUntil { replicaHead(replica) == commit }, "\(agent.stderrSoFar)")
            #expect(stopAgent(agent).status == 0)
        }
    }

    @Test("a placeholder a sync moves keeps its mark and is filled at its new path, before and after the agent lists again; never zeros")
    func movedPlaceholderIsFilledAtItsNewPath() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let agent = try s.startAgent(replica)
            let before = try #require(lstatInfo(replica + "/bin.dat"))
            let work = s.at("work")
            try s.gitOK(["clone", "-q", remote.path, work])
            try s.gitOK(["mv", "bin.dat", "moved.dat"], cwd: work)
            try s.gitOK(["commit", "-q", "-m", "move"], cwd: work)
            try s.gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)
            try s.fprepOK(["sync"], cwd: replica)
            let after = try #require(lstatInfo(replica + "/moved.dat"))
            #expect(after.inode == before.inode && after.blocks == 0, "the sync moves the placeholder itself")
            let read = try Shell.run(["/bin/cat", "moved.dat"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(read.status == 0 && read.stdoutData == pseudoRandomBytes(10_000, seed: 1),
                    "\(read.stdoutData.prefix(16).map { String($0) }) \(read.stderr) \(agent.stderrSoFar)")
            #expect(stopAgent(agent).status == 0)
        }
    }

    @Test("fprep agent status shows how each replica hears of remote changes: the push service connected, then lost when it stops; a replica without one polls")
    func statusShowsThePushService() throws {
        try withSandbox { s in
            let (remote, replica) = try syncingReplica(s, poll: 0)
            let other = s.at("other")
            _ = try s.clone(remote.path, other)
            try s.gitOK(["-C", other, "config", "fprep.agent.pollSeconds", "90"])
            let service = try s.startService(remote.path)
            let watch = try s.spawnFprep(["watch", "-C", replica, "--service", service.url, "--enroll", service.enrollment])
            #expect(waitUntil { watch.stdoutSoFar.contains("connected to") }, "\(watch.stdoutSoFar)")
            watch.signal(SIGTERM)
            #expect(watch.wait(timeout: patienceSeconds).status == 0)

            try s.agentCommand(["add", replica], syncs: true)
            try s.agentCommand(["add", other], syncs: true)
            let agent = try s.startAgentDaemon()
            func remoteChanges(_ root: String) -> [String: Any]? { (try? s.agentReplicaStatus(root))?["remoteChanges"] as? [String: Any] }
            #expect(waitUntil { remoteChanges(replica)?["connected"] as? Bool == true }, "\(String(describing: remoteChanges(replica))) \(agent.stderrSoFar)")
            let connected = remoteChanges(replica) ?? [:]
            #expect(connected["service"] as? String == service.url && connected["pollSeconds"] as? Double == 0 && connected["since"] is String, "\(connected)")
            #expect(waitUntil { remoteChanges(other)?["pollSeconds"] as? Double == 90 }, "\(String(describing: remoteChanges(other)))")
            #expect(remoteChanges(other)?["service"] == nil && remoteChanges(other)?["connected"] as? Bool == false)
            let text = try s.agentCommand(["status"])
            #expect(text.stdout.contains("push service \(service.url): connected since "), "\(text)")
            #expect(text.stdout.contains("no push service (set one with 'fprep watch --service URL'); the agent polls the remote every 90 s"), "\(text)")

            #expect(service.stop().status == 0)
            #expect(waitUntil { remoteChanges(replica)?["connected"] as? Bool == false }, "\(String(describing: remoteChanges(replica)))")
            #expect(remoteChanges(replica)?["lost"] is String, "\(String(describing: remoteChanges(replica)))")
            let lost = try s.agentCommand(["status"])
            #expect(lost.stdout.contains("push service \(service.url): not connected since "), "\(lost)")
            #expect(stopAgent(agent).status == 0)
        }
    }

    @Test("fprep agent status shows each replica's last sync and what it did; a bad setting is refused in one line")
    func statusShowsSyncs() throws {
        try withSandbox { s in
            let (remote, replica) = try syncingReplica(s)
            try s.agentCommand(["add", replica], syncs: true)
            let agent = try s.startAgentDaemon()
            #expect(waitUntil { served(replica, by: agent.pid) }, "\(agent.stderrSoFar)")
            try Data("for the status\n".utf8).write(to: URL(fileURLWithPath: replica + "/status.txt"))
            #expect(waitUntil { remoteHas(s, remote, "status.txt") }, "\(agent.stderrSoFar)")
            #expect(waitUntil { agent.stderrSoFar.contains("synced of \(replica): 1 local change committed") }, "\(agent.stderrSoFar)")
            // The status is published within half a second of a sync; a later
            // sync (that found nothing) may have replaced what it says the last did.
            #expect(waitUntil { (try? s.agentReplicaStatus(replica))?["lastSync"] is String }, "\(String(describing: try? s.agentReplicaStatus(replica)))")
            let entry = try #require(try s.agentReplicaStatus(replica))
            #expect((entry["syncs"] as? Int ?? 0) >= 1 && entry["lastSyncResult"] is String && entry["lastSyncFailed"] as? Bool == false, "\(entry)")
            let text = try s.agentCommand(["status"])
            #expect(text.stdout.contains("last sync ("), "\(text)")
            #expect(stopAgent(agent).status == 0)

            try s.gitOK(["-C", replica, "config", "fprep.agent.pollSeconds", "often"])
            let refused = try s.fprep(["agent", "-C", replica], timeout: patienceSeconds)
            expectOneLineError(refused, mentioning: ["fprep.agent.pollSeconds", "often", "0 to never poll"])
        }
    }
}
