import Foundation
import Glibc
import Testing

/// Checks that `relative` holds the remote's bytes, with its mode and the fixed date.
func expectMaterialized(_ replica: String, _ remote: Remote, _ relative: String, date: Int64 = fixedDate,
                        sourceLocation: SourceLocation = #_sourceLocation) {
    let path = replica + "/" + relative
    #expect(contents(path) == remote.files[relative], "\(relative): content differs", sourceLocation: sourceLocation)
    guard let info = lstatInfo(path) else {
        Issue.record("\(relative) is missing", sourceLocation: sourceLocation)
        return
    }
    #expect(info.isRegular, sourceLocation: sourceLocation)
    #expect(info.permissions == (remote.isExecutable(relative) ? 0o755 : 0o644),
            "\(relative): mode \(String(info.permissions, radix: 8))", sourceLocation: sourceLocation)
    #expect(info.mtime == date, "\(relative): mtime \(info.mtime)", sourceLocation: sourceLocation)
    if let size = remote.files[relative]?.count, size > 0 {
        #expect(info.blocks > 0, "\(relative): materialized but no blocks", sourceLocation: sourceLocation)
    }
}

/// Checks that `relative` is a placeholder again: no blocks, size and date kept, xattrs set.
func expectDataless(_ box: Sandbox, _ replica: String, _ remote: Remote, _ relative: String,
                    sourceLocation: SourceLocation = #_sourceLocation) throws {
    let path = replica + "/" + relative
    let info = try #require(lstatInfo(path), "\(relative) is missing", sourceLocation: sourceLocation)
    #expect(info.blocks == 0, "\(relative): \(info.blocks) blocks", sourceLocation: sourceLocation)
    #expect(info.size == Int64(remote.files[relative]?.count ?? -1), "\(relative): size \(info.size)", sourceLocation: sourceLocation)
    #expect(info.mtime == fixedDate, "\(relative): mtime \(info.mtime)", sourceLocation: sourceLocation)
    #expect(info.permissions == (remote.isExecutable(relative) ? 0o755 : 0o644), sourceLocation: sourceLocation)
    #expect(xattrString(path, "user.fprep.state") == "dataless", "\(relative): state xattr", sourceLocation: sourceLocation)
    #expect(xattr(path, "user.fprep.blob") == rawID(try box.blobID(remote, relative)), "\(relative): blob xattr",
            sourceLocation: sourceLocation)
}

func expectGitClean(_ box: Sandbox, _ replica: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let porcelain = try box.git(["status", "--porcelain"], cwd: replica, env: ["GIT_NO_LAZY_FETCH": "1"])
    #expect(porcelain.status == 0 && porcelain.stdout.isEmpty, "git status: \(porcelain)", sourceLocation: sourceLocation)
    #expect(porcelain.stderr.isEmpty, "git printed something because of fprep: \(porcelain.stderr)", sourceLocation: sourceLocation)
}

func packFiles(_ replica: String) -> Set<String> {
    Set((try? FileManager.default.contentsOfDirectory(atPath: replica + "/.git/objects/pack")) ?? [])
}

