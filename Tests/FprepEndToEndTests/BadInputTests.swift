import Foundation
import Glibc
import Testing

/// A remote tree no replica may lay out, built with git's plumbing in a bare
/// repository (as git's t1014-read-tree-confusing.sh does).
struct HostileTree: CustomTestStringConvertible, Sendable {
    let name: String
    /// Text the one-line error must contain (the entry's path).
    let shown: String
    /// Builds the root tree in `repo`, returns its id.
    let build: @Sendable (Sandbox, String) throws -> String

    var testDescription: String { name }

    /// A root tree holding one harmless file and `entry` (mode, raw name, object).
    static func withEntry(_ label: String, mode: String, name: [UInt8], shown: String,
                          object: @escaping @Sendable (Sandbox, String) throws -> String) -> HostileTree {
        HostileTree(name: label, shown: shown) { box, repo in
            let ok = try box.writeObject(Data("fine\n".utf8), in: repo)
            let id = try object(box, repo)
            var entries: [(mode: String, name: [UInt8], id: String)] = [("100644", Array("ok.txt".utf8), ok), (mode, name, id)]
            entries.sort { $0.name.lexicographicallyPrecedes($1.name) }
            return try box.writeRawTree(entries, in: repo)
        }
    }

    static func file(_ name: String) -> HostileTree {
        withEntry("file '\(name)'", mode: "100644", name: Array(name.utf8), shown: name) { box, repo in
            try box.writeObject(Data("[core]\n\tfsmonitor = touch /tmp/pwned-by-fprep-e2e\n".utf8), in: repo)
        }
    }

    /// A folder named `name` holding a file (`..` / `.git` as a tree).
    static func folder(_ name: String) -> HostileTree {
        withEntry("folder '\(name)'", mode: "40000", name: Array(name.utf8), shown: name) { box, repo in
            let blob = try box.writeObject(Data("#!/bin/sh\necho pwned\n".utf8), in: repo)
            return try box.writeRawTree([("100755", Array("escaped-by-fprep-e2e".utf8), blob)], in: repo)
        }
    }

    static let all: [HostileTree] = [
        .file(".."), .file("."), .file(".git"), .file(".GIT"), .file(".Git"), .file(".fprep"), .file(".Fprep"),
        .file(".FPREP"), .file("git~1"), .file("GIT~1"), .file(".git."), .file(".git "),
        .file(".g\u{200C}it"),  // HFS+ ignores zero-width characters
        .folder(".."), .folder(".git"), .folder(".fprep"),
        withEntry("name with '/'", mode: "100644", name: Array("a/b".utf8), shown: "a/b") { box, repo in
            try box.writeObject(Data("x".utf8), in: repo)
        },
        withEntry("absolute name '/etc'", mode: "100644", name: Array("/etc".utf8), shown: "/etc") { box, repo in
            try box.writeObject(Data("x".utf8), in: repo)
        },
        HostileTree(name: "symlink 'a' and folder 'a'", shown: "a") { box, repo in
            let link = try box.writeObject(Data("/tmp".utf8), in: repo)
            let blob = try box.writeObject(Data("through the link\n".utf8), in: repo)
            let sub = try box.writeRawTree([("100644", Array("escaped-by-fprep-e2e".utf8), blob)], in: repo)
            return try box.writeRawTree([("120000", Array("a".utf8), link), ("40000", Array("a".utf8), sub)], in: repo)
        },
        HostileTree(name: "two files 'a'", shown: "a") { box, repo in
            let one = try box.writeObject(Data("one\n".utf8), in: repo)
            let two = try box.writeObject(Data("two\n".utf8), in: repo)
            return try box.writeRawTree([("100644", Array("a".utf8), one), ("100644", Array("a".utf8), two)], in: repo)
        },
        // Out of git's order, an index written as the tree is walked would
        // be out of order too.
        HostileTree(name: "entries out of git's order", shown: "a") { box, repo in
            let one = try box.writeObject(Data("one\n".utf8), in: repo)
            let two = try box.writeObject(Data("two\n".utf8), in: repo)
            return try box.writeRawTree([("100644", Array("b".utf8), one), ("100644", Array("a".utf8), two)], in: repo)
        },
        HostileTree(name: "nested 'docs/.git/hooks'", shown: "docs/.git") { box, repo in
            let hook = try box.writeObject(Data("#!/bin/sh\necho pwned\n".utf8), in: repo)
            let hooks = try box.writeRawTree([("100755", Array("post-checkout".utf8), hook)], in: repo)
            let git = try box.writeRawTree([("40000", Array("hooks".utf8), hooks)], in: repo)
            let readme = try box.writeObject(Data("docs\n".utf8), in: repo)
            let docs = try box.writeRawTree([("40000", Array(".git".utf8), git), ("100644", Array("readme".utf8), readme)], in: repo)
            return try box.writeRawTree([("40000", Array("docs".utf8), docs)], in: repo)
        },
        HostileTree(name: "nested '.fprep' under a folder", shown: "x/.FPrep") { box, repo in
            let blob = try box.writeObject(Data("state\n".utf8), in: repo)
            let x = try box.writeRawTree([("100644", Array(".FPrep".utf8), blob)], in: repo)
            return try box.writeRawTree([("40000", Array("x".utf8), x)], in: repo)
        },
    ]
}

