import Foundation
import Testing
import FprepGit
@testable import FprepCore

@Suite(.serialized) struct SyncTests {
    static let files = [
        "docs/a.txt": "alpha\n", "docs/b.txt": "bravo\n", "docs/deep/x/y/z.txt": "zulu\n",
        "pics/p1.jpg": String(repeating: "p", count: 5000), "other/o.txt": "oscar\n", "top.txt": "top\n",
    ]
    static let root = ContainerIdentifier.root
    static let workingSet = ContainerIdentifier.workingSet

    @Test func syncLaysOutAddsChangesDeletionsAndMoves() throws {
        let h = try SyncHarness(files: Self.files)
        _ = try h.replica().materialize(["docs/a.txt"], relativeTo: h.replicaRoot)
        let folderInode = try #require(h.stat("pics")).inode
        try h.push { work in
            try h.git(["mv", "docs/a.txt", "docs/renamed.txt"], in: work)
            try h.git(["mv", "pics", "photos"], in: work)
            try Data("bravo, longer now\n".utf8).write(to: URL(fileURLWithPath: work + "/docs/b.txt"))
            try Data("new\n".utf8).write(to: URL(fileURLWithPath: work + "/new.txt"))
            try h.git(["rm", "-q", "top.txt"], in: work)
        }
        let report = try h.replica().sync()
        #expect(report.added == 1 && report.changed == 1 && report.deleted == 1)
        #expect(report.bytesFetched == 0, "a move of a materialized file fetches nothing")
        // The materialized file moved with its content and stays materialized.
        #expect(try h.read("docs/renamed.txt") == "alpha\n")
        #expect(h.stat("docs/a.txt") == nil)
        // The renamed folder moved as one: same inode.
        #expect(h.stat("photos")?.inode == folderInode)
        #expect(h.stat("pics") == nil)
        // Changed and new files are placeholders with the new size and the push's date.
        let changed = try #require(h.stat("docs/b.txt"))
        #expect(changed.size == 18 && changed.blocks == 0 && changed.mtime.0 == 1_700_000_060)
        #expect(h.stat("new.txt")?.size == 4)
        #expect(h.stat("top.txt") == nil)
        let status = try h.replica().status()
        #expect(status.materialized == 1 && status.modified == 0 && status.deleted == 0)
        #expect(try h.git(["status", "--porcelain"], in: h.replicaRoot) == "")
        #expect(try h.replica().currentAnchor() == h.git(["rev-parse", "HEAD"], in: h.work))
    }

    @Test func aZeroBytePlaceholderNobodyNotedGetsItsSizeOnceKnown() throws {
        let h = try SyncHarness(files: Self.files)
        // A push the hook has not listed yet: the sync lays the file out at
        // 0 bytes, size unknown.
        try Data("twenty-one bytes long".utf8).write(to: URL(fileURLWithPath: h.work + "/late.txt"))
        try h.git(["add", "-A"], in: h.work)
        try h.git(["commit", "-q", "-m", "late"], in: h.work)
        let old = try h.git(["rev-parse", "origin/main"], in: h.work)
        try h.git(["push", "-q", "origin", "HEAD:main"], in: h.work)
        let new = try h.git(["rev-parse", "HEAD"], in: h.work)
        _ = try h.replica().sync()
        #expect(h.stat("late.txt")?.size == 0)
        // Whatever laid it out forgot to say so (the note is gone)...
        try h.replica().store.setMeta(UnknownSizes.pendingKey, "")
        // ...and the hook lists its size now. A sync whose cost follows the
        // change (incoming) does not read every entry to find it...
        try PostReceive.run(gitDirectory: h.remote, updates: PostReceive.parse("\(old) \(new) refs/heads/main\n"))
        _ = try h.replica().sync(incoming: true)
        #expect(h.stat("late.txt")?.size == 0)
        // ...the next one that scans the whole tree anyway still looks.
        _ = try h.replica().sync()
        let laidOut = try #require(h.stat("late.txt"))
        #expect(laidOut.size == 21 && laidOut.blocks == 0, "\(laidOut.size) bytes")
    }

    @Test func changedMaterializedFileGetsItsNewContent() throws {
        let h = try SyncHarness(files: Self.files)
        _ = try h.replica().materialize(["docs"], relativeTo: h.replicaRoot)
        try h.push { work in try Data("alpha two\n".utf8).write(to: URL(fileURLWithPath: work + "/docs/a.txt")) }
        let report = try h.replica().sync()
        #expect(report.bytesFetched > 0)
        #expect(try h.read("docs/a.txt") == "alpha two\n")
        #expect(try h.replica().status().materialized == 3)
    }