@Suite("materialize")
struct MaterializeTests {
    @Test("materialize a file and a folder: original bytes, mode, date; idempotent")
    func materializeFileAndFolder() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)

            let first = try box.fprepJSON(["materialize", "a.txt", "docs"], cwd: replica)
            let done = Set(first.strings("materialized"))
            #expect(done == ["a.txt", "docs/readme.md", "docs/deep/nested.txt", "docs/deep/tool"])
            #expect(first.objects("skipped").isEmpty)
            for path in done { expectMaterialized(replica, remote, path) }
            #expect(xattrString(replica + "/a.txt", "user.fprep.state") != "dataless")
            // Others untouched.
            try expectDataless(box, replica, remote, "bin.dat")
            try expectDataless(box, replica, remote, "run.sh")
            #expect(readLink(replica + "/docs/up") == "../a.txt")

            let items = itemsByName(try box.fprepJSON(["ls", "docs/deep"], cwd: replica))
            #expect(items["docs/deep/tool"]?.string("state") == "materialized")
            #expect(items["docs/deep/nested.txt"]?.string("state") == "materialized")
            try expectGitClean(box, replica)

            // Again: nothing new.
            let second = try box.fprepJSON(["materialize", "a.txt", "docs"], cwd: replica)
            #expect(second.strings("materialized").isEmpty)
            #expect(second.int("alreadyMaterialized") == 4)
            #expect(second.int("fetchedBlobs") == 0)
            let text = try box.fprepOK(["materialize", "docs"], cwd: replica).stdout
            #expect(text.hasPrefix("materialized 0 files"), "second run: \(text)")
            for path in done { expectMaterialized(replica, remote, path) }
        }
    }

    @Test("materialize takes paths relative to the current folder, -C, and --paths-from")
    func materializePathForms() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)

            try box.fprepOK(["materialize", "readme.md", "../run.sh"], cwd: replica + "/docs")
            expectMaterialized(replica, remote, "docs/readme.md")
            expectMaterialized(replica, remote, "run.sh")

            try box.fprepOK(["materialize", "-C", replica, "bin.dat"])
            expectMaterialized(replica, remote, "bin.dat")
            try box.fprepOK(["-C", replica, "materialize", "empty.txt"])
            expectMaterialized(replica, remote, "empty.txt")

            let list = box.at("list.txt")
            _ = FileManager.default.createFile(atPath: list, contents: Data("docs/deep/tool\n\na.txt\n".utf8))
            try box.fprepOK(["materialize", "--paths-from", list], cwd: replica)
            expectMaterialized(replica, remote, "docs/deep/tool")
            expectMaterialized(replica, remote, "a.txt")

            try box.fprepOK(["materialize", "--paths-from", "-"], cwd: replica, stdin: Data("docs/deep/nested.txt\n".utf8))
            expectMaterialized(replica, remote, "docs/deep/nested.txt")
            // Absolute paths inside the replica work as well.
            try box.fprepOK(["evict", replica + "/a.txt"], cwd: replica + "/docs")
            try expectDataless(box, replica, remote, "a.txt")
            try expectGitClean(box, replica)
        }
    }

    @Test("--verbose: a line per phase with its time and memory, on standard error; the output stays as it was")
    func verbosePhases() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let plain = try box.fprepOK(["materialize", "a.txt"], cwd: replica)
            try box.fprepOK(["evict", "a.txt"], cwd: replica)
            let verbose = try box.fprepOK(["materialize", "a.txt", "--verbose"], cwd: replica)
            #expect(verbose.stdout == plain.stdout)
            let phases = verbose.stderrLines.filter { $0.hasPrefix("fprep: ") }
            for phase in ["read index", "fetch", "write files", "index write", "store"] {
                #expect(phases.contains { $0.hasPrefix("fprep: \(phase): ") && $0.contains(" s, ") && $0.hasSuffix("MiB in memory") },
                        "no line for \(phase): \(verbose.stderr)")
            }
            let evict = try box.fprepOK(["evict", "a.txt", "-v"], cwd: replica)
            for phase in ["read index", "classify", "punch", "index write", "store"] {
                #expect(evict.stderrLines.contains { $0.hasPrefix("fprep: \(phase): ") }, "no line for \(phase): \(evict.stderr)")
            }
            let quiet = try box.fprepOK(["materialize", "a.txt"], cwd: replica)
            #expect(quiet.stderr.isEmpty, "phases only with --verbose: \(quiet.stderr)")
        }
    }

    /// The command line folds long runs of paths before ArgumentParser sees
    /// them (see PathArguments); each form a run can take must come back
    /// whole: after the command's name, after an option's value, after
    /// `--` (names that look like options), split by options, repeated.
    @Test("long lists of paths on the command line: every form, every path, options anywhere")
    func longPathLists() throws {
        var nodes = standardTree
        let names = (0..<90).map { String(format: "many/f%02d.txt", $0) }
        for (i, name) in names.enumerated() { nodes[name] = .text("file \(i)\n") }
        nodes["many/-dash.txt"] = .text("dash\n")
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: nodes)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let first = Array(names[0..<40]), second = Array(names[40..<80]), third = Array(names[80...])

            // A run right after the command's name, one after -C's value,
            // options between runs, names twice.
            let done = try box.fprepJSON(["materialize"] + first + ["-C", replica] + second + ["--json"] + first.prefix(3)
                                         + second.suffix(30), cwd: box.path)
            #expect(Set(done.strings("materialized")) == Set(first + second))
            // A run after '--', with a name that looks like an option.
            try box.fprepOK(["materialize", "-C", replica, "--"] + third + ["many/-dash.txt"] + first, cwd: box.path)
            for name in names + ["many/-dash.txt"] { expectMaterialized(replica, remote, name) }

            // A run that starts with --paths-from's value.
            let list = box.at("list.txt")
            _ = FileManager.default.createFile(atPath: list, contents: Data("a.txt\n".utf8))
            let evicted = try box.fprepJSON(["evict", "--paths-from", list] + names + ["--json"], cwd: replica)
            #expect(Set(evicted.strings("evicted")) == Set(names))
            #expect(evicted.int("alreadyDataless") == 1, "a.txt, from the list: \(evicted)")
            for name in names { try expectDataless(box, replica, remote, name) }

            // A wrong name deep in a long run is named as itself.
            let wrong = try box.fprep(["materialize"] + first + ["many/nothing-here"] + second, cwd: replica)
            expectOneLineError(wrong, mentioning: ["many/nothing-here"])
            let unknown = try box.fprep(["evict"] + first + ["--no-such-option"], cwd: replica)
            expectOneLineError(unknown, status: 64, mentioning: ["--no-such-option"])
            try expectGitClean(box, replica)
        }
    }

    @Test("many files come in two requests at once: every file's bytes; a request that fails fails the whole materialize, placeholders and object store unchanged")
    func manyFilesInTwoRequests() throws {
        try withSandbox { box in
            var nodes: [String: Node] = [:]
            for i in 0..<300 { nodes["d\(i % 7)/f\(i).txt"] = .text("file \(i)\n" + String(repeating: "x", count: i)) }
            let remote = try box.makeRemote(nodes: nodes)
            let daemon = try box.startDaemon(base: box.path)
            let replica = box.at("replica")
            _ = try box.clone(daemon.url("remote.git"), replica)
            let packsBefore = packFiles(replica)

            // The remote loses one blob: the request that asks for it fails,
            // the other one brings its half.
            let victim = "d3/f150.txt"
            let lost = try box.blobID(remote, victim)
            let everything = try box.gitOK(["cat-file", "--batch-all-objects", "--batch-check=%(objectname)"], cwd: remote.path)
            let kept = everything.split(separator: "\n").filter { $0 != lost }.joined(separator: "\n") + "\n"
            let objects = remote.path + "/objects"
            let stash = box.at("remote-objects")
            try FileManager.default.copyItem(atPath: objects, toPath: stash)
            try box.gitOK(["pack-objects", "-q", objects + "/pack/all"], cwd: remote.path, stdin: Data(kept.utf8))
            for name in try FileManager.default.contentsOfDirectory(atPath: objects) where name.count == 2 {
                try FileManager.default.removeItem(atPath: objects + "/" + name)
            }
            for name in try FileManager.default.contentsOfDirectory(atPath: objects + "/pack") where !name.hasPrefix("all-") {
                try FileManager.default.removeItem(atPath: objects + "/pack/" + name)
            }
            #expect(try box.git(["cat-file", "-e", lost], cwd: remote.path).status != 0)

            let before = snapshot(replica, skipping: [".fprep"])
            let failed = try box.fprep(["materialize", "."], cwd: replica, timeout: 60)
            expectOneLineError(failed)
            #expect(snapshot(replica, skipping: [".fprep"]) == before)
            #expect(packFiles(replica) == packsBefore, "a failed materialize left packs: \(packFiles(replica).subtracting(packsBefore))")
            let status = try box.fprepJSON(["status"], cwd: replica)
            #expect(status.int("dataless") == nodes.count)
            #expect(status.int("modified") == 0)
            try expectGitClean(box, replica)

            // The blob back: everything arrives.
            try FileManager.default.removeItem(atPath: objects)
            try FileManager.default.moveItem(atPath: stash, toPath: objects)
            let done = try box.fprepJSON(["materialize", "."], cwd: replica)
            #expect(done.strings("materialized").count == nodes.count)
            #expect(done.int("fetchedBlobs") == nodes.count)
            for path in remote.files.keys { expectMaterialized(replica, remote, path) }
            #expect(packFiles(replica) == packsBefore)
            try expectGitClean(box, replica)
        }
    }

    @Test("folders and a file changed while materialize waits for the remote (found by a hostile test): a folder deleted and made again, one moved out of the replica, a file deleted; their files are skipped with the reason, nothing is written outside the replica or brought back, the other files arrive")
    func foldersChangedDuringTheFetch() throws {
        try withSandbox { box in
            var nodes: [String: Node] = [:]
            for d in 0..<4 { for i in 0..<70 { nodes["d\(d)/f\(i).txt"] = .text("file \(d)/\(i)\n") } }
            let remote = try box.makeRemote(nodes: nodes)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            // The remote answers once the test says so: a pack-objects hook
            // (honoured from the global configuration) that waits for a file.
            let hook = box.at("hold-pack-objects.sh"), waiting = box.at("fetching"), go = box.at("go")
            try Data("#!/bin/sh\ntouch '\(waiting)'\nwhile [ ! -e '\(go)' ]; do sleep 0.01; done\nexec \"$@\"\n".utf8)
                .write(to: URL(fileURLWithPath: hook))
            #expect(chmod(hook, 0o755) == 0)
            let config = box.at("gitconfig")
            try Data("[uploadpack]\n\tpackObjectsHook = \(hook)\n".utf8).write(to: URL(fileURLWithPath: config))
            let materialize = try box.spawnFprep(["materialize", ".", "--json"], cwd: replica, env: ["GIT_CONFIG_GLOBAL": config])
            #expect(waitUntil { exists(waiting) })
            let outside = box.at("outside")
            #expect(rename(replica + "/d1", outside) == 0)
            try FileManager.default.removeItem(atPath: replica + "/d3")
            try writeTree(["mine.txt": .text("a file of mine\n")], at: replica + "/d3")
            #expect(unlink(replica + "/d0/f5.txt") == 0)
            try Data().write(to: URL(fileURLWithPath: go))
            let result = materialize.wait(timeout: 120)
            #expect(result.killedBySignal == nil, "\(result)")
            #expect(result.status == 2, "done in part: \(result)")

            // What moved out stays as the user left it: placeholders, no temporaries.
            for i in 0..<70 {
                let info = try #require(lstatInfo(outside + "/f\(i).txt"))
                #expect(info.blocks == 0 && info.size == Int64(remote.files["d1/f\(i).txt"]?.count ?? -1))
            }
            #expect(((try? FileManager.default.contentsOfDirectory(atPath: outside)) ?? []).count == 70)
            #expect(contents(replica + "/d3/mine.txt") == Data("a file of mine\n".utf8))
            #expect(((try? FileManager.default.contentsOfDirectory(atPath: replica + "/d3")) ?? []) == ["mine.txt"])
            for d in [0, 2] { for i in 0..<70 where (d, i) != (0, 5) { expectMaterialized(replica, remote, "d\(d)/f\(i).txt") } }
            #expect(lstatInfo(replica + "/d0/f5.txt") == nil, "a file deleted during the fetch came back")
            let skipped = (try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])?.objects("skipped") ?? []
            #expect(skipped.count == 141, "\(result)")
            let status = try box.fprepJSON(["status"], cwd: replica)
            #expect(status.int("modified") == 0)
        }
    }

    @Test("placeholders hard-linked to each other (a deduplicating tool) are all materialized, none refused as changed (found by a hostile test)")
    func hardLinkedPlaceholders() throws {
        try withSandbox { box in
            var nodes: [String: Node] = [:]
            for i in 0..<120 { nodes["d/p\(i).txt"] = .text("same content \(i / 2)\n") }
            let remote = try box.makeRemote(nodes: nodes)
            for round in 0..<3 {
                let replica = box.at("replica-\(round)")
                _ = try box.clone(remote.path, replica)
                for i in stride(from: 0, to: 120, by: 2) {
                    #expect(unlink(replica + "/d/p\(i + 1).txt") == 0 && link(replica + "/d/p\(i).txt", replica + "/d/p\(i + 1).txt") == 0)
                }
                let done = try box.fprepJSON(["materialize", "."], cwd: replica)
                #expect(done.objects("skipped").isEmpty, "round \(round): \(done)")
                for path in remote.files.keys { expectMaterialized(replica, remote, path) }
                #expect(try box.fprepJSON(["status"], cwd: replica).int("modified") == 0)
            }
        }
    }

    @Test("fetched packs are not kept: disk use after evict is back to what it was")
    func packsNotKept() throws {
        try withSandbox { box in
            var nodes: [String: Node] = [:]
            for i in 0..<4 { nodes["big/f\(i).bin"] = .file(pseudoRandomBytes(256 * 1024, seed: UInt64(100 + i))) }
            nodes["small.txt"] = .text("small\n")
            let remote = try box.makeRemote(nodes: nodes)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)

            let packsBefore = packFiles(replica)
            let missingBefore = try objectStore(box, replica: replica).missing
            let before = try #require(try box.fprepJSON(["status"], cwd: replica).int("bytesOnDisk"))

            try box.fprepOK(["materialize", "."], cwd: replica)
            for path in remote.files.keys { expectMaterialized(replica, remote, path) }
            #expect(packFiles(replica) == packsBefore, "materialize left packs: \(packFiles(replica).subtracting(packsBefore))")
            #expect(try objectStore(box, replica: replica).missing == missingBefore, "blobs stayed in the object store")
            let during = try #require(try box.fprepJSON(["status"], cwd: replica).int("bytesOnDisk"))
            #expect(during >= before + 1024 * 1024, "materialized content must show in bytesOnDisk (\(before) → \(during))")

            try box.fprepOK(["evict", "."], cwd: replica)
            let after = try #require(try box.fprepJSON(["status"], cwd: replica).int("bytesOnDisk"))
            let slack = max(before / 20, 64 * 1024)  // within 5% (at least 64 KiB: the state database's log)
            #expect(abs(after - before) <= slack, "bytesOnDisk before \(before), after evict \(after)")
            #expect(packFiles(replica) == packsBefore)
        }
    }
}

