import Foundation
import Glibc
import Testing

// Files fprep did not make (hard links, FIFOs, sockets, devices, a symlink
// in place of a folder), programs writing while fprep works on a file, and
// git's own lock files: nothing anyone wrote is lost, nothing hangs.

private let python = "/usr/bin/python3"

/// The paths of `keptLocal` in a sync's JSON, with their reasons.
private func kept(_ report: [String: Any]) -> [String: String] {
    var result: [String: String] = [:]
    for item in report.objects("keptLocal") {
        if let path = item.string("path"), let reason = item.string("reason") { result[path] = reason }
    }
    return result
}

/// The remote branch's file list.
private func remoteFiles(_ box: Sandbox, _ remote: Remote) throws -> Set<String> {
    Set(try box.gitOK(["ls-tree", "-r", "--name-only", "main"], cwd: remote.path).split(separator: "\n").map(String.init))
}

/// Runs `sync --json` with a deadline: it must finish, not hang.
private func syncWithin(_ box: Sandbox, _ replica: String, seconds: Double = 30,
                        sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: Any] {
    let result = try box.fprep(["sync", "--json"], cwd: replica, timeout: seconds)
    #expect(!result.timedOut, "sync hung: \(result)", sourceLocation: sourceLocation)
    #expect(result.status == 0 && !looksLikeCrash(result.stderr), "sync failed: \(result)", sourceLocation: sourceLocation)
    return (try? result.json()) ?? [:]
}

/// Every byte of every regular file directly in `folder`, concatenated.
private func allBytes(in folder: String) -> Data {
    var bytes = Data()
    for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] {
        if let info = lstatInfo(folder + "/" + name), info.isRegular { bytes += contents(folder + "/" + name) ?? Data() }
    }
    return bytes
}