    /// A file this device wrote is not in the store's materialized list, so
    /// the content asked for right after the diff misses it; the second
    /// request must bring it.
    @Test func aFileThisDeviceWroteGetsTheRemoteChangeToo() throws {
        let h = try SyncHarness(files: Self.files)
        _ = try h.replica().materialize(["docs/a.txt"], relativeTo: h.replicaRoot)
        try Data("mine\n".utf8).write(to: URL(fileURLWithPath: h.replicaRoot + "/docs/mine.txt"))
        #expect(try h.replica().sync().pushed != nil)
        try h.git(["pull", "-q", "--ff-only", "origin", "main"], in: h.work)
        try h.push { work in
            try Data("mine, edited elsewhere\n".utf8).write(to: URL(fileURLWithPath: work + "/docs/mine.txt"))
            try Data("alpha two\n".utf8).write(to: URL(fileURLWithPath: work + "/docs/a.txt"))
        }
        let report = try h.replica().sync(incoming: true)
        #expect(report.changed == 2 && report.keptLocal.isEmpty)
        #expect(try h.read("docs/mine.txt") == "mine, edited elsewhere\n")
        #expect(try h.read("docs/a.txt") == "alpha two\n")
        let status = try h.replica().status()
        #expect(status.modified == 0)
        #expect(try h.git(["status", "--porcelain"], in: h.replicaRoot) == "")
    }

    /// A file and a folder of one name sit apart in git's order ("a",
    /// "a.txt", "a/"): the diff must still see the pair and refuse it.
    @Test func aFileAndAFolderOfOneNameAreRefused() throws {
        let h = try SyncHarness(files: Self.files)
        let before = try h.replica().currentAnchor()
        let gitDir = "--git-dir=\(h.remote)"
        let blob = try h.git([gitDir, "hash-object", "-w", "--stdin"], in: h.folder, input: "x\n")
        let inner = try h.git([gitDir, "mktree"], in: h.folder, input: "100644 blob \(blob)\tinner.txt\n")
        let listing = try h.git([gitDir, "ls-tree", "main"], in: h.folder)
        let tree = try h.git([gitDir, "mktree"], in: h.folder,
                             input: listing + "\n100644 blob \(blob)\tsame\n100644 blob \(blob)\tsame.txt\n040000 tree \(inner)\tsame\n")
        let commit = try h.git([gitDir, "commit-tree", "-p", "main", "-m", "two entries named same", tree], in: h.folder)
        try h.git([gitDir, "update-ref", "refs/heads/main", commit], in: h.folder)
        do {
            _ = try h.replica().sync()
            Issue.record("a tree with a file and a folder of one name was applied")
        } catch let error as FprepError {
            #expect(error.message.contains("same"))
        }
        #expect(try h.replica().currentAnchor() == before)
        #expect(h.stat("same") == nil && h.stat("same.txt") == nil)
    }

    @Test func localChangesAreNeverLost() throws {
        let h = try SyncHarness(files: Self.files)
        _ = try h.replica().materialize(["docs/a.txt", "docs/b.txt"], relativeTo: h.replicaRoot)
        try Data("mine\n".utf8).write(to: URL(fileURLWithPath: h.replicaRoot + "/docs/a.txt"))
        try Data("mine too\n".utf8).write(to: URL(fileURLWithPath: h.replicaRoot + "/docs/b.txt"))
        try h.push { work in
            try Data("theirs\n".utf8).write(to: URL(fileURLWithPath: work + "/docs/a.txt"))
            try h.git(["rm", "-q", "docs/b.txt"], in: work)
        }
        let report = try h.replica().sync()
        // Both changed a.txt: the remote's keeps the name, ours is kept beside it.
        #expect(try h.read("docs/a.txt") == "theirs\n")
        let conflict = try #require(report.conflicts.first)
        #expect(conflict.path == "docs/a.txt" && conflict.copy.hasPrefix("docs/a (conflict "))
        #expect(try h.read(conflict.copy) == "mine\n")
        // Edit against delete keeps the edit.
        #expect(try h.read("docs/b.txt") == "mine too\n")
        #expect(report.pushed != nil)
        #expect(report.signals.contains { $0.reason.contains("conflict") })
        #expect(try h.replica().status().changes.isEmpty)
    }

    @Test func aChangeOutsideTheWorkingSetRaisesNoFolderSignal() throws {
        let h = try SyncHarness(files: Self.files)
        _ = try h.replica().materialize(["docs/a.txt"], relativeTo: h.replicaRoot)
        try h.push { work in try Data("o2\n".utf8).write(to: URL(fileURLWithPath: work + "/other/o.txt")) }
        #expect(try h.replica().sync().signals.isEmpty)
    }

