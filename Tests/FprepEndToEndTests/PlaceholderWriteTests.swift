import Foundation
import Glibc
import Testing

// Writes into placeholders, changes of mode and changes of kind: what a
// program or a user does to a replica without fprep, and what sync must make
// of it without losing a byte or committing one nobody wrote.

extension Sandbox {
    /// The remote branch's tree: path → (mode, blob id).
    func remoteTree(_ remote: String, branch: String = "main") throws -> [String: (mode: String, id: String)] {
        var result: [String: (mode: String, id: String)] = [:]
        let listing = try gitOK(["ls-tree", "-r", "-z", branch], cwd: remote)
        for record in listing.split(separator: "\0") {
            let parts = record.split(separator: "\t", maxSplits: 1)
            let fields = parts[0].split(separator: " ")
            guard parts.count == 2, fields.count == 3 else { continue }
            result[String(parts[1])] = (String(fields[0]), String(fields[2]))
        }
        return result
    }

    /// A blob of the remote's branch, by path.
    func remoteBlob(_ remote: String, _ path: String, branch: String = "main") throws -> Data {
        let result = try git(["cat-file", "blob", "\(branch):\(path)"], cwd: remote)
        guard result.status == 0 else { throw HarnessError("no blob at \(path): \(result)") }
        return result.stdoutData
    }

    /// Runs a shell command line; requires exit 0.
    @discardableResult
    func sh(_ script: String, cwd: String) throws -> RunResult {
        let result = try Shell.run(["/bin/sh", "-c", script], cwd: cwd, env: baseEnvironment, ioFolder: io)
        guard result.status == 0 else { throw HarnessError("sh failed: \(result)") }
        return result
    }

    /// A remote of the standard tree, a replica of it at `one` with
    /// `materialized` materialized, and a full git clone at `full` to make
    /// the remote's changes in.
    func replicaBesideFullClone(materialized: [String] = []) throws -> (remote: Remote, one: String, full: String) {
        let remote = try makeRemote()
        let one = at("one"), full = at("full")
        _ = try clone(remote.path, one)
        if !materialized.isEmpty { try fprepOK(["materialize"] + materialized, cwd: one) }
        try gitOK(["clone", "-q", remote.path, full])
        return (remote, one, full)
    }
}

/// The conflict copies in a tree listing (their names say so).
func conflictCopies<T>(_ tree: [String: T], of name: String) -> [String] {
    let stem = (name as NSString).deletingPathExtension
    return tree.keys.filter { ($0 as NSString).lastPathComponent.hasPrefix(stem + " (conflict ") }.sorted()
}

@Suite("writes into placeholders")
struct PlaceholderWriteTests {
    /// Each way a program writes into a dataless file without reading its
    /// content first, as a shell line run in the replica's folder.
    static let writers: [(name: String, script: String, written: @Sendable (Data) -> Data)] = [
        ("append", "printf 'dev#1\\n' >> a.txt", { old in Data(count: old.count) + Data("dev#1\n".utf8) }),
        ("truncate to empty", ": > a.txt", { _ in Data() }),
        ("truncate longer", "truncate -s 20 a.txt", { _ in Data(count: 20) }),
        ("write at an offset", "printf 'XY' | dd of=a.txt bs=1 seek=2 conv=notrunc status=none",
         { old in var bytes = Data(count: old.count); bytes.replaceSubrange(2..<4, with: Data("XY".utf8)); return bytes }),
        ("an editor's save by rename", "cat a.txt > .a.swp && printf 'dev#2\\n' >> .a.swp && mv .a.swp a.txt",
         { old in Data(count: old.count) + Data("dev#2\n".utf8) }),
    ]

