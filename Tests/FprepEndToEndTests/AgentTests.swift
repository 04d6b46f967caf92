import Foundation
import Glibc
import Testing

// `fprep agent`: hydration on first access through fanotify pre-content
// events, with the real kernel (Linux 6.14 or later, as root). A machine
// without them fails these tests with the agent's own one-line refusal.

extension Sandbox {
    /// Starts `fprep agent -C replica` and waits until it watches the
    /// replica's placeholders (it writes its process id to
    /// `.fprep/agent.pid` once they are marked).
    /// `syncs`: whether the agent syncs by itself (off by default); off, a
    /// test of hydration sees only what it does itself.
    func startAgent(_ replica: String, extra: [String] = [], env: [String: String] = [:], syncs: Bool = false,
                    journal: Bool? = true, sourceLocation: SourceLocation = #_sourceLocation) throws -> Spawned {
        try agentSyncs(replica, syncs, journal: journal)
        let agent = try spawnFprep(["agent", "-C", replica] + extra, env: env)
        let deadline = monotonicSeconds() + patienceSeconds
        while monotonicSeconds() < deadline {
            if let text = contents(replica + "/.fprep/agent.pid").map({ String(decoding: $0, as: UTF8.self) }),
               Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) == agent.pid {
                return agent
            }
            if !agent.isRunning {
                let result = agent.wait()
                Issue.record("fprep agent did not start (it needs fanotify pre-content events: Linux 6.14 or later, as root, on ext4/xfs/btrfs): \(result)",
                             sourceLocation: sourceLocation)
                throw HarnessError("fprep agent did not start")
            }
            usleep(5_000)
        }
        Issue.record("fprep agent was not ready within 30 s", sourceLocation: sourceLocation)
        throw HarnessError("fprep agent was not ready")
    }

    /// A clone served by a git daemon, so the remote can be paused or stopped.
    func daemonReplica(nodes: [String: Node] = standardTree) throws -> (daemon: GitDaemon, replica: String, remote: Remote) {
        let remote = try makeRemote(nodes: nodes)
        let daemon = try startDaemon(base: path)
        let replica = at("replica")
        _ = try clone(daemon.url("remote.git"), replica)
        return (daemon, replica, remote)
    }

    /// Runs a short Python program (reads, maps, appends the way programs do).
    func python(_ program: String, _ args: [String], cwd: String) throws -> RunResult {
        try Shell.run(["/usr/bin/python3", "-c", program] + args, cwd: cwd, env: baseEnvironment, timeout: 60, ioFolder: io)
    }

    func spawnPython(_ program: String, _ args: [String], cwd: String) throws -> Spawned {
        try spawn(["/usr/bin/python3", "-c", program] + args, cwd: cwd)
    }
}

/// Stops the agent (SIGTERM) and returns what it did, its log in stderr.
func stopAgent(_ agent: Spawned) -> RunResult {
    agent.signal(SIGTERM)
    return agent.wait(timeout: patienceSeconds)
}

/// Whether the process is held by a fanotify permission event (the access
/// waits for the agent's answer).
func waitsOnFanotify(_ pid: pid_t) -> Bool {
    (try? String(contentsOfFile: "/proc/\(pid)/wchan", encoding: .utf8))?.hasPrefix("fanotify") == true
}

let readProgram = "import sys; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read())"

/// Python lines, at the top level of a program: read bin.dat, and print
/// 'read' or why the read failed.
let readBinaryOrSayWhy = """
try:
    open('bin.dat', 'rb').read()
    print('read')
except OSError as error:
    print(error.strerror)
"""

/// A clone of the sandbox's test remote served by an agent whose bound no
/// test waits out: an answer at all is the answer at once.
func servedWithoutBound(_ s: Sandbox) throws -> (replica: String, agent: Spawned) {
    let remote = try s.makeRemote()
    let replica = s.at("replica")
    _ = try s.clone(remote.path, replica)
    return (replica, try s.startAgent(replica, extra: ["--timeout", "3600"]))
}

@Suite("hydration on access (fprep agent)", .serialized)
struct AgentTests {
    @Test("cat, exec and mmap of placeholders under the agent get the real bytes; the files are then materialized as materialize leaves them")
    func readsHydrate() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let agent = try s.startAgent(replica)
            let serving = try s.fprepJSON(["status", "-C", replica])
            #expect(serving.int("agent") == Int(agent.pid), "status names the agent: \(serving)")
            let text = try s.fprepOK(["status", "-C", replica]).stdout
            #expect(text.contains("agent:        pid \(agent.pid) "), "\(text)")