@Suite("files fprep did not make")
struct ForeignFileTests {
    @Test("evict refuses a file with another hard link; the other name keeps its bytes")
    func evictRefusesHardLink() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "a.txt"], cwd: replica)
            let outside = box.at("outside.txt")
            #expect(link(replica + "/a.txt", outside) == 0)
            let result = try box.fprep(["evict", "a.txt"], cwd: replica)
            expectOneLineError(result, status: 2, mentioning: ["a.txt", "hard links"])
            #expect(contents(outside) == Data("hello\n".utf8), "the other link was emptied")
            #expect(contents(replica + "/a.txt") == Data("hello\n".utf8))
        }
    }

    @Test("a FIFO or a socket in place of tracked files: sync finishes, reports them, deletes nothing")
    func fifoAndSocketInPlaceOfTrackedFiles() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "bin.dat"], cwd: replica)
            // A placeholder and a materialized file become FIFOs; a file a socket.
            for path in ["a.txt", "bin.dat"] {
                unlink(replica + "/" + path)
                #expect(mkfifo(replica + "/" + path, 0o644) == 0)
            }
            unlink(replica + "/docs/readme.md")
            let socket = try Shell.run([python, "-c", "import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])",
                                        replica + "/docs/readme.md"])
            #expect(socket.status == 0, "\(socket)")

            let report = try syncWithin(box, replica)
            let skipped = kept(report)
            #expect(skipped["a.txt"]?.contains("FIFO") == true, "\(report)")
            #expect(skipped["bin.dat"]?.contains("FIFO") == true, "\(report)")
            #expect(skipped["docs/readme.md"]?.contains("socket") == true, "\(report)")
            #expect(try remoteFiles(box, remote).isSuperset(of: ["a.txt", "bin.dat", "docs/readme.md"]))
            // Materialize and evict leave them alone too, and say why.
            let materialized = try box.fprep(["materialize", "a.txt"], cwd: replica, timeout: 30)
            // Done in part (exit 2), the file left out named on standard error with why.
            expectOneLineError(materialized, status: 2, mentioning: ["a.txt", "FIFO"])
            let evicted = try box.fprep(["evict", "docs/readme.md"], cwd: replica, timeout: 30)
            expectOneLineError(evicted, status: 2, mentioning: ["socket"])
        }
    }

    @Test("new FIFOs, sockets and devices in the replica are reported and never committed")
    func newSpecialFiles() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            #expect(mkfifo(replica + "/new.fifo", 0o644) == 0)
            try FileManager.default.createDirectory(atPath: replica + "/dev", withIntermediateDirectories: true)
            let null = try Shell.run(["/usr/bin/mknod", replica + "/dev/null-clone", "c", "1", "3"])
            #expect(null.status == 0, "\(null)")
            let socket = try Shell.run([python, "-c", "import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])",
                                        replica + "/new.sock"])
            #expect(socket.status == 0, "\(socket)")

            let report = try syncWithin(box, replica)
            let skipped = kept(report)
            #expect(skipped["new.fifo"]?.contains("FIFO") == true, "\(report)")
            #expect(skipped["new.sock"]?.contains("socket") == true, "\(report)")
            #expect(skipped["dev/null-clone"]?.contains("device") == true, "\(report)")
            let files = try remoteFiles(box, remote)
            #expect(files.isDisjoint(with: ["new.fifo", "new.sock", "dev/null-clone"]), "\(files)")
        }
    }

    @Test("new items under names every device refuses (.fprep, .GIT, '.git. ' below the top) stay here, reported; the other devices and new clones sync on")
    func namesTheRemoteRefusesStayLocal() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            let other = box.at("other")
            _ = try box.clone(remote.path, replica)
            _ = try box.clone(remote.path, other)
            let held = ["docs/.fprep/notes", "sub/.GIT/HEAD", "sub/.GIT/refs/x", "deep/er/.git. /w"]
            for path in held + ["gitx/g", "docs/.fprep-not/n"] {
                let full = replica + "/" + path
                try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                #expect(FileManager.default.createFile(atPath: full, contents: Data(path.utf8)))
            }

            let status = try box.fprepJSON(["status", "--json"], cwd: replica)
            let notSynced = Set(status.objects("notSynced").compactMap { $0.string("path") })
            #expect(notSynced == ["docs/.fprep", "sub/.GIT", "deep/er/.git. "], "\(status)")
            let report = try syncWithin(box, replica)
            let skipped = kept(report)
            #expect(skipped["docs/.fprep"]?.contains("reserved for fprep") == true, "\(report)")
            #expect(skipped["sub/.GIT"]?.contains("reserved for git") == true, "\(report)")
            let files = try remoteFiles(box, remote)
            #expect(files.isSuperset(of: ["gitx/g", "docs/.fprep-not/n"]), "\(files)")
            #expect(files.allSatisfy { !$0.contains(".fprep/") && !$0.contains(".GIT/") && !$0.contains(".git. /") }, "\(files)")
            // Every device takes the tree: a sync elsewhere, a new clone.
            _ = try syncWithin(box, other)
            #expect(contents(other + "/gitx/g") != nil)
            _ = try box.clone(remote.path, box.at("third"))
            // Kept here, and a later sync says so again without failing.
            for path in held { #expect(contents(replica + "/" + path) == Data(path.utf8)) }
            #expect(kept(try syncWithin(box, replica))["sub/.GIT"] != nil)
        }
    }

    @Test("a replica of another remote cloned inside a replica: its placeholders stay here (reported), its content syncs, and every push goes through")
    func replicaOfAnotherRemoteInside() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let other = try box.makeRemote("other.git", nodes: ["o.txt": .text("other\n"), "big.bin": .file(Data(repeating: 7, count: 5000))])
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            _ = try box.clone(other.path, replica + "/nested")
            try box.fprepOK(["materialize", "o.txt"], cwd: replica + "/nested")
            // A placeholder of this replica's own, copied with its marks: its blob is the remote's.
            let copied = try Shell.run(["/bin/cp", "-a", replica + "/a.txt", replica + "/copy-of-a.txt"])
            #expect(copied.status == 0, "\(copied)")

            let report = try syncWithin(box, replica)
            #expect(report.string("pushed") != nil, "\(report)")
            #expect(kept(report)["nested/big.bin"]?.contains("another replica") == true, "\(report)")
            let files = try remoteFiles(box, remote)
            #expect(files.contains("nested/o.txt") && files.contains("copy-of-a.txt") && !files.contains("nested/big.bin"), "\(files)")
            // Moved out of its replica, it is still another replica's.
            #expect(rename(replica + "/nested/big.bin", replica + "/moved.bin") == 0)
            try Data("later\n".utf8).write(to: URL(fileURLWithPath: replica + "/later.txt"))
            let again = try syncWithin(box, replica)
            #expect(again.string("pushed") != nil && kept(again)["moved.bin"] != nil, "\(again)")
            #expect(try remoteFiles(box, remote).contains("later.txt"))
            #expect(try box.fprepJSON(["status", "--json"], cwd: replica).string("waitingToPush") == nil)
        }
    }

    @Test("a /dev/zero clone in place of a tracked file is never read (no endless read, no huge allocation)")
    func zeroDeviceInPlaceOfFile() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let before = try box.blobID(remote, "bin.dat")
            unlink(replica + "/bin.dat")
            let zero = try Shell.run(["/usr/bin/mknod", replica + "/bin.dat", "c", "1", "5"])
            #expect(zero.status == 0, "\(zero)")
            let report = try syncWithin(box, replica)
            #expect(kept(report)["bin.dat"]?.contains("character device") == true, "\(report)")
            #expect(try box.blobID(remote, "bin.dat") == before)
        }
    }

    @Test("a symlink in place of a folder: never followed, and named clearly")
    func symlinkInPlaceOfFolder() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            #expect(rename(replica + "/docs", box.at("elsewhere")) == 0)
            #expect(symlink(box.at("elsewhere"), replica + "/docs") == 0)
            let outside = snapshot(box.at("elsewhere"))

            let materialized = try box.fprep(["materialize", "docs/readme.md"], cwd: replica)
            #expect(materialized.status == 2, "\(materialized)")
            #expect(materialized.stderr.contains("'docs' is a symlink where the replica has a folder"), "\(materialized)")
            // Nor a folder's times through it: a materialize looks ahead at
            // the folders it is about to change (their access time set),
            // and a symlink among the folders on the way is never followed.
            func changed(_ path: String) -> Int {
                var info = stat()
                return stat(path, &info) == 0 ? info.st_ctim.tv_sec * 1_000_000_000 + info.st_ctim.tv_nsec : -1
            }
            let deepChanged = changed(box.at("elsewhere/deep"))
            _ = try box.fprep(["materialize", "docs/readme.md", "docs/deep/nested.txt"], cwd: replica)
            #expect(changed(box.at("elsewhere/deep")) == deepChanged, "a folder's times changed through the symlink")
            let evicted = try box.fprep(["evict", "docs/deep/nested.txt"], cwd: replica)
            expectOneLineError(evicted, status: 2, mentioning: ["'docs' is a symlink where the replica has a folder"])
            // Listing the folder reads nothing through the symlink: its files are not there.
            let items = itemsByName(try box.fprepJSON(["ls", "docs"], cwd: replica))
            #expect(items["docs/readme.md"]?.string("state") == "deleted", "\(items)")
            #expect(snapshot(box.at("elsewhere")) == outside, "fprep wrote through the symlink")
        }
    }
}

@Suite("programs writing while fprep works")
struct ConcurrentWriterTests {
    /// Holds the placeholder open from before materialize; writes only once
    /// the name points at another file (the rename happened) or the test
    /// says fprep is done. Every token it wrote is in its log's count.
    static let holdingWriter = """
        import os, sys, time
        path, ready, stop, log = sys.argv[1:5]
        f = open(path, 'ab', buffering=0)
        inode = os.fstat(f.fileno()).st_ino
        open(ready, 'w').close()
        while not os.path.exists(stop):
            try:
                if os.stat(path).st_ino != inode: break
            except FileNotFoundError:
                break
            time.sleep(0.0005)
        n = 0
        for _ in range(20):
            f.write(b'<token-%d>' % n); n += 1
            time.sleep(0.001)
        f.close()
        open(log, 'w').write(str(n))
        """

    @Test("a program holding a placeholder open while it is materialized keeps every byte it writes")
    func writerDuringMaterialize() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let ready = box.at("ready"), stop = box.at("stop"), log = box.at("log")
            let writer = try box.spawn([python, "-c", Self.holdingWriter, replica + "/bin.dat", ready, stop, log])
            let deadline = monotonicSeconds() + patienceSeconds
            while !exists(ready) && writer.isRunning && monotonicSeconds() < deadline { usleep(1_000) }
            try #require(exists(ready), "the writer did not start")