    @Test("bytes written into a placeholder are kept as a conflict copy; the name keeps the remote's content everywhere",
          arguments: 0..<writers.count)
    func writtenPlaceholderBecomesConflictCopy(_ which: Int) throws {
        let writer = Self.writers[which]
        try withSandbox { box in
            let remote = try box.makeRemote()
            let original = try #require(remote.files["a.txt"])
            let one = box.at("one"), two = box.at("two")
            _ = try box.clone(remote.path, one)
            _ = try box.clone(remote.path, two)
            try box.sh(writer.script, cwd: one)

            let status = try box.fprepJSON(["status"], cwd: one)
            let kinds = status.objects("changes").map { "\($0.string("kind") ?? ""):\($0.string("path") ?? "")" }
            #expect(kinds == ["writtenWhileDataless:a.txt"], "\(writer.name): \(status)")

            let report = try box.fprepJSON(["sync"], cwd: one)
            let conflicts = report.objects("conflicts")
            #expect(conflicts.count == 1 && conflicts.first?.string("path") == "a.txt", "\(writer.name): \(report)")
            let tree = try box.remoteTree(remote.path)
            #expect(try box.remoteBlob(remote.path, "a.txt") == original, "\(writer.name): the remote's a.txt changed")
            let copies = conflictCopies(tree, of: "a.txt")
            #expect(copies.count == 1, "\(writer.name): \(tree.keys.sorted())")
            #expect(conflicts.first?.string("copy") == copies.first)
            if let copy = copies.first {
                #expect(try box.remoteBlob(remote.path, copy) == writer.written(original), "\(writer.name): the copy's bytes")
                #expect(contents(one + "/" + copy) == writer.written(original))
            }
            // The name is a placeholder of the remote's version again, and the
            // replica has nothing left to sync.
            #expect(xattrString(one + "/a.txt", "user.fprep.state") == "dataless")
            #expect(lstatInfo(one + "/a.txt")?.size == Int64(original.count))
            #expect(try box.fprepJSON(["status"], cwd: one).objects("changes").isEmpty)
            #expect(try box.fprepJSON(["sync"], cwd: one).string("pushed") == nil)

            // The other device keeps the real content and gets the copy.
            try box.fprepOK(["sync"], cwd: two)
            try box.fprepOK(["materialize", "a.txt"], cwd: two)
            #expect(contents(two + "/a.txt") == original)
            if let copy = copies.first { #expect(exists(two + "/" + copy)) }
            try box.fprepOK(["materialize", "a.txt"], cwd: one)
            #expect(contents(one + "/a.txt") == original)
        }
    }

    @Test("a placeholder of an empty file filled in (>, >>, an editor's save by rename, after a move) is a plain edit at its name: no conflict copy, on every device")
    func emptyFilesFilledIn() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: ["a/__init__.py": .file(Data()), "b/.gitkeep": .file(Data()), "c/log.txt": .file(Data()),
                                                     "d/moved.txt": .file(Data()), "other.txt": .text("other\n")])
            let one = box.at("one"), two = box.at("two")
            _ = try box.clone(remote.path, one)
            _ = try box.clone(remote.path, two)
            try box.sh("printf 'VERSION = 1\n' > a/__init__.py && printf 'kept\n' >> b/.gitkeep && printf 'saved\n' > c/.log.swp && mv c/.log.swp c/log.txt && mv d/moved.txt d/renamed.txt && printf 'after a move\n' >> d/renamed.txt",
                       cwd: one)
            let status = try box.fprepJSON(["status"], cwd: one)
            #expect(!status.objects("changes").contains { $0.string("kind") == "writtenWhileDataless" }, "\(status)")
            let report = try box.fprepJSON(["sync"], cwd: one)
            #expect(report.objects("conflicts").isEmpty, "\(report)")
            let tree = try box.remoteTree(remote.path)
            #expect(!tree.keys.contains { $0.contains("(conflict ") }, "\(tree.keys.sorted())")
            let expected = ["a/__init__.py": "VERSION = 1\n", "b/.gitkeep": "kept\n", "c/log.txt": "saved\n", "d/renamed.txt": "after a move\n"]
            for (path, text) in expected {
                #expect(try box.remoteBlob(remote.path, path) == Data(text.utf8), "\(path)")
            }
            #expect(try box.fprepJSON(["status"], cwd: one).objects("changes").isEmpty)
            try box.fprepOK(["sync"], cwd: two)
            try box.fprepOK(["materialize", "."], cwd: two)
            for (path, text) in expected { #expect(contents(two + "/" + path) == Data(text.utf8), "\(path)") }
        }
    }

    @Test("a placeholder copied with its marks is a copy of its content, and one moved and written keeps both")
    func copiedAndMovedPlaceholders() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one"), two = box.at("two")
            _ = try box.clone(remote.path, one)
            _ = try box.clone(remote.path, two)
            let original = try box.blobID(remote, "a.txt")
            try box.sh("cp -a bin.dat copy.dat && mv a.txt moved.txt && printf 'dev#1\\n' >> moved.txt && cp -a run.sh run2.sh && printf 'dev#2\\n' >> run2.sh",
                       cwd: one)
            let report = try box.fprepJSON(["sync"], cwd: one)
            #expect(Set(report.objects("conflicts").compactMap { $0.string("path") }) == ["moved.txt", "run2.sh"], "\(report)")
            let tree = try box.remoteTree(remote.path)
            #expect(tree["copy.dat"]?.id == tree["bin.dat"]?.id, "a copy of a placeholder is its content, not zeros")
            #expect(tree["a.txt"] == nil && tree["moved.txt"]?.id == original)
            #expect(tree["run2.sh"]?.id == tree["run.sh"]?.id && tree["run2.sh"]?.mode == "100755")
            let copies = conflictCopies(tree, of: "moved.txt") + conflictCopies(tree, of: "run2.sh")
            #expect(copies.count == 2, "\(tree.keys.sorted())")
            let texts = try copies.map { String(decoding: try box.remoteBlob(remote.path, $0), as: UTF8.self) }
            #expect(texts.contains { $0.hasSuffix("dev#1\n") } && texts.contains { $0.hasSuffix("dev#2\n") })
            #expect(try box.fprepJSON(["status"], cwd: one).objects("changes").isEmpty)
            try box.fprepOK(["sync"], cwd: two)
            try box.fprepOK(["materialize", "copy.dat", "moved.txt"], cwd: two)
            #expect(contents(two + "/copy.dat") == remote.files["bin.dat"])
            #expect(contents(two + "/moved.txt") == remote.files["a.txt"])
        }
    }

    @Test("sync --incoming over a written placeholder the remote changed keeps both, and no zeros reach the name")
    func incomingOverWrittenPlaceholder() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one"), full = box.at("full")
            _ = try box.clone(remote.path, one)
            try box.gitOK(["clone", "-q", remote.path, full])
            try box.sh("printf 'remote#1\\n' >> a.txt && git commit -qam edit && git push -q origin main", cwd: full)
            try box.sh("printf 'dev#1\\n' >> a.txt", cwd: one)
            try box.fprepOK(["sync", "--incoming"], cwd: one)
            try box.fprepOK(["sync"], cwd: one)
            let tree = try box.remoteTree(remote.path)
            let remoteText = String(decoding: try box.remoteBlob(remote.path, "a.txt"), as: UTF8.self)
            #expect(remoteText == "hello\nremote#1\n")
            let copies = conflictCopies(tree, of: "a.txt")
            #expect(copies.count == 1, "\(tree.keys.sorted())")
            if let copy = copies.first {
                #expect(String(decoding: try box.remoteBlob(remote.path, copy), as: UTF8.self).hasSuffix("dev#1\n"))
            }
        }
    }

    @Test("bytes written into a placeholder the remote deleted are kept as a conflict copy, never at its name",
          arguments: [true, false])
    func writtenPlaceholderDeletedOnRemote(_ incomingFirst: Bool) throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one"), full = box.at("full")
            _ = try box.clone(remote.path, one)
            try box.gitOK(["clone", "-q", remote.path, full])
            try box.sh("git rm -q a.txt && git commit -qm delete && git push -q origin main", cwd: full)
            try box.sh("printf 'dev#1\\n' >> a.txt", cwd: one)
            if incomingFirst { try box.fprepOK(["sync", "--incoming"], cwd: one) }
            try box.fprepOK(["sync"], cwd: one)
            let tree = try box.remoteTree(remote.path)
            #expect(tree["a.txt"] == nil, "zeros reached the name: \(tree.keys.sorted())")
            let copies = conflictCopies(tree, of: "a.txt")
            #expect(copies.count == 1, "\(tree.keys.sorted())")
            if let copy = copies.first {
                #expect(String(decoding: try box.remoteBlob(remote.path, copy), as: UTF8.self).hasSuffix("dev#1\n"))
            }
            #expect(try box.fprepJSON(["status"], cwd: one).objects("changes").isEmpty)
        }
    }

    @Test("a program still writing a file that became a conflict copy writes into the copy")
    func writerKeepsWritingTheCopy() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one")
            _ = try box.clone(remote.path, one)
            // A writer holds a.txt open for appending across the sync.
            let fifo = box.at("go")
            #expect(mkfifo(fifo, 0o600) == 0)
            let writer = try box.spawn(["/bin/sh", "-c", "exec 3>>a.txt; printf 'w#1\\n' >&3; read x < '\(fifo)'; printf 'w#2\\n' >&3"],
                                       cwd: one)
            let deadline = monotonicSeconds() + patienceSeconds
            while (lstatInfo(one + "/a.txt")?.size ?? 0) <= 6, monotonicSeconds() < deadline { sleepSeconds(0.01) }
            try box.fprepOK(["sync"], cwd: one)
            try box.sh("echo go > '\(fifo)'", cwd: box.path)
            #expect(writer.wait(timeout: 30).status == 0)
            let report = try box.fprepJSON(["sync"], cwd: one)
            #expect(report.objects("localChanges").map { $0.string("kind") } == ["modified"], "\(report)")
            let copies = conflictCopies(try box.remoteTree(remote.path), of: "a.txt")
            #expect(copies.count == 1)
            if let copy = copies.first {
                let text = String(decoding: try box.remoteBlob(remote.path, copy), as: UTF8.self)
                #expect(text.hasSuffix("w#1\nw#2\n"), "\(text.debugDescription)")
            }
            #expect(try box.remoteBlob(remote.path, "a.txt") == remote.files["a.txt"])
        }
    }

    @Test("a sync killed after linking the copy finishes with one copy, not two")
    func linkedCopyIsTakenAsItIs() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one")
            _ = try box.clone(remote.path, one)
            try box.sh("printf 'dev#1\\n' >> a.txt", cwd: one)
            // What a run killed after its first disk steps leaves: the written
            // file without its placeholder marks, linked at its copy's name.
            var host = [CChar](repeating: 0, count: 256)
            gethostname(&host, host.count)
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withFullDate]
            let hostName = String(decoding: host.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let copy = "a (conflict \(hostName) \(formatter.string(from: Date()))).txt"
            #expect(link(one + "/a.txt", one + "/" + copy) == 0)
            try box.sh("setfattr -x user.fprep.state a.txt && setfattr -x user.fprep.blob a.txt", cwd: one)
            let report = try box.fprepJSON(["sync"], cwd: one)
            let tree = try box.remoteTree(remote.path)
            #expect(conflictCopies(tree, of: "a.txt") == [copy], "\(report)")
            #expect(try box.remoteBlob(remote.path, copy) == Data(count: 6) + Data("dev#1\n".utf8))
            #expect(try box.remoteBlob(remote.path, "a.txt") == remote.files["a.txt"])
            #expect(lstatInfo(one + "/" + copy)?.isRegular == true)
            #expect(try box.fprepJSON(["status"], cwd: one).objects("changes").isEmpty)
        }
    }
}