/// Top-level names of the sandbox (what a hostile clone might have escaped into).
func sandboxTop(_ box: Sandbox) -> Set<String> {
    Set(((try? FileManager.default.contentsOfDirectory(atPath: box.path)) ?? []).filter { $0 != ".io" })
}

@Suite("bad input")
struct BadInputTests {
    @Test("a hostile remote tree is refused and the destination stays as it was",
          arguments: HostileTree.all, [false, true])
    func hostileTreeRefused(tree: HostileTree, destinationExists: Bool) throws {
        try withSandbox { box in
            let repo = try box.makeBareRemote("hostile.git") { repo in try tree.build(box, repo) }
            let repoBefore = snapshot(repo)
            let destination = box.at("replica")
            if destinationExists { mkdir(destination, 0o755) }
            let topBefore = sandboxTop(box)

            let result = try box.fprep(["clone", repo, destination])
            expectOneLineError(result, mentioning: [tree.shown])
            if destinationExists {
                #expect((try? FileManager.default.contentsOfDirectory(atPath: destination)) == [],
                        "the existing folder must be left empty: \(walk(destination))")
            } else {
                #expect(!exists(destination), "the destination must not be created: \(walk(destination))")
            }
            #expect(sandboxTop(box) == topBefore, "nothing may appear beside the destination")
            #expect(!exists("/tmp/escaped-by-fprep-e2e") && !exists("/tmp/pwned-by-fprep-e2e"))
            #expect(snapshot(repo) == repoBefore, "the remote must not change")
        }
    }

    @Test("clone of an unreachable git:// URL fails in one line and creates nothing")
    func unreachableURL() throws {
        try withSandbox { box in
            let port = try GitDaemon.freePort()  // nothing listens there
            let result = try box.fprep(["clone", "git://127.0.0.1:\(port)/remote.git", box.at("replica")], timeout: 30)
            expectOneLineError(result, mentioning: ["127.0.0.1"])
            #expect(!exists(box.at("replica")))
        }
    }

    @Test("a push the remote refuses (a lock a killed git left there) says the remote's reason, and status says it while the commit waits; it goes once the lock is gone")
    func pushRefusedByRemoteSaysWhy() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let lock = remote.path + "/refs/heads/main.lock"
            #expect(FileManager.default.createFile(atPath: lock, contents: Data()))
            try Data("new\n".utf8).write(to: URL(fileURLWithPath: replica + "/new.txt"))
            let refused = try box.fprep(["sync"], cwd: replica)
            expectOneLineError(refused, mentioning: ["the remote says", "main.lock", "File exists"])
            let waiting = try box.fprepJSON(["status"], cwd: replica)
            #expect(waiting.string("waitingToPush") != nil && waiting.string("waitingBecause")?.contains("main.lock") == true, "\(waiting)")
            let shown = try box.fprepOK(["status"], cwd: replica).stdout
            #expect(shown.contains("the last sync could not push: the remote says: cannot lock ref"), "\(shown)")
            try FileManager.default.removeItem(atPath: lock)
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.gitOK(["show", "main:new.txt"], cwd: remote.path).hasPrefix("new"))
            #expect(try box.fprepJSON(["status"], cwd: replica)["waitingBecause"] == nil)
        }
    }

    @Test("clone of a folder that is not a git repository fails in one line and touches nothing")
    func nonGitFolderURL() throws {
        try withSandbox { box in
            let source = box.at("plain")
            try writeTree(["f.txt": .text("not git\n")], at: source)
            let before = snapshot(source)
            for url in [source, "file://" + source, box.at("does-not-exist")] {
                let result = try box.fprep(["clone", url, box.at("replica")])
                expectOneLineError(result)
                #expect(!exists(box.at("replica")), "after cloning \(url)")
            }
            #expect(snapshot(source) == before)
        }
    }

    @Test("clone into a non-empty folder or onto a file is refused and changes nothing")
    func cloneIntoNonEmptyFolder() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let folder = box.at("busy")
            try writeTree(["mine.txt": .text("keep me\n"), "sub/x": .text("x")], at: folder)
            let before = snapshot(folder)
            expectOneLineError(try box.fprep(["clone", remote.path, folder]), mentioning: ["busy"])
            #expect(snapshot(folder) == before)

            // An existing replica of another remote is not empty either; one
            // of the same remote is left as it is, and the command says so.
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let replicaBefore = snapshot(replica, skipping: [".fprep"])
            let other = try box.makeRemote("other.git")
            expectOneLineError(try box.fprep(["clone", other.path, replica]))
            #expect(snapshot(replica, skipping: [".fprep"]) == replicaBefore)
            let again = try box.fprepOK(["clone", remote.path, replica])
            #expect(again.stdout.contains("already is a replica"))
            #expect(snapshot(replica, skipping: [".fprep"]) == replicaBefore)
            try box.fprepOK(["status"], cwd: replica)

            try writeTree(["file": .text("f")], at: box.path)
            expectOneLineError(try box.fprep(["clone", remote.path, box.at("file")]))
            #expect(contents(box.at("file")) == Data("f".utf8))
        }
    }

    @Test("paths outside the replica, inside its state, or not in it are refused and change nothing")
    func badPaths() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "a.txt"], cwd: replica)
            try writeTree(["outside.txt": .text("outside\n")], at: box.path)
            let before = snapshot(replica, skipping: [".fprep"])
            let outsideBefore = snapshot(box.path, skipping: [".io", "replica", remote.path.components(separatedBy: "/").last!])

            let cases: [(args: [String], cwd: String, mention: String)] = [
                (["materialize", box.at("outside.txt")], replica, "outside.txt"),
                (["materialize", "../outside.txt"], replica, "outside.txt"),
                (["evict", "../outside.txt"], replica, "outside.txt"),
                (["materialize", "/etc/hostname"], replica, "/etc/hostname"),
                (["ls", ".."], replica, ".."),
                (["materialize", "nothere.txt"], replica, "nothere.txt"),
                (["evict", "docs/nothere"], replica, "docs/nothere"),
                (["ls", "nothere"], replica, "nothere"),
                (["ls", "missing/deeper"], replica, "missing/deeper"),
                (["materialize", ".git/config"], replica, ".git/config"),
                (["evict", ".fprep/state.db"], replica, ".fprep"),
                (["materialize", ".fprep"], replica, ".fprep"),
                (["materialize", "-C", box.at("elsewhere"), "a.txt"], box.path, "elsewhere"),
            ]
            for (args, cwd, mention) in cases {
                let result = try box.fprep(args, cwd: cwd)
                expectOneLineError(result, mentioning: [mention])
                #expect(result.status == 64, "\(args) should be a usage error: \(result)")
            }
            #expect(snapshot(replica, skipping: [".fprep"]) == before)
            #expect(snapshot(box.path, skipping: [".io", "replica", remote.path.components(separatedBy: "/").last!]) == outsideBefore)
            expectMaterialized(replica, remote, "a.txt")
            try expectDataless(box, replica, remote, "bin.dat")
        }
    }

    @Test("replica commands outside any replica fail in one line")
    func outsideAnyReplica() throws {
        try withSandbox { box in
            let elsewhere = box.at("elsewhere")
            try writeTree(["f.txt": .text("f")], at: elsewhere)
            let before = snapshot(elsewhere)
            for args in [["status"], ["ls"], ["materialize", "f.txt"], ["evict", "f.txt"], ["status", "--json"]] {
                let result = try box.fprep(args, cwd: elsewhere)
                expectOneLineError(result, mentioning: ["replica"])
                #expect(result.stdout.isEmpty, "\(result)")
            }
            #expect(snapshot(elsewhere) == before)
            #expect(!exists(elsewhere + "/.fprep"))
        }
    }

    @Test("materialize with the remote gone (daemon stopped) fails in one line and keeps the placeholder")
    func materializeDaemonStopped() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let daemon = try box.startDaemon(base: box.path)
            let replica = box.at("replica")
            _ = try box.clone(daemon.url("remote.git"), replica)
            daemon.stop()
            let before = snapshot(replica, skipping: [".fprep"])
            let result = try box.fprep(["materialize", "a.txt", "docs"], cwd: replica, timeout: 30)
            expectOneLineError(result)
            #expect(result.status == 1, "\(result)")
            #expect(snapshot(replica, skipping: [".fprep"]) == before)
            for path in ["a.txt", "docs/readme.md", "docs/deep/tool"] { try expectDataless(box, replica, remote, path) }
            let status = try box.fprepJSON(["status"], cwd: replica)
            #expect(status.int("dataless") == remote.files.count)
            #expect(status.int("modified") == 0)
        }
    }

    @Test("materialize with the remote folder moved away fails in one line and keeps the placeholder; works once it is back")
    func materializeRemoteMoved() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let moved = box.at("moved.git")
            #expect(rename(remote.path, moved) == 0)
            let before = snapshot(replica, skipping: [".fprep"])
            let result = try box.fprep(["materialize", "bin.dat"], cwd: replica, timeout: 30)
            expectOneLineError(result, mentioning: [remote.path])
            #expect(snapshot(replica, skipping: [".fprep"]) == before)
            try expectGitClean(box, replica)

            #expect(rename(moved, remote.path) == 0)
            try expectDataless(box, replica, remote, "bin.dat")
            try box.fprepOK(["materialize", "bin.dat"], cwd: replica)
            expectMaterialized(replica, remote, "bin.dat")
        }
    }

    @Test("usage mistakes exit 64 with one 'fprep:' line",
          arguments: [["frobnicate"], ["ls", "--page-size", "0"], ["clone"], ["materialize"], ["status", "--bogus-flag"]])
    func usageErrors(args: [String]) throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let result = try box.fprep(args, cwd: replica)
            expectOneLineError(result, status: 64)
        }
    }
}
