import Foundation
import Testing

// git's ignore rules in the replica: untracked items they match never sync,
// `status --ignored` lists them; what the remote has stays synced whatever
// the rules say, and nothing a user wrote is lost to a rule.

@Suite("ignore rules")
struct IgnoreRulesTests {
    static let tree: [String: Node] = standardTree.merging([
        ".gitignore": .text("*.swp\nbuild/\n"),
        "docs/.gitignore": .text("*.o\n!keep.o\n"),
        "notes.log": .text("a tracked file a rule matches\n"),
    ]) { _, new in new }

    @Test(".gitignore files, info/exclude and core.excludesFile leave untracked items out of status and sync; --ignored lists them")
    func rulesLeaveItemsOut() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.tree)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "notes.log"], cwd: replica)
            try box.sh("""
                printf '*.log\\n' > \(box.at("global-ignore"))
                git config core.excludesFile \(box.at("global-ignore"))
                printf 'secret/\\n' >> .git/info/exclude
                echo swap > .a.txt.swp
                mkdir -p build/out secret docs/deep && echo o > build/out/x && echo s > secret/key
                echo o > docs/m.o && echo keep > docs/keep.o && echo o > docs/deep/n.o
                echo new > new.txt && echo log > new.log
                echo changed >> notes.log
                """, cwd: replica)
            let status = try box.fprepJSON(["status", "--ignored"], cwd: replica)
            let changes = status.objects("changes").map { "\($0.string("kind") ?? ""): \($0.string("path") ?? "")" }
            #expect(changes == ["added: docs/keep.o", "added: new.txt", "modified: notes.log"], "\(changes)")
            #expect(status.strings("ignored") == [".a.txt.swp", "build/", "docs/deep/n.o", "docs/m.o", "new.log", "secret/"],
                    "\(status.strings("ignored"))")
            #expect(status.strings("ignoreFilesNotRead").isEmpty)
            #expect(try box.fprepJSON(["status"], cwd: replica)["ignored"] == nil, "listed only when asked for")
            let text = try box.fprepOK(["status", "--ignored"], cwd: replica).stdout
            #expect(text.contains("ignored:\n  .a.txt.swp\n  build/\n"), "\(text)")

            try box.fprepOK(["sync"], cwd: replica)
            let files = try box.gitOK(["ls-tree", "-r", "--name-only", "main"], cwd: remote.path).split(separator: "\n").map(String.init)
            #expect(files.contains("docs/keep.o") && files.contains("new.txt"))
            for left in [".a.txt.swp", "build/out/x", "secret/key", "docs/m.o", "docs/deep/n.o", "new.log"] {
                #expect(!files.contains(left), "\(left) reached the remote")
                #expect(FileManager.default.fileExists(atPath: replica + "/" + left), "\(left) is still here")
            }
            #expect(try box.gitOK(["show", "main:notes.log"], cwd: remote.path).hasSuffix("changed"), "a tracked file syncs whatever the rules say")
            #expect(try box.fprepJSON(["status"], cwd: replica).objects("changes").isEmpty)
        }
    }

    @Test("an ignored file set aside because the remote put a tracked file at its name stays ignored under its conflict name: never pushed, still here")
    func ignoredItemSetAsideStaysIgnored() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.tree.merging([".gitignore": .text("secret.env\n")]) { _, new in new })
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.sh("printf 'PASSWORD=hunter2\\n' > secret.env", cwd: replica)
            try box.fprepOK(["sync"], cwd: replica)
            // Another device adds a tracked file at that name with plain git.
            let other = box.at("other")
            try box.gitOK(["clone", "-q", remote.path, other])
            try box.sh("printf 'theirs\\n' > secret.env && git add -f secret.env && git -c user.name=o -c user.email=o@example.com commit -qm theirs && git push -q origin HEAD:main",
                       cwd: other)
            try box.fprepOK(["sync"], cwd: replica)
            try box.fprepOK(["sync"], cwd: replica)
            let files = try box.gitOK(["ls-tree", "-r", "--name-only", "main"], cwd: remote.path).split(separator: "\n").map(String.init)
            #expect(files.filter { $0.hasPrefix("secret") } == ["secret.env"], "\(files)")
            #expect(try box.git(["grep", "-q", "hunter2", "main"], cwd: remote.path).status == 1, "the secret reached the remote")
            let kept = try FileManager.default.contentsOfDirectory(atPath: replica).filter { $0.hasPrefix("secret (conflict") }
            #expect(kept.count == 1, "\(kept)")
            #expect(try String(contentsOfFile: replica + "/" + (kept.first ?? ""), encoding: .utf8) == "PASSWORD=hunter2\n")
            #expect(try box.fprepJSON(["status", "--ignored"], cwd: replica).strings("ignored") == kept)
            #expect(try String(contentsOfFile: replica + "/.git/info/exclude", encoding: .utf8).contains("# fprep: 'secret.env'"))
        }
    }

    @Test("a dataless file or folder moved to an ignored name is a move, never a deletion of content only the remote has")
    func placeholderMovedToIgnoredName() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.tree.merging([".gitignore": .text("*.bak\nattic/\n")]) { _, new in new })
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.sh("mv bin.dat bin.dat.bak && mkdir attic && mv docs/deep attic/deep", cwd: replica)
            let changes = try box.fprepJSON(["status", "--ignored"], cwd: replica).objects("changes")
            #expect(Set(changes.compactMap { $0.string("kind") }) == ["moved"], "\(changes)")
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.gitOK(["cat-file", "-s", "main:bin.dat.bak"], cwd: remote.path) == "10000")
            #expect(try box.gitOK(["cat-file", "-s", "main:attic/deep/nested.txt"], cwd: remote.path) == "5000")
            // The content comes back at the new name.
            try box.fprepOK(["materialize", "bin.dat.bak"], cwd: replica)
            #expect(contents(replica + "/bin.dat.bak") == remote.files["bin.dat"])
        }
    }

    @Test("files of rules arrive with their content at clone and sync; one made dataless is fetched before the scan, with no conflict copy")
    func ruleFilesKeepTheirContent() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.tree)
            let replica = box.at("replica"), other = box.at("other")
            _ = try box.clone(remote.path, replica)
            #expect(contents(replica + "/.gitignore") == Data("*.swp\nbuild/\n".utf8))
            #expect(contents(replica + "/docs/.gitignore") == Data("*.o\n!keep.o\n".utf8))
            #expect(contents(replica + "/a.txt") != Data("hello\n".utf8), "other files stay dataless")

            // Another device adds rules; they arrive with content.
            _ = try box.clone(remote.path, other)
            try box.sh("mkdir -p lib && printf 'cache/\\n' > lib/.gitignore", cwd: other)
            try box.fprepOK(["sync"], cwd: other)
            try box.fprepOK(["sync"], cwd: replica)
            #expect(contents(replica + "/lib/.gitignore") == Data("cache/\n".utf8))

            // Made dataless by hand: status says its rules wait; sync brings
            // it back first and applies them, with no conflict copy.
            try box.fprepOK(["evict", "docs/.gitignore"], cwd: replica)
            try box.sh("echo o > docs/x.o && mkdir -p lib/cache && echo c > lib/cache/c", cwd: replica)
            let status = try box.fprepJSON(["status", "--ignored"], cwd: replica)
            #expect(status.strings("ignoreFilesNotRead") == ["docs/.gitignore"])
            #expect(status.objects("changes").compactMap { $0.string("path") } == ["docs/x.o"], "\(status)")
            let report = try box.fprepJSON(["sync"], cwd: replica)
            #expect(report.objects("localChanges").isEmpty, "\(report)")
            #expect(report.objects("conflicts").isEmpty, "\(report)")
            #expect(contents(replica + "/docs/.gitignore") == Data("*.o\n!keep.o\n".utf8))
            let after = try box.fprepJSON(["status", "--ignored"], cwd: replica)
            #expect(after.objects("changes").isEmpty && after.strings("ignoreFilesNotRead").isEmpty, "\(after)")
            #expect(after.strings("ignored") == ["docs/x.o", "lib/cache/"])
            let names = try FileManager.default.contentsOfDirectory(atPath: replica + "/docs")
            #expect(!names.contains { $0.contains("conflict") }, "\(names)")
        }
    }

    @Test("a file the remote adds where an ignored file of yours is: yours is kept beside it")
    func remoteAddsOverIgnoredFile() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.tree)
            let replica = box.at("replica"), other = box.at("other")
            _ = try box.clone(remote.path, replica)
            _ = try box.clone(remote.path, other)
            try box.sh("echo 'mine, ignored' > notes.swp", cwd: replica)
            try box.sh("echo 'theirs, forced' > notes.swp && git add -f notes.swp", cwd: other)
            try box.sh("git commit -qm 'add a swap file on purpose'", cwd: other)
            try box.fprepOK(["sync"], cwd: other)
            #expect(try box.gitOK(["show", "main:notes.swp"], cwd: remote.path) == "theirs, forced")
            try box.fprepOK(["sync"], cwd: replica)
            try box.fprepOK(["materialize", "notes.swp"], cwd: replica)
            #expect(contents(replica + "/notes.swp") == Data("theirs, forced\n".utf8))
            let copies = try FileManager.default.contentsOfDirectory(atPath: replica).filter { $0.hasPrefix("notes") && $0.contains("conflict") }
            #expect(copies.count == 1, "\(copies)")
            #expect(copies.first.flatMap { contents(replica + "/" + $0) } == Data("mine, ignored\n".utf8))
        }
    }

    @Test("with the agent running, status in a replica whose .gitignore is dataless answers (fprep never reads a placeholder for its rules)")
    func unreadRulesUnderTheAgent() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: Self.tree)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["evict", ".gitignore"], cwd: replica)
            try box.sh("echo x > a.swp", cwd: replica)
            let agent = try box.startAgent(replica)
            let status = try box.fprepJSON(["status", "--ignored"], cwd: replica)
            #expect(status.strings("ignoreFilesNotRead") == [".gitignore"])
            #expect(status.objects("changes").compactMap { $0.string("path") } == ["a.swp"])
            // A read by anyone else is served by the agent as usual.
            #expect(contents(replica + "/.gitignore") == Data("*.swp\nbuild/\n".utf8))
            #expect(try box.fprepJSON(["status", "--ignored"], cwd: replica).strings("ignored") == ["a.swp"])
            #expect(stopAgent(agent).status == 0)
        }
    }
}
