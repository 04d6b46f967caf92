import Foundation
import Glibc
import Testing

/// A folder of `count` small files (`walk/f000.txt`: `line 0`), and one file elsewhere.
private func walkTree(_ count: Int) -> [String: Node] {
    var nodes: [String: Node] = ["other.txt": .text("elsewhere\n")]
    for number in 0..<count { nodes[String(format: "walk/f%03d.txt", number)] = .text("line \(number)\n") }
    return nodes
}

/// The git fetches an agent's log shows: one per single hydration, one per read-ahead.
private func fetches(_ log: String) -> Int {
    log.components(separatedBy: "\n").filter { $0.contains(" info hydrated ") || $0.contains(" info read ahead ") }.count
}

@Suite("read-ahead and refused programs (fprep agent)", .serialized)
struct AgentReadAheadTests {
    @Test("grep -r over a dataless folder of 200 files makes a few fetches, not one per file; the content is right, and a file a program wrote into keeps its bytes")
    func grepReadsAhead() throws {
        try withSandbox { s in
            let remote = try s.makeRemote(nodes: walkTree(200))
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            // The user's bytes in a placeholder (no agent ran): never a placeholder again.
            let write = try s.python("import sys; f = open(sys.argv[1], 'r+b'); f.write(b'mine'); f.close()", ["walk/f007.txt"], cwd: replica)
            #expect(write.status == 0, "\(write)")
            let agent = try s.startAgent(replica)
            let grep = try Shell.run(["/bin/grep", "-r", "line", "walk"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            // Its summary is written once its last chunk's marks are off, maybe after grep is done.
            #expect(waitUntil { agent.stderrSoFar.contains(" info read ahead ") }, "\(agent.stderrSoFar)")
            let log = stopAgent(agent).stderr
            let expected = (0..<200).filter { $0 != 7 }.map { String(format: "walk/f%03d.txt:line %d", $0, $0) }.sorted()
            #expect(grep.stdout.split(separator: "\n").map(String.init).sorted() == expected, "\(grep)")
            #expect(contents(replica + "/walk/f007.txt")?.prefix(4) == Data("mine".utf8))
            #expect(fetches(log) <= 5, "\(fetches(log)) fetches: \(log)")
            #expect(log.contains(" info read ahead "), "\(log)")
            let status = try s.fprepJSON(["status", "-C", replica])
            #expect(status.int("dataless") == 1 && status.int("modified") == 1, "only other.txt is still dataless, f007 is the user's: \(status)")
        }
    }

    @Test("the read-ahead's fetch fails while grep -r waits on a file of it: that file is hydrated on its own, and grep reads every file")
    func readAheadFailureFailsNoReader() throws {
        try withSandbox { s in
            let (_, replica, _) = try s.daemonReplica(nodes: walkTree(12))
            // From now on the server takes a few seconds to refuse any fetch
            // of more than three objects (a read-ahead), and serves the rest:
            // grep is waiting on the batch's next file when it fails.
            let hook = s.at("refuse-batches.sh")
            try """
                #!/bin/sh
                wants=$(mktemp)
                cat > "$wants"
                if [ "$(grep -c '^[0-9a-f]\\{40\\}' "$wants")" -gt 3 ]; then sleep 3; echo "refusing a batch" >&2; exit 1; fi
                exec "$@" < "$wants"
                """.write(toFile: hook, atomically: false, encoding: .utf8)
            chmod(hook, 0o755)
            try "[uploadpack]\n\tpackObjectsHook = \(hook)\n".write(toFile: s.home + "/.gitconfig", atomically: false, encoding: .utf8)
            let agent = try s.startAgent(replica)
            let grep = try Shell.run(["/bin/grep", "-r", "line", "walk"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            let log = stopAgent(agent).stderr
            let expected = (0..<12).map { String(format: "walk/f%03d.txt:line %d", $0, $0) }.sorted()
            #expect(grep.status == 0 && grep.stdout.split(separator: "\n").map(String.init).sorted() == expected, "\(grep)\n\(log)")
            #expect(log.contains(" cannot read ahead in walk: "), "the batch did not fail: \(log)")
            #expect(log.contains(" hydrating it on its own"), "no reader waited on the batch: \(log)")
        }
    }

    @Test("a file emptied by a program (open(O_TRUNC)) while a read-ahead fills its folder stays empty: the open waits for the file's fill")
    func truncatingOpenDuringAReadAhead() throws {
        try withSandbox { s in
            let remote = try s.makeRemote(nodes: walkTree(12))
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let gate = s.at("fill-gate")
            let agent = try s.startAgent(replica, env: ["FPREP_TEST_FILL_GATE": gate])
            for number in 0..<2 {
                let read = try s.python(readProgram, [String(format: "walk/f%03d.txt", number)], cwd: replica)
                #expect(read.status == 0, "\(read)")
            }
            // The third read in a row starts a read-ahead of the others; its
            // fill of f005 (checked with the rest, not yet written) waits.
            #expect(FileManager.default.createFile(atPath: gate, contents: Data("walk/f005.txt".utf8)))
            // Not waited for here: its own fill may come after the batch's,
            // which holds the lock at the gate.
            let third = try s.spawnPython(readProgram, ["walk/f002.txt"], cwd: replica)
            #expect(waitUntil { FileManager.default.fileExists(atPath: gate + ".waiting") }, "the read-ahead waits to write f005")
            let emptier = try s.spawn(["/bin/sh", "-c", ": > walk/f005.txt"], cwd: replica)
            // Held at its open; without the hold it is done at once, the file emptied under the fill.
            #expect(waitUntil { waitsOnFanotify(emptier.pid) || !emptier.isRunning })
            #expect(unlink(gate) == 0)
            let emptied = emptier.wait(timeout: patienceSeconds)
            #expect(!emptied.timedOut && emptied.status == 0, "\(emptied)")
            let read = third.wait(timeout: patienceSeconds)
            #expect(!read.timedOut && read.status == 0 && read.stdout == "line 2\n", "\(read)")
            #expect(waitUntil { agent.stderrSoFar.contains(" info read ahead ") }, "\(agent.stderrSoFar)")
            _ = stopAgent(agent)
            #expect(FileManager.default.contents(atPath: replica + "/walk/f005.txt") == Data(), "the program emptied it: its fill must not undo that")
            #expect(FileManager.default.contents(atPath: replica + "/walk/f006.txt") == Data("line 6\n".utf8))
        }
    }

    @Test("with fprep.agent.readAheadBytes = 0, grep -r is served one fetch per file")
    func readAheadOff() throws {
        try withSandbox { s in
            let remote = try s.makeRemote(nodes: walkTree(40))
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            _ = try s.gitOK(["config", "fprep.agent.readAheadBytes", "0"], cwd: replica)
            let agent = try s.startAgent(replica)
            let grep = try Shell.run(["/bin/grep", "-rc", "line", "walk"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            let log = stopAgent(agent).stderr
            #expect(grep.status == 0 && grep.stdout.split(separator: "\n").allSatisfy { $0.hasSuffix(":1") }, "\(grep)")
            #expect(fetches(log) == 40 && !log.contains("read ahead"), "\(log)")
        }
    }

    @Test("a program fprep.agent.refuse names gets EIO and the log names it; another program reads the content")
    func refusedProgram() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            _ = try s.gitOK(["config", "fprep.agent.refuse", "updatedb, indexer"], cwd: replica)
            try FileManager.default.createDirectory(atPath: s.at("tools"), withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: "/bin/cat", toPath: s.at("tools/indexer"))
            let agent = try s.startAgent(replica)
            let refused = try Shell.run([s.at("tools/indexer"), "a.txt"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(refused.status != 0 && refused.stdout.isEmpty && refused.stderr.contains("Input/output error"), "\(refused)")
            #expect(xattrString(replica + "/a.txt", "user.fprep.state") == "dataless")
            let cat = try Shell.run(["/bin/cat", "a.txt"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(cat.status == 0 && cat.stdout == "hello\n", "\(cat)")
            let log = stopAgent(agent).stderr
            #expect(log.contains("warning refused hydration of a.txt to indexer (pid "), "\(log)")
        }
    }

    @Test("a read-ahead budget that is not a size: the agent refuses to start with one line naming the setting")
    func badBudget() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            _ = try s.gitOK(["config", "fprep.agent.readAheadBytes", "lots"], cwd: replica)
            expectOneLineError(try s.fprep(["agent", "-C", replica]), mentioning: ["fprep.agent.readAheadBytes", "lots"])
        }
    }

    @Test("a replica with more placeholders than the agent may hold descriptors: every one is watched (each is closed once marked)")
    func morePlaceholdersThanDescriptors() throws {
        try withSandbox { s in
            let remote = try s.makeRemote(nodes: walkTree(120))
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            _ = try s.gitOK(["config", "fprep.agent.readAheadBytes", "0"], cwd: replica)
            let agent = try s.spawn(["/bin/sh", "-c", "ulimit -n 48 && exec \"$0\" agent -C \"$1\"", Binaries.fprep, replica])
            #expect(waitUntil { agent.stderrSoFar.contains("placeholders watched") || !agent.isRunning }, "\(agent.stderrSoFar)")
            let cat = try Shell.run(["/bin/cat", "walk/f119.txt", "walk/f000.txt"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            let log = stopAgent(agent).stderr
            #expect(log.contains("serving \(replica): 121 placeholders watched"), "\(log)")
            #expect(cat.status == 0 && cat.stdout == "line 119\nline 0\n", "\(cat)")
        }
    }
}
