import Foundation
import Glibc
import Testing

// A file's history: `fprep versions` lists it from the local history,
// `fprep restore --version` brings one back as a new change, and `restore`
// takes folders; a restored item leaves the trash.

@Suite("versions and restore")
struct HistoryTests {
    @Test("versions lists each change of a file, newest first; restore --version brings one back as a change sync pushes")
    func versionsAndRestore() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica"), full = box.at("full")
            _ = try box.clone(remote.path, replica)
            try box.gitOK(["clone", "-q", remote.path, full])
            try box.sh("echo second > a.txt && git commit -qam 'second a' && echo third > a.txt && git commit -qam 'third a' && git push -q origin main",
                       cwd: full)
            try box.fprepOK(["sync"], cwd: replica)
            let versions = try box.fprepJSON(["versions", "a.txt"], cwd: replica).objects("versions")
            #expect(versions.map { $0.string("summary") ?? "" }.prefix(2) == ["third a", "second a"], "\(versions)")
            #expect(versions.count == 3, "\(versions)")
            #expect(versions.first?.int("size") == 6)
            let second = try #require(versions.dropFirst().first?.string("commit"))
            // From a folder, a unique prefix of the commit.
            try box.fprepOK(["restore", "--version", String(second.prefix(8)), "../a.txt"], cwd: replica + "/docs")
            #expect(contents(replica + "/a.txt") == Data("second\n".utf8))
            #expect(try box.fprepJSON(["status"], cwd: replica).objects("changes").map { $0.string("kind") } == ["modified"])
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.gitOK(["show", "main:a.txt"], cwd: remote.path) == "second")
            // Nothing of the user's is overwritten.
            try box.sh("echo mine > a.txt", cwd: replica)
            let refused = try box.fprep(["restore", "--version", second, "a.txt"], cwd: replica)
            expectOneLineError(refused, status: 64, mentioning: ["a.txt", "local changes"])
            #expect(contents(replica + "/a.txt") == Data("mine\n".utf8))
            expectOneLineError(try box.fprep(["restore", "--version", "0000000", "docs/readme.md"], cwd: replica), status: 64,
                               mentioning: ["0000000"])
        }
    }

    @Test("restore takes a folder; restored items leave the trash")
    func restoreFolder() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.sh("rm -r docs", cwd: replica)
            try box.fprepOK(["sync"], cwd: replica)
            let restored = try box.fprepJSON(["restore", "docs"], cwd: replica).strings("restored")
            #expect(restored.count == 4, "\(restored)")
            #expect(contents(replica + "/docs/readme.md") == remote.files["docs/readme.md"])
            #expect(lstatInfo(replica + "/docs/deep/tool")?.permissions == 0o755)
            let trash = try box.fprep(["trash"], cwd: replica)
            #expect(!trash.stdout.contains("docs/"), "restored items still in the trash: \(trash.stdout)")
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.remoteTree(remote.path)["docs/deep/nested.txt"]?.id == box.blobID(remote, "docs/deep/nested.txt"))
        }
    }
}