@Suite("materialize and symlinks")
struct SymlinkSafetyTests {
    @Test("materialize and evict never write through a symlink the user put in place of a folder or file")
    func neverWritesThroughSymlinks() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let victim = box.at("victim")
            try FileManager.default.createDirectory(atPath: victim, withIntermediateDirectories: false)
            try FileManager.default.createDirectory(atPath: victim + "/deep", withIntermediateDirectories: false)
            #expect(rename(replica + "/docs", replica + "/docs.mine") == 0)
            #expect(symlink("../victim", replica + "/docs") == 0)

            for args in [["materialize", "docs/readme.md"], ["materialize", "docs"], ["materialize", "docs/deep/nested.txt"]] {
                let result = try box.fprep(args, cwd: replica)
                #expect(result.killedBySignal == nil && !looksLikeCrash(result.stderr), "\(result)")
            }
            #expect(walk(victim) == ["deep"], "nothing may be written through the symlink: \(walk(victim))")

            try box.fprepOK(["materialize", "a.txt"], cwd: replica)
            unlink(replica + "/a.txt")
            _ = FileManager.default.createFile(atPath: victim + "/target", contents: Data("victim's\n".utf8))
            #expect(symlink("../victim/target", replica + "/a.txt") == 0)
            let evict = try box.fprep(["evict", "a.txt"], cwd: replica)
            #expect(evict.status == 2, "a file replaced by a symlink is a local change: \(evict)")
            #expect(contents(victim + "/target") == Data("victim's\n".utf8))
            #expect(lstatInfo(victim + "/target")?.blocks ?? 0 > 0, "the symlink's target must keep its blocks")
        }
    }
}

