import Foundation
import Synchronization
import Testing
import FprepGit
@testable import FprepCore

@Suite struct SizeManifestTests {
    @Test func extendListsOnlyNewBlobsAndReadsBackInOrder() throws {
        let folder = NSTemporaryDirectory() + "fprep-manifest-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let repository = try Repository(creatingBareAt: folder, initialBranch: "main")
        func blob(_ text: String) throws -> ObjectID { try Array(text.utf8).withUnsafeBytes { try repository.writeBlob($0) } }
        func tree(_ entries: [(String, ObjectID)]) throws -> ObjectID {
            let builder = try repository.treeBuilder()
            for (name, id) in entries { try builder.insert(name: Array(name.utf8), id: id, mode: .blob) }
            return try builder.write()
        }
        let a = try blob("aaaa"), b = try blob("bbbbbbbb"), c = try blob("c")
        let first = try tree([("a", a), ("b", b)])
        let second = try tree([("a", a), ("b", b), ("c", c)])
        #expect(try SizeManifest.extend(repository, from: nil, to: first, time: 100) == 2)
        #expect(try SizeManifest.extend(repository, from: first, to: second, time: 200) == 1)
        #expect(try SizeManifest.extend(repository, from: second, to: second, time: 300) == 0)
        let tip = try #require(try repository.referenceTarget(SizeManifest.reference))
        let entries = try SizeManifest.entries(repository, from: tip, stoppingAt: nil)
        let byID = Dictionary(entries, uniquingKeysWith: { first, _ in first })
        #expect(byID[a] == BlobInfo(size: 4, mtime: 100))
        #expect(byID[b] == BlobInfo(size: 8, mtime: 100))
        #expect(byID[c] == BlobInfo(size: 1, mtime: 200))
        // Reading from the newest commit down to the one already read gives only the new part.
        let firstManifest = try #require(try repository.commit(tip).parentIDs.first)
        #expect(try SizeManifest.entries(repository, from: tip, stoppingAt: firstManifest).map(\.0) == [c])
    }