@Suite("modes")
struct ModeTests {
    @Test("chmod of a placeholder is a change of mode that syncs without content, both ways")
    func placeholderChmodSyncs() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one"), two = box.at("two")
            _ = try box.clone(remote.path, one)
            _ = try box.clone(remote.path, two)
            #expect(chmod(one + "/a.txt", 0o755) == 0)
            #expect(chmod(one + "/run.sh", 0o644) == 0)
            let status = try box.fprepJSON(["status"], cwd: one)
            #expect(Set(status.objects("changes").map { $0.string("kind") ?? "" }) == ["modeChanged"], "\(status)")
            try box.fprepOK(["sync"], cwd: one)
            let tree = try box.remoteTree(remote.path)
            #expect(tree["a.txt"]?.mode == "100755" && tree["run.sh"]?.mode == "100644")
            #expect(xattrString(one + "/a.txt", "user.fprep.state") == "dataless", "no content was needed")
            let fetched = try box.git(["cat-file", "-e", tree["a.txt"]?.id ?? ""], cwd: one, env: ["GIT_NO_LAZY_FETCH": "1"])
            #expect(fetched.status != 0, "the content of a.txt was fetched for a change of mode")
            try box.fprepOK(["sync"], cwd: two)
            #expect(lstatInfo(two + "/a.txt")?.permissions == 0o755 && lstatInfo(two + "/run.sh")?.permissions == 0o644)
            #expect(xattrString(two + "/a.txt", "user.fprep.state") == "dataless")
            // Nobody changes a mode back: the next syncs are empty on both.
            for replica in [one, two, one, two] {
                let report = try box.fprepJSON(["sync"], cwd: replica)
                #expect(report.objects("localChanges").isEmpty && report.string("pushed") == nil, "\(report)")
            }
            #expect(try box.remoteTree(remote.path)["a.txt"]?.mode == "100755")
        }
    }

    @Test("materialize keeps a mode given to the placeholder before, and sync shares it")
    func materializeKeepsChmod() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one")
            _ = try box.clone(remote.path, one)
            #expect(chmod(one + "/a.txt", 0o755) == 0)
            let done = try box.fprepJSON(["materialize", "a.txt"], cwd: one)
            #expect(done.strings("materialized") == ["a.txt"], "\(done)")
            #expect(lstatInfo(one + "/a.txt")?.permissions == 0o755)
            #expect(contents(one + "/a.txt") == remote.files["a.txt"])
            try box.fprepOK(["sync"], cwd: one)
            #expect(try box.remoteTree(remote.path)["a.txt"]?.mode == "100755")
            #expect(try box.remoteBlob(remote.path, "a.txt") == remote.files["a.txt"])
        }
    }

    @Test("a remote chmod of a materialized file is applied, not reverted, and two devices do not flip it")
    func remoteChmodConverges() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one"), two = box.at("two"), full = box.at("full")
            _ = try box.clone(remote.path, one)
            _ = try box.clone(remote.path, two)
            try box.fprepOK(["materialize", "run.sh", "a.txt"], cwd: one)
            try box.fprepOK(["materialize", "run.sh"], cwd: two)
            try box.gitOK(["clone", "-q", remote.path, full])
            try box.sh("chmod -x run.sh && chmod +x a.txt && git commit -qam modes && git push -q origin main", cwd: full)
            for replica in [one, two] {
                try box.fprepOK(["sync"], cwd: replica)
                #expect(lstatInfo(replica + "/run.sh")?.permissions == 0o644, "\(replica)")
                #expect(lstatInfo(replica + "/a.txt")?.permissions == 0o755, "\(replica)")
            }
            let before = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            for replica in [one, two, one, two] {
                let report = try box.fprepJSON(["sync"], cwd: replica)
                #expect(report.objects("localChanges").isEmpty, "\(report)")
            }
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == before, "a sync pushed a mode back")
            #expect(contents(one + "/run.sh") == remote.files["run.sh"])
        }
    }

    @Test("a remote chmod of a file with other hard links changes that name only; no mode nobody changed is pushed",
          arguments: [true, false])
    func remoteChmodOfHardLinkedFile(materialized: Bool) throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one"), full = box.at("full"), outside = box.at("outside.txt")
            _ = try box.clone(remote.path, one)
            if materialized { try box.fprepOK(["materialize", "a.txt"], cwd: one) }
            // A second name in the replica (synced as a file of its own) and
            // one outside it, both the same inode as a.txt.
            #expect(link(one + "/a.txt", one + "/linked.txt") == 0)
            #expect(link(one + "/a.txt", outside) == 0)
            try box.fprepOK(["sync"], cwd: one)
            try box.gitOK(["clone", "-q", remote.path, full])
            try box.sh("chmod +x a.txt && git commit -qam 'a.txt executable' && git push -q origin main", cwd: full)
            try box.fprepOK(["sync"], cwd: one)
            #expect(lstatInfo(one + "/a.txt")?.permissions == 0o755)
            #expect(lstatInfo(one + "/linked.txt")?.permissions == 0o644, "the other name's mode changed too")
            #expect(lstatInfo(outside)?.permissions == 0o644, "the name outside the replica changed mode")
            let before = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            let report = try box.fprepJSON(["sync"], cwd: one)
            #expect(report.objects("localChanges").isEmpty, "\(report)")
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == before, "a mode nobody changed was pushed")
            #expect(try box.remoteTree(remote.path)["linked.txt"]?.mode == "100644")
            try box.fprepOK(["materialize", "a.txt", "linked.txt"], cwd: one)
            #expect(contents(one + "/a.txt") == remote.files["a.txt"] && contents(one + "/linked.txt") == remote.files["a.txt"])
            if materialized { #expect(contents(outside) == remote.files["a.txt"]) }
        }
    }

    /// Ways a placeholder of the same size takes another's name, and
    /// commands that write the index without looking at the other files.
    static let replacements = ["ln -f b.txt a.txt", "mv b.txt a.txt"]
    static let blindIndexWriters: [[String]] = [["sync", "--incoming"], ["materialize", "c.txt"], ["evict", "c.txt"],
                                                 ["materialize", "."]]

    @Test("a placeholder hard-linked or moved over another of the same size is synced, whatever wrote the index since",
          arguments: replacements, blindIndexWriters)
    func sameSizePlaceholderOverAnother(replacement: String, writer: [String]) throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: ["a.txt": .text("alpha 1\n"), "b.txt": .text("bravo 2\n"),
                                                    "c.txt": .text("charlie\n")])
            let one = box.at("one")
            _ = try box.clone(remote.path, one)
            if writer.first == "evict" { try box.fprepOK(["materialize", "c.txt"], cwd: one) }
            if writer.first == "sync" {
                // Something for the incoming sync to lay out.
                let full = box.at("full")
                try box.gitOK(["clone", "-q", remote.path, full])
                try box.sh("echo delta > d.txt && git add d.txt && git commit -qm d && git push -q origin main", cwd: full)
            }
            try box.sh(replacement, cwd: one)
            // The index is written after the change, by a command that
            // does not scan: its date says nothing about a.txt.
            // Materializing everything is done in part (exit 2): the file
            // moved away or the changed one is left as it is.
            let written = try box.fprep(writer, cwd: one)
            #expect(written.status == 0 || (writer == ["materialize", "."] && written.status == 2), "\(written)")
            try box.fprepOK(["sync"], cwd: one)
            let tree = try box.remoteTree(remote.path)
            #expect(try box.remoteBlob(remote.path, "a.txt") == Data("bravo 2\n".utf8), "\(replacement) then \(writer): \(tree)")
            #expect((tree["b.txt"] != nil) == replacement.hasPrefix("ln"), "\(tree)")
            try box.fprepOK(["materialize", "a.txt"], cwd: one)
            #expect(contents(one + "/a.txt") == Data("bravo 2\n".utf8))
            #expect(try box.fprepJSON(["status"], cwd: one).objects("changes").isEmpty)
        }
    }

    @Test("a materialize killed at any durable step never takes a placeholder moved over another for that one (model seed 8159)",
          arguments: 1...6)
    func movedPlaceholderSurvivesKilledMaterialize(crashAt: Int) throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: ["a.txt": .text("alpha 1\n"), "b.txt": .text("bravo 2\n")])
            let one = box.at("one")
            _ = try box.clone(remote.path, one)
            try box.sh("mv b.txt a.txt", cwd: one)
            _ = try box.fprep(["materialize", "."], cwd: one, env: ["FPREP_CRASH_AT": "\(crashAt)"])
            try box.fprepOK(["sync"], cwd: one)
            #expect(try box.remoteTree(remote.path).keys.sorted() == ["a.txt"])
            #expect(try box.remoteBlob(remote.path, "a.txt") == Data("bravo 2\n".utf8))
            try box.fprepOK(["materialize", "a.txt"], cwd: one)
            #expect(contents(one + "/a.txt") == Data("bravo 2\n".utf8))
        }
    }

    @Test("restore brings a deleted executable back executable, whole, as a change the next sync shares")
    func restoreKeepsMode() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one")
            _ = try box.clone(remote.path, one)
            try box.sh("rm run.sh", cwd: one)
            try box.fprepOK(["sync"], cwd: one)
            #expect(try box.remoteTree(remote.path)["run.sh"] == nil)
            try box.fprepOK(["restore", "run.sh"], cwd: one)
            #expect(lstatInfo(one + "/run.sh")?.permissions == 0o755)
            #expect(contents(one + "/run.sh") == remote.files["run.sh"])
            #expect(try box.fprepJSON(["status"], cwd: one).objects("changes").map { $0.string("kind") } == ["added"])
            try box.fprepOK(["sync"], cwd: one)
            #expect(try box.remoteTree(remote.path)["run.sh"]?.mode == "100755")
            let again = try box.fprep(["restore", "run.sh"], cwd: one)
            #expect(again.status != 0)
        }
    }

    @Test("a change of mode here and of content there both land")
    func modeHereContentThere() throws {
        try withSandbox { box in
            let (remote, one, full) = try box.replicaBesideFullClone(materialized: ["bin.dat"])
            try box.sh("printf 'x' >> bin.dat && git commit -qam edit && git push -q origin main", cwd: full)
            #expect(chmod(one + "/bin.dat", 0o755) == 0)
            let report = try box.fprepJSON(["sync"], cwd: one)
            #expect(report.objects("conflicts").isEmpty, "\(report)")
            let tree = try box.remoteTree(remote.path)
            #expect(tree["bin.dat"]?.mode == "100755")
            #expect(try box.remoteBlob(remote.path, "bin.dat") == (remote.files["bin.dat"] ?? Data()) + Data("x".utf8))
        }
    }
}

