import Foundation
import Testing

// git used in a replica, as people who clone a git repository do: what git
// commits, stages, resets or checks out is never dropped by fprep, and a
// git command prints nothing because of fprep.

@Suite("git in the replica")
struct GitNeighbourTests {
    @Test("a plain git commit in the replica is local work: status says so, sync pushes it with its history")
    func gitCommitIsPushed() throws {
        try withSandbox { box in
            let (remote, replica) = try box.standardReplica(materializing: ["a.txt"])
            try box.sh("echo 'edited with git' > a.txt && echo new > new.txt && git add a.txt new.txt && git commit -qm 'made with git'",
                       cwd: replica)
            let status = try box.fprep(["status"], cwd: replica)
            #expect(status.stdout.contains("1 commit made with git"), "\(status.stdout)")
            #expect(try box.fprepJSON(["status"], cwd: replica).string("anchor") == remote.commit)

            let report = try box.fprepJSON(["sync"], cwd: replica)
            #expect(report.int("gitCommitsTaken") == 1, "\(report)")
            let log = try box.gitOK(["log", "--format=%s", "main"], cwd: remote.path)
            #expect(log.contains("made with git"), "the commit itself reached the remote: \(log)")
            #expect(try box.gitOK(["show", "main:a.txt"], cwd: remote.path) == "edited with git")
            #expect(try box.gitOK(["show", "main:new.txt"], cwd: remote.path) == "new")
            // Nothing left: the next sync pushes nothing, status is clean.
            let tip = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            #expect(try box.fprepJSON(["sync"], cwd: replica).objects("localChanges").isEmpty)
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == tip)
            #expect(try box.fprepJSON(["status"], cwd: replica).objects("changes").isEmpty)
        }
    }

    @Test("git read-tree or git reset rewrites the index without fprep's bits: the placeholders are no change (status, sync), a mode or bytes changed still are",
          arguments: ["read-tree HEAD", "reset -q"])
    func indexRewrittenByGitIsNoChange(_ command: String) throws {
        try withSandbox { box in
            let (remote, replica) = try box.standardReplica(materializing: ["a.txt"])
            try box.sh("git \(command)", cwd: replica)
            // Every placeholder as the clone made it: no change, counted dataless.
            var status = try box.fprepJSON(["status"], cwd: replica)
            #expect(status.objects("changes").isEmpty, "\(status)")
            #expect(status.int("modified") == 0 && status.int("dataless") == 6, "\(status)")
            // A placeholder's mode, and a materialized file's bytes, changed
            // after git's rewrite: those are changes.
            try box.sh("chmod +x docs/readme.md && echo edited > a.txt", cwd: replica)
            status = try box.fprepJSON(["status"], cwd: replica)
            let changes = status.objects("changes").map { "\($0.string("kind") ?? "?") \($0.string("path") ?? "?")" }.sorted()
            #expect(changes == ["modeChanged docs/readme.md", "modified a.txt"], "\(changes)")
            // The sync pushes those two and nothing else; git sees no change after it.
            let report = try box.fprepJSON(["sync"], cwd: replica)
            #expect(report.objects("localChanges").count == 2, "\(report)")
            let pushed = try box.gitOK(["diff", "--name-status", remote.commit, "main"], cwd: remote.path)
            #expect(pushed.split(separator: "\n").sorted() == ["M\ta.txt", "M\tdocs/readme.md"], "\(pushed)")
            #expect(try box.gitOK(["status", "--porcelain"], cwd: replica).isEmpty)
            #expect(try box.gitOK(["ls-files", "-v", "docs/deep/tool"], cwd: replica).hasPrefix("S "))
        }
    }

    /// Ways git can be made to read a placeholder and commit what it read.
    static let placeholderCommits: [(name: String, script: String, written: Bool)] = [
        ("no-skip-worktree, then commit -a", "git update-index --no-skip-worktree a.txt && git commit -qam 'read a placeholder'", false),
        ("an append, then no-skip-worktree and commit -a",
         "printf 'dev line\\n' >> a.txt && git update-index --no-skip-worktree a.txt && git commit -qam 'read a placeholder'", true),
    ]

    @Test("a git commit of what a placeholder reads as is never pushed: kept aside, the name keeps its content, written bytes become a conflict copy",
          arguments: 0..<placeholderCommits.count)
    func gitCommitOfPlaceholderIsNotPushed(_ which: Int) throws {
        let way = Self.placeholderCommits[which]
        try withSandbox { box in
            let (remote, replica) = try box.standardReplica(materializing: ["docs/readme.md"])
            try box.sh("echo 'edited too' > docs/readme.md && git add docs/readme.md && \(way.script)", cwd: replica)
            let made = try box.gitOK(["rev-parse", "main"], cwd: replica)
            let status = try box.fprep(["status"], cwd: replica)
            #expect(status.stdout.contains("took placeholders ('a.txt') as content"), "\(status.stdout)")
            let result = try box.fprepOK(["sync"], cwd: replica)
            #expect(result.stdout.contains("read placeholders ('a.txt')"), "\(result.stdout)")
            // Not in the remote's history, and a.txt keeps its content there.
            let log = try box.gitOK(["log", "--format=%s", "main"], cwd: remote.path)
            #expect(!log.contains("read a placeholder"), "\(log)")
            #expect(try box.remoteBlob(remote.path, "a.txt") == remote.files["a.txt"])
            // The other change git committed is on disk, so it is synced.
            #expect(try box.gitOK(["show", "main:docs/readme.md"], cwd: remote.path) == "edited too")
            // The commit is kept.
            let backups = try box.gitOK(["for-each-ref", "--format=%(objectname)", "refs/fprep/backup/"], cwd: replica)
            #expect(backups.contains(made), "\(backups)")
            let copies = conflictCopies(try box.remoteTree(remote.path), of: "a.txt")
            if way.written {
                #expect(copies.count == 1, "\(copies)")
                if let copy = copies.first {
                    let size = remote.files["a.txt"]?.count ?? 0
                    #expect(try box.remoteBlob(remote.path, copy) == Data(count: size) + Data("dev line\n".utf8))
                }
            } else {
                #expect(copies.isEmpty, "zeros nobody wrote became a copy: \(copies)")
            }
            try box.fprepOK(["materialize", "a.txt"], cwd: replica)
            #expect(contents(replica + "/a.txt") == remote.files["a.txt"])
            #expect(try box.fprepJSON(["status"], cwd: replica).objects("changes").isEmpty)
            #expect(try box.gitOK(["rev-parse", "main"], cwd: replica) == box.gitOK(["rev-parse", "main"], cwd: remote.path))
        }
    }

    @Test("what git stages or removes (git add, git rm) is a local change that status lists and sync pushes")
    func stagedChangesAreChanges() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "a.txt", "docs/readme.md"], cwd: replica)
            try box.sh("echo staged > a.txt && git add a.txt && git rm -q docs/readme.md", cwd: replica)
            let kinds = try box.fprepJSON(["status"], cwd: replica).objects("changes")
                .map { "\($0.string("kind") ?? "") \($0.string("path") ?? "")" }
            #expect(Set(kinds) == ["modified a.txt", "deleted docs/readme.md"], "\(kinds)")
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.gitOK(["show", "main:a.txt"], cwd: remote.path) == "staged")
            #expect(try box.remoteTree(remote.path)["docs/readme.md"] == nil)
            // Placeholders git never touched were not read as content.
            #expect(try box.remoteTree(remote.path)["bin.dat"]?.id == box.blobID(remote, "bin.dat"))
            #expect(try box.fprepJSON(["status"], cwd: replica).objects("changes").isEmpty)
        }
    }

    @Test("git reset --hard to an older commit: the files it changed are changes, the branch goes back to the anchor, commits made after the reset are kept")
    func gitResetIsSeen() throws {
        try withSandbox { box in
            let (remote, replica) = try box.standardReplica(materializing: ["a.txt"])
            try box.sh("echo second > a.txt", cwd: replica)
            try box.fprepOK(["sync"], cwd: replica)
            // Back to the first version with git, and a commit on top of it.
            try box.sh("git reset -q --hard HEAD~1 && echo 'after reset' > other.txt && git add other.txt && git commit -qm 'after reset'",
                       cwd: replica)
            #expect(contents(replica + "/a.txt") == Data("hello\n".utf8))
            let status = try box.fprep(["status"], cwd: replica)
            #expect(status.stdout.contains("does not contain fprep's anchor"), "\(status.stdout)")
            let report = try box.fprepJSON(["sync"], cwd: replica)
            let backup = try #require(report.string("gitBackup"), "\(report)")
            #expect(try box.gitOK(["log", "--format=%s", "-1", backup], cwd: replica) == "after reset")
            #expect(try box.gitOK(["show", "main:a.txt"], cwd: remote.path) == "hello", "the reset's change was synced")
            #expect(try box.gitOK(["show", "main:other.txt"], cwd: remote.path) == "after reset")
            #expect(try box.gitOK(["rev-parse", "main"], cwd: replica) == box.gitOK(["rev-parse", "main"], cwd: remote.path))
            #expect(try box.fprepJSON(["status"], cwd: replica).objects("changes").isEmpty)
        }
    }

    @Test("HEAD on another branch: sync refuses in one line and changes nothing")
    func otherBranchRefused() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.gitOK(["checkout", "-q", "-b", "experiment"], cwd: replica)
            let before = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            let result = try box.fprep(["sync"], cwd: replica)
            expectOneLineError(result, status: 64, mentioning: ["experiment", "git switch main"])
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == before)
            try box.gitOK(["checkout", "-q", "main"], cwd: replica)
            try box.fprepOK(["sync"], cwd: replica)
        }
    }
}