            let result = try box.fprep(["materialize", "bin.dat", "--json"], cwd: replica)
            // 2 when the writer wrote before materialize looked at the
            // file (left as it is), 0 when it wrote during the swap (the
            // content in place, the bytes kept beside it).
            #expect(result.status == 0 || result.status == 2, "\(result)")
            #expect(FileManager.default.createFile(atPath: stop, contents: nil))
            let done = writer.wait(timeout: 30)
            #expect(done.status == 0, "\(done)")
            let count = Int(String(decoding: contents(log) ?? Data(), as: UTF8.self)) ?? 0
            #expect(count == 20)
            let everything = allBytes(in: replica)
            for n in 0..<count {
                #expect(everything.range(of: Data("<token-\(n)>".utf8)) != nil, "token \(n) was lost: \(result)")
            }
        }
    }

    /// Opens the file the moment fprep holds a lease on it (its open waits
    /// until the lease is given back), appends a token and closes; if no
    /// lease shows up before fprep ends, appends all the same.
    static let leaseRacer = """
        import os, sys
        path, pid, log = sys.argv[1], sys.argv[2], sys.argv[3]
        inode = str(os.stat(path).st_ino)
        def leased():
            for line in open('/proc/locks'):
                fields = line.split()
                if 'LEASE' in fields and any(f.count(':') == 2 and f.rsplit(':', 1)[1] == inode for f in fields):
                    return True
            return False
        def gone():
            try:
                return open('/proc/%s/stat' % pid).read().rsplit(')', 1)[1].split()[0] in 'ZX'
            except OSError:
                return True
        found = 'gone'
        while not gone():
            if leased():
                found = 'leased'
                break
        with open(path, 'ab') as f:
            f.write(b'<lease-token>')
        open(log, 'w').write(found)
        """

    /// Runs fprep under strace (each of its threads: materialize swaps two
    /// files at a time), which holds each of its `renameat2` calls
    /// (the swap of a file under its lease) for 30 ms, while `leaseRacer`
    /// opens `watched` the moment the lease is there: the open waits for
    /// the swap, then writes into the old file. Returns fprep's result, the
    /// racer's log ("leased" when it met the lease) and the bytes of every
    /// file in `folder`.
    static func raceTheSwap(_ box: Sandbox, _ args: [String], cwd: String, watched: String,
                            folder: String) throws -> (RunResult, String, Data) {
        let log = box.at("log")
        let traced = try box.spawn(["/usr/bin/strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=renameat2",
                                    "-e", "inject=renameat2:delay_enter=30000", Binaries.fprep] + args, cwd: cwd)
        let racer = try box.spawn([python, "-c", Self.leaseRacer, watched, String(traced.pid), log])
        let result = traced.wait(timeout: 60)
        let raced = racer.wait(timeout: 60)
        #expect(raced.status == 0, "\(raced)")
        return (result, String(decoding: contents(log) ?? Data(), as: UTF8.self), allBytes(in: folder))
    }

    static let straceWorks = (try? Shell.run(["/usr/bin/strace", "-qq", "-o", "/dev/null", "/bin/true"]))?.status == 0

    @Test("an open that goes away at once (a forked child not yet exec'd holds it) does not refuse materialize or evict")
    func transientOpenIsWaitedOut() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            // A child inherits the shell's descriptor of the file and holds it
            // a moment after the shell closed its own: the kernel refuses a
            // write lease meanwhile, as while a forked child has not exec'd.
            let script = "exec 3< a.txt; sleep 0.3 & exec 3<&-; fprep materialize a.txt && exec 3< a.txt; sleep 0.3 & exec 3<&-; fprep evict a.txt"
            let result = try box.sh(script.replacingOccurrences(of: "fprep ", with: Binaries.fprep + " "), cwd: replica)
            #expect(!result.stdout.contains("open in another program"), "\(result)")
            #expect(lstatInfo(replica + "/a.txt")?.blocks == 0, "evict did not happen")
            try box.fprepOK(["materialize", "a.txt"], cwd: replica)
            #expect(contents(replica + "/a.txt") == remote.files["a.txt"])
        }
    }

    @Test("a program that opens a placeholder while materialize swaps it keeps its bytes, as a conflict copy",
          .enabled(if: straceWorks, "needs strace to hold the swap"))
    func writerOpeningDuringMaterializeSwap() throws {
        try withSandbox { box in
            var nodes = standardTree
            for n in 0..<20 { nodes["many/f\(n).txt"] = .text("file \(n)\n") }
            let remote = try box.makeRemote(nodes: nodes)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let (result, log, everything) = try Self.raceTheSwap(box, ["materialize", "many"], cwd: replica,
                                                                  watched: replica + "/many/f9.txt", folder: replica + "/many")
            #expect(result.status == 0, "\(result)")
            #expect(log == "leased", "the racer never met the lease: \(result)")
            #expect(everything.range(of: Data("<lease-token>".utf8)) != nil, "the token was lost: \(result)")
            #expect(contents(replica + "/many/f9.txt") == Data("file 9\n".utf8))
            let copies = ((try? FileManager.default.contentsOfDirectory(atPath: replica + "/many")) ?? []).filter { $0.contains("conflict") }
            #expect(copies.count == 1 && result.stdout.contains("kept as"), "\(copies) \(result)")
        }
    }

    @Test("a program that opens a file while sync swaps in the remote's version keeps its bytes, as a conflict copy",
          .enabled(if: straceWorks, "needs strace to hold the swap"))
    func writerOpeningDuringSyncSwap() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            try Data("changed\n".utf8).write(to: URL(fileURLWithPath: work + "/a.txt"))
            try box.gitOK(["commit", "-q", "-am", "change"], cwd: work)
            try box.gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)
            let (result, log, everything) = try Self.raceTheSwap(box, ["sync"], cwd: replica, watched: replica + "/a.txt", folder: replica)
            #expect(result.status == 0, "\(result)")
            #expect(log == "leased", "the racer never met the lease: \(result)")
            #expect(everything.range(of: Data("<lease-token>".utf8)) != nil, "the token was lost: \(result)")
            // Held aside while the program had it open, or settled at once: a conflict copy after the next sync.
            try box.fprepOK(["sync"], cwd: replica)
            let copies = ((try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? []).filter { $0.contains("conflict") }
            #expect(copies.count == 1, "\(copies) \(result)")
            #expect(try Self.kept(box, "<lease-token>", replica: replica, remote: remote).pushed)
        }
    }

    /// A replica whose `a.txt` the remote then changes (or deletes): as a
    /// placeholder or materialized first.
    static func replicaBehindTheRemote(_ box: Sandbox, materialized: Bool, deleted: Bool) throws -> (replica: String, remote: Remote) {
        let remote = try box.makeRemote()
        let replica = box.at("replica")
        _ = try box.clone(remote.path, replica)
        if materialized { try box.fprepOK(["materialize", "a.txt"], cwd: replica) }
        try box.pushToRemote(remote, ["a.txt": deleted ? nil : Data("the remote's\n".utf8)], message: "the remote changes a.txt")
        return (replica, remote)
    }

    /// Whether `text` is in some file of the replica's top folder, and in some blob of the remote's branch.
    static func kept(_ box: Sandbox, _ text: String, replica: String, remote: Remote) throws -> (here: Bool, pushed: Bool) {
        let here = allBytes(in: replica).range(of: Data(text.utf8)) != nil
        let grep = try box.git(["grep", "-q", "-F", text, "main"], cwd: remote.path)
        return (here, grep.status == 0)
    }

    @Test("an editor's save renamed over a file while sync is about to swap it (a lease holds opens, not renames) is kept and pushed, never deleted",
          arguments: [(false, false), (true, false), (true, true)])
    func renameSaveDuringTheSwap(materialized: Bool, deleted: Bool) throws {
        try withSandbox { box in
            let (replica, remote) = try Self.replicaBehindTheRemote(box, materialized: materialized, deleted: deleted)
            let gate = box.at("gate")
            #expect(FileManager.default.createFile(atPath: gate, contents: Data()))
            let sync = try box.spawnFprep(["sync", "--json"], cwd: replica, env: ["FPREP_TEST_BEFORE_EXCHANGE_GATE": gate])
            #expect(waitUntil { exists(gate + ".waiting") }, "the sync reached the swap: \(sync.stderrSoFar)")
            // As an editor saves: a new file, renamed over the name.
            try Data("EDITOR-SAVE\n".utf8).write(to: URL(fileURLWithPath: replica + "/.a.txt.swp"))
            #expect(rename(replica + "/.a.txt.swp", replica + "/a.txt") == 0)
            #expect(unlink(gate) == 0)
            let synced = sync.wait(timeout: patienceSeconds)
            #expect(!synced.timedOut && synced.status == 0, "\(synced)")
            #expect(try Self.kept(box, "EDITOR-SAVE", replica: replica, remote: remote).here, "the save is gone: \(synced)")
            try box.fprepOK(["sync"], cwd: replica)
            let after = try Self.kept(box, "EDITOR-SAVE", replica: replica, remote: remote)
            #expect(after.here && after.pushed, "\(after) \(synced)")
            if !deleted {
                #expect(try box.git(["show", "main:a.txt"], cwd: remote.path).stdout == "the remote's\n" || after.pushed)
            }
        }
    }

    @Test("sync killed right after an editor's save renamed over the file it was about to swap (the save is at the temporary name, not yet put back): the next command keeps the save, and the next sync pushes it",
          arguments: [(false, false), (true, false), (true, true)])
    func renameSaveDuringTheSwapThenKilled(materialized: Bool, deleted: Bool) throws {
        try withSandbox { box in
            let (replica, remote) = try Self.replicaBehindTheRemote(box, materialized: materialized, deleted: deleted)
            let before = box.at("before"), after = box.at("after")
            for gate in [before, after] { #expect(FileManager.default.createFile(atPath: gate, contents: Data())) }
            let sync = try box.spawnFprep(["sync"], cwd: replica,
                                          env: ["FPREP_TEST_BEFORE_EXCHANGE_GATE": before, "FPREP_TEST_AFTER_EXCHANGE_GATE": after])
            #expect(waitUntil { exists(before + ".waiting") }, "the sync reached the swap: \(sync.stderrSoFar)")
            try Data("EDITOR-SAVE\n".utf8).write(to: URL(fileURLWithPath: replica + "/.a.txt.swp"))
            #expect(rename(replica + "/.a.txt.swp", replica + "/a.txt") == 0)
            #expect(unlink(before) == 0)
            #expect(waitUntil { exists(after + ".waiting") }, "the sync exchanged the names: \(sync.stderrSoFar)")
            _ = sync.kill9()
            let status = try box.fprep(["status"], cwd: replica)
            #expect(status.status == 0, "\(status)")
            #expect(try Self.kept(box, "EDITOR-SAVE", replica: replica, remote: remote).here, "recovery deleted the save: \(status)")
            try box.fprepOK(["sync"], cwd: replica)
            let kept = try Self.kept(box, "EDITOR-SAVE", replica: replica, remote: remote)
            #expect(kept.here && kept.pushed, "\(kept)")
            let left = (try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? []
            #expect(!left.contains { $0.hasPrefix(".a.txt.fprep-") }, "\(left)")
        }
    }

    /// A program that opens `a.txt` for appending while sync holds its
    /// lease (the open waits, then goes into the old file), says so in
    /// `opened`, appends `text` (none: nothing) and holds the file open
    /// until `stop` exists, then appends `late` and closes.
    static let appendingWriter = """
        import os, sys, time
        f = open('a.txt', 'ab', buffering=0)
        open(sys.argv[1], 'w').close()
        if sys.argv[2]: f.write(sys.argv[2].encode())
        open(sys.argv[1] + '.wrote', 'w').close()
        while not os.path.exists(sys.argv[3]): time.sleep(0.005)
        if sys.argv[4]: f.write(sys.argv[4].encode())
        f.close()
        """

    @Test("sync killed right after it swapped out the old file, a program writing into it: the next command leaves it aside while the program holds it, and the sync after the program closed it keeps those bytes as a conflict copy, pushed; killed with the old file untouched, it goes")
    func killedWhileTheOldFileIsWritten() throws {
        for written in [true, false] {
            try withSandbox { box in
                let (replica, remote) = try Self.replicaBehindTheRemote(box, materialized: true, deleted: false)
                let before = box.at("before"), after = box.at("after"), opened = box.at("opened"), stop = box.at("stop")
                #expect(FileManager.default.createFile(atPath: after, contents: Data()))
                var env = ["FPREP_TEST_AFTER_EXCHANGE_GATE": after]
                if written {
                    #expect(FileManager.default.createFile(atPath: before, contents: Data()))
                    env["FPREP_TEST_BEFORE_EXCHANGE_GATE"] = before
                }
                let sync = try box.spawnFprep(["sync"], cwd: replica, env: env)
                var writer: Spawned?
                if written {
                    #expect(waitUntil { exists(before + ".waiting") }, "the sync reached the swap: \(sync.stderrSoFar)")
                    // Its open waits on the lease, and goes into the old file once the names are exchanged.
                    writer = try box.spawn([python, "-c", Self.appendingWriter, opened, "WRITER-BYTES\n", stop, ""], cwd: replica)
                    #expect(waitUntil { (try? String(contentsOfFile: "/proc/\(writer!.pid)/wchan", encoding: .utf8))?.contains("break_lease") == true },
                            "the writer's open waits on the sync's lease")
                    #expect(unlink(before) == 0)
                }
                // Killed after the exchange (its lease goes with it: the writer's open goes on into the old file).
                #expect(waitUntil { exists(after + ".waiting") }, "the sync exchanged the names: \(sync.stderrSoFar)")
                _ = sync.kill9()
                if written { #expect(waitUntil { exists(opened + ".wrote") }, "the writer wrote") }
                let status = try box.fprepJSON(["status"], cwd: replica)
                let left = (try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? []
                #expect(left.contains { $0.hasPrefix(".a.txt.fprep-") } == written, "held while written, else settled: \(left)")
                #expect(!left.contains { $0.contains("conflict") }, "written \(written): \(left) \(status)")
                #expect(FileManager.default.createFile(atPath: stop, contents: nil))
                if let writer { #expect(writer.wait(timeout: patienceSeconds).status == 0) }
                try box.fprepOK(["sync"], cwd: replica)
                let settled = (try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? []
                #expect(!settled.contains { $0.hasPrefix(".a.txt.fprep-") }, "settled: \(settled)")
                #expect(settled.contains { $0.contains("conflict") } == written, "written \(written): \(settled)")
                let bytes = try Self.kept(box, "WRITER-BYTES", replica: replica, remote: remote)
                #expect(bytes.here == written && bytes.pushed == written, "written \(written): \(bytes)")
                #expect(contents(replica + "/a.txt") == Data("the remote's\n".utf8))
            }
        }
    }

    @Test("a program holding a file open for writing while sync replaces or deletes it: the old version waits aside until the program closes it; written meanwhile, it is a conflict copy, pushed; never written, it goes and nothing is pushed",
          arguments: [(true, false, false), (false, false, false), (true, true, false), (false, true, false),
                      (true, false, true), (false, false, true), (true, true, true), (false, true, true)])
    func writerHoldingTheFileDuringSync(materialized: Bool, deleted: Bool, writes: Bool) throws {
        try withSandbox { box in
            let (replica, remote) = try Self.replicaBehindTheRemote(box, materialized: materialized, deleted: deleted)
            let tip = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            let opened = box.at("opened"), stop = box.at("stop")
            let writer = try box.spawn([python, "-c", Self.appendingWriter, opened, "", stop, writes ? "LATE-WRITE\n" : ""], cwd: replica)
            #expect(waitUntil { exists(opened + ".wrote") }, "the program holds a.txt open")
            for round in 0..<2 {
                // Twice: a sync while the program still holds it settles nothing.
                let report = try syncWithin(box, replica)
                #expect(report["heldOpen"] as? [String] == ["a.txt"], "round \(round): \(report)")
                #expect((report["conflicts"] as? [Any])?.isEmpty == true && (report["localChanges"] as? [Any])?.isEmpty == true
                        && (report["keptLocal"] as? [Any])?.isEmpty == true, "round \(round): \(report)")
            }
            let inPlace = {
                // The remote's version: its content, or a placeholder of its size.
                deleted ? !exists(replica + "/a.txt") : materialized ? contents(replica + "/a.txt") == Data("the remote's\n".utf8)
                    : lstatInfo(replica + "/a.txt").map { $0.blocks == 0 && $0.size == 13 } == true
            }
            #expect(inPlace(), "the remote's version is in place")
            let names = (try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? []
            #expect(!names.contains { $0.contains("conflict") } && names.filter { $0.hasPrefix(".a.txt.fprep-") }.count == 1, "\(names)")
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == tip, "nothing was pushed while the program held it")
            let status = try box.fprepJSON(["status"], cwd: replica)
            #expect((status["changes"] as? [Any])?.isEmpty != false, "the old version is no change of the user's: \(status)")
            // Nor one git shows, or a user's `git add -A` would commit.
            let gitStatus = try box.gitOK(["status", "--porcelain", "--untracked-files=all"], cwd: replica)
            #expect(!gitStatus.contains(".a.txt.fprep-"), "git status: \(gitStatus)")
            #expect(FileManager.default.createFile(atPath: stop, contents: nil))
            #expect(writer.wait(timeout: patienceSeconds).status == 0)
            // An incoming sync settles it too; a written one waits for the
            // next full sync as a conflict copy, and it says so.
            let incoming = try box.fprep(["sync", "--incoming", "--json"], cwd: replica)
            let waiting = ((try? incoming.json()) ?? [:]).objects("keptLocal").filter {
                $0.string("reason")?.contains("for the next full 'fprep sync'") == true && $0.string("path")?.contains("conflict") == true
            }
            #expect(incoming.status == 0 && waiting.count == (writes ? 1 : 0), "\(incoming)")
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == tip, "an incoming sync pushes nothing")
            let report = try syncWithin(box, replica)
            #expect((report["heldOpen"] as? [String] ?? []).isEmpty, "\(report)")
            let after = (try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? []
            #expect(!after.contains { $0.hasPrefix(".a.txt.fprep-") }, "settled: \(after)")
            #expect(after.filter { $0.contains("conflict") }.count == (writes ? 1 : 0), "writes \(writes): \(after) \(report)")
            let pushed = try Self.kept(box, "LATE-WRITE", replica: replica, remote: remote)
            #expect(pushed.here == writes && pushed.pushed == writes, "writes \(writes): \(pushed) \(report)")
            if !writes { #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == tip, "nothing nobody wrote was pushed: \(report)") }
            #expect(inPlace())
        }
    }

    @Test("the remote deletes the folder of a file a program holds open for writing (or puts a file in its place: found by a hostile test): the folder stays while the program holds it (said so), then goes with the old version; nothing is pushed",
          arguments: [false, true])
    func writerHoldingAFileOfADeletedFolder(fileInItsPlace: Bool) throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "docs"], cwd: replica)
            let files = try remoteFiles(box, remote).filter { $0.hasPrefix("docs/") }
            try box.pushToRemote(remote, Dictionary(uniqueKeysWithValues: files.map { ($0, Data?.none) }), message: "no more docs")
            // Both commits come in with one sync: a folder that became a file.
            if fileInItsPlace { try box.pushToRemote(remote, ["docs": Data("a file now\n".utf8)], message: "docs is a file") }
            let tip = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            let opened = box.at("opened"), stop = box.at("stop")
            let writer = try box.spawn([python, "-c", Self.appendingWriter.replacingOccurrences(of: "'a.txt'", with: "'docs/readme.md'"),
                                        opened, "", stop, ""], cwd: replica)
            #expect(waitUntil { exists(opened + ".wrote") }, "the program holds docs/readme.md open")
            let report = try syncWithin(box, replica)
            #expect(report["heldOpen"] as? [String] == ["docs/readme.md"], "\(report)")
            let why = report.objects("keptLocal").first { $0.string("path") == "docs" }?.string("reason")
            #expect(why?.contains("once the programs holding") == true, "\(report)")
            #expect(FileManager.default.createFile(atPath: stop, contents: nil))
            #expect(writer.wait(timeout: patienceSeconds).status == 0)
            _ = try syncWithin(box, replica)
            _ = try syncWithin(box, replica)
            #expect(fileInItsPlace ? contents(replica + "/docs") != nil && lstatInfo(replica + "/docs")?.isRegular == true
                                   : !exists(replica + "/docs"), "the folder went with the old version")
            let left = (try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? []
            #expect(!left.contains { $0.contains("conflict") }, "nothing set aside is left: \(left)")
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == tip, "nothing was pushed")
        }
    }

    /// A replica whose `docs/readme.md` (materialized) a program holds open
    /// for writing while a sync takes in the remote's change of it: held.
    /// Once `stop` exists the program appends "LATE-WRITE" (if `writes`) and closes.
    static func holdingAnOldVersion(_ box: Sandbox, writes: Bool) throws -> (replica: String, remote: Remote, writer: Spawned, stop: String) {
        let remote = try box.makeRemote()
        let replica = box.at("replica")
        _ = try box.clone(remote.path, replica)
        try box.fprepOK(["materialize", "docs/readme.md"], cwd: replica)
        try box.pushToRemote(remote, ["docs/readme.md": Data("changed\n".utf8)], message: "change")
        let opened = box.at("opened"), stop = box.at("stop")
        let writer = try box.spawn([python, "-c", Self.appendingWriter.replacingOccurrences(of: "'a.txt'", with: "'docs/readme.md'"),
                            opened, "", stop, writes ? "LATE-WRITE\n" : ""], cwd: replica)
        #expect(waitUntil { exists(opened + ".wrote") }, "the program holds docs/readme.md open")
        #expect(try syncWithin(box, replica)["heldOpen"] as? [String] == ["docs/readme.md"])
        return (replica, remote, writer, stop)
    }

    @Test("the remote renames the folder of an old version a program holds open for writing (found by a hostile test: a later sync deleted it under the program, or pushed a copy of bytes nobody wrote): it stays held in the folder's new place; written, it is a conflict copy there, pushed; never written, it goes and nothing is pushed",
          arguments: [true, false])
    func heldFileInAFolderTheRemoteRenames(writes: Bool) throws {
        try withSandbox { box in
            let (replica, remote, writer, stop) = try Self.holdingAnOldVersion(box, writes: writes)
            let work = box.at("rename-work")
            try box.gitOK(["clone", "-q", remote.path, work])
            try box.gitOK(["mv", "docs", "papers"], cwd: work)
            try box.gitOK(["commit", "-q", "-m", "rename the folder"], cwd: work)
            try box.gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)
            let tip = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            for round in 0..<2 {
                let report = try syncWithin(box, replica)
                #expect(report["heldOpen"] as? [String] == ["papers/readme.md"], "round \(round): \(report)")
            }
            let names = (try? FileManager.default.contentsOfDirectory(atPath: replica + "/papers")) ?? []
            #expect(names.filter { $0.hasPrefix(".readme.md.fprep-") }.count == 1 && !names.contains { $0.contains("conflict") }, "\(names)")
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == tip, "nothing pushed while the program holds it")
            let gitStatus = try box.gitOK(["status", "--porcelain", "--untracked-files=all"], cwd: replica)
            #expect(!gitStatus.contains(".readme.md.fprep-"), "git status, the folder renamed: \(gitStatus)")
            #expect(FileManager.default.createFile(atPath: stop, contents: nil))
            #expect(writer.wait(timeout: patienceSeconds).status == 0)
            _ = try syncWithin(box, replica)
            let after = (try? FileManager.default.contentsOfDirectory(atPath: replica + "/papers")) ?? []
            #expect(!after.contains { $0.hasPrefix(".readme.md.fprep-") } && after.filter { $0.contains("conflict") }.count == (writes ? 1 : 0), "\(after)")
            let grep = try box.git(["grep", "-q", "-F", "LATE-WRITE", "main"], cwd: remote.path)
            #expect((grep.status == 0) == writes, "writes \(writes)")
            if !writes { #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == tip, "nothing nobody wrote was pushed") }
        }
    }

    @Test("the user moves the folder of an old version a program holds open for writing: the old version, judged by its own mark, goes once closed if unwritten (nothing but the move is pushed), or becomes a conflict copy, pushed",
          arguments: [true, false])
    func heldFileInAFolderTheUserMoves(writes: Bool) throws {
        try withSandbox { box in
            let (replica, remote, writer, stop) = try Self.holdingAnOldVersion(box, writes: writes)
            #expect(rename(replica + "/docs", replica + "/papers") == 0)
            _ = try syncWithin(box, replica)
            #expect(try box.gitOK(["show", "main:papers/readme.md"], cwd: remote.path) == "changed", "the move is pushed")
            let names = (try? FileManager.default.contentsOfDirectory(atPath: replica + "/papers")) ?? []
            #expect(names.filter { $0.hasPrefix(".readme.md.fprep-") }.count == 1 && !names.contains { $0.contains("conflict") },
                    "kept while the program holds it: \(names)")
            #expect(FileManager.default.createFile(atPath: stop, contents: nil))
            #expect(writer.wait(timeout: patienceSeconds).status == 0)
            _ = try syncWithin(box, replica)
            let after = (try? FileManager.default.contentsOfDirectory(atPath: replica + "/papers")) ?? []
            #expect(!after.contains { $0.hasPrefix(".readme.md.fprep-") } && after.filter { $0.contains("conflict") }.count == (writes ? 1 : 0), "\(after)")
            let files = Set(try box.gitOK(["ls-tree", "-r", "--name-only", "main"], cwd: remote.path).split(separator: "\n").map(String.init))
            #expect(files.filter { $0.contains("conflict") || $0.contains(".fprep-") }.count == (writes ? 1 : 0), "\(files)")
            let grep = try box.git(["grep", "-q", "-F", "LATE-WRITE", "main"], cwd: remote.path)
            #expect((grep.status == 0) == writes, "writes \(writes)")
        }
    }

    @Test("a program that opened the old file while sync swapped it and still holds it open for writing when the sync ends: the old file is kept, and its later writes are pushed")
    func writerStillOpenAfterTheWait() throws {
        try withSandbox { box in
            let (replica, remote) = try Self.replicaBehindTheRemote(box, materialized: true, deleted: false)
            let gate = box.at("gate"), opened = box.at("opened"), stop = box.at("stop")
            #expect(FileManager.default.createFile(atPath: gate, contents: Data()))
            let sync = try box.spawnFprep(["sync", "--json"], cwd: replica,
                                          env: ["FPREP_TEST_BEFORE_EXCHANGE_GATE": gate, "FPREP_TEST_CLOSE_WAIT_SECONDS": "0.5"])
            #expect(waitUntil { exists(gate + ".waiting") }, "the sync reached the swap: \(sync.stderrSoFar)")
            let writer = try box.spawn([python, "-c", Self.appendingWriter, opened, "", stop, "LATE-WRITE\n"], cwd: replica)
            #expect(waitUntil { (try? String(contentsOfFile: "/proc/\(writer.pid)/wchan", encoding: .utf8))?.contains("break_lease") == true },
                    "the writer's open waits on the sync's lease")
            #expect(unlink(gate) == 0)
            let synced = sync.wait(timeout: patienceSeconds)
            #expect(!synced.timedOut && synced.status == 0, "\(synced)")
            #expect(exists(opened), "the writer's open went on")
            // It writes once the sync is over: into the old file, which must have a name.
            #expect(FileManager.default.createFile(atPath: stop, contents: nil))
            #expect(writer.wait(timeout: patienceSeconds).status == 0)
            try box.fprepOK(["sync"], cwd: replica)
            let after = try Self.kept(box, "LATE-WRITE", replica: replica, remote: remote)
            #expect(after.here && after.pushed, "the late write was lost: \(after) \(synced)")
        }
    }

    @Test("a program holding a file open only to read it (a viewer, tail) while sync replaces it: no conflict copy, nothing pushed, it reads the old bytes to the end")
    func readerDuringSync() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "docs/readme.md"], cwd: replica)
            let old = try #require(contents(replica + "/docs/readme.md"))
            try box.pushToRemote(remote, ["docs/readme.md": Data("changed\n".utf8), "a.txt": Data("changed too\n".utf8)], message: "change")
            let tip = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            // Two readers: of the materialized file and of a placeholder.
            let ready = box.at("ready"), go = box.at("go")
            let reader = try box.spawn([python, "-c", """
                import os, sys, time
                files = [open(p, 'rb') for p in ('docs/readme.md', 'a.txt')]
                open(sys.argv[1], 'w').close()
                while not os.path.exists(sys.argv[2]): time.sleep(0.005)
                sys.stdout.buffer.write(files[0].read())
                """, ready, go], cwd: replica)
            #expect(waitUntil { exists(ready) }, "the reader holds the files open")
            let report = try syncWithin(box, replica)
            #expect(FileManager.default.createFile(atPath: go, contents: nil))
            let read = reader.wait(timeout: patienceSeconds)
            #expect(read.status == 0 && read.stdoutData == old, "the reader reads the bytes it opened: \(read)")
            #expect((report["conflicts"] as? [Any])?.isEmpty == true && (report["localChanges"] as? [Any])?.isEmpty == true, "\(report)")
            let names = ((try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? [])
                + ((try? FileManager.default.contentsOfDirectory(atPath: replica + "/docs")) ?? [])
            #expect(!names.contains { $0.contains("conflict") }, "a reader made a conflict copy: \(names) \(report)")
            #expect(contents(replica + "/docs/readme.md") == Data("changed\n".utf8))
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == tip, "nothing was pushed")
        }
    }

    @Test("programs holding files open while sync replaces and deletes them keep every byte they write")
    func writersDuringSync() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "docs/readme.md"], cwd: replica)
            // The remote changes a placeholder and a materialized file, and deletes one.
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            try Data("changed\n".utf8).write(to: URL(fileURLWithPath: work + "/a.txt"))
            try Data("changed too\n".utf8).write(to: URL(fileURLWithPath: work + "/docs/readme.md"))
            try box.gitOK(["rm", "-q", "bin.dat"], cwd: work)
            try box.gitOK(["commit", "-q", "-am", "change and delete"], cwd: work)
            try box.gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)

            let stop = box.at("stop")
            var writers: [(Spawned, String)] = []
            for (n, path) in ["a.txt", "docs/readme.md", "bin.dat"].enumerated() {
                let ready = box.at("ready-\(n)"), log = box.at("log-\(n)")
                writers.append((try box.spawn([python, "-c", Self.holdingWriter, replica + "/" + path, ready, stop, log]), log))
                let deadline = monotonicSeconds() + patienceSeconds
                while !exists(ready) && monotonicSeconds() < deadline { usleep(1_000) }
                try #require(exists(ready), "writer \(n) did not start")
            }
            let report = try syncWithin(box, replica)
            #expect(FileManager.default.createFile(atPath: stop, contents: nil))
            var everything = Data()
            var counts: [Int] = []
            for (writer, log) in writers {
                let done = writer.wait(timeout: 30)
                #expect(done.status == 0, "\(done)")
                counts.append(Int(String(decoding: contents(log) ?? Data(), as: UTF8.self)) ?? 0)
            }
            everything = allBytes(in: replica) + allBytes(in: replica + "/docs")
            #expect(counts == [20, 20, 20])
            for n in 0..<20 {
                let occurrences = everything.ranges(of: Data("<token-\(n)>".utf8)).count
                #expect(occurrences == 3, "token \(n) is in \(occurrences) of 3 files: \(report)")
            }
        }
    }

    /// Waits until fprep has read the whole file through a read-write
    /// descriptor (the evict's check of its content; its position is at the
    /// end), or holds a lease on it (/proc/locks), or has ended, then
    /// appends a token: on the old code that landed between the check and
    /// the punch.
    static let evictRacer = """
        import os, sys, time
        path, pid, log = sys.argv[1], sys.argv[2], sys.argv[3]
        size = os.stat(path).st_size
        inode = str(os.stat(path).st_ino)
        real = os.path.realpath(path)
        def leased():
            for line in open('/proc/locks'):
                fields = line.split()
                if 'LEASE' in fields and any(f.count(':') == 2 and f.rsplit(':', 1)[1] == inode for f in fields):
                    return True
            return False
        def state():
            if leased(): return 'leased'

            try:
                if open('/proc/%s/stat' % pid).read().rsplit(')', 1)[1].split()[0] in 'ZX': return 'gone'
                fds = os.listdir('/proc/%s/fd' % pid)
            except OSError:
                return 'gone'
            for fd in fds:
                try:
                    if os.readlink('/proc/%s/fd/%s' % (pid, fd)) != real: continue
                    info = dict(l.split(':', 1) for l in open('/proc/%s/fdinfo/%s' % (pid, fd)).read().splitlines() if ':' in l)
                    if int(info['flags'].strip(), 8) & 3 == 2 and int(info['pos']) >= size: return 'read'
                except (OSError, KeyError, ValueError):
                    pass
            return 'wait'
        deadline = time.time() + 60
        found = 'wait'
        while time.time() < deadline and found == 'wait':
            found = state()
        with open(path, 'ab') as f:
            f.write(b'<evict-token>')
        open(log, 'w').write(found)
        """

    @Test("a write that lands while evict checks a file is never punched away")
    func writerDuringEvict() throws {
        try withSandbox { box in
            var nodes = standardTree
            nodes["big.dat"] = .file(Data(repeating: 0x61, count: 24 << 20))
            let remote = try box.makeRemote(nodes: nodes)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let path = replica + "/big.dat"
            var leases = 0
            for round in 0..<3 {
                try box.fprepOK(["materialize", "big.dat"], cwd: replica)
                // A new date with the same bytes: evict reads the file to be sure.
                var times = [timespec(tv_sec: 1_700_000_100 + round, tv_nsec: 0), timespec(tv_sec: 1_700_000_100 + round, tv_nsec: 0)]
                #expect(utimensat(AT_FDCWD, path, &times, 0) == 0)
                let log = box.at("log-\(round)")
                let evict = try box.spawnFprep(["evict", "big.dat"], cwd: replica)
                let racer = try box.spawn([python, "-c", Self.evictRacer, path, String(evict.pid), log])
                let evicted = evict.wait(timeout: 60)
                let raced = racer.wait(timeout: 60)
                #expect(raced.status == 0 && exists(log), "\(raced)")
                leases += String(decoding: contents(log) ?? Data(), as: UTF8.self) == "leased" ? 1 : 0
                #expect(evicted.status == 0 || evicted.status == 2, "\(evicted)")
                let data = contents(path) ?? Data()
                #expect(data.range(of: Data("<evict-token>".utf8)) != nil, "round \(round): the token was punched away: \(evicted)")
                // The written bytes become a commit (or a conflict copy); start over.
                _ = try syncWithin(box, replica)
                for name in (try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? [] where name.contains("conflict") {
                    unlink(replica + "/" + name)
                }
                _ = try syncWithin(box, replica)
            }
            // The writes did race the evict: they met its lease and waited.
            #expect(leases > 0, "the writer never met evict's lease")
        }
    }
}