@Suite("evict")
struct EvictTests {
    /// An index that lags the disk: the evict's placeholders are there, the
    /// entries still say content (its index write lost to a power cut, or an
    /// older index put back). Every command takes each file for the
    /// placeholder it is: never a change of the user's, never content.
    @Test("placeholders behind entries that say content: status, evict, materialize and sync take them for placeholders")
    func placeholdersBehindContentEntries() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "bin.dat", "docs/deep/tool", "a.txt"], cwd: replica)
            let materializedIndex = try #require(contents(replica + "/.git/index"))
            try box.fprepOK(["evict", "bin.dat", "docs/deep/tool"], cwd: replica)
            try materializedIndex.write(to: URL(fileURLWithPath: replica + "/.git/index"))
            unlink(replica + "/.git/fprep-index-offsets")
            let head = try box.gitOK(["rev-parse", "main"], cwd: remote.path)

            let status = try box.fprepJSON(["status"], cwd: replica)
            #expect(status["modified"] as? Int == 0, "\(status)")
            #expect((status["changes"] as? [Any])?.isEmpty == true, "\(status)")
            let evicted = try box.fprepJSON(["evict", "bin.dat"], cwd: replica)
            #expect(evicted["alreadyDataless"] as? Int == 1, "\(evicted)")
            try expectDataless(box, replica, remote, "bin.dat")

            // Materialize fills them, from entries that still say content.
            let copy = box.at("copy")
            let copied = try Shell.run(["cp", "-a", "--sparse=always", replica, copy])
            #expect(copied.status == 0, "\(copied)")
            let materialized = try box.fprepJSON(["materialize", "bin.dat", "docs/deep/tool", "a.txt"], cwd: copy)
            #expect((materialized["materialized"] as? [String])?.sorted() == ["bin.dat", "docs/deep/tool"], "\(materialized)")
            #expect(materialized["alreadyMaterialized"] as? Int == 1, "\(materialized)")
            for path in ["bin.dat", "docs/deep/tool", "a.txt"] { expectMaterialized(copy, remote, path) }

            // Sync commits nothing and writes their entries again as placeholders'.
            let sync = try box.fprepJSON(["sync"], cwd: replica)
            #expect((sync["localChanges"] as? [Any])?.isEmpty ?? true, "\(sync)")
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == head, "the sync committed something")
            for path in ["bin.dat", "docs/deep/tool"] {
                #expect(try box.gitOK(["ls-files", "-v", "--", path], cwd: replica).hasPrefix("S "), "\(path): not a placeholder's entry after the sync")
                try expectDataless(box, replica, remote, path)
            }
            #expect(try box.gitOK(["ls-files", "-v", "--", "a.txt"], cwd: replica).hasPrefix("H "))
        }
    }

    @Test("evict frees the blocks and keeps size, date, mode and xattrs")
    func evictFreesBlocks() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "."], cwd: replica)
            for path in remote.files.keys { expectMaterialized(replica, remote, path) }

            let result = try box.fprepJSON(["evict", "."], cwd: replica)
            #expect(Set(result.strings("evicted")) == Set(remote.files.keys.filter { !(remote.files[$0]?.isEmpty ?? true) })
                    || Set(result.strings("evicted")) == Set(remote.files.keys))
            #expect(result.objects("refused").isEmpty)
            #expect((result.int("bytesFreed") ?? 0) > 0)
            for path in remote.files.keys { try expectDataless(box, replica, remote, path) }
            let items = itemsByName(try box.fprepJSON(["ls"], cwd: replica))
            for name in ["a.txt", "bin.dat", "run.sh", "empty.txt"] {
                #expect(items[name]?.string("state") == "dataless", "\(name): \(items[name] ?? [:])")
            }
            #expect(items["link"]?.string("state") == "materialized", "symlinks stay")
            #expect(readLink(replica + "/link") == "a.txt")
            try expectGitClean(box, replica)
            let status = try box.fprepJSON(["status"], cwd: replica)
            #expect(status.int("dataless") == remote.files.count)

            // Evicting again: nothing to do.
            let again = try box.fprepJSON(["evict", "docs"], cwd: replica)
            #expect(again.strings("evicted").isEmpty)
            #expect(again.int("alreadyDataless") == 3)

            // And materialize brings the same bytes back.
            try box.fprepOK(["materialize", "bin.dat"], cwd: replica)
            expectMaterialized(replica, remote, "bin.dat")
        }
    }

    @Test("evict refuses a modified file (exit 2, named) and evicts the others")
    func evictRefusesModified() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "a.txt", "docs"], cwd: replica)
            try append(replica + "/a.txt", "my edit\n")

            let result = try box.fprep(["evict", "a.txt", "docs"], cwd: replica)
            #expect(result.status == 2, "\(result)")
            #expect(!result.stderrLines.isEmpty)
            #expect(result.stderrLines.allSatisfy { $0.hasPrefix("fprep: ") }, "\(result)")
            #expect(result.stderrLines.contains { $0.contains("a.txt") }, "the refused file must be named: \(result)")
            #expect(!result.stderr.contains("docs/"), "only the modified file is refused: \(result)")
            #expect(!looksLikeCrash(result.stderr))
            #expect(contents(replica + "/a.txt") == Data("hello\nmy edit\n".utf8), "the edit must survive")
            for path in ["docs/readme.md", "docs/deep/nested.txt", "docs/deep/tool"] {
                try expectDataless(box, replica, remote, path)
            }

            // The JSON form lists it as refused, with exit 2 as well.
            let json = try box.fprep(["evict", "a.txt", "--json"], cwd: replica)
            #expect(json.status == 2)
            let refused = try json.json().objects("refused")
            #expect(refused.compactMap { $0.string("path") } == ["a.txt"])
            #expect(contents(replica + "/a.txt") == Data("hello\nmy edit\n".utf8))
        }
    }

    @Test("bytes a program writes into a placeholder are the user's: status, materialize and evict keep them")
    func writesIntoPlaceholderAreKept() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)

            // O_WRONLY without O_TRUNC, a few bytes at the start; and `echo >>`.
            try writeInPlace(replica + "/bin.dat", Array("XYZ".utf8))
            var binExpected = Data(count: 10_000)
            binExpected.replaceSubrange(0..<3, with: Array("XYZ".utf8))
            let echo = try Shell.run(["/bin/sh", "-c", "echo appended >> docs/readme.md"], cwd: replica)
            #expect(echo.status == 0)
            let readmeSize = remote.files["docs/readme.md"]!.count
            var readmeExpected = Data(count: readmeSize)
            readmeExpected.append(Data("appended\n".utf8))
            #expect(contents(replica + "/bin.dat") == binExpected)
            #expect(contents(replica + "/docs/readme.md") == readmeExpected)

            let status = try box.fprepJSON(["status"], cwd: replica)
            #expect(status.int("modified") == 2)
            let changed = status.objects("changes").compactMap { $0.string("path") }
            #expect(changed == ["bin.dat", "docs/readme.md"])
            #expect(status.objects("changes").allSatisfy { $0.string("kind") == "writtenWhileDataless" })

            let materialize = try box.fprep(["materialize", "bin.dat", "docs", "--json"], cwd: replica)
            #expect(materialize.status == 2, "done in part: \(materialize)")
            let m = try materialize.json()
            #expect(!m.strings("materialized").contains("bin.dat"))
            #expect(!m.strings("materialized").contains("docs/readme.md"))
            let skipped = Set(m.objects("skipped").compactMap { $0.string("path") })
            #expect(skipped == ["bin.dat", "docs/readme.md"], "\(m)")
            #expect(contents(replica + "/bin.dat") == binExpected, "materialize must not overwrite the user's bytes")
            #expect(contents(replica + "/docs/readme.md") == readmeExpected)
            expectMaterialized(replica, remote, "docs/deep/nested.txt")
            // As text: a line on standard error for each file left out, with why.
            let again = try box.fprep(["materialize", "bin.dat", "docs"], cwd: replica)
            #expect(again.status == 2, "\(again)")
            #expect(again.stderrLines.count == 2 && again.stderrLines.allSatisfy { $0.hasPrefix("fprep: left as is '") }, "\(again)")
            #expect(again.stderr.contains("bin.dat") && again.stderr.contains("docs/readme.md"), "\(again)")
            // Nothing left out: 0.
            #expect(try box.fprep(["materialize", "docs/deep"], cwd: replica).status == 0)

            let evict = try box.fprep(["evict", "bin.dat", "docs"], cwd: replica)
            #expect(evict.status == 2, "\(evict)")
            #expect(evict.stderrLines.allSatisfy { $0.hasPrefix("fprep: ") })
            #expect(evict.stderr.contains("bin.dat") && evict.stderr.contains("docs/readme.md"), "\(evict)")
            #expect(contents(replica + "/bin.dat") == binExpected, "evict must not drop the user's bytes")
            #expect(contents(replica + "/docs/readme.md") == readmeExpected)
            try expectDataless(box, replica, remote, "docs/deep/nested.txt")
            let after = try box.fprepJSON(["status"], cwd: replica)
            #expect(after.int("modified") == 2)
        }
    }

    @Test("a copy of a replica that wrote its holes out as zeros (cp --sparse=never) still has placeholders, not changes")
    func copiedReplicaKeepsPlaceholders() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let copy = box.at("copy")
            let cp = try Shell.run(["cp", "-a", "--sparse=never", replica, copy])
            #expect(cp.status == 0, "\(cp)")
            #expect(try #require(lstatInfo(copy + "/bin.dat")).blocks > 0, "the copy is meant to hold written zeros")

            let status = try box.fprepJSON(["status"], cwd: copy)
            #expect(status.int("modified") == 0, "\(status)")
            #expect(status.objects("changes").isEmpty, "\(status)")
            let sync = try box.fprepJSON(["sync"], cwd: copy)
            #expect(sync.objects("localChanges").isEmpty && sync.string("pushed") == nil, "zeros must never be committed: \(sync)")
            _ = try box.fprepOK(["materialize", "bin.dat"], cwd: copy)
            expectMaterialized(copy, remote, "bin.dat")
        }
    }
}
