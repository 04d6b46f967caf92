import Foundation
import Glibc
import Testing

extension Spawned {
    /// kill -9 of this process only, as a user's `kill -9` would do: its
    /// children (git) are orphaned and run on; we wait until they are gone.
    func crash() -> RunResult {
        let children = Shell.childProcesses(of: pid)
        let result = kill9Only()
        let deadline = monotonicSeconds() + patienceSeconds
        for child in children {
            while processAlive(child) && monotonicSeconds() < deadline { usleep(5_000) }
            if processAlive(child) { kill(child, SIGKILL) }
        }
        return result
    }

    private func kill9Only() -> RunResult {
        signal(SIGKILL)
        return wait(timeout: 30)
    }
}

/// Alive and not a zombie.
func processAlive(_ pid: pid_t) -> Bool {
    guard kill(pid, 0) == 0 else { return false }
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")") else { return false }
    let state = stat[stat.index(after: close)...].split(separator: " ").first
    return state != "Z" && state != "X"
}

/// fprep's temporary files (".NAME.fprep-TOKEN") anywhere in the tree.
func temporaryFiles(_ replica: String) -> [String] {
    walk(replica, skipping: [".git", ".fprep"]).filter { path in
        let name = (path as NSString).lastPathComponent
        return name.hasPrefix(".") && name.contains(".fprep-")
    }
}

/// A remote of `folders` × `perFolder` files of `size` pseudo-random bytes.
func manyFiles(folders: Int, perFolder: Int, size: Int) -> [String: Node] {
    var nodes: [String: Node] = [:]
    for d in 0..<folders {
        for f in 0..<perFolder {
            let seed = UInt64(d * 10_000 + f + 1)
            nodes[String(format: "d%02d/f%03d.bin", d, f)] = size > 0 ? .file(pseudoRandomBytes(size, seed: seed))
                : .text("\(d) \(f)\n")
        }
    }
    return nodes
}

/// After a crash: the next command must settle the replica. Every file is
/// either a placeholder or holds its exact content; no temporary files; git
/// sees a clean tree; status agrees. Returns (dataless, materialized).
@discardableResult
func expectSettled(_ box: Sandbox, _ replica: String, _ remote: Remote, after what: String,
                   sourceLocation: SourceLocation = #_sourceLocation) throws -> (Int, Int) {
    var status = try box.fprep(["status", "--json", "--no-wait"], cwd: replica, timeout: 30)
    if status.status != 0 {
        Issue.record("fprep status after \(what) failed (nobody holds the lock, so it must recover and succeed): \(status)",
                     sourceLocation: sourceLocation)
        // Let a command that takes the lock alone settle the journal, so the
        // checks below still run.
        _ = try box.fprep(["evict", "e2e-no-such-item"], cwd: replica, timeout: 30)
        status = try box.fprep(["status", "--json"], cwd: replica, timeout: 30)
        guard status.status == 0 else {
            Issue.record("fprep status still fails: \(status)", sourceLocation: sourceLocation)
            return (0, 0)
        }
    }
    let report = try status.json()
    var dataless = 0, materialized = 0
    for (relative, data) in remote.files {
        let path = replica + "/" + relative
        guard let info = lstatInfo(path), info.isRegular else {
            Issue.record("after \(what): \(relative) is missing or not a file", sourceLocation: sourceLocation)
            continue
        }
        if info.blocks == 0 && info.size == Int64(data.count) && xattrString(path, "user.fprep.state") == "dataless" {
            dataless += 1
            #expect(info.mtime == fixedDate, "after \(what): placeholder \(relative) has mtime \(info.mtime), not the item's date",
                    sourceLocation: sourceLocation)
        } else if contents(path) == data {
            materialized += 1
            #expect(info.mtime == fixedDate, "after \(what): \(relative) mtime \(info.mtime)", sourceLocation: sourceLocation)
            #expect(xattrString(path, "user.fprep.state") != "dataless",
                    "after \(what): \(relative) holds its content but is still marked dataless", sourceLocation: sourceLocation)
        } else {
            Issue.record("after \(what): \(relative) is neither a placeholder nor its content (size \(info.size), blocks \(info.blocks), state \(xattrString(path, "user.fprep.state") ?? "-"))",
                         sourceLocation: sourceLocation)
        }
    }
    let links = remote.symlinks.count  // symlinks are always there: counted as materialized
    #expect(report.int("items") == remote.files.count + links, "after \(what): \(report)", sourceLocation: sourceLocation)
    #expect(report.int("modified") == 0 && report.int("deleted") == 0, "after \(what): \(report)", sourceLocation: sourceLocation)
    #expect(report.int("dataless") == dataless && report.int("materialized") == materialized + links,
            "after \(what): status says \(report.int("dataless") ?? -1) dataless / \(report.int("materialized") ?? -1) materialized, disk says \(dataless) / \(materialized) (+\(links) symlinks)",
            sourceLocation: sourceLocation)
    let leftovers = temporaryFiles(replica)
    #expect(leftovers.isEmpty, "after \(what): temporary files left: \(leftovers.prefix(5))", sourceLocation: sourceLocation)
    let porcelain = try box.git(["status", "--porcelain"], cwd: replica, env: ["GIT_NO_LAZY_FETCH": "1"])
    #expect(porcelain.status == 0 && porcelain.stdout.isEmpty, "after \(what): git status: \(porcelain)", sourceLocation: sourceLocation)
    return (dataless, materialized)
}