@Suite("git's locks")
struct GitLockTests {
    @Test("an index.lock a live git holds is never removed; sync refuses, naming it, and a stale one still goes")
    func liveIndexLock() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let lock = replica + "/.git/index.lock"
            let holder = try box.spawn(["/bin/sh", "-c", "exec 3>.git/index.lock; exec sleep 120"], cwd: replica)
            let deadline = monotonicSeconds() + patienceSeconds
            while !exists(lock) && monotonicSeconds() < deadline { usleep(1_000) }
            try #require(exists(lock))
            // Older than the two seconds after which a lock used to count as stale.
            var times = [timespec(tv_sec: time(nil) - 60, tv_nsec: 0), timespec(tv_sec: time(nil) - 60, tv_nsec: 0)]
            #expect(utimensat(AT_FDCWD, lock, &times, 0) == 0)

            let result = try box.fprep(["sync"], cwd: replica, timeout: 30)
            #expect(!result.timedOut)
            expectOneLineError(result, mentioning: ["git is running", "index.lock", "pid \(holder.pid)"])
            #expect(exists(lock), "the live lock was removed")
            #expect(holder.isRunning)

            // Once its holder is gone, the lock is stale: the next command removes it.
            _ = holder.kill9()
            #expect(exists(lock))
            try box.fprepOK(["sync"], cwd: replica)
            #expect(!exists(lock))
        }
    }
    @Test("a git commit waiting on its editor (index.lock closed meanwhile) is not broken by a sync")
    func gitCommitWithEditor() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try Data("one\n".utf8).write(to: URL(fileURLWithPath: replica + "/new.txt"))
            try box.gitOK(["add", "new.txt"], cwd: replica, env: ["GIT_NO_LAZY_FETCH": "1"])
            try Data("two\n".utf8).write(to: URL(fileURLWithPath: replica + "/new.txt"))
            // `git commit PATH` writes index.lock, closes it, and keeps it
            // while the editor runs; the editor waits for the test.
            let editing = box.at("editing"), go = box.at("go")
            let editor = "sh -c 'touch \(editing); while [ ! -e \(go) ]; do sleep 0.05; done; echo message > \"$1\"' editor"
            let commit = try box.spawn([Binaries.git, "commit", "-q", "new.txt"], cwd: replica,
                                       env: ["GIT_EDITOR": editor, "GIT_NO_LAZY_FETCH": "1"])
            let deadline = monotonicSeconds() + patienceSeconds
            while !exists(editing) && commit.isRunning && monotonicSeconds() < deadline { usleep(2_000) }
            try #require(exists(editing) && exists(replica + "/.git/index.lock"), "git commit did not reach its editor")

            let result = try box.fprep(["sync"], cwd: replica, timeout: 30)
            expectOneLineError(result, mentioning: ["git is running", "index.lock"])
            #expect(FileManager.default.createFile(atPath: go, contents: nil))
            let committed = commit.wait(timeout: 30)
            #expect(committed.status == 0, "git commit failed: \(committed)")
            #expect(try box.gitOK(["log", "-1", "--format=%s"], cwd: replica, env: ["GIT_NO_LAZY_FETCH": "1"]) == "message")
        }
    }
}