    @Test func aChangeInTheWorkingSetSignalsItsParentAndTheWorkingSetOnce() throws {
        let h = try SyncHarness(files: Self.files)
        _ = try h.replica().materialize(["docs/a.txt"], relativeTo: h.replicaRoot)
        try h.push { work in
            try Data("a2\n".utf8).write(to: URL(fileURLWithPath: work + "/docs/a.txt"))
            try Data("b2\n".utf8).write(to: URL(fileURLWithPath: work + "/docs/b.txt"))  // sibling of a working-set item
        }
        let report = try h.replica().sync()
        #expect(report.signals.map(\.container) == ["docs", Self.workingSet], "one signal per container, coalesced")
        let log = try h.replica().signals(after: 0)
        #expect(log.map(\.seq) == [1, 2])
        #expect(log.allSatisfy { $0.domain == "test" && $0.anchor == report.to })
    }

    @Test func aDeepChangeUnderAMaterializedFolderSignalsItsFolder() throws {
        let h = try SyncHarness(files: Self.files)
        _ = try h.replica().materialize(["docs"], relativeTo: h.replicaRoot)
        try h.push { work in try Data("z2\n".utf8).write(to: URL(fileURLWithPath: work + "/docs/deep/x/y/z.txt")) }
        let report = try h.replica().sync()
        #expect(SyncHarness.containers(report) == ["docs/deep/x/y", Self.workingSet])
    }

    @Test func aMoveOutOfTheWorkingSetSignalsBothParents() throws {
        let h = try SyncHarness(files: Self.files)
        _ = try h.replica().materialize(["docs/a.txt"], relativeTo: h.replicaRoot)
        try h.push { work in try h.git(["mv", "docs/a.txt", "other/a.txt"], in: work) }
        let report = try h.replica().sync()
        #expect(SyncHarness.containers(report) == ["docs", "other", Self.workingSet])
        #expect(try h.read("other/a.txt") == "alpha\n")
    }

    @Test func aMoveIntoTheWorkingSetSignalsTheNewParent() throws {
        let h = try SyncHarness(files: Self.files)
        try h.replica().setFavorite("docs", relativeTo: h.replicaRoot, present: true)
        try h.push { work in try h.git(["mv", "other/o.txt", "docs/o.txt"], in: work) }
        let report = try h.replica().sync()
        #expect(SyncHarness.containers(report) == ["docs", Self.workingSet])
    }

    @Test func aMoveBetweenFoldersOutsideTheWorkingSetSignalsNothing() throws {
        let h = try SyncHarness(files: Self.files)
        try h.push { work in try h.git(["mv", "other/o.txt", "pics/o.txt"], in: work) }
        #expect(try h.replica().sync().signals.isEmpty)
    }

    @Test func taggedAndRecentlyDeletedItemsAreInTheWorkingSet() throws {
        let h = try SyncHarness(files: Self.files)
        try h.replica().setTag("other/o.txt", relativeTo: h.replicaRoot, name: "red", present: true)
        try h.push { work in try h.git(["rm", "-q", "top.txt"], in: work) }
        _ = try h.replica().sync()
        let items = try h.replica().workingSetItems()
        #expect(items.first { $0.identifier == "other/o.txt" }?.tags == ["red"])
        #expect(items.first { $0.identifier == "top.txt" }?.reasons == [.recentlyDeleted])
        // A change to a tagged item signals its folder.
        try h.push { work in try Data("o3\n".utf8).write(to: URL(fileURLWithPath: work + "/other/o.txt")) }
        #expect(SyncHarness.containers(try h.replica().sync()) == ["other", Self.workingSet])
    }

    @Test func changesPageWithLimitAndContinue() throws {
        let h = try SyncHarness(files: Self.files)
        let start = try h.replica().currentAnchor()
        try h.push { work in
            for i in 0..<7 { try Data("n\(i)\n".utf8).write(to: URL(fileURLWithPath: work + "/docs/n\(i).txt")) }
            try h.git(["rm", "-q", "top.txt"], in: work)
            try h.git(["mv", "other/o.txt", "other/o2.txt"], in: work)
        }
        _ = try h.replica().sync()
        let whole = try h.replica().changes(from: start, to: nil, container: nil, limit: nil)
        #expect(whole.updated.count == 7 && whole.deleted == ["top.txt"] && whole.moved.count == 1 && !whole.moreComing)
        var seen: [String] = []
        var token = start
        var batches = 0
        while true {
            let batch = try h.replica().changes(from: token, to: nil, container: nil, limit: 3)
            seen += batch.updated.map(\.identifier) + batch.deleted + batch.moved.map(\.to)
            batches += 1
            token = batch.anchor
            if !batch.moreComing { break }
        }
        #expect(batches == 3)
        #expect(seen.count == 9 && Set(seen).count == 9)
        #expect(token == whole.anchor)
        let docs = try h.replica().changes(from: start, to: nil, container: "docs", limit: nil)
        #expect(docs.updated.count == 7 && docs.deleted.isEmpty && docs.moved.isEmpty)
        let root = try h.replica().changes(from: start, to: nil, container: Self.root, limit: nil)
        #expect(root.deleted == ["top.txt"] && root.updated.isEmpty)
    }