            let cat = try Shell.run(["/bin/cat", "a.txt"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(cat.status == 0 && cat.stdout == "hello\n", "\(cat)")
            let run = try Shell.run(["./run.sh"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(run.status == 0 && run.stdout == "run\n", "exec of a dataless script: \(run)")
            let mapped = try s.python("import mmap, sys; f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ); sys.stdout.buffer.write(m[:])",
                                      ["docs/deep/nested.txt"], cwd: replica)
            #expect(mapped.status == 0 && mapped.stdoutData == pseudoRandomBytes(5_000, seed: 2), "mmap: \(mapped.status) \(mapped.stderr)")
            let binary = try s.python(readProgram, ["bin.dat"], cwd: replica)
            #expect(binary.stdoutData == pseudoRandomBytes(10_000, seed: 1))

            let log = stopAgent(agent)
            #expect(log.status == 0 && log.stderr.contains("info stopped serving"), "a stopped agent exits cleanly: \(log)")
            let line = try Regex(#"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ info hydrated a\.txt \(6 B, \d+ ms\)$"#)
            #expect(log.stderrLines.contains { $0.wholeMatch(of: line) != nil }, "one timestamped line per hydration: \(log.stderr)")
            for name in ["a.txt", "run.sh", "docs/deep/nested.txt", "bin.dat"] {
                #expect(log.stderr.contains("info hydrated \(name) ("), "\(name): \(log.stderr)")
                #expect(xattr(replica + "/" + name, "user.fprep.state") == nil, "\(name) keeps its placeholder marks")
            }
            #expect(lstatInfo(replica + "/run.sh").map { $0.mode & 0o777 } == 0o755)
            let status = try s.fprepJSON(["status", "-C", replica])
            #expect(status.int("dataless") == 3 && status.int("materialized") == 6, "four of seven placeholders hydrated: \(status)")
            #expect(status["agent"] == nil, "no agent serves the replica any more: \(status)")
            #expect(status.int("modified") == 0, "\(status)")
            let porcelain = try s.gitOK(["status", "--porcelain"], cwd: replica, env: ["GIT_NO_LAZY_FETCH": "1"])
            #expect(porcelain.isEmpty, "git status: \(porcelain)")
            // A file that was never accessed stays a placeholder.
            #expect(xattrString(replica + "/docs/readme.md", "user.fprep.state") == "dataless")
        }
    }

    @Test("a placeholder moved or copied with its marks and read before a sync gets its content; the sync records a move and an add, never zeros")
    func movedPlaceholderReads() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let agent = try s.startAgent(replica)
            defer { _ = stopAgent(agent) }
            #expect(rename(replica + "/bin.dat", replica + "/moved.dat") == 0)
            let moved = try s.python(readProgram, ["moved.dat"], cwd: replica)
            #expect(moved.status == 0 && moved.stdoutData == pseudoRandomBytes(10_000, seed: 1), "a moved placeholder reads its content: \(moved.status) \(moved.stderr)")
            let copy = try Shell.run(["/bin/cp", "-a", "docs/readme.md", "copy.md"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(copy.status == 0, "\(copy)")
            let copied = try Shell.run(["/bin/cat", "copy.md"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(copied.status == 0 && Data(copied.stdout.utf8) == remote.files["docs/readme.md"], "a copy with the marks reads the content: \(copied)")
            let sync = try s.fprepJSON(["sync"], cwd: replica)
            let kinds = sync.objects("localChanges").map { "\($0.string("kind") ?? "") \($0.string("path") ?? "")" }.sorted()
            #expect(kinds == ["added copy.md", "moved moved.dat"], "\(sync)")
            #expect(try s.git(["show", "main:moved.dat"], cwd: remote.path).stdoutData == pseudoRandomBytes(10_000, seed: 1))
            #expect(try s.git(["show", "main:copy.md"], cwd: remote.path).stdoutData == remote.files["docs/readme.md"])
        }
    }

    @Test("files that are not placeholders never meet the agent: materialized, changed by a program, fprep's own")
    func nonPlaceholdersAreNotWatched() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            try s.fprepOK(["materialize", "-C", replica, "a.txt"])
            // Bytes a program wrote into a placeholder before the agent ran are the user's.
            try s.sh("printf 'dev#1' | dd of=bin.dat bs=1 seek=5 conv=notrunc status=none", cwd: replica)
            let agent = try s.startAgent(replica)
            let watched = agent.stderrSoFar
            #expect(watched.contains(": 5 placeholders watched"), "seven placeholders less a.txt (materialized) and bin.dat (written into): \(watched)")
            #expect(contents(replica + "/a.txt") == Data("hello\n".utf8))
            let written = try s.python(readProgram, ["bin.dat"], cwd: replica)
            #expect(written.stdoutData == Data(count: 5) + Data("dev#1".utf8) + Data(count: 10_000 - 10), "the user's bytes, as written")
            _ = try s.python(readProgram, [".git/HEAD"], cwd: replica)
            _ = try s.python(readProgram, [".fprep/agent.pid"], cwd: replica)
            let log = stopAgent(agent)
            #expect(!log.stderr.contains("a.txt") && !log.stderr.contains("bin.dat") && !log.stderr.contains(".git"), "\(log.stderr)")
        }
    }

    @Test("exec of a dataless program (ELF) runs it")
    func execOfABinary() throws {
        try withSandbox { s in
            let program = try Data(contentsOf: URL(fileURLWithPath: "/bin/echo"))
            let remote = try s.makeRemote(nodes: ["bin/echo": .file(program, executable: true)])
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let agent = try s.startAgent(replica)
            let run = try Shell.run([replica + "/bin/echo", "ran"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(run.status == 0 && run.stdout == "ran\n", "\(run)")
            _ = stopAgent(agent)
            #expect(contents(replica + "/bin/echo") == program)
        }
    }

    @Test("another command holding the replica's lock: a read fails with EIO at the bound, and the hydration completes once the lock is free")
    func lockHeldElsewhere() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let agent = try s.startAgent(replica, extra: ["--timeout", "2"])
            // The holder holds until it is killed: a read that returns at
            // all (rather than timing out) returned at the agent's bound.
            let holder = try s.holdLock(replica)
            let blocked = try Shell.run(["/bin/cat", "a.txt"], cwd: replica, env: s.baseEnvironment, timeout: patienceSeconds, ioFolder: s.io)
            #expect(!blocked.timedOut, "the read waited for the lock's holder, past the agent's 2 s bound: \(blocked)")
            #expect(blocked.status != 0 && blocked.stdout.isEmpty && blocked.stderr.contains("Input/output error"), "\(blocked)")
            _ = holder.kill9()
            #expect(waitUntil { agent.stderrSoFar.contains("info hydrated a.txt") }, "\(agent.stderrSoFar)")
            let cat = try Shell.run(["/bin/cat", "a.txt"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(cat.status == 0 && cat.stdout == "hello\n", "\(cat)")
            _ = stopAgent(agent)
        }
    }

    @Test("a process holding the replica's lock (or a program it runs) reads a placeholder: EIO at once, not at the bound (the fill needs that lock); a file it emptied reads as empty")
    func lockHolderReadsAPlaceholder() throws {
        try withSandbox { s in
            let (replica, agent) = try servedWithoutBound(s)
            let holder = try s.python("""
                import fcntl, os
                lock = os.open('.fprep/lock', os.O_RDWR)
                fcntl.flock(lock, fcntl.LOCK_EX)
                with open('a.txt', 'w') as f: pass
                print(repr(open('a.txt', 'rb').read()))
                \(readBinaryOrSayWhy)
                """, [], cwd: replica)
            #expect(!holder.timedOut && holder.stdout == "b''\nInput/output error\n", "\(holder)")
            #expect(agent.stderrSoFar.contains("cannot hydrate bin.dat for process"), "\(agent.stderrSoFar)")
            // A program the holder runs counts as the holder: flock(1) keeps the lock and runs it.
            let child = try Shell.run(["/usr/bin/flock", ".fprep/lock", "/bin/cat", "bin.dat"], cwd: replica, env: s.baseEnvironment,
                                      timeout: patienceSeconds, ioFolder: s.io)
            #expect(!child.timedOut && child.status != 0 && child.stdout.isEmpty && child.stderr.contains("Input/output error"), "\(child)")
            // Once the lock is free, the file is filled as ever.
            let read = try s.python(readProgram, ["bin.dat"], cwd: replica)
            #expect(read.stdoutData == pseudoRandomBytes(10_000, seed: 1))
            _ = stopAgent(agent)
        }
    }

    @Test("the lock's holder is told by its note only when that process holds the lock alone: a noted holder and its child read a placeholder as the holder (EIO at once); a note naming a process that holds nothing makes no holder of it (its read waits for the fill and gets the content)")
    func lockHolderNoteIsCheckedNotTrusted() throws {
        try withSandbox { s in
            let (replica, agent) = try servedWithoutBound(s)
            // As fprep's commands do: the exclusive lock, then the note.
            let holder = try s.python("""
                import fcntl, os, subprocess
                lock = os.open('.fprep/lock', os.O_RDWR)
                fcntl.flock(lock, fcntl.LOCK_EX)
                os.ftruncate(lock, 0)
                os.pwrite(lock, b'pid %d (fprep test)\\n' % os.getpid(), 0)
                \(readBinaryOrSayWhy)
                child = subprocess.run(['/bin/cat', 'bin.dat'], capture_output=True)
                print(child.returncode != 0 and b'Input/output error' in child.stderr)
                """, [], cwd: replica)
            #expect(!holder.timedOut && holder.stdout == "Input/output error\nTrue\n", "\(holder)")
            // A holder that wrote no note (flock(1)), and a note naming the
            // reader, which holds nothing: the reader is no holder.
            let realHolder = try s.holdLock(replica, note: nil)
            let reader = try s.spawnPython("""
                import os, sys
                lock = os.open('.fprep/lock', os.O_RDWR)
                os.pwrite(lock, b'pid %d (fprep stale)\\n' % os.getpid(), 0)
                sys.stdout.buffer.write(open('bin.dat', 'rb').read())
                """, [], cwd: replica)
            // The reader waits in the kernel for the agent's answer (the
            // fill waits for the lock); a reader taken for the holder would
            // have had EIO at once.
            let waiting = waitUntil {
                !reader.isRunning || (try? String(contentsOfFile: "/proc/\(reader.pid)/wchan", encoding: .utf8)) == "fanotify_handle_event"
            }
            #expect(waiting && reader.isRunning, "the reader did not wait for the fill: \(reader.stdoutSoFar) \(agent.stderrSoFar)")
            _ = realHolder.kill9()
            let read = reader.wait(timeout: patienceSeconds)
            #expect(read.status == 0 && read.stdoutData == pseudoRandomBytes(10_000, seed: 1), "\(read.stderr) \(agent.stderrSoFar)")
            #expect(!agent.stderrSoFar.contains("for process \(reader.pid)"), "\(agent.stderrSoFar)")
            _ = stopAgent(agent)
        }
    }

    @Test("offline, a program overwrites a placeholder (echo x > file) or copies it: its open fails with EIO and nothing changes (no zeros copied); online, the same save is the file's new version")
    func offlineOverwriteOfAPlaceholder() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            _ = try s.gitOK(["config", "fprep.agent.sync", "false"], cwd: replica)
            let agent = try s.startAgent(replica)
            let away = s.at("away.git")
            try FileManager.default.moveItem(atPath: remote.path, toPath: away)
            let save = try Shell.run(["/bin/sh", "-c", "echo x > bin.dat"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(save.status != 0 && save.stderr.contains("Input/output error"), "\(save)")
            let copy = try Shell.run(["/bin/cp", "bin.dat", "copy.dat"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(copy.status != 0 && !FileManager.default.fileExists(atPath: replica + "/copy.dat"), "\(copy)")
            let status = try s.fprepJSON(["status", "-C", replica])
            #expect(status.objects("changes").isEmpty && status.int("dataless") == 7, "nothing changed: \(status)")
            try FileManager.default.moveItem(atPath: away, toPath: remote.path)
            let online = try Shell.run(["/bin/sh", "-c", "echo x > bin.dat"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(online.status == 0, "\(online)")
            _ = stopAgent(agent)
            try s.fprepOK(["sync", "-C", replica])
            #expect(try s.git(["show", "main:bin.dat"], cwd: remote.path).stdoutData == Data("x\n".utf8))
        }
    }

    @Test("under the agent, evict leaves a file a program has open for reading or mapped: the program reads its bytes, never zeros; the others go")
    func evictLeavesFilesOpenOrMapped() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            try s.fprepOK(["materialize", "a.txt", "bin.dat", "docs/deep/nested.txt"], cwd: replica)
            let agent = try s.startAgent(replica)
            defer { _ = stopAgent(agent) }
            // One holds a.txt open for reading; one maps nested.txt and closes its descriptor.
            // Each says 'ready', waits for 'go' on its input, then prints what it reads.
            let program = """
                import sys, mmap, time
                if sys.argv[1] == 'open':
                    f = open('a.txt', 'rb'); view = None
                else:
                    with open('docs/deep/nested.txt', 'rb') as f:
                        view = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
                open(sys.argv[2], 'w').write('ready')
                while open(sys.argv[2]).read() != 'go':
                    time.sleep(0.01)
                data = f.read() if view is None else view[:]
                sys.stdout.buffer.write(b'zeros' if data.count(0) == len(data) else b'bytes')
                """
            let holder = try s.spawnPython(program, ["open", s.at("open-gate")], cwd: replica)
            let mapper = try s.spawnPython(program, ["map", s.at("map-gate")], cwd: replica)
            #expect(waitUntil { contents(s.at("open-gate")) == Data("ready".utf8) && contents(s.at("map-gate")) == Data("ready".utf8) })
            let result = try s.fprep(["evict", "a.txt", "bin.dat", "docs/deep/nested.txt", "--json"], cwd: replica)
            #expect(result.status == 2, "\(result)")
            let evicted = (try? result.json()) ?? [:]
            let refused = Set(evicted.objects("refused").compactMap { $0.string("path") })
            #expect(refused == ["a.txt", "docs/deep/nested.txt"], "\(evicted)")
            #expect(evicted.strings("evicted") == ["bin.dat"], "\(evicted)")
            for gate in ["open-gate", "map-gate"] { try Data("go".utf8).write(to: URL(fileURLWithPath: s.at(gate))) }
            #expect(holder.wait(timeout: 30).stdout == "bytes")
            #expect(mapper.wait(timeout: 30).stdout == "bytes")
        }
    }

    @Test("grep -r and cp -r over dataless folders under the agent see the real bytes")
    func walkersSeeContent() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let agent = try s.startAgent(replica)
            let grep = try Shell.run(["/bin/grep", "-r", "Some words", "docs"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(grep.status == 0 && grep.stdout == "docs/readme.md:Some words.\n", "\(grep)")
            let copy = try Shell.run(["/bin/cp", "-r", "docs", s.at("copy")], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(copy.status == 0, "\(copy)")
            #expect(contents(s.at("copy/deep/nested.txt")) == pseudoRandomBytes(5_000, seed: 2))
            #expect(contents(s.at("copy/deep/tool")) == pseudoRandomBytes(300, seed: 3))
            #expect(contents(s.at("copy/readme.md")) == Data("# Readme\n\nSome words.\n".utf8))
            _ = stopAgent(agent)
            let porcelain = try s.gitOK(["status", "--porcelain"], cwd: replica, env: ["GIT_NO_LAZY_FETCH": "1"])
            #expect(porcelain.isEmpty, "git status: \(porcelain)")
        }
    }

    @Test("an append to a placeholder under the agent lands after the real content, and sync pushes both")
    func appendSyncsOriginalPlusAppended() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let agent = try s.startAgent(replica)
            let append = try s.python("import sys; f = open(sys.argv[1], 'a'); f.write('dev#1\\n'); f.close()", ["a.txt"], cwd: replica)
            #expect(append.status == 0, "\(append)")
            _ = stopAgent(agent)
            try s.fprepOK(["sync", "-C", replica])
            #expect(try s.remoteBlob(remote.path, "a.txt") == Data("hello\ndev#1\n".utf8))
            #expect(conflictCopies(try s.remoteTree(remote.path), of: "a.txt").isEmpty)
        }
    }

    @Test("overwriting a placeholder under the agent (a shell's >): the open fills it first, so the save is a new version of the file, which sync shares as the file's")
    func overwriteIsANewVersion() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let agent = try s.startAgent(replica)
            try s.sh("printf 'dev#2\\n' > docs/readme.md", cwd: replica)
            #expect(contents(replica + "/docs/readme.md") == Data("dev#2\n".utf8), "the agent wrote into a file a program had truncated")
            _ = stopAgent(agent)
            try s.fprepOK(["sync", "-C", replica])
            #expect(try s.remoteBlob(remote.path, "docs/readme.md") == Data("dev#2\n".utf8))
            #expect(conflictCopies(try s.remoteTree(remote.path), of: "readme.md").isEmpty)
        }
    }

    @Test("cp and tar --sparse of placeholders under the agent copy the real bytes (they skip what SEEK_DATA calls holes, and a placeholder is all hole): the open fills the file first")
    func sparseAwareCopiesGetTheBytes() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            try s.gitOK(["-C", replica, "config", "fprep.agent.sync", "false"])
            let agent = try s.startAgent(replica)
            try s.sh("cp bin.dat copy.dat && tar --sparse -cf \(s.at("docs.tar")) docs", cwd: replica)
            #expect(contents(replica + "/copy.dat") == pseudoRandomBytes(10_000, seed: 1), "cp copied zeros")
            try FileManager.default.createDirectory(atPath: s.at("unpacked"), withIntermediateDirectories: true)
            try s.sh("tar -xf \(s.at("docs.tar"))", cwd: s.at("unpacked"))
            #expect(contents(s.at("unpacked/docs/deep/nested.txt")) == pseudoRandomBytes(5_000, seed: 2), "tar --sparse stored zeros")
            _ = stopAgent(agent)
            try s.fprepOK(["sync", "-C", replica])
            #expect(try s.remoteBlob(remote.path, "copy.dat") == pseudoRandomBytes(10_000, seed: 1), "the copy pushed is the file's bytes")
        }
    }

    @Test("two readers of one placeholder get the same bytes, from one fetch")
    func concurrentReadersOneFetch() throws {
        try withSandbox { s in
            let (daemon, replica, _) = try s.daemonReplica()
            let agent = try s.startAgent(replica)
            daemon.pause()
            let first = try s.spawnPython(readProgram, ["bin.dat"], cwd: replica)
            let second = try s.spawnPython(readProgram, ["bin.dat"], cwd: replica)
            #expect(waitUntil { waitsOnFanotify(first.pid) && waitsOnFanotify(second.pid) }, "both readers wait for the agent")
            daemon.resume()
            let one = first.wait(timeout: 30), two = second.wait(timeout: 30)
            #expect(one.status == 0 && two.status == 0, "\(one)\n\(two)")
            #expect(one.stdoutData == pseudoRandomBytes(10_000, seed: 1))
            #expect(two.stdoutData == one.stdoutData)
            let log = stopAgent(agent)
            #expect(log.stderr.components(separatedBy: "hydrated bin.dat").count == 2, "one hydration: \(log.stderr)")
        }
    }

    @Test("offline: a read fails with EIO within the bound, never zeros, and the agent logs the file and the cause")
    func offlineReadFailsWithEIO() throws {
        try withSandbox { s in
            let (daemon, replica, _) = try s.daemonReplica()
            let agent = try s.startAgent(replica, extra: ["--timeout", "2"])
            // A remote that accepts and never answers: the bound ends the wait.
            daemon.pause()
            // The remote stays paused: a read that returns at all returned at the bound.
            let hung = try Shell.run(["/bin/cat", "a.txt"], cwd: replica, env: s.baseEnvironment, timeout: patienceSeconds, ioFolder: s.io)
            #expect(!hung.timedOut, "the read waited on the paused remote past the agent's 2 s bound: \(hung)")
            #expect(hung.status != 0 && hung.stdout.isEmpty && hung.stderr.contains("Input/output error"), "\(hung)")
            daemon.resume()
            // A remote that is gone: fails at once.
            daemon.stop()
            let gone = try Shell.run(["/bin/cat", "bin.dat"], cwd: replica, env: s.baseEnvironment, timeout: 30, ioFolder: s.io)
            #expect(gone.status != 0 && gone.stdout.isEmpty && gone.stderr.contains("Input/output error"), "\(gone)")
            let log = stopAgent(agent)
            #expect(log.stderr.contains("error cannot hydrate a.txt"), "\(log.stderr)")
            #expect(log.stderr.contains("error cannot hydrate bin.dat"), "\(log.stderr)")
            #expect(xattrString(replica + "/bin.dat", "user.fprep.state") == "dataless")
            let status = try s.fprepJSON(["status", "-C", replica])
            // A fetch the bound gave up on may still finish once the remote is
            // resumed (a loaded machine lets it): that file is then content, whole.
            #expect((status.int("dataless") ?? 0) + (status.int("materialized") ?? 0) == status.int("items") && (status.int("dataless") ?? 0) >= 6 && status.int("modified") == 0,
                    "every placeholder is one still, or its whole content: \(status)")
        }
    }

    @Test("kill -9 of the agent while a reader waits: the reader gets EIO, not zeros and not a hang; the file stays a placeholder")
    func killWhileReaderWaits() throws {
        try withSandbox { s in
            let (daemon, replica, _) = try s.daemonReplica()
            let agent = try s.startAgent(replica)
            daemon.pause()
            let reader = try s.spawnPython(readProgram, ["bin.dat"], cwd: replica)
            #expect(waitUntil { waitsOnFanotify(reader.pid) && agent.stderrSoFar.contains("serving") }, "the reader waits for the agent")
            let stateFolder = replica + "/.fprep"
            #expect(waitUntil { ((try? FileManager.default.contentsOfDirectory(atPath: stateFolder)) ?? []).contains { $0.hasPrefix("agent-fetch-") } },
                    "the agent took the first access and fetches")
            // A second access the agent never reads: it is stopped first.
            kill(agent.pid, SIGSTOP)
            let unread = try s.spawnPython(readProgram, ["docs/readme.md"], cwd: replica)
            #expect(waitUntil { waitsOnFanotify(unread.pid) }, "the second reader waits for the agent")
            kill(agent.pid, SIGKILL)  // the agent only, as a user's kill -9
            _ = agent.wait(timeout: 30)
            for (name, waiting) in [("bin.dat", reader), ("docs/readme.md", unread)] {
                let read = waiting.wait(timeout: 60)
                #expect(!read.timedOut && read.status != 0 && read.stdoutData.isEmpty && read.stderr.contains("Input/output error"), "\(name): \(read)")
            }
            daemon.resume()
            let status = try s.fprepJSON(["status", "-C", replica])
            #expect(status.int("dataless") == 7 && status.int("modified") == 0, "every placeholder is one still: \(status)")
            #expect(xattrString(replica + "/bin.dat", "user.fprep.state") == "dataless")
        }
    }

