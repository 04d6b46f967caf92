import Foundation
import Testing

// import-tree into a remote that already has files never deletes silently.

@Suite("import-tree")
struct ImportTreeTests {
    /// The branch's files, path → content.
    func files(_ box: Sandbox, _ remote: String) throws -> [String: String] {
        var result: [String: String] = [:]
        for path in try box.gitOK(["ls-tree", "-r", "--name-only", "main"], cwd: remote).split(separator: "\n") {
            result[String(path)] = try box.gitOK(["show", "main:\(path)"], cwd: remote)
        }
        return result
    }

    /// The pushes the remote's outbox holds for the push service.
    func recordedPushes(_ box: Sandbox, _ remote: String) throws -> [String] {
        let script = "import sqlite3,sys; print('\\n'.join(r[0] for r in sqlite3.connect(sys.argv[1]).execute('select new from pushes order by seq')))"
        let result = try Shell.run(["/usr/bin/python3", "-c", script, remote + "/fprep/outbox.db"], cwd: box.path)
        return result.stdout.split(separator: "\n").map(String.init)
    }

    @Test("into a remote with files: refused without --prefix or --replace; --dry-run counts; --prefix imports beside; --replace replaces; dates kept; devices signalled")
    func importNeverDeletesSilently() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: ["a.txt": .text("a\n"), "keep/b.txt": .text("b\n")])
            let before = try files(box, remote.path)
            let scans = box.at("scans")
            try writeTree(["one.txt": .text("scan one\n"), "deep/two.txt": .text("scan two\n")], at: scans)
            var times = utimbuf(actime: 1_600_000_000, modtime: 1_600_000_000)
            #expect(utime(scans + "/one.txt", &times) == 0)

            let refused = try box.fprep(["import-tree", scans, "--into", remote.path])
            expectOneLineError(refused, status: 64, mentioning: ["already has files", "--prefix", "--replace"])
            #expect(try files(box, remote.path) == before, "a refused import changed the branch")

            let dry = try box.fprepJSON(["import-tree", scans, "--into", remote.path, "--replace", "--dry-run"])
            #expect(dry.int("added") == 2 && dry.int("deleted") == 2 && dry.string("commit") == nil, "\(dry)")
            #expect(try files(box, remote.path) == before, "a dry run changed the branch")

            let beside = try box.fprepJSON(["import-tree", scans, "--into", remote.path, "--prefix", "scans/2026"])
            #expect(beside.int("added") == 2 && beside.int("deleted") == 0, "\(beside)")
            var expected = before
            expected["scans/2026/one.txt"] = "scan one"
            expected["scans/2026/deep/two.txt"] = "scan two"
            #expect(try files(box, remote.path) == expected)
            #expect(try recordedPushes(box, remote.path).last == beside.string("commit"), "the import was not signalled")
            let again = try box.fprep(["import-tree", scans, "--into", remote.path, "--prefix", "scans/2026"])
            expectOneLineError(again, status: 64, mentioning: ["scans/2026", "--replace"])

            // A replica shows the imported file with its own date.
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            #expect(lstatInfo(replica + "/scans/2026/one.txt")?.mtime == 1_600_000_000)

            let replaced = try box.fprepJSON(["import-tree", scans, "--into", remote.path, "--replace"])
            #expect(replaced.int("deleted") == 4 && replaced.int("added") == 2, "\(replaced)")
            #expect(try files(box, remote.path) == ["one.txt": "scan one", "deep/two.txt": "scan two"])

            for bad in ["..", "a/../b", ".git", "/"] {
                let result = try box.fprep(["import-tree", scans, "--into", remote.path, "--prefix", bad])
                expectOneLineError(result, status: 64, mentioning: ["--prefix"])
            }
        }
    }
}
