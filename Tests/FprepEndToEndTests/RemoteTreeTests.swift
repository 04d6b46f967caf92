import Foundation
import Glibc
import Testing

// Remote trees a replica must take or refuse the same way in clone and sync,
// remotes whose history is rewritten under a replica, and names that are not
// UTF-8, hold control characters or look like fprep's temporary files. The
// remotes are changed with git's plumbing (no hook runs), as a hostile or
// careless remote owner would.

typealias RawEntry = (mode: String, name: [UInt8], id: String)

extension Sandbox {
    /// The entries of the root tree of `rev` in `repo`.
    func rootEntries(_ repo: String, _ rev: String = "main") throws -> [RawEntry] {
        let listing = try git(["ls-tree", "-z", rev], cwd: repo)
        guard listing.status == 0 else { throw HarnessError("ls-tree failed: \(listing)") }
        return listing.stdoutData.split(separator: 0).map { record in
            let bytes = Array(record)
            let tab = bytes.firstIndex(of: 0x09)!
            let meta = String(decoding: bytes[..<tab], as: UTF8.self).split(separator: " ")
            return (String(meta[0]), Array(bytes[(tab + 1)...]), String(meta[2]))
        }
    }

    /// A tree of `entries` in git's order (a folder sorts as its name and '/').
    func writeSortedTree(_ entries: [RawEntry], in repo: String) throws -> String {
        func key(_ entry: RawEntry) -> [UInt8] { entry.name + (entry.mode == "40000" ? [0x2F] : []) }
        return try writeRawTree(entries.sorted { key($0).lexicographicallyPrecedes(key($1)) }, in: repo)
    }

    /// Commits `tree` on `main` of the bare `repo` (no hook runs); returns the commit.
    @discardableResult
    func commitOnMain(_ repo: String, tree: String, message: String, parent: String? = "main") throws -> String {
        var args = ["commit-tree", "-m", message, tree]
        if let parent { args += ["-p", try gitOK(["rev-parse", parent], cwd: repo)] }
        let commit = try gitOK(args, cwd: repo)
        try gitOK(["update-ref", "refs/heads/main", commit], cwd: repo)
        return commit
    }