    @Test("kill -9 of the agent in the middle of writing a file: the next command makes it a placeholder again, and sync commits none of its bytes")
    func killMidWriteLeavesAPlaceholder() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let before = try s.remoteTree(remote.path)
            let agent = try s.startAgent(replica, env: ["FPREP_TEST_KILL_AGENT_AFTER_BYTES": "4096"])
            let read = try s.python(readProgram, ["bin.dat"], cwd: replica)
            #expect(read.status != 0 && read.stdoutData.isEmpty, "a reader never gets part of a file: \(read.status), \(read.stdoutData.count) bytes")
            let died = agent.wait(timeout: 30)
            #expect(died.killedBySignal == SIGKILL, "\(died)")

            let status = try s.fprepJSON(["status", "-C", replica])
            #expect(status.int("dataless") == 7 && status.int("modified") == 0, "every placeholder is one still: \(status)")
            #expect(xattrString(replica + "/bin.dat", "user.fprep.state") == "dataless")
            #expect(lstatInfo(replica + "/bin.dat")?.blocks == 0, "the half-written bytes are freed")
            try s.fprepOK(["sync", "-C", replica])
            let after = try s.remoteTree(remote.path)
            #expect(after.mapValues(\.id) == before.mapValues(\.id), "sync pushed bytes nobody wrote: \(after.keys.sorted())")
            // And the file still hydrates later.
            let again = try s.startAgent(replica)
            let second = try s.python(readProgram, ["bin.dat"], cwd: replica)
            #expect(second.stdoutData == pseudoRandomBytes(10_000, seed: 1))
            _ = stopAgent(again)
        }
    }

    @Test("kill -9 of the agent in the middle of filling a placeholder the user moved: the next command makes it a placeholder again, and sync commits the move, not the partial bytes")
    func killMidWriteOfAMovedPlaceholder() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let agent = try s.startAgent(replica, env: ["FPREP_TEST_KILL_AGENT_AFTER_BYTES": "4096"])
            #expect(rename(replica + "/bin.dat", replica + "/moved.dat") == 0)
            let read = try s.python(readProgram, ["moved.dat"], cwd: replica)
            #expect(read.status != 0 && read.stdoutData.isEmpty, "a reader never gets part of a file: \(read.status), \(read.stdoutData.count) bytes")
            let died = agent.wait(timeout: 30)
            #expect(died.killedBySignal == SIGKILL, "\(died)")

            let status = try s.fprepJSON(["status", "-C", replica])
            let changes = status.objects("changes").map { "\($0.string("kind") ?? "") \($0.string("path") ?? "")" }
            #expect(changes == ["moved moved.dat"], "the move, and nothing written: \(status)")
            #expect(xattrString(replica + "/moved.dat", "user.fprep.state") == "dataless")
            #expect(lstatInfo(replica + "/moved.dat")?.blocks == 0, "the half-written bytes are freed")
            let before = try s.remoteTree(remote.path)
            try s.fprepOK(["sync", "-C", replica])
            let after = try s.remoteTree(remote.path)
            #expect(after["bin.dat"] == nil && after["moved.dat"]?.id == before["bin.dat"]?.id && after.count == before.count,
                    "sync pushed the move only: \(after.keys.sorted())")
            let again = try s.startAgent(replica)
            let second = try s.python(readProgram, ["moved.dat"], cwd: replica)
            #expect(second.stdoutData == pseudoRandomBytes(10_000, seed: 1))
            _ = stopAgent(again)
        }
    }

    @Test("a program that empties and rewrites a file while the agent fills it gets exactly its bytes: its open waits for the fill (an open(O_TRUNC) raises no access event)")
    func truncatingOpenDuringAFill() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let gate = s.at("fill-gate")
            #expect(FileManager.default.createFile(atPath: gate, contents: Data()))
            let agent = try s.startAgent(replica, env: ["FPREP_TEST_FILL_GATE": gate])
            let reader = try s.spawnPython(readProgram, ["bin.dat"], cwd: replica)
            #expect(waitUntil { FileManager.default.fileExists(atPath: gate + ".waiting") }, "the fill looked at the file and waits to write it")
            // A save as a shell's `>` makes it: open(O_TRUNC), then write.
            let writer = try s.spawn(["/bin/sh", "-c", "printf 'USERDATA\\n' > bin.dat"], cwd: replica)
            // Held at its open (else at its write, the file already emptied under the fill).
            #expect(waitUntil { waitsOnFanotify(writer.pid) }, "the writer waits for the agent")
            #expect(unlink(gate) == 0)
            let wrote = writer.wait(timeout: patienceSeconds)
            #expect(!wrote.timedOut && wrote.status == 0, "\(wrote)")
            let read = reader.wait(timeout: patienceSeconds)
            #expect(!read.timedOut && read.status == 0, "\(read)")
            #expect(FileManager.default.contents(atPath: replica + "/bin.dat") == Data("USERDATA\n".utf8),
                    "the file is the program's bytes, no remote bytes after them")
            _ = stopAgent(agent)
            try s.fprepOK(["sync", "-C", replica])
            let pushed = try s.git(["show", "main:bin.dat"], cwd: remote.path)
            #expect(pushed.stdoutData == Data("USERDATA\n".utf8), "the remote has what the program wrote")
        }
    }

    @Test("a sync by hand replaces a placeholder whose fill waits for the sync's lock: no conflict copy, nothing pushed, the reader gets the version it opened")
    func syncReplacesAPlaceholderBeingFilled() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let newer = pseudoRandomBytes(7_000, seed: 2)
            try s.pushToRemote(remote, ["bin.dat": newer], message: "a new bin.dat")
            let tip = try s.gitOK(["rev-parse", "main"], cwd: remote.path)
            let agent = try s.startAgent(replica)
            // The sync holds the lock (held at its gate) while a program opens
            // the placeholder: its fill fetches, then waits for the lock, the
            // agent's descriptor of the file open all the while.
            let gate = s.at("sync-gate")
            #expect(FileManager.default.createFile(atPath: gate, contents: Data()))
            let sync = try s.spawnFprep(["sync", "--json", "-C", replica], env: ["FPREP_TEST_SYNC_GATE": gate])
            #expect(waitUntil { FileManager.default.fileExists(atPath: gate + ".waiting") }, "the sync holds the lock")
            let reader = try s.spawnPython(readProgram, ["bin.dat"], cwd: replica)
            let stateFolder = replica + "/.fprep"
            #expect(waitUntil { waitsOnFanotify(reader.pid)
                && ((try? FileManager.default.contentsOfDirectory(atPath: stateFolder)) ?? []).contains { $0.hasPrefix("agent-fetch-") } },
                    "the reader's fill has begun (and will wait for the lock)")
            #expect(unlink(gate) == 0)
            let synced = sync.wait(timeout: patienceSeconds)
            #expect(!synced.timedOut && synced.status == 0, "\(synced)")
            let report = (try? synced.json()) ?? [:]
            #expect((report["conflicts"] as? [Any])?.isEmpty == true && (report["localChanges"] as? [Any])?.isEmpty == true,
                    "the placeholder was taken for a change of the user's: \(synced)")
            let read = reader.wait(timeout: patienceSeconds)
            #expect(read.status == 0 && read.stdoutData == pseudoRandomBytes(10_000, seed: 1), "the reader gets the version it opened: \(read)")
            let names = (try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? []
            #expect(!names.contains { $0.contains("conflict") }, "\(names)")
            #expect(FileManager.default.contents(atPath: replica + "/bin.dat") == newer, "the file is the remote's version")
            _ = stopAgent(agent)
            let again = try s.fprepOK(["sync", "-C", replica])
            #expect(try s.gitOK(["rev-parse", "main"], cwd: remote.path) == tip, "nothing was pushed: \(again)")
        }
    }

    @Test("a sync replaces a placeholder a program is opening for writing while its fill waits: the old version waits aside, the program and a reader get its content there (never EIO); what the program wrote is pushed as a conflict copy, and if it wrote nothing, nothing is pushed",
          arguments: [true, false])
    func syncSetsAsideAPlaceholderBeingOpenedForWriting(writes: Bool) throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            try s.pushToRemote(remote, ["bin.dat": pseudoRandomBytes(7_000, seed: 2)], message: "a new bin.dat")
            let tip = try s.gitOK(["rev-parse", "main"], cwd: remote.path)
            let agent = try s.startAgent(replica)
            let gate = s.at("sync-gate")
            #expect(FileManager.default.createFile(atPath: gate, contents: Data()))
            let sync = try s.spawnFprep(["sync", "-C", replica], env: ["FPREP_TEST_SYNC_GATE": gate])
            #expect(waitUntil { FileManager.default.fileExists(atPath: gate + ".waiting") }, "the sync holds the lock")
            // Opened for writing (its open counts as a writer while it waits), then written at the start.
            let writer = try s.spawnPython("""
                import sys
                f = open('bin.dat', 'r+b')
                if sys.argv[1] == 'yes': f.write(b'WRITER')
                f.close()
                """, [writes ? "yes" : "no"], cwd: replica)
            let reader = try s.spawnPython(readProgram, ["bin.dat"], cwd: replica)
            #expect(waitUntil { waitsOnFanotify(writer.pid) && waitsOnFanotify(reader.pid) }, "both wait for the fill")
            #expect(unlink(gate) == 0)
            let synced = sync.wait(timeout: patienceSeconds)
            #expect(!synced.timedOut && synced.status == 0, "\(synced)")
            let read = reader.wait(timeout: patienceSeconds)
            // The version it opened, but for the writer's bytes if they came first.
            let opened = pseudoRandomBytes(10_000, seed: 1)
            #expect(read.status == 0 && read.stdoutData.count == opened.count && read.stdoutData.dropFirst(6) == opened.dropFirst(6)
                    && [opened.prefix(6), Data("WRITER".utf8)].contains(read.stdoutData.prefix(6)),
                    "the reader gets the version it opened: \(read.status) \(agent.stderrSoFar)")
            let wrote = writer.wait(timeout: patienceSeconds)
            #expect(wrote.status == 0, "the writer's open and write went on: \(wrote) \(agent.stderrSoFar)")
            _ = stopAgent(agent)
            try s.fprepOK(["sync", "-C", replica])
            let grep = try s.git(["grep", "-q", "-a", "-F", "WRITER", "main"], cwd: remote.path)
            #expect((grep.status == 0) == writes, "the program's bytes reached the remote (writes: \(writes))")
            let names = (try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? []
            #expect(!names.contains { $0.hasPrefix(".bin.dat.fprep-") } && names.contains { $0.contains("conflict") } == writes, "\(names)")
            if !writes { #expect(try s.gitOK(["rev-parse", "main"], cwd: remote.path) == tip, "nothing nobody wrote was pushed") }
            #expect(try s.git(["show", "main:bin.dat"], cwd: remote.path).stdoutData == pseudoRandomBytes(7_000, seed: 2))
        }
    }

    @Test("a command holding the replica's lock opens a file whose fill waits for that lock: its open goes on at once (no wait on a fill that waits on it)")
    func lockHolderOpensAFileBeingFilled() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let agent = try s.startAgent(replica)
            let locked = s.at("locked"), go = s.at("go")
            // As a command does: the lock, then an open of the file (a sync replacing it, say).
            let holder = try s.spawnPython("""
                import fcntl, os, sys, time
                lock = os.open('.fprep/lock', os.O_RDWR)
                fcntl.flock(lock, fcntl.LOCK_EX)
                open(sys.argv[1], 'w').close()
                while not os.path.exists(sys.argv[2]): time.sleep(0.005)
                os.close(os.open('bin.dat', os.O_RDONLY))
                print('opened', flush=True)
                """, [locked, go], cwd: replica)
            #expect(waitUntil { FileManager.default.fileExists(atPath: locked) })
            let reader = try s.spawnPython(readProgram, ["bin.dat"], cwd: replica)
            let stateFolder = replica + "/.fprep"
            #expect(waitUntil { waitsOnFanotify(reader.pid)
                && ((try? FileManager.default.contentsOfDirectory(atPath: stateFolder)) ?? []).contains { $0.hasPrefix("agent-fetch-") } },
                    "the reader's fill has begun (and will wait for the lock)")
            #expect(FileManager.default.createFile(atPath: go, contents: Data()))
            let held = holder.wait(timeout: patienceSeconds)
            #expect(!held.timedOut && held.status == 0 && held.stdout == "opened\n", "\(held)")
            let read = reader.wait(timeout: patienceSeconds)
            #expect(read.status == 0 && read.stdoutData == pseudoRandomBytes(10_000, seed: 1), "\(read)")
            _ = stopAgent(agent)
        }
    }

    @Test("refusals: not root, a filesystem without pre-content events")
    func refusals() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica")
            _ = try s.clone(remote.path, replica)
            let unprivileged = try Shell.run(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                              Binaries.fprep, "agent", "-C", replica],
                                             env: s.baseEnvironment, timeout: 30, ioFolder: s.io)
            expectOneLineError(unprivileged, mentioning: ["root"])

            let agent = try s.startAgent(replica)
            let second = try s.fprep(["agent", "-C", replica], timeout: 30)
            expectOneLineError(second, mentioning: ["already serves"])
            _ = stopAgent(agent)

            var template = Array("/dev/shm/fprep-e2e-XXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else { throw HarnessError("mkdtemp in /dev/shm failed") }
            let shm = String(cString: made)
            defer { try? FileManager.default.removeItem(atPath: shm) }
            _ = try s.clone(remote.path, shm + "/replica")
            let tmpfs = try s.fprep(["agent", "-C", shm + "/replica"], timeout: 30)
            expectOneLineError(tmpfs, mentioning: ["filesystem"])
        }
    }

    @Test("placeholders a sync brings while the agent runs are watched too")
    func syncAddsWatchedPlaceholders() throws {
        try withSandbox { s in
            let remote = try s.makeRemote()
            let replica = s.at("replica"), other = s.at("other")
            _ = try s.clone(remote.path, replica)
            _ = try s.clone(remote.path, other)
            let agent = try s.startAgent(replica)
            try Data("new content\n".utf8).write(to: URL(fileURLWithPath: other + "/new.txt"))
            try s.fprepOK(["sync", "-C", other])
            try s.fprepOK(["sync", "-C", replica])
            // Read at once: the sync had the agent watch it before it had its name.
            let cat = try Shell.run(["/bin/cat", "new.txt"], cwd: replica, env: s.baseEnvironment, ioFolder: s.io)
            #expect(cat.stdout == "new content\n", "\(cat)")
            _ = stopAgent(agent)
        }
    }
}