    @Test func aLargeManifestIsPackedAndReadsBackOldestFirst() throws {
        let folder = NSTemporaryDirectory() + "fprep-manifest-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let repository = try Repository(creatingBareAt: folder, initialBranch: "main")
        func id(_ i: Int) -> ObjectID { ObjectID(hex: String(format: "%040x", i))! }
        // A small append stays loose; one of 16 commits or more is packed.
        let small = try #require(try SizeManifest.append([SizeManifest.line(id(1), size: 1, time: 10)], to: nil,
                                                         in: repository, time: 10))
        let count = SizeManifest.linesPerCommit * SizeManifest.packAtCommits
        // The same blob twice, once in the first commit and once in the last
        // one written now: the oldest line counts.
        var lines = (0..<count).map { SizeManifest.line(id(1000 + $0), size: Int64($0), time: 20) }
        lines[count - 1] = SizeManifest.line(id(1000), size: 999, time: 30)
        let tip = try #require(try SizeManifest.append(lines, to: small, in: repository, time: 20))
        let loose = try FileManager.default.subpathsOfDirectory(atPath: folder + "/objects")
            .filter { !$0.hasPrefix("pack") && !$0.hasPrefix("info") && $0.count == 41 }
        #expect(loose.count == 1, "only the small append's commit is left loose: \(loose.count)")
        let entries = try SizeManifest.entries(repository, from: tip, stoppingAt: nil)
        #expect(entries.count == count + 1)
        #expect(entries.first?.0 == id(1) && entries[1].0 == id(1000) && entries.last?.0 == id(1000))
        #expect(entries.map(\.1.size) == [1] + (0..<count - 1).map(Int64.init) + [999])
        let table = BlobSizeTable(entries)
        #expect(table[id(1000)] == BlobInfo(size: 0, mtime: 20))
        #expect(table[id(1000 + count - 2)] == BlobInfo(size: Int64(count - 2), mtime: 20))
        #expect(table[id(1)] == BlobInfo(size: 1, mtime: 10))
        #expect(table[id(2)] == nil)
        #expect(try SizeManifest.entries(repository, from: tip, stoppingAt: small).count == count)
    }

    /// Ids spread over every first byte, some sharing their first two: each
    /// listed one is found with its own line, the first of two for one id;
    /// an unlisted one (one byte off, or in a prefix nobody has) is not.
    @Test func theSizeTableFindsEveryListedIdAndNoOther() throws {
        var generator = SystemRandomNumberGenerator()
        func random() -> [UInt8] { (0..<20).map { _ in UInt8.random(in: 0...255, using: &generator) } }
        var listed: [(ObjectID, BlobInfo)] = []
        for i in 0..<3000 {
            var bytes = random()
            if i % 3 == 0 { bytes[0] = 0x7F; bytes[1] = 0x00 }  // many in one prefix
            if i == 1 { bytes = [UInt8](repeating: 0, count: 20) }
            if i == 2 { bytes = [UInt8](repeating: 0xFF, count: 20) }
            listed.append((try #require(ObjectID(bytes: bytes)), BlobInfo(size: Int64(i), mtime: 7)))
        }
        // In no order, then a later line for one id.
        let table = BlobSizeTable(listed.shuffled(using: &generator) + [(listed[5].0, BlobInfo(size: -5, mtime: 9))])
        for (id, info) in listed {
            #expect(table[id] == info, "\(id)")
            var bytes = id.bytes
            bytes[19] ^= 0x01
            let neighbour = try #require(ObjectID(bytes: bytes))
            if !listed.contains(where: { $0.0 == neighbour }) { #expect(table[neighbour] == nil) }
        }
        #expect(table[try #require(ObjectID(bytes: [0x7F, 0x01] + [UInt8](repeating: 0, count: 18)))] == nil)
        #expect(BlobSizeTable()[listed[0].0] == nil)
    }

    @Test func aLargeTreeIsListedInCommitsOfBoundedSize() throws {
        let folder = NSTemporaryDirectory() + "fprep-manifest-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let repository = try Repository(creatingBareAt: folder, initialBranch: "main")
        let count = SizeManifest.linesPerCommit * 2 + 500
        let builder = try repository.treeBuilder()
        for i in 0..<count {
            let id = try Array("blob \(i)".utf8).withUnsafeBytes { try repository.writeBlob($0) }
            try builder.insert(name: Array("f\(i)".utf8), id: id, mode: .blob)
        }
        let tree = try builder.write()
        #expect(try SizeManifest.extend(repository, from: nil, to: tree, time: 100) == count)
        let tip = try #require(try repository.referenceTarget(SizeManifest.reference))
        var commits = 0
        var next: ObjectID? = tip
        while let id = next {
            let commit = try repository.commit(id)
            var lines: [(ObjectID, BlobInfo)] = []
            commit.withMessageBytes { SizeManifest.parse($0, into: &lines) }
            #expect(lines.count <= SizeManifest.linesPerCommit)
            commits += 1
            next = commit.parentIDs.first
        }
        #expect(commits == 3)
        #expect(Set(try SizeManifest.entries(repository, from: tip, stoppingAt: nil).map(\.0)).count == count)
    }

    /// Hooks of pushes that land at once, and a device's push of its own
    /// sizes, write the manifest's ref together; one that finds the ref
    /// locked or moved waits and writes on the new tip. With the lock held
    /// while four writers start (as receive-pack holds it), each must list
    /// its blobs once the lock goes: the retries that did not wait gave up
    /// within microseconds and lost the push's sizes.
    @Test func writersThatFindTheRefBusyWaitAndLoseNothing() throws {
        let folder = NSTemporaryDirectory() + "fprep-manifest-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let repository = try Repository(creatingBareAt: folder, initialBranch: "main")
        func tree(_ texts: [String], in repository: Repository) throws -> (ObjectID, [ObjectID]) {
            let builder = try repository.treeBuilder()
            var ids: [ObjectID] = []
            for (i, text) in texts.enumerated() {
                let id = try Array(text.utf8).withUnsafeBytes { try repository.writeBlob($0) }
                try builder.insert(name: Array("f\(i)".utf8), id: id, mode: .blob)
                ids.append(id)
            }
            return (try builder.write(), ids)
        }
        let (first, _) = try tree(["start"], in: repository)
        try SizeManifest.extend(repository, from: nil, to: first, time: 1)
        let writers = 4
        var trees: [(ObjectID, [ObjectID])] = []
        for w in 0..<writers { trees.append(try tree((0..<3).map { "writer \(w) blob \($0)" }, in: repository)) }

        // Held as git's receive-pack holds it while it updates the ref.
        let lock = folder + "/" + SizeManifest.reference + ".lock"
        #expect(FileManager.default.createFile(atPath: lock, contents: Data()))
        let busy = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        let failures = Mutex<[String]>([])
        for (w, (tree, _)) in trees.enumerated() {
            DispatchQueue.global().async(group: done) {
                var told = false
                do {
                    // A repository of its own, as each hook process opens one.
                    let own = try Repository(openingAt: folder)
                    try SizeManifest.extend(own, from: first, to: tree, time: Int64(10 + w)) {
                        if !told { told = true; busy.signal() }
                    }
                } catch {
                    failures.withLock { $0.append("writer \(w): \(error)") }
                }
                if !told { busy.signal() }
            }
        }
        for _ in 0..<writers {
            #expect(busy.wait(timeout: .now() + 60) == .success, "a writer neither found the ref busy nor ended")
        }
        try FileManager.default.removeItem(atPath: lock)
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(failures.withLock { $0 } == [])
        let tip = try #require(try repository.referenceTarget(SizeManifest.reference))
        let listed = Set(try SizeManifest.entries(repository, from: tip, stoppingAt: nil).map(\.0))
        for (w, (_, ids)) in trees.enumerated() {
            #expect(ids.allSatisfy(listed.contains), "writer \(w)'s blobs are not all in the manifest")
        }
    }

    @Test func parseSkipsMalformedLines() {
        let text = "fprep sizes v1\n\nnot a line\n\(String(repeating: "a", count: 40)) 12 34\n\(String(repeating: "b", count: 40)) x 1\n"
        var result: [(ObjectID, BlobInfo)] = []
        Array(text.utf8).withUnsafeBytes { SizeManifest.parse($0, into: &result) }
        #expect(result.count == 1)
        #expect(result.first?.1 == BlobInfo(size: 12, mtime: 34))
    }

    /// Every fetch has the remote walk the manifest commits a device names;
    /// the commit-graph spares it reading them. Import and post-receive keep
    /// the remote's graph up to date, and a clone writes the replica's own.
    @Test func importPushAndCloneKeepCommitGraphs() throws {
        let h = try SyncHarness(files: ["a.txt": "a\n"])
        func graphHolds(_ objects: String, _ id: ObjectID) -> Bool {
            var files = [objects + "/info/commit-graph"]
            let layers = objects + "/info/commit-graphs"
            files += ((try? FileManager.default.contentsOfDirectory(atPath: layers)) ?? [])
                .filter { $0.hasSuffix(".graph") }.map { layers + "/" + $0 }
            let raw = Data(id.bytes)
            return files.contains { (try? Data(contentsOf: URL(fileURLWithPath: $0)))?.range(of: raw) != nil }
        }
        let remote = try Repository(openingAt: h.remote)
        let imported = try #require(try remote.referenceTarget(SizeManifest.reference))
        #expect(graphHolds(h.remote + "/objects", imported), "import-tree writes the graph")
        let replicaObjects = h.replicaRoot + "/.git/objects"
        #expect(graphHolds(replicaObjects, imported), "clone writes the replica's graph")

        let pushed = try h.push { work in try Data("a two\n".utf8).write(to: URL(fileURLWithPath: work + "/a.txt")) }
        let extended = try #require(try remote.referenceTarget(SizeManifest.reference))
        #expect(extended != imported)
        #expect(graphHolds(h.remote + "/objects", extended), "post-receive adds the new manifest commit")
        #expect(graphHolds(h.remote + "/objects", try #require(ObjectID(hex: pushed))), "and the pushed commit")
        #expect(try h.git(["--git-dir=\(h.remote)", "commit-graph", "verify"], in: h.folder) == "")
    }
}