/// Kill moments: the brief's fixed ones plus fractions of how long the whole command takes here.
func killMoments(fullRun seconds: Double, fixed: [Double] = [0.05, 0.15, 0.4], fractions: [Double] = [0.2, 0.5, 0.8]) -> [Double] {
    Array(Set((fixed + fractions.map { $0 * seconds }).map { ($0 * 1000).rounded() / 1000 })).sorted()
}

@Suite("crash safety", .serialized)
struct CrashTests {
    @Test("kill -9 of materialize at any moment: the next command settles every file")
    func killMaterialize() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: manyFiles(folders: 10, perFolder: 30, size: 8 * 1024))
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let packsBefore = packFiles(replica)

            let started = monotonicSeconds()
            try box.fprepOK(["materialize", "."], cwd: replica)
            let full = monotonicSeconds() - started
            try box.fprepOK(["evict", "."], cwd: replica)

            for delay in killMoments(fullRun: full) {
                let process = try box.spawnFprep(["materialize", "."], cwd: replica)
                sleepSeconds(delay)
                _ = process.crash()
                try expectSettled(box, replica, remote, after: "materialize killed at \(Int(delay * 1000)) ms")
                let reset = try box.fprep(["evict", "."], cwd: replica)
                #expect(reset.status == 0, "evict after the crash: \(reset)")
            }
            // Then a full run finishes the job.
            try box.fprepOK(["materialize", "."], cwd: replica)
            let (dataless, materialized) = try expectSettled(box, replica, remote, after: "the final materialize")
            #expect(dataless == 0 && materialized == remote.files.count)
            #expect(packFiles(replica) == packsBefore, "packs left behind: \(packFiles(replica).subtracting(packsBefore).sorted())")
        }
    }

    @Test("kill -9 of evict at any moment: the next command settles every file")
    func killEvict() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: manyFiles(folders: 10, perFolder: 30, size: 8 * 1024))
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "."], cwd: replica)
            let started = monotonicSeconds()
            try box.fprepOK(["evict", "."], cwd: replica)
            let full = monotonicSeconds() - started
            try box.fprepOK(["materialize", "."], cwd: replica)

            for delay in killMoments(fullRun: full, fixed: [0.02, 0.05, 0.15, 0.4]) {
                let process = try box.spawnFprep(["evict", "."], cwd: replica)
                sleepSeconds(delay)
                _ = process.crash()
                try expectSettled(box, replica, remote, after: "evict killed at \(Int(delay * 1000)) ms")
                let reset = try box.fprep(["materialize", "."], cwd: replica)
                #expect(reset.status == 0, "materialize after the crash: \(reset)")
            }
            try box.fprepOK(["evict", "."], cwd: replica)
            let (dataless, materialized) = try expectSettled(box, replica, remote, after: "the final evict")
            #expect(dataless == remote.files.count && materialized == 0)
        }
    }

    @Test("evict of a folder holding a changed file, killed at each durable step: the changed file keeps its bytes, the others settle")
    func killEvictWithAChangedFile() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: manyFiles(folders: 2, perFolder: 5, size: 4 * 1024))
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let changed = try #require(remote.files.keys.sorted().first)
            var step = 1
            while true {
                try box.fprepOK(["materialize", "."], cwd: replica)
                try Data("mine \(step)\n".utf8).write(to: URL(fileURLWithPath: replica + "/" + changed))
                let evict = try box.fprep(["evict", "."], cwd: replica, env: ["FPREP_CRASH_AT": "\(step)"])
                let status = try box.fprepJSON(["status"], cwd: replica)
                #expect(contents(replica + "/" + changed) == Data("mine \(step)\n".utf8), "killed at step \(step): the change is gone")
                let changes = status.objects("changes").map { "\($0.string("kind") ?? "") \($0.string("path") ?? "")" }
                #expect(changes == ["modified \(changed)"], "killed at step \(step): \(status)")
                // Put back, for the next round.
                try remote.files[changed].map { try $0.write(to: URL(fileURLWithPath: replica + "/" + changed)) }
                if evict.killedBySignal == nil {
                    #expect(evict.stderr.contains(changed) && status.int("dataless") == remote.files.count - 1, "\(evict)\n\(status)")
                    break
                }
                step += 1
                #expect(step < 20, "evict never finished")
                if step >= 20 { break }
            }
            #expect(step > 2, "the evict had durable steps to kill it at")
        }
    }

    @Test("materialize killed while the remote is slow: other commands recover at once, without waiting on themselves")
    func killDuringFetch() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let daemon = try box.startDaemon(base: box.path)
            let replica = box.at("replica")
            _ = try box.clone(daemon.url("remote.git"), replica)

            daemon.pause()  // the fetch connects and then waits
            let process = try box.spawnFprep(["materialize", "bin.dat", "docs"], cwd: replica)
            let fetching = waitUntil { !Shell.childProcesses(of: process.pid).isEmpty }
            #expect(fetching, "materialize never started git")
            sleepSeconds(0.5)  // by now the journal names the files
            _ = process.kill9()  // fprep and the git fetch hanging on the paused daemon
            daemon.resume()

            let noWait = try box.fprep(["status", "--json", "--no-wait"], cwd: replica, timeout: 60)
            #expect(noWait.status == 0, "status must recover the interrupted materialize, not report itself as busy: \(noWait)")
            let waiting = try box.fprep(["status", "--json"], cwd: replica, timeout: 60)
            #expect(waiting.status == 0 && !waiting.timedOut, "status must not wait for its own lock: \(waiting)")
            let ls = try box.fprep(["ls", "--json"], cwd: replica, timeout: 60)
            #expect(ls.status == 0 && !ls.timedOut, "ls after the crash: \(ls)")

            try expectSettled(box, replica, remote, after: "materialize killed during its fetch")
            try expectDataless(box, replica, remote, "bin.dat")
            try box.fprepOK(["materialize", "bin.dat", "docs"], cwd: replica)
            expectMaterialized(replica, remote, "bin.dat")
            expectMaterialized(replica, remote, "docs/deep/nested.txt")
        }
    }

    @Test("materialize killed during its fetch, the orphaned git fetch finishing later: no pack (no second copy of the content) is kept")
    func orphanedFetchLeavesNoPack() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let daemon = try box.startDaemon(base: box.path)
            let replica = box.at("replica")
            _ = try box.clone(daemon.url("remote.git"), replica)
            let packsBefore = packFiles(replica)
            let missingBefore = try objectStore(box, replica: replica).missing

            daemon.pause()
            let process = try box.spawnFprep(["materialize", "bin.dat", "docs"], cwd: replica)
            #expect(waitUntil { !Shell.childProcesses(of: process.pid).isEmpty }, "materialize never started git")
            sleepSeconds(0.5)
            let git = Shell.childProcesses(of: process.pid)
            process.signal(SIGKILL)  // fprep only: its git fetch lives on, as after a real kill -9
            _ = process.wait(timeout: 60)
            daemon.resume()
            #expect(waitUntil { !git.contains(where: processAlive) }, "the orphaned git fetch did not finish")
            for pid in git where processAlive(pid) { kill(pid, SIGKILL) }

            // The next command that takes the lock settles the journal; then a full materialize and evict.
            try box.fprepOK(["materialize", "bin.dat", "docs"], cwd: replica)
            expectMaterialized(replica, remote, "bin.dat")
            try box.fprepOK(["evict", "bin.dat", "docs"], cwd: replica)
            try expectSettled(box, replica, remote, after: "an orphaned fetch")
            let leaked = packFiles(replica).subtracting(packsBefore)
            #expect(leaked.isEmpty, "packs kept after the crash: \(leaked.sorted())")
            let present = missingBefore.subtracting(try objectStore(box, replica: replica).missing)
            #expect(present.isEmpty, "blobs kept in the object store beside their files: \(present.sorted())")
        }
    }

    @Test("kill -9 of clone (3000 files) at any moment: the same clone command finishes it, other commands say so or finish it")
    func killClone() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: manyFiles(folders: 30, perFolder: 100, size: 0))
            let count = remote.files.count

            func expectComplete(_ replica: String, _ what: String) throws {
                let status = try box.fprep(["status", "--json"], cwd: replica, timeout: 60)
                guard status.status == 0 else {
                    Issue.record("\(what): status fails: \(status)")
                    return
                }
                let report = try status.json()
                #expect(report.int("items") == count && report.int("dataless") == count, "\(what): \(report)")
                #expect(report.string("anchor") == remote.commit)
                let names = walk(replica, skipping: [".git", ".fprep"])
                #expect(names.count == count + 30, "\(what): \(names.count) entries on disk")
                for relative in ["d00/f000.bin", "d29/f099.bin", "d15/f050.bin"] {
                    let info = lstatInfo(replica + "/" + relative)
                    #expect(info?.blocks == 0 && info?.size == Int64(remote.files[relative]!.count), "\(what): \(relative)")
                    #expect(xattrString(replica + "/" + relative, "user.fprep.state") == "dataless")
                }
                let porcelain = try box.git(["status", "--porcelain"], cwd: replica, env: ["GIT_NO_LAZY_FETCH": "1"])
                #expect(porcelain.status == 0 && porcelain.stdout.isEmpty, "\(what): git status \(porcelain)")
            }

            let started = monotonicSeconds()
            _ = try box.clone(remote.path, box.at("full"))
            let full = monotonicSeconds() - started
            try expectComplete(box.at("full"), "an uninterrupted clone")

            let moments = killMoments(fullRun: full, fixed: [0.03], fractions: [0.1, 0.3, 0.5, 0.7, 0.9])
            for (i, delay) in moments.enumerated() {
                let what = "clone killed at \(Int(delay * 1000)) ms of \(Int(full * 1000))"
                // A: the same clone command again.
                let a = box.at("a\(i)")
                let first = try box.spawnFprep(["clone", remote.path, a])
                sleepSeconds(delay)
                _ = first.crash()
                let again = try box.fprep(["clone", remote.path, a], timeout: 60)
                #expect(again.status == 0, "\(what): running the same clone again must finish it: \(again)")
                if again.status == 0 { try expectComplete(a, what + ", then cloned again") }
                else { expectOneLineError(again) }

                // B: another command first: it finishes the clone or says to run it again.
                let b = box.at("b\(i)")
                let second = try box.spawnFprep(["clone", remote.path, b])
                sleepSeconds(delay)
                _ = second.crash()
                // --no-wait: nobody holds the lock, so waiting could only mean waiting on itself.
                let status = try box.fprep(["-C", b, "status", "--json", "--no-wait"], timeout: 30)
                if status.status == 0 {
                    try expectComplete(b, what + ", then status")
                } else {
                    #expect(status.status != 75, "\(what): status reports the replica busy though nothing runs: \(status)")
                    expectOneLineError(status, mentioning: ["clone"])
                    let rerun = try box.fprep(["clone", remote.path, b], timeout: 60)
                    #expect(rerun.status == 0, "\(what): status said \(status.stderr), but the clone does not finish: \(rerun)")
                    if rerun.status == 0 { try expectComplete(b, what + ", then status, then clone") }
                }
            }
        }
    }
}
