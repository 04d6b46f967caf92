import Foundation
import Glibc
import Testing

/// Whether someone holds `path`'s flock in a way that keeps a shared lock out
/// (an exclusive holder), tested with a lock attempt of our own.
func exclusivelyLocked(_ path: String) -> Bool {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    if flock(fd, LOCK_SH | LOCK_NB) == 0 { flock(fd, LOCK_UN); return false }
    return true
}

/// Whether someone holds any flock on `path` (a shared or exclusive holder).
func anyLock(_ path: String) -> Bool {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    if flock(fd, LOCK_EX | LOCK_NB) == 0 { flock(fd, LOCK_UN); return false }
    return true
}

/// How long a test waits for something that should happen before it gives
/// up. Only a failing test ever waits this long, so it is generous: CI runs
/// the suites in parallel on two cores, where a step that takes a second
/// alone can take a minute (a 20 s bound failed CI that way).
let patienceSeconds = 180.0

/// Waits for `condition`, checked every 5 ms, giving up after `patienceSeconds`.
func waitUntil(_ condition: () -> Bool) -> Bool {
    let deadline = monotonicSeconds() + patienceSeconds
    while monotonicSeconds() < deadline {
        if condition() { return true }
        usleep(5_000)
    }
    return condition()
}

extension Sandbox {
    /// Holds the replica's lock with /usr/bin/flock until the returned
    /// process is killed (the sandbox kills it at the end), after writing a
    /// holder note the way fprep does ("pid N (fprep COMMAND)"). A holder
    /// that let go after a fixed time would make the test a race with it.
    func holdLock(_ replica: String, shared: Bool = false, note: String? = "e2e-holder") throws -> Spawned {
        let lock = replica + "/.fprep/lock"
        let writeNote = note.map { "printf 'pid %s (fprep \($0))\\n' $$ > .fprep/lock && " } ?? ""
        let holder = try spawn(["/bin/sh", "-c", "\(writeNote)exec /usr/bin/flock \(shared ? "-s " : "")-- .fprep/lock sleep 3600"],
                               cwd: replica)
        let held = waitUntil { shared ? anyLock(lock) : exclusivelyLocked(lock) }
        guard held else { throw HarnessError("the lock holder did not take the lock") }
        return holder
    }
}

@Suite("locking")
struct LockTests {
    @Test("--no-wait exits 75 naming the holder; nothing changes")
    func noWaitBusy() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let holder = try box.holdLock(replica)
            let before = snapshot(replica, skipping: [".fprep"])

            for args in [["status", "--no-wait"], ["status", "--json", "--no-wait"], ["materialize", "--no-wait", "a.txt"],
                         ["evict", "--no-wait", "a.txt"], ["ls", "--no-wait"]] {
                let result = try box.fprep(args, cwd: replica, timeout: 60)
                expectOneLineError(result, status: 75, mentioning: ["busy", "e2e-holder", "pid \(holder.pid)"])
                #expect(result.stdout.isEmpty)
            }
            #expect(snapshot(replica, skipping: [".fprep"]) == before)
            #expect(holder.isRunning, "the holder must still hold the lock (the checks took too long)")
            try expectDataless(box, replica, remote, "a.txt")
        }
    }

    @Test("without --no-wait a command waits for the holder, says so, then succeeds")
    func waitsForHolder() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let holder = try box.holdLock(replica)
            let command = try box.spawnFprep(["materialize", "a.txt"], cwd: replica)
            #expect(waitUntil { command.stderrSoFar.contains("waiting") || !command.isRunning }, "a waiting command says so")
            #expect(command.isRunning, "the command must wait while the lock is held: \(command.stderrSoFar)")
            _ = holder.kill9()
            let result = command.wait(timeout: patienceSeconds)
            #expect(result.status == 0, "\(result)")
            #expect(result.stderr.contains("waiting"), "a waiting command says so: \(result)")
            #expect(result.stderrLines.allSatisfy { $0.hasPrefix("fprep: ") }, "\(result)")
            expectMaterialized(replica, remote, "a.txt")
            try expectGitClean(box, replica)
        }
    }

    @Test("readers share the lock; writers wait for readers; the busy note never names a finished process")
    func sharedReaders() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            // A finished exclusive command first: whatever it noted must not outlive it.
            try box.fprepOK(["materialize", "a.txt"], cwd: replica)

            // A reader (as a long `fprep ls` would) that writes no note.
            let reader = try box.holdLock(replica, shared: true, note: nil)
            let status = try box.fprep(["status", "--no-wait", "--json"], cwd: replica, timeout: 60)
            #expect(status.status == 0, "a reader must not keep another reader out: \(status)")
            let ls = try box.fprep(["ls", "--no-wait"], cwd: replica, timeout: 60)
            #expect(ls.status == 0, "\(ls)")

            let evict = try box.fprep(["evict", "--no-wait", "a.txt"], cwd: replica, timeout: 60)
            expectOneLineError(evict, status: 75)
            // If it names a pid, that process must be alive.
            if let range = evict.stderr.range(of: #"pid [0-9]+"#, options: .regularExpression) {
                let pid = pid_t(evict.stderr[range].dropFirst(4))!
                #expect(kill(pid, 0) == 0, "the busy message names pid \(pid), which is not running: \(evict)")
            }
            #expect(reader.isRunning)
            expectMaterialized(replica, remote, "a.txt")
        }
    }

    @Test("global options before the command: fprep -C DIR status, fprep --verbose status, fprep --no-wait status")
    func globalOptionsBeforeCommand() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let dashC = try box.fprep(["-C", replica, "status", "--json"])
            #expect(dashC.status == 0, "\(dashC)")
            let verbose = try box.fprep(["--verbose", "status"], cwd: replica)
            #expect(verbose.status == 0, "--verbose before the command: \(verbose)")

            let holder = try box.holdLock(replica)
            let noWait = try box.fprep(["--no-wait", "status"], cwd: replica, timeout: 60)
            expectOneLineError(noWait, status: 75, mentioning: ["e2e-holder"])
            let both = try box.fprep(["-C", replica, "--no-wait", "status"], timeout: 60)
            expectOneLineError(both, status: 75, mentioning: ["e2e-holder"])
            #expect(holder.isRunning)
        }
    }
}
