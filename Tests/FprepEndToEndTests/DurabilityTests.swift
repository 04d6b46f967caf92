import Foundation
import Testing

/// What a sync makes durable before its index names it, read from the
/// system calls of a real `fprep sync` (strace): a few changes are flushed
/// item by item, so other programs' writes on the same disk do not hold the
/// sync (a syncfs waits for all of them); many changes, or objects fprep
/// wrote itself, are flushed with one syncfs.
@Suite("durability barriers", .enabled(if: ConcurrentWriterTests.straceWorks, "needs strace"))
struct DurabilityTests {
    /// One traced run: its result, and the fsync'd paths, whether it
    /// called syncfs, and whether an index write followed, all counted up
    /// to the sync's barrier (its trace mark).
    struct Barrier {
        var result: RunResult
        var flushed: Set<String> = []
        var syncfsCalls = 0
        var indexWrittenAfter = false
        var markFound = false
        /// The trace's lines after the mark.
        var after: [Substring] = []
    }

    /// `marks`: the trace marks of which the first ends what is counted.
    static func traced(_ box: Sandbox, _ args: [String] = ["sync"], replica: String,
                       marks markNames: [String] = ["trace: fsync ", "trace: syncfs"]) throws -> Barrier {
        let log = box.at("strace-\(UUID().uuidString.prefix(6)).log")
        let marks = box.at("marks-\(UUID().uuidString.prefix(6)).txt")
        let result = try Shell.run(["/usr/bin/strace", "-f", "-qq", "-y", "-s", "64", "-o", log,
                                    "-e", "trace=fsync,fdatasync,syncfs,openat,write", Binaries.fprep] + args,
                                   cwd: replica, env: ["FPREP_TRACE": marks])
        var barrier = Barrier(result: result)
        let lines = String(decoding: contents(log) ?? Data(), as: UTF8.self).split(separator: "\n")
        // The mark the sync writes once its barrier is done ("fsync N" or "syncfs").
        let isMark: (Substring) -> Bool = { line in line.contains("write(") && line.contains(marks) && markNames.contains { line.contains($0) } }
        guard let mark = lines.firstIndex(where: isMark) else { return barrier }
        barrier.markFound = true
        for line in lines[..<mark] {
            if line.contains("syncfs(") { barrier.syncfsCalls += 1 }
            guard line.contains(" fsync("), let open = line.range(of: "fsync("), let start = line[open.upperBound...].firstIndex(of: "<"),
                  let end = line[start...].firstIndex(of: ">") else { continue }
            // "fsync(5</path>) = 0", or "fsync(5</path> <unfinished ...>" when another thread's call comes between.
            barrier.flushed.insert(String(line[line.index(after: start)..<end]))
        }
        barrier.indexWrittenAfter = lines[mark...].contains { $0.contains("openat(") && $0.contains("/.git/index.lock") }
        barrier.after = Array(lines[(mark + 1)...])
        return barrier
    }

    /// Runs `fprep args` in `replica` under strace, expects it to succeed
    /// with no flush of the state database after its index write, and
    /// cuts the database's log as a power cut right after would leave it
    /// (`cutLogAsAPowerCut`). Nil when there was nothing to cut.
    static func runThenCutPower(_ box: Sandbox, _ args: [String], replica: String) throws
        -> (lines: [Substring], state: String, flushed: Int, logSize: Int)? {
        let (result, lines) = try calls(box, args, replica: replica, traced: "openat,pwrite64,fdatasync,fsync,ftruncate")
        #expect(result.status == 0, "\(result)")
        let state = resolved(replica) + "/.fprep/state.db"
        let storeFlushes = try storeFlushesAfterIndexWrite(lines, state: state)
        #expect(storeFlushes.isEmpty, "the store was flushed after the index write: \(storeFlushes.joined(separator: "\n"))")
        let (flushed, logSize) = cutLogAsAPowerCut(lines, state: state)
        #expect(flushed > 0 && flushed < logSize, "the log holds \(logSize) bytes, \(flushed) flushed: nothing for a power cut to lose")
        return flushed > 0 && flushed < logSize ? (lines, state, flushed, logSize) : nil
    }