@Suite("changes of kind")
struct KindChangeTests {
    @Test("a folder replaced by a file of its name, and back, reaches the remote and the other device")
    func folderToFileAndBack() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one"), two = box.at("two")
            _ = try box.clone(remote.path, one)
            _ = try box.clone(remote.path, two)
            try box.sh("rm -rf docs && printf 'dev#1\\n' > docs", cwd: one)
            try box.fprepOK(["sync"], cwd: one)
            var tree = try box.remoteTree(remote.path)
            #expect(tree["docs"]?.mode == "100644" && !tree.keys.contains { $0.hasPrefix("docs/") }, "\(tree.keys.sorted())")
            try box.fprepOK(["sync"], cwd: two)
            try box.fprepOK(["materialize", "docs"], cwd: two)
            #expect(contents(two + "/docs") == Data("dev#1\n".utf8))

            try box.sh("rm docs && mkdir docs && printf 'dev#2\\n' > docs/new.txt", cwd: one)
            try box.fprepOK(["sync"], cwd: one)
            tree = try box.remoteTree(remote.path)
            #expect(tree["docs"] == nil && tree["docs/new.txt"] != nil, "\(tree.keys.sorted())")
            try box.fprepOK(["sync"], cwd: two)
            #expect(lstatInfo(two + "/docs")?.isDirectory == true && exists(two + "/docs/new.txt"))
        }
    }

    @Test("a file on one device and a folder on the other at one path: both survive, in either order",
          arguments: [true, false])
    func fileAgainstFolder(_ fileFirst: Bool) throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one"), two = box.at("two")
            _ = try box.clone(remote.path, one)
            _ = try box.clone(remote.path, two)
            try box.sh("printf 'file#1\\n' > p", cwd: one)
            try box.sh("mkdir p && printf 'folder#1\\n' > p/q", cwd: two)
            for replica in fileFirst ? [one, two, one] : [two, one, two] { try box.fprepOK(["sync"], cwd: replica) }
            let tree = try box.remoteTree(remote.path)
            let texts = try tree.keys.filter { $0 == "p" || $0.hasPrefix("p ") || $0.hasPrefix("p/") }
                .map { String(decoding: try box.remoteBlob(remote.path, $0), as: UTF8.self) }
            #expect(Set(texts) == ["file#1\n", "folder#1\n"], "\(tree.keys.sorted())")
            #expect(try box.fprepJSON(["status"], cwd: one).objects("changes").isEmpty)
            #expect(try box.fprepJSON(["status"], cwd: two).objects("changes").isEmpty)
        }
    }

    @Test("a file edited here that the remote turned into a folder: the folder keeps the name, the edit survives")
    func editAgainstFolder() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one"), full = box.at("full")
            _ = try box.clone(remote.path, one)
            try box.fprepOK(["materialize", "a.txt"], cwd: one)
            try box.gitOK(["clone", "-q", remote.path, full])
            try box.sh("git rm -q a.txt && mkdir a.txt && printf 'remote#1\\n' > a.txt/inner && git add -A && git commit -qm kind && git push -q origin main",
                       cwd: full)
            try box.sh("printf 'dev#1\\n' >> a.txt", cwd: one)
            try box.fprepOK(["sync"], cwd: one)
            let tree = try box.remoteTree(remote.path)
            #expect(tree["a.txt/inner"] != nil, "\(tree.keys.sorted())")
            let copies = conflictCopies(tree, of: "a.txt")
            #expect(copies.count == 1, "\(tree.keys.sorted())")
            if let copy = copies.first {
                #expect(String(decoding: try box.remoteBlob(remote.path, copy), as: UTF8.self) == "hello\ndev#1\n")
            }
            #expect(try box.fprepJSON(["status"], cwd: one).objects("changes").isEmpty)
        }
    }

    @Test("sync --incoming where the remote put a folder over a file changed here: the file steps aside, nothing wedges")
    func incomingFolderOverChangedFile() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one"), full = box.at("full")
            _ = try box.clone(remote.path, one)
            try box.fprepOK(["materialize", "a.txt"], cwd: one)
            try box.sh("printf 'dev#1\\n' >> a.txt", cwd: one)
            try box.gitOK(["clone", "-q", remote.path, full])
            try box.sh("git rm -q a.txt && mkdir a.txt && printf 'remote#1\\n' > a.txt/inner && git add -A && git commit -qm kind && git push -q origin main",
                       cwd: full)
            try box.fprepOK(["sync", "--incoming"], cwd: one)
            #expect(lstatInfo(one + "/a.txt")?.isDirectory == true)
            try box.fprepOK(["status"], cwd: one)
            try box.fprepOK(["sync"], cwd: one)
            let tree = try box.remoteTree(remote.path)
            #expect(tree["a.txt/inner"] != nil)
            let copies = conflictCopies(tree, of: "a.txt")
            #expect(copies.count == 1, "\(tree.keys.sorted())")
            if let copy = copies.first {
                #expect(String(decoding: try box.remoteBlob(remote.path, copy), as: UTF8.self) == "hello\ndev#1\n")
            }
        }
    }

    @Test("a folder of files added here where the remote put a file: both kept")
    func folderItemsAgainstRemoteFile() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one"), full = box.at("full")
            _ = try box.clone(remote.path, one)
            try box.gitOK(["clone", "-q", remote.path, full])
            try box.sh("git rm -rq docs && printf 'remote#1\\n' > docs && git add docs && git commit -qm kind && git push -q origin main",
                       cwd: full)
            try box.sh("printf 'dev#1\\n' > docs/added.txt", cwd: one)
            try box.fprepOK(["sync"], cwd: one)
            let tree = try box.remoteTree(remote.path)
            #expect(String(decoding: try box.remoteBlob(remote.path, "docs"), as: UTF8.self) == "remote#1\n")
            let moved = tree.keys.filter { $0.hasPrefix("docs (conflict ") && $0.hasSuffix("/added.txt") }
            #expect(moved.count == 1, "\(tree.keys.sorted())")
            #expect(try box.fprepJSON(["status"], cwd: one).objects("changes").isEmpty)
        }
    }

    @Test("a symlink here against an edit there keeps both")
    func symlinkAgainstFile() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let one = box.at("one"), two = box.at("two")
            _ = try box.clone(remote.path, one)
            _ = try box.clone(remote.path, two)
            try box.sh("rm a.txt && ln -s run.sh a.txt", cwd: one)
            try box.fprepOK(["materialize", "a.txt"], cwd: two)
            try box.sh("printf 'dev#2\\n' >> a.txt", cwd: two)
            try box.fprepOK(["sync"], cwd: one)
            try box.fprepOK(["sync"], cwd: two)
            try box.fprepOK(["sync"], cwd: one)
            let tree = try box.remoteTree(remote.path)
            #expect(tree["a.txt"]?.mode == "120000")
            let copies = conflictCopies(tree, of: "a.txt")
            #expect(copies.count == 1)
            if let copy = copies.first {
                #expect(String(decoding: try box.remoteBlob(remote.path, copy), as: UTF8.self) == "hello\ndev#2\n")
            }
            for replica in [one, two] {
                #expect(readLink(replica + "/a.txt") == "run.sh")
                #expect(try box.fprepJSON(["status"], cwd: replica).objects("changes").isEmpty)
            }
        }
    }
}

@Suite("an empty remote")
struct EmptyRemoteTests {
    @Test("files made in a replica of an empty remote are its first commit, and reach the other device")
    func firstCommitStartsTheBranch() throws {
        try withSandbox { box in
            let remote = box.at("remote.git")
            try box.fprepOK(["init-remote", remote])
            let one = box.at("one"), two = box.at("two")
            _ = try box.clone(remote, one)
            _ = try box.clone(remote, two)
            #expect(try box.fprepJSON(["sync"], cwd: two).string("pushed") == nil)
            try box.sh("printf 'dev#1\\n' > x.txt && mkdir d && printf 'dev#2\\n' > d/y.txt", cwd: one)
            let report = try box.fprepJSON(["sync"], cwd: one)
            #expect(report.string("pushed") != nil, "\(report)")
            #expect(try box.remoteBlob(remote, "x.txt") == Data("dev#1\n".utf8))
            try box.fprepOK(["sync"], cwd: two)
            try box.fprepOK(["materialize", "x.txt", "d"], cwd: two)
            #expect(contents(two + "/d/y.txt") == Data("dev#2\n".utf8))
            #expect(try box.fprepJSON(["status"], cwd: one).objects("changes").isEmpty)
        }
    }
}
