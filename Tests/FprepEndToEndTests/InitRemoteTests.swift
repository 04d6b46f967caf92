import Foundation
import Glibc
import Testing

@Suite("init-remote")
struct InitRemoteTests {
    @Test("init-remote makes a bare repository ready for partial clone, with the hook")
    func initRemoteSetsConfigAndHook() throws {
        try withSandbox { box in
            let remote = box.at("photos.git")
            let setup = try box.fprepJSON(["init-remote", remote, "--domain", "photos.e2e_1-x"])
            #expect(setup.string("domain") == "photos.e2e_1-x")
            #expect(setup.string("branch") == "main")
            #expect(setup["created"] as? Bool == true)

            #expect(try box.gitOK(["rev-parse", "--is-bare-repository"], cwd: remote) == "true")
            #expect(try box.gitOK(["config", "--bool", "uploadpack.allowFilter"], cwd: remote) == "true")
            #expect(try box.gitOK(["config", "--bool", "uploadpack.allowAnySHA1InWant"], cwd: remote) == "true")
            #expect(try box.gitOK(["config", "fprep.domain"], cwd: remote) == "photos.e2e_1-x")
            #expect(try box.gitOK(["symbolic-ref", "HEAD"], cwd: remote) == "refs/heads/main")

            let hook = remote + "/hooks/post-receive"
            let info = try #require(lstatInfo(hook), "hooks/post-receive missing")
            #expect(info.isRegular)
            #expect(info.permissions & 0o111 == 0o111, "hook mode \(String(info.permissions, radix: 8))")
            #expect(access(hook, X_OK) == 0)
            let script = String(decoding: contents(hook) ?? Data(), as: UTF8.self)
            #expect(script.hasPrefix("#!"), "the hook must be a script: \(script)")
        }
    }

    @Test("the default domain is the folder name without .git; --branch is kept")
    func defaultDomainAndBranch() throws {
        try withSandbox { box in
            let remote = box.at("holiday.git")
            let setup = try box.fprepJSON(["init-remote", remote, "--branch", "trunk"])
            #expect(setup.string("domain") == "holiday")
            #expect(try box.gitOK(["config", "fprep.domain"], cwd: remote) == "holiday")
            #expect(try box.gitOK(["symbolic-ref", "HEAD"], cwd: remote) == "refs/heads/trunk")
            // import-tree and clone follow that branch.
            try writeTree(["x.txt": .text("x\n")], at: box.at("src"))
            try box.fprepOK(["import-tree", box.at("src"), "--into", remote])
            #expect(try box.git(["rev-parse", "--verify", "refs/heads/trunk"], cwd: remote).status == 0)
            let clone = try box.clone(remote, box.at("replica"))
            #expect(clone.string("branch") == "trunk")
        }
    }

    @Test("init-remote refuses a non-empty folder that is not an fprep remote and leaves it as it was")
    func refusesNonEmptyFolder() throws {
        try withSandbox { box in
            let folder = box.at("stuff")
            try writeTree(["notes.txt": .text("mine\n"), "sub/more.bin": .file(pseudoRandomBytes(100, seed: 9))], at: folder)
            let before = snapshot(folder)
            let result = try box.fprep(["init-remote", folder])
            expectOneLineError(result, mentioning: ["stuff"])
            #expect(snapshot(folder) == before)

            // A plain bare repository (not made by fprep) is refused too.
            let bare = box.at("plain.git")
            try box.gitOK(["init", "-q", "--bare", bare])
            let bareBefore = snapshot(bare)
            expectOneLineError(try box.fprep(["init-remote", bare]))
            #expect(snapshot(bare) == bareBefore)

            // A file, not a folder.
            let file = box.at("file.txt")
            try writeTree(["file.txt": .text("x")], at: box.path)
            expectOneLineError(try box.fprep(["init-remote", file]))
            #expect(contents(file) == Data("x".utf8))
        }
    }

    @Test("init-remote again on an fprep remote succeeds, keeps it, and reinstalls the hook")
    func rerunIsIdempotent() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(domain: "again")
            let refsBefore = try box.gitOK(["for-each-ref"], cwd: remote.path)
            let hook = remote.path + "/hooks/post-receive"
            unlink(hook)
            let second = try box.fprepJSON(["init-remote", remote.path])
            #expect(second["created"] as? Bool == false)
            #expect(second.string("domain") == "again")
            #expect(lstatInfo(hook).map { $0.permissions & 0o111 == 0o111 } == true, "hook reinstalled and executable")
            #expect(try box.gitOK(["config", "fprep.domain"], cwd: remote.path) == "again")
            #expect(try box.gitOK(["for-each-ref"], cwd: remote.path) == refsBefore, "refs must not move")
            // Same domain given explicitly: fine; another domain: refused.
            try box.fprepOK(["init-remote", remote.path, "--domain", "again"])
            let other = try box.fprep(["init-remote", remote.path, "--domain", "different"])
            expectOneLineError(other)
            #expect(try box.gitOK(["config", "fprep.domain"], cwd: remote.path) == "again")
        }
    }

    @Test("init-remote refuses a domain with bad characters and creates nothing",
          arguments: ["bad domain", "a/b", "", "ünïcode", "semi;colon", String(repeating: "x", count: 129)])
    func badDomainRefused(domain: String) throws {
        try withSandbox { box in
            let remote = box.at("r.git")
            let result = try box.fprep(["init-remote", remote, "--domain", domain])
            expectOneLineError(result)
            #expect(!exists(remote), "nothing may be created for a refused domain")
        }
    }
}
