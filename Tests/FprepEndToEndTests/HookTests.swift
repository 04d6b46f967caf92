import Foundation
import Glibc
import Testing

@Suite("hooks")
struct HookTests {
    @Test("git push runs the post-receive hook; the size manifest moves; a new clone over git:// sees the real size")
    func pushExtendsManifest() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let sizesBefore = try box.gitOK(["rev-parse", "refs/fprep/sizes"], cwd: remote.path)

            // A normal git clone, one new commit with a fixed later date, pushed.
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            let newData = pseudoRandomBytes(12_345, seed: 77)
            _ = FileManager.default.createFile(atPath: work + "/new.bin", contents: newData)
            _ = FileManager.default.createFile(atPath: work + "/a.txt", contents: Data("hello, changed\n".utf8))
            let later = fixedDate + 100
            let dates = ["GIT_AUTHOR_DATE": "@\(later)", "GIT_COMMITTER_DATE": "@\(later)"]
            try box.gitOK(["add", "-A"], cwd: work)
            try box.gitOK(["commit", "-q", "-m", "Add new.bin"], cwd: work, env: dates)
            let push = try box.git(["push", "origin", "HEAD:main"], cwd: work, env: dates)
            #expect(push.status == 0, "\(push)")
            #expect(!push.stderr.contains("fprep hook:"), "the hook reported a problem: \(push)")
            #expect(!exists(remote.path + "/fprep-hook.log") || (contents(remote.path + "/fprep-hook.log") ?? Data()).isEmpty,
                    "hook log: \(String(decoding: contents(remote.path + "/fprep-hook.log") ?? Data(), as: UTF8.self))")

            let sizesAfter = try box.gitOK(["rev-parse", "refs/fprep/sizes"], cwd: remote.path)
            #expect(sizesAfter != sizesBefore, "refs/fprep/sizes did not move")
            let refs = try box.gitOK(["for-each-ref", "refs/fprep/sizes"], cwd: remote.path)
            #expect(refs.hasPrefix(sizesAfter))
            // The manifest grows: the old tip is an ancestor of the new one.
            #expect(try box.git(["merge-base", "--is-ancestor", sizesBefore, sizesAfter], cwd: remote.path).status == 0)
            let newBlob = try box.gitOK(["rev-parse", "main:new.bin"], cwd: remote.path)
            let manifest = try box.gitOK(["log", "--format=%B", "refs/fprep/sizes"], cwd: remote.path)
            #expect(manifest.contains("\(newBlob) 12345"), "manifest: \(manifest)")

            // A fresh clone over git:// (no local object headers to read) knows the sizes.
            let daemon = try box.startDaemon(base: box.path)
            let replica = box.at("replica")
            let clone = try box.clone(daemon.url("remote.git"), replica)
            #expect(clone.int("unknownSizes") == 0)
            #expect(clone.string("anchor") == (try box.gitOK(["rev-parse", "main"], cwd: remote.path)))
            let info = try #require(lstatInfo(replica + "/new.bin"))
            #expect(info.size == 12_345 && info.blocks == 0)
            #expect(info.mtime == later, "the date of the push's commit, not the clone's: \(info.mtime)")
            let a = try #require(lstatInfo(replica + "/a.txt"))
            #expect(a.size == Int64("hello, changed\n".utf8.count) && a.blocks == 0)
            // Unchanged files keep their first date.
            #expect(lstatInfo(replica + "/bin.dat")?.mtime == fixedDate)
            let items = itemsByName(try box.fprepJSON(["ls"], cwd: replica))
            #expect(items["new.bin"]?.int("size") == 12_345)
            #expect(items["new.bin"]?.string("state") == "dataless")

            try box.fprepOK(["materialize", "new.bin"], cwd: replica)
            #expect(contents(replica + "/new.bin") == newData)
            #expect(lstatInfo(replica + "/new.bin")?.mtime == later)
        }
    }

    @Test("fprep hook post-receive extends the manifest for lines on stdin")
    func hookCommandDirectly() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let old = remote.commit
            let blob = try box.writeObject(pseudoRandomBytes(4_321, seed: 5), in: remote.path)
            let listing = try box.gitOK(["ls-tree", "main"], cwd: remote.path)
            let tree = try box.gitOK(["mktree"], cwd: remote.path, stdin: Data((listing + "\n100644 blob \(blob)\textra.bin\n").utf8))
            let commit = try box.gitOK(["commit-tree", "-p", "main", "-m", "extra", tree], cwd: remote.path)
            try box.gitOK(["update-ref", "refs/heads/main", commit], cwd: remote.path)  // no hook runs for update-ref
            let before = try box.gitOK(["rev-parse", "refs/fprep/sizes"], cwd: remote.path)

            let hook = try box.fprep(["hook", "post-receive"], cwd: remote.path, env: ["GIT_DIR": remote.path],
                                     stdin: Data("\(old) \(commit) refs/heads/main\n".utf8))
            #expect(hook.status == 0, "\(hook)")
            let after = try box.gitOK(["rev-parse", "refs/fprep/sizes"], cwd: remote.path)
            #expect(after != before)
            #expect(try box.gitOK(["log", "-1", "--format=%B", "refs/fprep/sizes"], cwd: remote.path).contains("\(blob) 4321"))

            // Malformed input never fails a push: exit 0, manifest unchanged.
            let junk = try box.fprep(["hook", "post-receive"], cwd: remote.path, env: ["GIT_DIR": remote.path],
                                     stdin: Data("not a hook line\n\n".utf8))
            #expect(junk.status == 0, "\(junk)")
            #expect(try box.gitOK(["rev-parse", "refs/fprep/sizes"], cwd: remote.path) == after)
        }
    }
}
