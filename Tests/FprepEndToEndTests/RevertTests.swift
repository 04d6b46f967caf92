import Foundation
import Glibc
import Testing

// `fprep revert`: local changes discarded back to the anchor's version,
// never content stored nowhere else without --force, and nothing pushed.

@Suite("revert")
struct RevertTests {
    @Test("an edit stored nowhere else is refused without --force; --dry-run lists it; --force puts the anchor's version back")
    func editNeedsForce() throws {
        try withSandbox { box in
            let (remote, replica) = try box.standardReplica(materializing: ["a.txt"])
            try box.sh("echo 'my edit' > a.txt", cwd: replica)
            let refused = try box.fprep(["revert", "a.txt"], cwd: replica)
            expectOneLineError(refused, status: 1, mentioning: ["a.txt", "--force", "nothing was changed"])
            #expect(contents(replica + "/a.txt") == Data("my edit\n".utf8))
            let dry = try box.fprepJSON(["revert", "--dry-run", "a.txt", "--force"], cwd: replica)
            #expect(dry.strings("discarded") == ["a.txt"], "\(dry)")
            #expect(contents(replica + "/a.txt") == Data("my edit\n".utf8))

            let tip = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            let report = try box.fprepJSON(["revert", "--force", "a.txt"], cwd: replica)
            #expect(report.strings("reverted") == ["a.txt"], "\(report)")
            #expect(try box.fprepJSON(["status"], cwd: replica).objects("changes").isEmpty)
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == tip, "a revert pushed something")
            try box.fprepOK(["materialize", "a.txt"], cwd: replica)
            #expect(contents(replica + "/a.txt") == remote.files["a.txt"])
        }
    }

    @Test("deletions, moves and mode changes lose nothing: reverted without --force")
    func lossless() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "docs/readme.md"], cwd: replica)
            try box.sh("rm bin.dat && mv docs/readme.md docs/moved.md && chmod +x a.txt && rm -r docs/deep", cwd: replica)
            #expect(try box.fprepJSON(["status"], cwd: replica).objects("changes").count >= 4)
            let report = try box.fprepJSON(["revert", "."], cwd: replica)
            #expect(report.strings("discarded").isEmpty, "\(report)")
            #expect(try box.fprepJSON(["status"], cwd: replica).objects("changes").isEmpty)
            #expect(lstatInfo(replica + "/docs/moved.md") == nil)
            #expect(lstatInfo(replica + "/a.txt")?.permissions == 0o644)
            try box.fprepOK(["materialize", "bin.dat", "docs/readme.md", "docs/deep/tool", "a.txt"], cwd: replica)
            #expect(contents(replica + "/bin.dat") == remote.files["bin.dat"])
            #expect(contents(replica + "/docs/readme.md") == remote.files["docs/readme.md"])
            #expect(lstatInfo(replica + "/docs/deep/tool")?.permissions == 0o755)
            #expect(try box.fprepJSON(["status"], cwd: replica).objects("changes").isEmpty)
        }
    }

    @Test("new files and folders go only with --force; bytes written into a placeholder are discarded, never committed")
    func newAndWritten() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.sh("mkdir -p new/sub && echo fresh > new/sub/f.txt && printf 'x' >> bin.dat && ln -s a.txt newlink", cwd: replica)
            let refused = try box.fprep(["revert", "."], cwd: replica)
            expectOneLineError(refused, status: 1, mentioning: ["new/sub/f.txt", "--force"])
            #expect(contents(replica + "/new/sub/f.txt") == Data("fresh\n".utf8))
            // From inside a folder, paths are relative to it.
            try box.fprepOK(["revert", "--force", "sub"], cwd: replica + "/new")
            #expect(lstatInfo(replica + "/new") == nil, "an emptied new folder stays")
            try box.fprepOK(["revert", "--force", "bin.dat", "newlink"], cwd: replica)
            #expect(lstatInfo(replica + "/newlink") == nil)
            #expect(try box.fprepJSON(["status"], cwd: replica).objects("changes").isEmpty)
            let tip = try box.gitOK(["rev-parse", "main"], cwd: remote.path)
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.gitOK(["rev-parse", "main"], cwd: remote.path) == tip)
            try box.fprepOK(["materialize", "bin.dat"], cwd: replica)
            #expect(contents(replica + "/bin.dat") == remote.files["bin.dat"])
            let nothing = try box.fprepOK(["revert", "a.txt"], cwd: replica)
            #expect(nothing.stdout.contains("nothing to revert"))
            // The whole replica with nothing to revert (found by a hostile test: "'' is not in the replica").
            #expect(try box.fprepOK(["revert", "-C", replica, "."]).stdout.contains("nothing to revert"))
            expectOneLineError(try box.fprep(["revert", "no-such"], cwd: replica), status: 64, mentioning: ["no-such"])
        }
    }
}