    /// The flushes of the state database (`state`, its path) after the
    /// last whole index write in `lines` (a trace as for `cutLogAsAPowerCut`).
    static func storeFlushesAfterIndexWrite(_ lines: [Substring], state: String) throws -> [Substring] {
        let indexWrite = try #require(lines.lastIndex { $0.contains("openat(") && $0.contains("/.git/index.lock") },
                                      "no whole index write in the trace")
        return lines[indexWrite...].filter { isFlush($0) && ($0.contains(state + "-wal>") || $0.contains(state + ">")) }
    }

    static func isFlush(_ line: Substring) -> Bool { line.contains("fdatasync(") || line.contains(" fsync(") }

    /// Cuts the state database's log (`state`, its path) back to its size
    /// at its last flush in `lines` (a trace of openat, pwrite64,
    /// fdatasync, fsync and ftruncate with paths): what a power cut keeps
    /// of it. Returns that size and the log's size before the cut; a log
    /// flushed whole is left alone.
    static func cutLogAsAPowerCut(_ lines: [Substring], state: String) -> (flushed: Int, size: Int) {
        var written = 0
        var flushed = 0
        for line in lines where line.contains(state + "-wal>") {
            // A call's arguments, without its result: a line split
            // because another thread's call came in between ends at
            // them ("<unfinished ...>"; its result comes on a line
            // without the path), a whole one has " = result" after.
            // The thread's next call starts after this one ended.
            let split = line.hasSuffix(" <unfinished ...>")
            guard split || line.contains(") = ") else { continue }
            let numbers = line.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }.dropLast(split ? 0 : 1)
            if line.contains("pwrite64("), numbers.count >= 2 {
                // pwrite64(fd</path>, ""..., length, offset)
                written = max(written, numbers[numbers.endIndex - 1] + numbers[numbers.endIndex - 2])
            } else if line.contains("ftruncate("), let length = numbers.last {
                written = length
            } else if isFlush(line) {
                flushed = written
            }
        }
        let size = Int(lstatInfo(state + "-wal")?.size ?? 0)
        if flushed > 0, flushed < size {
            let cut = truncate(state + "-wal", off_t(flushed))
            #expect(cut == 0, "the log was not cut: \(String(cString: strerror(errno)))")
        }
        return (flushed, size)
    }

    static func resolved(_ path: String) -> String { URL(fileURLWithPath: path).resolvingSymlinksInPath().path }

    /// One run of `fprep args` under strace: its result and the lines of
    /// the calls `traced` names (each descriptor with its path, no data).
    static func calls(_ box: Sandbox, _ args: [String], replica: String, traced: String) throws -> (RunResult, [Substring]) {
        let log = box.at("strace-\(UUID().uuidString.prefix(6)).log")
        let result = try Shell.run(["/usr/bin/strace", "-f", "-qq", "-y", "-s", "0", "-o", log, "-e", "trace=" + traced, Binaries.fprep] + args,
                                   cwd: replica)
        return (result, String(decoding: contents(log) ?? Data(), as: UTF8.self).split(separator: "\n"))
    }

    @Test("a few remote changes: each changed item and every folder they touched fsync'd before the index write, no syncfs")
    func fewChangesItemByItem() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "a.txt"], cwd: replica)
            try box.pushToRemote(remote, ["a.txt": Data("changed\n".utf8), "new/deep/n.txt": Data("new\n".utf8),
                                          "docs/deep/tool": Data("retooled\n".utf8), "bin.dat": nil],
                                 moves: [("docs/readme.md", "readme.md")], message: "a few changes")
            let barrier = try Self.traced(box, replica: replica)
            #expect(barrier.result.status == 0, "\(barrier.result)")
            #expect(barrier.markFound, "no barrier mark in the trace: \(barrier.result)")
            #expect(barrier.syncfsCalls == 0, "a sync of five changes flushed the whole filesystem")
            #expect(barrier.indexWrittenAfter, "no index write after the barrier")
            let root = Self.resolved(replica)
            // Items (content, placeholders, moved), then every folder whose entries changed.
            for path in ["a.txt", "new/deep/n.txt", "docs/deep/tool", "readme.md", "new/deep", "new", "docs", "docs/deep", ""] {
                let full = path.isEmpty ? root : root + "/" + path
                #expect(barrier.flushed.contains(full), "'\(path.isEmpty ? "." : path)' not flushed before the index; flushed: \(barrier.flushed.sorted())")
            }
            #expect(contents(replica + "/a.txt") == Data("changed\n".utf8))
            #expect(lstatInfo(replica + "/bin.dat") == nil)
            let status = try box.gitOK(["status", "--porcelain", "--untracked-files=all"], cwd: replica)
            #expect(status.isEmpty, "\(status)")
        }
    }

    @Test("many remote changes: one syncfs before the index write, no fsync of each")
    func manyChangesOneSyncfs() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            var files: [String: Data?] = [:]
            for n in 0..<80 { files["many/f\(n).txt"] = Data("file \(n)\n".utf8) }
            try box.pushToRemote(remote, files, message: "many changes")
            let barrier = try Self.traced(box, replica: replica)
            #expect(barrier.result.status == 0, "\(barrier.result)")
            #expect(barrier.markFound, "no barrier mark in the trace: \(barrier.result)")
            #expect(barrier.syncfsCalls == 1)
            #expect(barrier.indexWrittenAfter, "no index write after the barrier")
            let root = Self.resolved(replica)
            #expect(!barrier.flushed.contains { $0.hasPrefix(root + "/many") }, "\(barrier.flushed.sorted())")
        }
    }

    @Test("a sync that merges (a local and a remote change): fprep's own objects fsync'd as written, no syncfs; commits made with git: one syncfs as they are taken in")
    func objectsOfTheSync() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try Data("mine\n".utf8).write(to: URL(fileURLWithPath: replica + "/mine.txt"))
            try box.pushToRemote(remote, ["theirs.txt": Data("theirs\n".utf8)], message: "theirs")
            let merged = try Self.traced(box, replica: replica)
            #expect(merged.result.status == 0, "\(merged.result)")
            #expect(merged.markFound, "no barrier mark in the trace: \(merged.result)")
            #expect(merged.syncfsCalls == 0)
            #expect(lstatInfo(replica + "/theirs.txt") != nil)
            #expect(try box.gitOK(["show", "main:mine.txt"], cwd: remote.path) == "mine")
            // The merge commit, the local commit under it and the blob of mine.txt, each flushed before the barrier.
            let objects = Self.resolved(replica + "/.git/objects")
            for name in ["HEAD", "HEAD^1", "HEAD:mine.txt"] {
                let id = try box.gitOK(["rev-parse", name], cwd: replica)
                let path = objects + "/" + id.prefix(2) + "/" + id.dropFirst(2)
                #expect(merged.flushed.contains(path), "\(name) (\(id)) not flushed: \(merged.flushed.sorted())")
            }
            // A commit made with git in the replica (loose, not flushed by git), with a remote change beside it.
            try Data("by git\n".utf8).write(to: URL(fileURLWithPath: replica + "/git.txt"))
            try box.gitOK(["add", "git.txt"], cwd: replica)
            try box.gitOK(["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "with git"], cwd: replica)
            try box.pushToRemote(remote, ["theirs2.txt": Data("theirs again\n".utf8)], message: "theirs again")
            let adopted = try Self.traced(box, replica: replica)
            #expect(adopted.result.status == 0, "\(adopted.result)")
            #expect(adopted.markFound, "no barrier mark in the trace: \(adopted.result)")
            #expect(adopted.syncfsCalls == 1, "commits made with git: the whole filesystem, once, as they are taken in")
            #expect(try box.gitOK(["show", "main:git.txt"], cwd: remote.path) == "by git")
        }
    }

    @Test("a local change alone: the new commit's objects and their folders fsync'd within its commit step (the code flushes them before the store names the commit), no syncfs")
    func localCommitObjectsFlushed() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try FileManager.default.createDirectory(atPath: replica + "/docs/deep/deeper", withIntermediateDirectories: true)
            try Data("mine\n".utf8).write(to: URL(fileURLWithPath: replica + "/docs/deep/deeper/mine.txt"))
            let committed = try Self.traced(box, replica: replica, marks: ["trace: commit objects durable"])
            #expect(committed.result.status == 0, "\(committed.result)")
            #expect(committed.markFound, "no local commit mark in the trace: \(committed.result)")
            #expect(committed.syncfsCalls == 0)
            let objects = Self.resolved(replica + "/.git/objects")
            for name in ["HEAD", "HEAD^{tree}", "HEAD:docs", "HEAD:docs/deep", "HEAD:docs/deep/deeper", "HEAD:docs/deep/deeper/mine.txt"] {
                let id = try box.gitOK(["rev-parse", name], cwd: replica)
                #expect(committed.flushed.contains(objects + "/" + id.prefix(2) + "/" + id.dropFirst(2)),
                        "\(name) (\(id)) not flushed: \(committed.flushed.sorted())")
                #expect(committed.flushed.contains(objects + "/" + id.prefix(2)), "the folder of \(name) not flushed")
            }
            // Then the store names the commit (its log flushed), before the step ends.
            let end = committed.after.firstIndex { $0.contains("trace: local commit") } ?? committed.after.endIndex
            #expect(committed.after[..<end].contains { ($0.contains("fsync(") || $0.contains("fdatasync(")) && $0.contains("state.db") },
                    "the store did not record the commit after its objects were flushed")
            #expect(try box.gitOK(["show", "main:docs/deep/deeper/mine.txt"], cwd: remote.path) == "mine")
        }
    }

    @Test("a sync that sets a user's file aside (changed here and on the remote): the whole filesystem, so the bytes a program wrote are durable too")
    func setAsideFlushesEverything() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.pushToRemote(remote, ["a.txt": Data("theirs\n".utf8)], message: "theirs")
            // Written into the placeholder by a program (not through fprep): a conflict copy.
            let handle = try #require(FileHandle(forWritingAtPath: replica + "/a.txt"))
            try handle.seek(toOffset: 0)
            try handle.write(contentsOf: Data("mine!\n".utf8))
            try handle.close()
            let barrier = try Self.traced(box, ["sync", "--incoming"], replica: replica)
            #expect(barrier.result.status == 0, "\(barrier.result)")
            #expect(barrier.markFound, "no barrier mark in the trace: \(barrier.result)")
            #expect(barrier.syncfsCalls == 1, "\(barrier.result)")
            #expect(contents(replica + "/a.txt") == Data("theirs\n".utf8) || lstatInfo(replica + "/a.txt")?.blocks == 0)
            let everything = ((try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? []).compactMap { contents(replica + "/" + $0) }
            #expect(everything.contains { $0.starts(with: Data("mine!\n".utf8)) }, "the program's bytes are not in any file")
        }
    }

    /// An index written in place (a few entries changed: evict) is data
    /// written over the file's own blocks, which the filesystem's journal
    /// does not order: it is flushed before the store records the end of
    /// the operation, or a power cut could keep the punched placeholders and
    /// the record while losing the entries that say they are placeholders.
    @Test("evict: the index written in place is flushed before the store's record of the end")
    func evictFlushesIndexWrittenInPlace() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "a.txt"], cwd: replica)
            let (result, lines) = try Self.calls(box, ["evict", "a.txt"], replica: replica,
                                                 traced: "pwrite64,fdatasync,fsync,rename,renameat,renameat2")
            #expect(result.status == 0, "\(result)")
            let index = Self.resolved(replica) + "/.git/index>"
            let patched = lines.lastIndex { $0.contains("pwrite64(") && $0.contains(index) }
            #expect(patched != nil, "the index was not written in place; the trace: \(lines.suffix(40).joined(separator: "\n"))")
            guard let patched else { return }
            let flushed = lines[patched...].firstIndex { $0.contains("fdatasync(") && $0.contains(index) }
            #expect(flushed != nil, "the index written in place was never flushed")
            let lastRecord = lines.lastIndex { ($0.contains("fdatasync(") || $0.contains("fsync(")) && $0.contains("state.db") }
            if let flushed, let lastRecord { #expect(flushed < lastRecord, "the store recorded the end before the index was flushed") }
            try expectDataless(box, replica, remote, "a.txt")
        }
    }

    /// A sync's last records (its anchor, its end in the journal) do not
    /// wait for the disk (`CommitDurability.whenWrittenOut`): their flush
    /// would wait for the whole new index to reach the disk. Checked on the
    /// system calls (no flush of the state database after the index write)
    /// and by the power cut itself: the log cut back to what was flushed,
    /// as the disk would hold it, and the next command must finish the
    /// same sync, commit nothing and push nothing.
    @Test("a sync's last records do not wait for the disk, and a power cut that loses them is repaired by the next command")
    func syncRecordsLostToPowerCut() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "a.txt"], cwd: replica)
            try box.pushToRemote(remote, ["a.txt": Data("changed\n".utf8), "new/n.txt": Data("new\n".utf8), "bin.dat": nil],
                                 moves: [("docs/readme.md", "readme.md")], message: "remote changes")
            let tip = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            guard let (lines, state, flushed, logSize) = try Self.runThenCutPower(box, ["sync", "--incoming"], replica: replica) else { return }

            // The next command finishes the sync; nothing is committed or pushed.
            let status = try box.fprepOK(["status"], cwd: replica)
            let logLines = lines.filter { $0.contains(state + "-wal>") }
            #expect(try box.fprepOK(["anchor"], cwd: replica).stdout.trimmingCharacters(in: .whitespacesAndNewlines) == tip,
                    "log cut at \(flushed) of \(logSize) bytes; status said: \(status.stdout) \(status.stderr)\nthe log's calls:\n\(logLines.joined(separator: "\n"))")
            #expect(contents(replica + "/a.txt") == Data("changed\n".utf8))
            #expect(lstatInfo(replica + "/bin.dat") == nil)
            #expect(lstatInfo(replica + "/readme.md") != nil && lstatInfo(replica + "/docs/readme.md") == nil)
            let synced = try box.fprepOK(["sync", "--json"], cwd: replica)
            #expect(!synced.stdout.contains("\"pushed\""), "\(synced.stdout)")
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == tip, "the sync after the power cut pushed a commit")
            let gitStatus = try box.gitOK(["status", "--porcelain", "--untracked-files=all"], cwd: replica)
            #expect(gitStatus.isEmpty, "\(gitStatus)")
            #expect(lstatInfo(replica + "/new/n.txt").map { $0.size == 4 && $0.blocks == 0 } == true, "new/n.txt is not a placeholder of its size")
        }
    }

    /// Materialize's last records (the operation's end, the files'
    /// records) do not wait for the disk either: on ext4 their flush
    /// wrote the whole new index out with them. A power cut that loses
    /// them (the log cut back to its last flush) leaves the operation
    /// open; the next command finds the content whole and keeps it as
    /// materialized, and nothing is committed: whether the new index
    /// reached the disk or, also lost to the cut, the old one is back.
    @Test("materialize's last records do not wait for the disk, and a power cut that loses them is repaired by the next command",
          arguments: [false, true])
    func materializeRecordsLostToPowerCut(oldIndexBack: Bool) throws {
        try withSandbox { box in
            var nodes = standardTree
            for n in 0..<12 { nodes["many/f\(n).txt"] = .text("file \(n)\n") }
            for n in 0..<12 { nodes["more/m\(n)/g.txt"] = .text("more \(n)\n") }
            let remote = try box.makeRemote(nodes: nodes)
            let tip = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            // The index files as they were, for the cut that loses the new one too.
            let saved = box.at("index-before")
            try box.sh("mkdir -p '\(saved)' && cp -p .git/index* .git/sharedindex.* .git/fprep-index-offsets '\(saved)/' 2>/dev/null; true", cwd: replica)
            guard try Self.runThenCutPower(box, ["materialize", "many", "more"], replica: replica) != nil else { return }
            if oldIndexBack {
                try box.sh("rm -f .git/index .git/fprep-index-offsets && cp -p '\(saved)'/* .git/", cwd: replica)
                let flags = try box.gitOK(["ls-files", "-v", "many/f0.txt"], cwd: replica)
                #expect(flags.hasPrefix("S "), "the old index (a placeholder's entry) is not back: \(flags)")
            }

            try box.fprepOK(["status"], cwd: replica)
            let listed = try box.fprepOK(["working-set", "--json"], cwd: replica).stdout
            let paths = (0..<12).map { ("many/f\($0).txt", "file \($0)\n") } + (0..<12).map { ("more/m\($0)/g.txt", "more \($0)\n") }
            for (path, text) in paths {
                #expect(contents(replica + "/" + path) == Data(text.utf8))
                #expect(lstatInfo(replica + "/" + path).map { $0.blocks > 0 } == true, "\(path) is a placeholder again")
                #expect(listed.contains(path), "\(path) is not recorded as materialized: \(listed)")
            }
            let leftovers = try box.sh("find many more -name '.*'", cwd: replica).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(leftovers.isEmpty, "\(leftovers)")
            let gitStatus = try box.gitOK(["status", "--porcelain", "--untracked-files=all"], cwd: replica)
            #expect(gitStatus.isEmpty, "\(gitStatus)")
            let again = try box.fprepJSON(["materialize", "many", "more"], cwd: replica)
            #expect(again.objects("skipped").isEmpty, "a file the power cut left is taken for a program's write: \(again)")
            let synced = try box.fprepOK(["sync", "--json"], cwd: replica)
            #expect(!synced.stdout.contains("\"pushed\""), "\(synced.stdout)")
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == tip, "the sync after the power cut pushed a commit")
        }
    }

    @Test("materialize of one file: the file and its folder fsync'd before the index write, no syncfs; of many: one syncfs each step")
    func materializeFlushesWhatItWrote() throws {
        try withSandbox { box in
            var nodes = standardTree
            for n in 0..<12 { nodes["many/f\(n).txt"] = .text("file \(n)\n") }
            let remote = try box.makeRemote(nodes: nodes)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let one = try Self.traced(box, ["materialize", "docs/readme.md"], replica: replica)
            #expect(one.result.status == 0, "\(one.result)")
            #expect(one.markFound, "no barrier mark in the trace: \(one.result)")
            #expect(one.syncfsCalls == 0)
            #expect(one.indexWrittenAfter, "no index write after the barrier")
            let root = Self.resolved(replica)
            for path in [root + "/docs/readme.md", root + "/docs", root] {
                #expect(one.flushed.contains(path), "'\(path)' not flushed; flushed: \(one.flushed.sorted())")
            }
            // The content was flushed under its temporary name, before the rename.
            #expect(one.flushed.contains { $0.hasPrefix(root + "/docs/.") && $0.contains("readme.md") }, "\(one.flushed.sorted())")
            #expect(contents(replica + "/docs/readme.md") == Data("# Readme\n\nSome words.\n".utf8))
            let many = try Self.traced(box, ["materialize", "many"], replica: replica)
            #expect(many.result.status == 0, "\(many.result)")
            #expect(many.syncfsCalls == 2, "content before the renames, renames before the index")
            #expect(!many.flushed.contains { $0.hasPrefix(root + "/many") }, "\(many.flushed.sorted())")
        }
    }
}
