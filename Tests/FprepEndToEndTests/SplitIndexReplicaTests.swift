import Foundation
import Testing

/// A replica past 8,192 files keeps git's split index: the clone writes the
/// shared file once, and a sync, materialize or evict after it writes only
/// what changed, against the same shared file, while git reads the replica
/// as it should.
@Suite struct SplitIndexReplicaTests {
    static func sharedFiles(_ replica: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: replica + "/.git")) ?? []).filter { $0.hasPrefix("sharedindex.") }
    }

    static func indexSize(_ replica: String) -> Int64 { lstatInfo(replica + "/.git/index")?.size ?? -1 }

    /// git's view of the index agrees with the anchor's tree, entry for entry.
    static func expectIndexIsAnchor(_ box: Sandbox, _ replica: String, _ what: String) throws {
        let staged = try box.gitOK(["ls-files", "--stage"], cwd: replica).split(separator: "\n")
            .map { line -> String in
                let parts = line.split(separator: "\t", maxSplits: 1)
                let fields = parts[0].split(separator: " ")
                return "\(fields[0]) \(fields[1])\t\(parts[1])"
            }
        let tree = try box.gitOK(["ls-tree", "-r", "HEAD"], cwd: replica).split(separator: "\n")
            .map { line -> String in
                let parts = line.split(separator: "\t", maxSplits: 1)
                let fields = parts[0].split(separator: " ")
                return "\(fields[0]) \(fields[2])\t\(parts[1])"
            }
        #expect(staged == tree, "\(what): the index is the anchor's tree")
        #expect(try box.gitOK(["status", "--porcelain"], cwd: replica).isEmpty, "\(what): git sees no change")
    }

    @Test func aLargeReplicaWritesOnlyWhatChanged() throws {
        try withSandbox { box in
            let nodes = manyFiles(folders: 41, perFolder: 200, size: 0)   // 8,200 files
            let remote = try box.makeRemote(nodes: nodes)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let shared = Self.sharedFiles(replica)
            #expect(shared.count == 1, "the clone wrote a shared index")
            #expect(Self.indexSize(replica) < 1024, "and an index that links to it")
            try Self.expectIndexIsAnchor(box, replica, "cloned")
            #expect(try box.gitOK(["ls-files", "-v"], cwd: replica).split(separator: "\n").allSatisfy { $0.hasPrefix("S ") })

            // Materialize a folder, then a change from another device comes in.
            try box.fprepOK(["materialize", "d03"], cwd: replica)
            #expect(try box.gitOK(["ls-files", "-v", "d03"], cwd: replica).split(separator: "\n").allSatisfy { $0.hasPrefix("H ") })
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            for path in ["d03/f001.bin", "d07/f010.bin", "d40/f199.bin"] { try Data("edited \(path)\n".utf8).write(to: URL(fileURLWithPath: work + "/" + path)) }
            for path in ["d03/f002.bin", "d10/f000.bin"] { try FileManager.default.removeItem(atPath: work + "/" + path) }
            try FileManager.default.createDirectory(atPath: work + "/new", withIntermediateDirectories: true)
            for n in 0..<3 { try Data("new \(n)\n".utf8).write(to: URL(fileURLWithPath: work + "/new/n\(n).txt")) }
            try box.gitOK(["add", "-A"], cwd: work)
            try box.gitOK(["commit", "-q", "-m", "other device"], cwd: work)
            try box.gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)
            try box.fprepOK(["sync", "--incoming"], cwd: replica)
            #expect(Self.sharedFiles(replica) == shared, "the sync wrote its changes only, against the same shared index")
            #expect(Self.indexSize(replica) < 64 << 10)
            try Self.expectIndexIsAnchor(box, replica, "synced")
            #expect(try String(contentsOfFile: replica + "/d03/f001.bin", encoding: .utf8) == "edited d03/f001.bin\n")

            // A local edit goes out; the folder is made dataless again.
            try Data("local\n".utf8).write(to: URL(fileURLWithPath: replica + "/d03/f005.bin"))
            try box.fprepOK(["sync"], cwd: replica)
            try box.gitOK(["pull", "-q", "origin", "main"], cwd: work)
            #expect(try String(contentsOfFile: work + "/d03/f005.bin", encoding: .utf8) == "local\n")
            try box.fprepOK(["evict", "d03"], cwd: replica)
            #expect(Self.sharedFiles(replica) == shared)
            try Self.expectIndexIsAnchor(box, replica, "evicted")
            #expect(try box.gitOK(["ls-files", "-v", "d03"], cwd: replica).split(separator: "\n").allSatisfy { $0.hasPrefix("S ") })
            let status = try box.fprepJSON(["status"], cwd: replica)
            #expect((status["changes"] as? [Any])?.isEmpty == true, "no local change: \(status)")

            // The shared file lost: one clear line, and the way back it names
            // loses nothing and pushes nothing.
            for name in Self.sharedFiles(replica) { try FileManager.default.removeItem(atPath: replica + "/.git/" + name) }
            let refused = try box.fprep(["status"], cwd: replica)
            #expect(refused.status != 0 && refused.stderr.contains("git read-tree HEAD"), "\(refused)")
            #expect(refused.stderr.split(separator: "\n").count == 1, "\(refused.stderr)")
            let tip = try box.gitOK(["rev-parse", "refs/heads/main"], cwd: remote.path)
            try FileManager.default.removeItem(atPath: replica + "/.git/index")
            try box.gitOK(["read-tree", "HEAD"], cwd: replica)
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.gitOK(["rev-parse", "refs/heads/main"], cwd: remote.path) == tip, "nothing pushed")
            try Self.expectIndexIsAnchor(box, replica, "read again from the commit")
            #expect(try box.gitOK(["ls-files", "-v", "d03"], cwd: replica).split(separator: "\n").allSatisfy { $0.hasPrefix("S ") })

            // `core.splitIndex = false`: the next write is whole, and the shared file goes.
            try box.gitOK(["config", "core.splitIndex", "false"], cwd: replica)
            try box.fprepOK(["materialize", "d00/f000.bin"], cwd: replica)
            #expect(Self.indexSize(replica) > 500_000)
            try Self.expectIndexIsAnchor(box, replica, "unsplit")
            // The shared file stays a minute (a git command may have read
            // the index before), then the next write removes it.
            for name in Self.sharedFiles(replica) {
                var times = utimbuf(actime: time(nil) - 120, modtime: time(nil) - 120)
                utime(replica + "/.git/" + name, &times)
            }
            try box.fprepOK(["evict", "d00/f000.bin"], cwd: replica)
            #expect(Self.sharedFiles(replica).isEmpty)
        }
    }
}