    /// The replica's anchor.
    func anchor(_ replica: String) throws -> String {
        try fprepOK(["anchor"], cwd: replica).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// The path of `name` (bytes) below `folder`, for the C calls.
func bytePath(_ folder: String, _ name: [UInt8]) -> [CChar] {
    (Array(folder.utf8) + [0x2F] + name).map { CChar(bitPattern: $0) } + [0]
}

/// lstat of a path given as bytes (a name that is not UTF-8).
func lstatBytes(_ folder: String, _ name: [UInt8]) -> stat? {
    var st = stat()
    return lstat(bytePath(folder, name), &st) == 0 ? st : nil
}

/// The content of a file whose name is bytes.
func contentsBytes(_ folder: String, _ name: [UInt8]) -> [UInt8]? {
    let fd = open(bytePath(folder, name), O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var result: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count <= 0 { return result }
        result += buffer[0..<count]
    }
}

/// One remote change a sync must refuse, made on top of `main`.
struct HostilePush: CustomTestStringConvertible, Sendable {
    let name: String
    /// Text the one-line error must contain (the entry).
    let shown: String
    /// Moves `main` of the bare repository to a commit with the hostile entry.
    let push: @Sendable (Sandbox, String) throws -> Void

    var testDescription: String { name }

    /// The root tree of `main` plus `entry`.
    static func adding(_ label: String, shown: String, entry: @escaping @Sendable (Sandbox, String) throws -> RawEntry) -> HostilePush {
        HostilePush(name: label, shown: shown) { box, repo in
            let tree = try box.writeSortedTree(try box.rootEntries(repo) + [try entry(box, repo)], in: repo)
            try box.commitOnMain(repo, tree: tree, message: "hostile \(label)")
        }
    }

    static let all: [HostilePush] = [
        adding("a file '.git'", shown: ".git") { box, repo in
            ("100644", Array(".git".utf8), try box.writeObject(Data("[core]\n\tfsmonitor = touch /tmp/pwned-by-fprep-e2e\n".utf8), in: repo))
        },
        adding("a folder '..'", shown: "..") { box, repo in
            let blob = try box.writeObject(Data("escaped\n".utf8), in: repo)
            return ("40000", Array("..".utf8), try box.writeRawTree([("100644", Array("escaped-by-fprep-e2e".utf8), blob)], in: repo))
        },
        adding("an unknown mode", shown: "mode.txt") { box, repo in
            ("100600", Array("mode.txt".utf8), try box.writeObject(Data("odd mode\n".utf8), in: repo))
        },
        adding("a second 'a.txt'", shown: "a.txt") { box, repo in
            ("100644", Array("a.txt".utf8), try box.writeObject(Data("the other a\n".utf8), in: repo))
        },
        adding("a 256-byte name", shown: String(repeating: "L", count: 60)) { box, repo in
            ("100644", Array(String(repeating: "L", count: 256).utf8), try box.writeObject(Data("long\n".utf8), in: repo))
        },
        HostilePush(name: "a tree 10,000 folders deep", shown: "d/d/d/d") { box, repo in
            let parent = try box.gitOK(["rev-parse", "main"], cwd: repo)
            let path = Array(repeating: "d", count: 10_000).joined(separator: "/") + "/f"
            let stream = "commit refs/heads/main\ncommitter T <t@example.com> 1700000000 +0000\ndata 4\ndeep\nfrom \(parent)\nM 100644 inline \(path)\ndata 2\nx\n\n"
            try box.gitOK(["fast-import", "--quiet"], cwd: repo, stdin: Data(stream.utf8))
        },
    ]
}

@Suite("remote trees, rewritten remotes and names end to end")
struct RemoteTreeTests {
    static let small: [String: Node] = ["a.txt": .text("hello\n"), "docs/readme.md": .text("# readme\n")]

    @Test("sync refuses a hostile remote tree in one line, stays at its anchor, and takes a later good push",
          arguments: HostilePush.all)
    func syncRefusesHostileTree(push: HostilePush) throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.small)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "a.txt"], cwd: replica)
            let anchor = try box.anchor(replica)
            try push.push(box, remote.path)
            let hostile = try box.gitOK(["rev-parse", "main"], cwd: remote.path)

            for args in [["sync"], ["sync", "--incoming"], ["sync"]] {
                let result = try box.fprep(args, cwd: replica, timeout: patienceSeconds)
                #expect(!result.timedOut, "refused in bounded time: \(result)")
                expectOneLineError(result, mentioning: [push.shown, "stays at \(anchor.prefix(12))"])
                #expect(try box.anchor(replica) == anchor)
            }
            #expect(!exists("/tmp/pwned-by-fprep-e2e") && !exists(box.at("escaped-by-fprep-e2e")))
            #expect(!exists(replica + "/mode.txt") && !exists(replica + "/d"))
            // Every other command still works.
            try box.fprepOK(["status"], cwd: replica)
            try box.fprepOK(["ls"], cwd: replica)
            try box.fprepOK(["materialize", "docs/readme.md"], cwd: replica)
            #expect(contents(replica + "/docs/readme.md") == Data("# readme\n".utf8))
            try box.fprepOK(["evict", "a.txt"], cwd: replica)

            // The remote's owner fixes the tree: the next sync takes it.
            let good = try box.writeObject(Data("good\n".utf8), in: remote.path)
            let fixed = try box.writeSortedTree(try box.rootEntries(remote.path, anchor) + [("100644", Array("good.txt".utf8), good)],
                                                in: remote.path)
            let fix = try box.commitOnMain(remote.path, tree: fixed, message: "fixed", parent: hostile)
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.anchor(replica) == fix)
            try box.fprepOK(["materialize", "good.txt"], cwd: replica)
            #expect(contents(replica + "/good.txt") == Data("good\n".utf8))
        }
    }

    @Test("a hostile tree met while local work waits is refused by the merge; the work is pushed once the remote is fixed")
    func hostileTreeUnderLocalWork() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.small)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try Data("mine\n".utf8).write(to: URL(fileURLWithPath: replica + "/local.txt"))
            let dup = HostilePush.all[3]  // a second 'a.txt': refused while the trees are read
            try dup.push(box, remote.path)
            let hostile = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            let refused = try box.fprep(["sync"], cwd: replica)
            expectOneLineError(refused, mentioning: ["a.txt", "stays at"])
            let waiting = try box.anchor(replica)
            #expect(waiting != remote.commit, "the local work is committed")
            #expect(try box.fprepJSON(["status"], cwd: replica).string("waitingToPush") == waiting)
            expectOneLineError(try box.fprep(["sync"], cwd: replica), mentioning: ["a.txt", "stays at \(waiting.prefix(12))"])

            let good = try box.writeObject(Data("good\n".utf8), in: remote.path)
            let fixed = try box.writeSortedTree(try box.rootEntries(remote.path, remote.commit) + [("100644", Array("good.txt".utf8), good)],
                                                in: remote.path)
            try box.commitOnMain(remote.path, tree: fixed, message: "fixed", parent: hostile)
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.gitOK(["show", "main:local.txt"], cwd: remote.path) == "mine")
            #expect(try box.gitOK(["show", "main:good.txt"], cwd: remote.path) == "good")
            #expect(exists(replica + "/good.txt"))
        }
    }

    @Test("clone of a tree 10,000 folders deep is refused in one line, quickly, and creates nothing")
    func cloneRefusesDeepTree() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.small)
            try HostilePush.all.last!.push(box, remote.path)
            let result = try box.fprep(["clone", remote.path, box.at("replica")], timeout: patienceSeconds)
            #expect(!result.timedOut, "\(result)")
            expectOneLineError(result, mentioning: ["d/d/d/d", "4095"])
            #expect(!exists(box.at("replica")))
        }
    }

    @Test("a 250-byte name: a remote change and a conflict copy both fit in 255 bytes")
    func longNameTemporaryAndConflict() throws {
        try withSandbox { box in
            let long = String(repeating: "n", count: 246) + ".txt"
            let other = String(repeating: "m", count: 250)
            let remote = try box.makeRemote(nodes: [long: .text("base\n"), other: .text("other\n")])
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", long], cwd: replica)
            try Data("mine\n".utf8).write(to: URL(fileURLWithPath: replica + "/" + long))

            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            try Data("theirs\n".utf8).write(to: URL(fileURLWithPath: work + "/" + long))
            try Data("other changed\n".utf8).write(to: URL(fileURLWithPath: work + "/" + other))
            try box.gitOK(["commit", "-qam", "change both"], cwd: work)
            try box.gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)

            let result = try box.fprepOK(["sync"], cwd: replica)
            let names = try FileManager.default.contentsOfDirectory(atPath: replica).filter { !$0.hasPrefix(".") }
            let copies = names.filter { $0.contains("(conflict ") }
            #expect(copies.count == 1, "\(names) \(result)")
            if let copy = copies.first {
                #expect(copy.utf8.count <= 255 && copy.hasSuffix(".txt"), "\(copy)")
                #expect(contents(replica + "/" + copy) == Data("mine\n".utf8))
            }
            #expect(lstatInfo(replica + "/" + other)?.size == Int64("other changed\n".utf8.count))
            try box.fprepOK(["materialize", long, other], cwd: replica)
            #expect(contents(replica + "/" + long) == Data("theirs\n".utf8))
            #expect(contents(replica + "/" + other) == Data("other changed\n".utf8))
            #expect(!names.contains { $0.contains(".fprep-") })
        }
    }

    @Test("a remote move onto the name of a new local item: the move lands, the local item becomes a conflict copy, nothing moves back",
          arguments: [true, false])
    func remoteMoveOntoNewLocalName(folder: Bool) throws {
        try withSandbox { box in
            // The remote moves a folder (`é` → `dir`) or a file (`sub/f` →
            // `dir`) while this device makes a file `dir`: the merge moves
            // the remote's item to `dir` and this device's file aside, two
            // moves in one sync whose order matters.
            let remote = try box.makeRemote(nodes: ["é/dir": .text("remote file\n"), "sub/f": .text("remote f\n"), "a": .text("a\n")])
            let replica = box.at("replica"), work = box.at("work")
            _ = try box.clone(remote.path, replica)
            try box.gitOK(["clone", "-q", remote.path, work])
            try box.sh(folder ? "mkdir dir && git mv é/dir dir/dir" : "git mv sub/f dir", cwd: work)
            try box.gitOK(["commit", "-qm", "move"], cwd: work)
            try box.gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)
            try Data("mine\n".utf8).write(to: URL(fileURLWithPath: replica + "/dir"))

            let report = try box.fprepJSON(["sync"], cwd: replica)
            #expect(report.objects("conflicts").map { $0.string("path") } == ["dir"], "\(report)")
            let tip = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            let again = try box.fprepJSON(["sync"], cwd: replica)
            #expect(again.objects("localChanges").isEmpty, "the next sync found changes nobody made: \(again)")
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == tip)
            let tree = try box.remoteTree(remote.path)
            let moved = folder ? "dir/dir" : "dir"
            #expect(tree[moved] != nil && tree[folder ? "é/dir" : "sub/f"] == nil, "\(tree.keys.sorted())")
            try box.fprepOK(["materialize", "."], cwd: replica)
            #expect(contents(replica + "/" + moved) == Data((folder ? "remote file\n" : "remote f\n").utf8))
            let copies = try FileManager.default.contentsOfDirectory(atPath: replica).filter { $0.hasPrefix("dir (conflict ") }
            #expect(copies.count == 1 && copies.first.map { contents(replica + "/" + $0) } == Data("mine\n".utf8), "\(copies)")
            #expect(lstatInfo(replica + "/é") == nil || !folder, "the folder stayed where it was")
        }
    }

    @Test("a remote rename onto a name where this device replaced a folder by a file: both files survive")
    func remoteRenameOntoLocalReplacement() throws {
        try withSandbox { box in
            // The remote deletes folder `a` and renames `notes.txt` to `a`;
            // this device replaces the folder `a` by a file of its own. The
            // local file was placed over the renamed one, and the content
            // of `notes.txt` vanished from every tree (model seed 5043).
            let remote = try box.makeRemote(nodes: ["a/A": .text("in the folder\n"), "notes.txt": .text("notes\n")])
            let replica = box.at("replica"), work = box.at("work")
            _ = try box.clone(remote.path, replica)
            try box.gitOK(["clone", "-q", remote.path, work])
            try box.sh("git rm -q a/A && git mv notes.txt a && git commit -qm 'notes become a'", cwd: work)
            try box.gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)
            try box.sh("rm -r a && echo mine > a", cwd: replica)

            let report = try box.fprepJSON(["sync"], cwd: replica)
            #expect(report.objects("conflicts").map { $0.string("path") } == ["a"], "\(report)")
            try box.fprepOK(["materialize", "."], cwd: replica)
            let tree = try box.remoteTree(remote.path)
            let copies = conflictCopies(tree, of: "a")
            #expect(copies.count == 1, "\(tree.keys.sorted())")
            let values = Set(([ "a" ] + copies).compactMap { try? box.gitOK(["show", "main:\($0)"], cwd: remote.path) })
            #expect(values == ["notes", "mine"], "\(values)")
            #expect(try box.fprepJSON(["sync"], cwd: replica).objects("localChanges").isEmpty)
        }
    }

    @Test("a remote move of an item onto the folder it was in (A/x → A): the item takes the name, no copy nobody wrote", arguments: [false, true])
    func remoteMoveOntoOwnFolder(symlink: Bool) throws {
        try withSandbox { box in
            let nodes: [String: Node] = symlink ? ["A/x": .symlink("target"), "b.txt": .text("b\n")] : ["A/x": .text("x\n"), "b.txt": .text("b\n")]
            let remote = try box.makeRemote(nodes: nodes)
            let replica = box.at("replica"), work = box.at("work")
            _ = try box.clone(remote.path, replica)
            if !symlink { try box.fprepOK(["materialize", "A/x"], cwd: replica) }
            try box.gitOK(["clone", "-q", remote.path, work])
            try box.sh("git mv A/x A-tmp && rmdir A && git mv A-tmp A && git commit -qm 'A/x becomes A'", cwd: work)
            try box.gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)
            let tip = try box.gitOK(["rev-parse", "main"], cwd: remote.path)

            let report = try box.fprepJSON(["sync"], cwd: replica)
            #expect(report.objects("keptLocal").isEmpty && report.objects("localChanges").isEmpty, "\(report)")
            let names = try FileManager.default.contentsOfDirectory(atPath: replica).filter { !$0.hasPrefix(".") }.sorted()
            #expect(names == ["A", "b.txt"], "\(names)")
            #expect(try box.fprepJSON(["sync"], cwd: replica).objects("localChanges").isEmpty)
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == tip, "a sync pushed a change nobody made")
            if symlink {
                #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: replica + "/A")) == "target")
            } else {
                #expect(contents(replica + "/A") == Data("x\n".utf8))
            }
        }
    }

    /// What the user did before an incoming sync (the agent's kind: no scan)
    /// around an item the remote moves: each once made the sync take the
    /// user's item for the moved one, or the other way round, and the next
    /// sync pushed a change nobody made. Found by a hostile test.
    enum HandMade: String, CaseIterable, CustomTestStringConvertible {
        /// The remote moves file `a` to `b`; the user deleted `a` and made
        /// another file `b` (ext4 may give it `a`'s freed inode).
        case otherFileAtTheNewName
        /// The remote moves folder `d` to `e`; the user moved its files to
        /// `e` by hand and added one of their own in `d`.
        case folderMovedByHandAndAFileAdded
        /// The remote moves file `a` to `b`; the user made `a` a folder.
        case folderWhereTheFileWas
        /// The remote moves file `a` to `b`; the user copied `a` to `b`.
        case copiedByHand
        var testDescription: String { rawValue }
    }

    @Test("what the user did by hand before an incoming sync is kept as the user's, and the next sync pushes only that",
          arguments: HandMade.allCases)
    func handMadeBeforeIncomingSync(_ kind: HandMade) throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: ["a": .text("a\n"), "d/f.txt": .text("f\n"), "d/sub/g.txt": .text("g\n"), "other": .text("o\n")])
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "a", "d"], cwd: replica)
            let moves = kind == .folderMovedByHandAndAFileAdded ? [("d", "e")] : [("a", "b")]
            try box.pushToRemote(remote, [:], moves: moves, message: "move")
            var expected: [String: String]   // the remote's files after the user's change is pushed
            switch kind {
            case .otherFileAtTheNewName:
                // The new file takes `a`'s freed inode when the filesystem gives
                // it (files made and put outside until one does).
                try box.sh("""
                    i=$(stat -c %i a); rm a; mkdir -p ../junk
                    for n in $(seq 1 400); do echo "the user's own b" > .t$n
                      if [ "$(stat -c %i .t$n)" = "$i" ]; then mv .t$n b; break; else mv .t$n ../junk/$n; fi; done
                    [ -f b ] || echo "the user's own b" > b
                    """, cwd: replica)
                expected = ["b": "a\n", "d/f.txt": "f\n", "d/sub/g.txt": "g\n", "other": "o\n"]
            case .folderMovedByHandAndAFileAdded:
                try box.sh("mkdir -p e/sub && mv d/f.txt e/ && mv d/sub/g.txt e/sub/ && echo new > d/new.txt", cwd: replica)
                expected = ["a": "a\n", "e/f.txt": "f\n", "e/sub/g.txt": "g\n", "d/new.txt": "new\n", "other": "o\n"]
            case .folderWhereTheFileWas:
                try box.sh("rm a && mkdir a && echo mine > a/mine.txt", cwd: replica)
                expected = ["b": "a\n", "a/mine.txt": "mine\n", "d/f.txt": "f\n", "d/sub/g.txt": "g\n", "other": "o\n"]
            case .copiedByHand:
                try box.sh("cp a b", cwd: replica)
                expected = ["b": "a\n", "d/f.txt": "f\n", "d/sub/g.txt": "g\n", "other": "o\n"]
            }
            try box.fprepOK(["sync", "--incoming"], cwd: replica)
            try box.fprepOK(["sync"], cwd: replica)
            let listing = try box.gitOK(["ls-tree", "-r", "--name-only", "main"], cwd: remote.path).split(separator: "\n").map(String.init)
            var onRemote: [String: String] = [:]
            for path in listing { onRemote[path] = try box.gitOK(["show", "main:" + path], cwd: remote.path) + "\n" }
            if kind == .otherFileAtTheNewName {
                // Both the remote's `b` and the user's survive; which keeps the name is the merge's call.
                let copies = onRemote.filter { $0.key.hasPrefix("b (conflict") }
                #expect(copies.count == 1 && Set([onRemote["b"], copies.first?.value]) == Set(["a\n", "the user's own b\n"]), "\(onRemote)")
                onRemote = onRemote.filter { !$0.key.hasPrefix("b") }
                expected["b"] = nil
            }
            #expect(onRemote == expected, "\(kind): the remote holds \(onRemote)")
            #expect(try box.fprepJSON(["status"], cwd: replica).objects("changes").isEmpty)
        }
    }

    /// The folder fprep lays out for a submodule (its content is not
    /// supported) goes when the remote deletes the submodule, and a file can
    /// take its name. Its removal once used a folder handle freed before
    /// the call that needed its descriptor (EBADF), so the folder stayed.
    @Test("a submodule the remote deletes leaves no folder behind, and a file the remote puts at its name arrives")
    func remoteDeletesSubmodule() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.small)
            _ = try box.addGitlink(to: remote)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            #expect(lstatInfo(replica + "/sub")?.isDirectory == true, "the submodule's folder is laid out")
            let listing = try box.gitOK(["ls-tree", "main"], cwd: remote.path)
                .split(separator: "\n").filter { !$0.hasSuffix("\tsub") }.joined(separator: "\n")
            let tree = try box.gitOK(["mktree"], cwd: remote.path, stdin: Data((listing + "\n").utf8))
            let commit = try box.gitOK(["commit-tree", "-p", "main", "-m", "drop the submodule", tree], cwd: remote.path)
            try box.gitOK(["update-ref", "refs/heads/main", commit], cwd: remote.path)

            try box.fprepOK(["sync"], cwd: replica)
            #expect(lstatInfo(replica + "/sub") == nil, "the submodule's folder stayed")
            try box.pushToRemote(remote, ["sub": Data("now a file\n".utf8)], message: "a file named sub")
            let report = try box.fprepJSON(["sync"], cwd: replica)
            #expect(report.objects("keptLocal").isEmpty, "\(report)")
            #expect(lstatInfo(replica + "/sub")?.isRegular == true && lstatInfo(replica + "/sub")?.size == 11)
        }
    }

    @Test("a force-push with no local work is followed: the dropped commits are not pushed back, a backup ref keeps them")
    func forcePushFollowed() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.small)
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            let dropped = try box.commitAndPush(work, file: "dropped.txt", content: "dropped\n").commit
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            #expect(try box.anchor(replica) == dropped)

            try box.gitOK(["update-ref", "refs/heads/main", remote.commit], cwd: remote.path)  // the owner's rewind
            let result = try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == remote.commit, "pushed back: \(result)")
            #expect(try box.anchor(replica) == remote.commit)
            #expect(!exists(replica + "/dropped.txt"))
            let backup = try box.gitOK(["for-each-ref", "--format=%(refname) %(objectname)", "refs/fprep/backup"], cwd: replica)
            #expect(backup.hasSuffix(" " + dropped), "\(backup)")
            #expect(result.stdout.contains("refs/fprep/backup/"), "\(result)")
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == remote.commit)
        }
    }

    @Test("a remote history rewound or replaced under local work: the work is replayed onto the new tip, kept in a backup ref, and said where",
          arguments: [false, true])
    func rewrittenHistoryKeepsWork(replace: Bool) throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.small)
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            _ = try box.commitAndPush(work, file: "dropped.txt", content: "dropped\n")
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "a.txt"], cwd: replica)
            try Data("mine\n".utf8).write(to: URL(fileURLWithPath: replica + "/a.txt"))
            try Data("new here\n".utf8).write(to: URL(fileURLWithPath: replica + "/local.txt"))

            // The owner rewinds the branch, or replaces the whole history
            // with one unrelated commit.
            let newTip: String
            if replace {
                let fresh = try box.writeObject(Data("fresh\n".utf8), in: remote.path)
                let tree = try box.writeSortedTree([("100644", Array("fresh.txt".utf8), fresh)], in: remote.path)
                newTip = try box.commitOnMain(remote.path, tree: tree, message: "new history", parent: nil)
            } else {
                newTip = remote.commit
                try box.gitOK(["update-ref", "refs/heads/main", newTip], cwd: remote.path)
            }

            let result = try box.fprepOK(["sync"], cwd: replica)
            #expect(!result.stdout.contains("clone it anew"))
            #expect(result.stdout.contains("refs/fprep/backup/"), "\(result)")
            #expect(try box.gitOK(["rev-parse", "main^"], cwd: remote.path) == newTip, "the work goes on top of the new tip")
            #expect(try box.git(["rev-parse", "main^2"], cwd: remote.path).status != 0, "no merge with the dropped history")
            #expect(try box.gitOK(["show", "main:local.txt"], cwd: remote.path) == "new here")
            #expect(try box.gitOK(["show", "main:a.txt"], cwd: remote.path) == "mine")
            if replace { #expect(try box.gitOK(["show", "main:fresh.txt"], cwd: remote.path) == "fresh") }
            #expect(try box.git(["cat-file", "-e", "main:dropped.txt"], cwd: remote.path).status != 0, "the dropped history stays dropped")
            let backup = try box.gitOK(["for-each-ref", "--format=%(refname)", "refs/fprep/backup"], cwd: replica)
            #expect(try box.gitOK(["show", backup + ":local.txt"], cwd: replica) == "new here")
            #expect(contents(replica + "/a.txt") == Data("mine\n".utf8))
            #expect(contents(replica + "/local.txt") == Data("new here\n".utf8))
        }
    }

    @Test("a rewrite first met by a sync that fails is still a rewrite to the next sync: the dropped commits stay dropped")
    func rewriteRememberedAcrossAFailedSync() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.small)
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            let dropped = try box.commitAndPush(work, file: "dropped.txt", content: "dropped\n").commit
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try Data("mine\n".utf8).write(to: URL(fileURLWithPath: replica + "/local.txt"))

            // The owner rewinds to the first commit and pushes a broken tree on it...
            try box.gitOK(["update-ref", "refs/heads/main", remote.commit], cwd: remote.path)
            try HostilePush.all[3].push(box, remote.path)
            let hostile = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            expectOneLineError(try box.fprep(["sync"], cwd: replica), mentioning: ["a.txt"])
            // ...then fixes it on top.
            let good = try box.writeObject(Data("good\n".utf8), in: remote.path)
            let fixed = try box.writeSortedTree(try box.rootEntries(remote.path, remote.commit) + [("100644", Array("good.txt".utf8), good)],
                                                in: remote.path)
            let fix = try box.commitOnMain(remote.path, tree: fixed, message: "fixed", parent: hostile)

            let result = try box.fprepOK(["sync"], cwd: replica)
            #expect(result.stdout.contains("refs/fprep/backup/"), "\(result)")
            #expect(try box.gitOK(["rev-parse", "main^"], cwd: remote.path) == fix)
            #expect(try box.git(["merge-base", "--is-ancestor", dropped, "main"], cwd: remote.path).status != 0,
                    "the dropped commit came back")
            #expect(try box.gitOK(["show", "main:local.txt"], cwd: remote.path) == "mine")
            #expect(!exists(replica + "/dropped.txt"))
        }
    }

    @Test("a broken branch the replica does not follow breaks neither its clone nor its sync")
    func brokenOtherBranch() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.small)
            let broken = "tree 1111111111111111111111111111111111111111\nauthor a <a@example.com> 1 +0000\ncommitter a <a@example.com> 1 +0000\n\nbroken\n"
            let commit = try box.writeObject(Data(broken.utf8), type: "commit", in: remote.path)
            try box.gitOK(["update-ref", "refs/heads/broken", commit], cwd: remote.path)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let good = try box.writeObject(Data("good\n".utf8), in: remote.path)
            let tree = try box.writeSortedTree(try box.rootEntries(remote.path) + [("100644", Array("good.txt".utf8), good)], in: remote.path)
            let next = try box.commitOnMain(remote.path, tree: tree, message: "good")
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.anchor(replica) == next)
            #expect(exists(replica + "/good.txt"))
        }
    }

    @Test("names that are not UTF-8, and a UTF-8 name that starts with %b64:, keep distinct identifiers; materialize fills only the one named")
    func binaryNameIdentifiers() throws {
        try withSandbox { box in
            let first: [UInt8] = [0xFF, 0x61], second: [UInt8] = [0xFE, 0x61]
            let lookalike = Array("%b64:_2E".utf8)  // the encoding of `first`, as a plain name
            let repo = try box.makeBareRemote("names.git") { repo in
                try box.writeSortedTree([
                    ("100644", first, try box.writeObject(Data("first\n".utf8), in: repo)),
                    ("100644", second, try box.writeObject(Data("second\n".utf8), in: repo)),
                    ("100644", lookalike, try box.writeObject(Data("lookalike\n".utf8), in: repo)),
                ], in: repo)
            }
            let replica = box.at("replica")
            _ = try box.clone(repo, replica)
            let ids = try box.fprepJSON(["ls"], cwd: replica).objects("items").compactMap { $0.string("identifier") }
            #expect(ids.count == 3 && Set(ids).count == 3, "\(ids)")

            try box.fprepOK(["materialize", "%b64:_2E"], cwd: replica)
            #expect(contentsBytes(replica, first) == Array("first\n".utf8))
            #expect(lstatBytes(replica, lookalike)?.st_blocks == 0, "the look-alike must stay dataless")
            #expect(lstatBytes(replica, second)?.st_blocks == 0)
            for id in ids where id != "%b64:_2E" {
                try box.fprepOK(["materialize", id], cwd: replica)
            }
            #expect(contentsBytes(replica, second) == Array("second\n".utf8))
            #expect(contentsBytes(replica, lookalike) == Array("lookalike\n".utf8))
            #expect(contentsBytes(replica, first) == Array("first\n".utf8))
            try box.fprepOK(["evict"] + ids, cwd: replica)
        }
    }

    @Test("names with an escape sequence or a newline print escaped: no terminal escape, no fake line")
    func controlCharactersEscaped() throws {
        try withSandbox { box in
            let repo = try box.makeBareRemote("control.git") { repo in
                try box.writeSortedTree([
                    ("100644", Array("red\u{1B}[31mX".utf8), try box.writeObject(Data("r\n".utf8), in: repo)),
                    ("100644", Array("two\nlines".utf8), try box.writeObject(Data("t\n".utf8), in: repo)),
                    ("100644", Array("ok.txt".utf8), try box.writeObject(Data("o\n".utf8), in: repo)),
                ], in: repo)
            }
            let replica = box.at("replica")
            _ = try box.clone(repo, replica)
            try Data("changed\n".utf8).write(to: URL(fileURLWithPath: replica + "/two\nlines"))
            for args in [["ls"], ["status"]] {
                let result = try box.fprepOK(args, cwd: replica)
                #expect(!result.stdoutData.contains(0x1B), "\(args): \(result)")
                #expect(args == ["status"] || result.stdout.contains("red\\x1b[31mX"), "\(args): \(result)")
                #expect(result.stdout.contains("two\\nlines"), "\(args): \(result)")
                #expect(!result.stdout.split(separator: "\n").contains { $0.hasPrefix("lines") }, "\(args): \(result)")
            }
            let missing = try box.fprep(["materialize", "no\u{1B}]0;title\u{07}such"], cwd: replica)
            expectOneLineError(missing, mentioning: ["\\x1b]0;title\\x07"])
            #expect(!missing.stderrData.contains(0x1B))
        }
    }

    @Test("a user's file named like fprep's temporary files is synced like any other")
    func temporaryLookalikeSynced() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.small)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try Data("my notes\n".utf8).write(to: URL(fileURLWithPath: replica + "/.a.txt.fprep-notes"))
            try Data("kept\n".utf8).write(to: URL(fileURLWithPath: replica + "/docs/.x.fprep-abc123"))
            let status = try box.fprepJSON(["status"], cwd: replica)
            #expect(status.objects("changes").count == 2, "\(status)")
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.gitOK(["show", "main:.a.txt.fprep-notes"], cwd: remote.path) == "my notes")
            #expect(try box.gitOK(["show", "main:docs/.x.fprep-abc123"], cwd: remote.path) == "kept")
        }
    }
}