    @Test func anAnchorFromRewrittenHistoryHasExpired() throws {
        let h = try SyncHarness(files: Self.files)
        try h.push { work in try Data("v1\n".utf8).write(to: URL(fileURLWithPath: work + "/top.txt")) }
        _ = try h.replica().sync()
        let old = try h.replica().currentAnchor()
        // Rewrite history: a different commit on top of the first one, force-pushed.
        try h.git(["reset", "-q", "--hard", "HEAD~1"], in: h.work)
        try h.push(force: true) { work in try Data("v2 rewritten\n".utf8).write(to: URL(fileURLWithPath: work + "/top.txt")) }
        _ = try h.replica().sync()
        #expect(h.stat("top.txt")?.size == 13)
        do {
            _ = try h.replica().changes(from: old, to: nil, container: nil, limit: nil)
            Issue.record("an anchor of rewritten history was accepted")
        } catch let error as FprepError {
            #expect(error.kind == .expiredAnchor && error.exitCode == 65)
        }
        let unknown = String(repeating: "1", count: 40)
        #expect(throws: FprepError.self) { try h.replica().changes(from: unknown, to: nil, container: nil, limit: nil) }
        do {
            _ = try h.replica().changes(from: "not-an-anchor", to: nil, container: nil, limit: nil)
        } catch let error as FprepError {
            #expect(error.kind == .usage)
        }
    }

    @Test func anUnreachableRemoteLeavesTheReplicaAsItWas() throws {
        let h = try SyncHarness(files: Self.files)
        try h.push { work in try Data("later\n".utf8).write(to: URL(fileURLWithPath: work + "/top.txt")) }
        let before = try h.replica().currentAnchor()
        try FileManager.default.moveItem(atPath: h.remote, toPath: h.remote + ".away")
        #expect(throws: FprepError.self) { try h.replica().sync() }
        #expect(try h.replica().currentAnchor() == before)
        #expect(h.stat("top.txt")?.size == 4)
        try FileManager.default.moveItem(atPath: h.remote + ".away", toPath: h.remote)
        _ = try h.replica().sync()
        #expect(h.stat("top.txt")?.size == 6)
    }

    @Test func aHostileEntryInTheNewTreeIsRefusedAndNothingApplied() throws {
        let h = try SyncHarness(files: Self.files)
        let before = try h.replica().currentAnchor()
        // A commit whose tree holds ".GIT" next to a normal change, made with
        // git mktree (libgit2's tree builder refuses such names).
        let gitDir = "--git-dir=\(h.remote)"
        let blob = try h.git([gitDir, "hash-object", "-w", "--stdin"], in: h.folder, input: "evil\n")
        let listing = try h.git([gitDir, "ls-tree", "main"], in: h.folder)
        let tree = try h.git([gitDir, "mktree"], in: h.folder,
                             input: listing + "\n100644 blob \(blob)\tnew.txt\n100644 blob \(blob)\t.GIT\n")
        let commit = try h.git([gitDir, "commit-tree", "-p", "main", "-m", "evil", tree], in: h.folder)
        try h.git([gitDir, "update-ref", "refs/heads/main", commit], in: h.folder)
        #expect(throws: FprepError.self) { try h.replica().sync() }
        #expect(try h.replica().currentAnchor() == before)
        #expect(h.stat("new.txt") == nil && h.stat(".GIT") == nil)
        #expect(try h.replica().status().items == 6)
    }

    @Test func aDeletedBranchIsAClearError() throws {
        let h = try SyncHarness(files: Self.files)
        try h.git(["push", "-q", "origin", "HEAD:other"], in: h.work)
        try h.git(["--git-dir=\(h.remote)", "symbolic-ref", "HEAD", "refs/heads/other"], in: h.folder)
        try h.git(["push", "-q", "origin", ":main"], in: h.work)
        do {
            _ = try h.replica().sync()
            Issue.record("sync of a deleted branch succeeded")
        } catch let error as FprepError {
            #expect(error.message.contains("no longer exists"))
        }
        #expect(try h.replica().status().items == 6)
    }
}
