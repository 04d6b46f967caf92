import Foundation
import FprepTestSupport
import Testing
import FprepGit
@testable import FprepCore

/// A replica opened for a test's own step, as a command opens it.
func openReplica(_ root: String) throws -> Replica {
    try Replica.open(containing: root, access: Replica.Access(command: "test", exclusive: true))
}

extension SyncHarness {
    /// A second replica of the harness's remote (the second device).
    func secondReplica() throws -> String {
        let second = folder + "/replica-b"
        _ = try Cloner.clone(url: remote, into: second, branch: nil, progress: SilentProgress(), showGitProgress: false)
        return second
    }
}

/// Two replicas of one remote, each changed offline, then synced: both end
/// with the same tree and nothing either device wrote is lost.
@Suite(.serialized) struct TwoDeviceTests {
    static let files = [
        "shared.txt": "line 1\nline 2\nline 3\nline 4\nline 5\n", "a-only.txt": "a\n", "b-only.txt": "b\n",
        "gone.txt": "to be deleted on A, edited on B\n", "renamed.txt": "to be renamed on A, edited on B\n",
        "photo.bin": "binary\u{0}data\n",
    ]

    /// The file tree of a replica (outside .git and .fprep), path → content
    /// (placeholders are materialized first, so content can be compared).
    static func tree(_ h: SyncHarness, _ root: String) throws -> [String: String] {
        let replica = try Replica.open(containing: root, access: Replica.Access(command: "test", exclusive: true))
        let materialized = try replica.materialize(["."], relativeTo: root)
        #expect(materialized.skipped.isEmpty, "materialize skipped: \(materialized.skipped) in \(root)")
        var result: [String: String] = [:]
        let enumerator = FileManager.default.enumerator(atPath: root)
        while let path = enumerator?.nextObject() as? String {
            if path.hasPrefix(".git") || path.hasPrefix(".fprep") { continue }
            var isDirectory: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: root + "/" + path, isDirectory: &isDirectory)
            if !isDirectory.boolValue { result[path] = try String(contentsOfFile: root + "/" + path, encoding: .utf8) }
        }
        return result
    }

    @Test func concurrentOfflineEditsEndIdenticalWithNothingLost() throws {
        let h = try SyncHarness(files: Self.files)
        let second = try h.secondReplica()
        func write(_ root: String, _ path: String, _ text: String) throws {
            try FileManager.default.createDirectory(atPath: ((root + "/" + path) as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(text.utf8).write(to: URL(fileURLWithPath: root + "/" + path))
        }
        let a = h.replicaRoot, b = second
        _ = try openReplica(a).materialize(["."], relativeTo: a)
        _ = try openReplica(b).materialize(["."], relativeTo: b)

        // Device A, offline.
        try write(a, "shared.txt", "line 1 (A)\nline 2\nline 3\nline 4\nline 5\n")   // merges with B's edit
        try write(a, "a-only.txt", "a, edited on A\n")
        try FileManager.default.removeItem(atPath: a + "/gone.txt")
        try FileManager.default.moveItem(atPath: a + "/renamed.txt", toPath: a + "/renamed-by-A.txt")
        try write(a, "new/same-path.txt", "created on A\n")
        try write(a, "photo.bin", "binary\u{0}from A\n")
        // Device B, offline.
        try write(b, "shared.txt", "line 1\nline 2\nline 3\nline 4\nline 5 (B)\n")
        try write(b, "b-only.txt", "b, edited on B\n")
        try write(b, "gone.txt", "edited on B, deleted on A: must survive\n")
        try write(b, "renamed.txt", "edited on B; A renamed me\n")
        try write(b, "new/same-path.txt", "created on B\n")
        try write(b, "photo.bin", "binary\u{0}from B\n")

        let first = try openReplica(a).sync()
        #expect(first.pushed != nil && first.conflicts.isEmpty)
        let merge = try openReplica(b).sync()
        #expect(merge.pushed != nil)
        #expect(Set(merge.conflicts.map(\.path)) == ["new/same-path.txt", "photo.bin"])
        _ = try openReplica(a).sync()
        _ = try openReplica(b).sync()

        let treeA = try Self.tree(h, a), treeB = try Self.tree(h, b)
        #expect(treeA == treeB)
        #expect(treeA["shared.txt"] == "line 1 (A)\nline 2\nline 3\nline 4\nline 5 (B)\n", "a clean text merge")
        #expect(treeA["a-only.txt"] == "a, edited on A\n" && treeA["b-only.txt"] == "b, edited on B\n")
        #expect(treeA["gone.txt"] == "edited on B, deleted on A: must survive\n", "edit against delete keeps the edit")
        #expect(treeA["renamed.txt"] == nil && treeA["renamed-by-A.txt"] == "edited on B; A renamed me\n",
                "rename against edit keeps the edit at the new name")
        let sameNew = treeA.filter { $0.key.hasPrefix("new/") }
        #expect(Set(sameNew.values) == ["created on A\n", "created on B\n"], "two new files at one path both survive")
        let photos = treeA.filter { $0.key.hasPrefix("photo") }
        #expect(Set(photos.values) == ["binary\u{0}from A\n", "binary\u{0}from B\n"], "a binary conflict keeps both")
        #expect(photos.keys.contains("photo.bin") && photos.keys.contains { $0.hasPrefix("photo (conflict ") && $0.hasSuffix(").bin") })
        // Nothing left to sync on either side; the remote holds the same tree.
        #expect(try openReplica(a).status().changes.isEmpty && openReplica(b).status().changes.isEmpty)
        #expect(try openReplica(a).currentAnchor() == openReplica(b).currentAnchor())
        #expect(try h.git(["--git-dir=\(h.remote)", "rev-parse", "main"], in: h.folder) == openReplica(a).currentAnchor())
    }

    /// Neither device's rename is dropped without a word: both names hold
    /// the file on both devices, and the second sync says so.
    @Test func aFileRenamedDifferentlyOnBothDevicesKeepsBothNames() throws {
        let h = try SyncHarness(files: Self.files)
        let second = try h.secondReplica()
        let a = h.replicaRoot, b = second
        try FileManager.default.moveItem(atPath: a + "/a-only.txt", toPath: a + "/named-by-A.txt")
        try FileManager.default.moveItem(atPath: b + "/a-only.txt", toPath: b + "/named-by-B.txt")
        _ = try openReplica(a).sync()
        let report = try openReplica(b).sync()
        _ = try openReplica(a).sync()
        #expect(report.conflicts.contains { $0.path == "named-by-A.txt" && $0.copy == "named-by-B.txt" }, "\(report.conflicts)")
        for root in [a, b] {
            let tree = try Self.tree(h, root)
            #expect(tree["a-only.txt"] == nil && tree["named-by-A.txt"] == "a\n" && tree["named-by-B.txt"] == "a\n", "\(root): \(tree)")
        }
        #expect(try openReplica(a).status().changes.isEmpty && openReplica(b).status().changes.isEmpty)
        #expect(try openReplica(a).currentAnchor() == openReplica(b).currentAnchor())
    }

    @Test func offlineCommitWaitsAndTheNextSyncPushesIt() throws {
        let h = try SyncHarness(files: Self.files)
        try Data("offline edit\n".utf8).write(to: URL(fileURLWithPath: h.replicaRoot + "/new.txt"))
        try FileManager.default.moveItem(atPath: h.remote, toPath: h.remote + ".away")
        #expect(throws: FprepError.self) { try h.replica().sync() }
        let waiting = try h.replica().status()
        #expect(waiting.waitingToPush != nil && waiting.changes.isEmpty)
        #expect(waiting.waitingBecause?.hasPrefix("could not reach the remote") == true, "\(String(describing: waiting.waitingBecause))")
        #expect(FileManager.default.contents(atPath: h.replicaRoot + "/new.txt") == Data("offline edit\n".utf8))
        try FileManager.default.moveItem(atPath: h.remote + ".away", toPath: h.remote)
        let report = try h.replica().sync()
        #expect(report.pushed == waiting.waitingToPush)
        #expect(try h.replica().status().waitingToPush == nil)
        #expect(try h.git(["--git-dir=\(h.remote)", "show", "main:new.txt"], in: h.folder) == "offline edit")
    }

    @Test func aRejectedPushIsRetriedAfterAnotherFetch() throws {
        let h = try SyncHarness(files: Self.files)
        try Data("mine\n".utf8).write(to: URL(fileURLWithPath: h.replicaRoot + "/mine.txt"))
        // Someone pushes between our fetch and our push: a wrapper around git
        // pushes another device's commit right after fprep's first fetch.
        try h.git(["checkout", "-q", "-b", "race"], in: h.work)
        try Data("theirs\n".utf8).write(to: URL(fileURLWithPath: h.work + "/theirs.txt"))
        try h.git(["add", "-A"], in: h.work)
        try h.git(["commit", "-q", "-m", "race"], in: h.work)
        let wrapper = h.folder + "/git-wrapper"
        try writeExecutable("""
            #!/bin/sh
            /usr/bin/git "$@"; status=$?
            case "$*" in *" fetch "*"--prune"*)
              if [ ! -e "\(h.folder)/raced" ]; then touch "\(h.folder)/raced"; /usr/bin/git -C "\(h.work)" push -q origin race:main; fi ;;
            esac
            exit $status
            """, to: wrapper)
        let report = try GitCommand.$executable.withValue(wrapper) { try h.replica().sync() }
        #expect(FileManager.default.fileExists(atPath: h.folder + "/raced"), "the race was injected")
        #expect(report.pushed != nil)
        #expect(try h.git(["--git-dir=\(h.remote)", "show", "main:mine.txt"], in: h.folder) == "mine")
        #expect(try h.git(["--git-dir=\(h.remote)", "show", "main:theirs.txt"], in: h.folder) == "theirs")
        #expect(FileManager.default.fileExists(atPath: h.replicaRoot + "/theirs.txt"))
    }
}

@Suite(.serialized) struct SharedMetadataTests {
    @Test func favoritesAndTagsReachTheOtherDeviceAlsoAfterOfflineEditsOnBoth() throws {
        let h = try SyncHarness(files: TwoDeviceTests.files)
        let second = try h.secondReplica()
        // Offline on both: A favorites a file and tags another; B tags a third.
        try FileManager.default.moveItem(atPath: h.remote, toPath: h.remote + ".away")
        try openReplica(h.replicaRoot).setFavorite("a-only.txt", relativeTo: h.replicaRoot, present: true)
        try openReplica(h.replicaRoot).setTag("shared.txt", relativeTo: h.replicaRoot, name: "red", present: true)
        try openReplica(second).setTag("b-only.txt", relativeTo: second, name: "blue", present: true)
        #expect(throws: FprepError.self) { try openReplica(h.replicaRoot).sync() }
        try FileManager.default.moveItem(atPath: h.remote + ".away", toPath: h.remote)
        _ = try openReplica(h.replicaRoot).sync()
        _ = try openReplica(second).sync()
        _ = try openReplica(h.replicaRoot).sync()
        for root in [h.replicaRoot, second] {
            let items = try openReplica(root).workingSetItems()
            #expect(items.first { $0.identifier == "a-only.txt" }?.reasons.contains(.favorite) == true, "\(root)")
            #expect(items.first { $0.identifier == "shared.txt" }?.tags == ["red"], "\(root)")
            #expect(items.first { $0.identifier == "b-only.txt" }?.tags == ["blue"], "\(root)")
        }
        // An unfavorite on B reaches A too.
        try openReplica(second).setFavorite("a-only.txt", relativeTo: second, present: false)
        _ = try openReplica(second).sync()
        _ = try openReplica(h.replicaRoot).sync()
        #expect(try openReplica(h.replicaRoot).workingSetItems().first { $0.identifier == "a-only.txt" }?.reasons.contains(.favorite) != true)
    }
}

extension SharedMetadataTests {
    @Test func aTagFollowsItsFileMovedOnOneDeviceOnBothDevices() throws {
        let h = try SyncHarness(files: TwoDeviceTests.files)
        let second = try h.secondReplica()
        try openReplica(h.replicaRoot).setTag("a-only.txt", relativeTo: h.replicaRoot, name: "red", present: true)
        _ = try openReplica(h.replicaRoot).sync()
        _ = try openReplica(second).sync()
        #expect(try openReplica(second).workingSetItems().first { $0.identifier == "a-only.txt" }?.tags == ["red"])

        try FileManager.default.createDirectory(atPath: h.replicaRoot + "/moved", withIntermediateDirectories: true)
        try FileManager.default.moveItem(atPath: h.replicaRoot + "/a-only.txt", toPath: h.replicaRoot + "/moved/a.txt")
        let sync = try openReplica(h.replicaRoot).sync()
        #expect(sync.localChanges.contains { $0.kind == .moved && $0.path == "moved/a.txt" }, "\(sync.localChanges)")
        _ = try openReplica(second).sync()
        for root in [h.replicaRoot, second] {
            let items = try openReplica(root).workingSetItems()
            #expect(items.first { $0.identifier == "moved/a.txt" }?.tags == ["red"], "\(root): \(items)")
            #expect(items.first { $0.identifier == "a-only.txt" }?.tags.isEmpty != false, "\(root): \(items)")
        }
    }
}

@Suite(.serialized) struct TrashTests {
    @Test func deletionsFromBothSidesAreListedAndRestoreBringsContentBack() throws {
        let h = try SyncHarness(files: TwoDeviceTests.files)
        try h.push { work in try h.git(["rm", "-q", "b-only.txt"], in: work) }
        try FileManager.default.removeItem(atPath: h.replicaRoot + "/a-only.txt")
        _ = try h.replica().sync()
        try FileManager.default.removeItem(atPath: h.replicaRoot + "/gone.txt")  // not synced yet
        let trash = try h.replica().trash()
        #expect(Set(trash.map(\.identifier)) == ["a-only.txt", "b-only.txt", "gone.txt"])
        #expect(trash.first { $0.identifier == "gone.txt" }?.commit == nil)
        #expect(trash.first { $0.identifier == "b-only.txt" }?.commit != nil)
        #expect(try h.replica().workingSetItems().contains { $0.identifier == "a-only.txt" && $0.reasons.contains(.recentlyDeleted) })
        // Restore: the remote's deletion comes back with its content (fetched) and syncs.
        _ = try h.replica().restore("b-only.txt", relativeTo: h.replicaRoot)
        #expect(try h.read("b-only.txt") == "b\n")
        #expect(throws: FprepError.self) { try h.replica().restore("b-only.txt", relativeTo: h.replicaRoot) }
        #expect(throws: FprepError.self) { try h.replica().restore("never-existed.txt", relativeTo: h.replicaRoot) }
        _ = try h.replica().sync()
        #expect(try h.git(["--git-dir=\(h.remote)", "show", "main:b-only.txt"], in: h.folder) == "b")
        #expect(!(try h.replica().trash().contains { $0.identifier == "b-only.txt" }))
    }
}

@Suite(.serialized) struct RaceTests {
    /// A file changed between a sync's scan and its layout (or any edit the
    /// layout meets) steps aside under a conflict name; the remote's version
    /// takes the name, and the next sync shares the user's copy.
    @Test func anEditTheLayoutMeetsIsKeptAsAConflictCopyAndSyncedNext() throws {
        let h = try SyncHarness(files: TwoDeviceTests.files)
        _ = try h.replica().materialize(["a-only.txt"], relativeTo: h.replicaRoot)
        try h.push { work in try Data("remote edit\n".utf8).write(to: URL(fileURLWithPath: work + "/a-only.txt")) }
        // Pull the remote change into a replica whose file changed after its
        // scan: apply the incoming step directly, as a sync would after a scan.
        try Data("edited during the sync\n".utf8).write(to: URL(fileURLWithPath: h.replicaRoot + "/a-only.txt"))
        let report: SyncReport = try {
            // This replica (and its lock) is released before the next open.
            let replica = try h.replica()
            try Transport.fetchTrees(gitDirectory: replica.gitDirectory, branch: replica.branch)
            try replica.ingestManifest()
            let theirs = try #require(try replica.repository.referenceTarget("refs/remotes/origin/main"))
            let journal = SyncJournal(from: replica.anchor?.hex, to: theirs.hex)
            return try replica.applySync(journal, operation: try replica.store.beginOperation("sync", payload: journal.encoded()))
        }()
        #expect(report.keptLocal.contains { $0.path == "a-only.txt" })
        // The remote's version takes the name (as a placeholder, then materialized).
        #expect(h.stat("a-only.txt")?.size == 12)
        _ = try h.replica().materialize(["a-only.txt"], relativeTo: h.replicaRoot)
        #expect(try h.read("a-only.txt") == "remote edit\n")
        let copies = try FileManager.default.contentsOfDirectory(atPath: h.replicaRoot).filter { $0.hasPrefix("a-only (conflict ") }
        #expect(copies.count == 1)
        #expect(try h.read(copies[0]) == "edited during the sync\n")
        _ = try h.replica().sync()
        #expect(try h.git(["--git-dir=\(h.remote)", "show", "main:\(copies[0])"], in: h.folder) == "edited during the sync")
        #expect(try h.git(["--git-dir=\(h.remote)", "show", "main:a-only.txt"], in: h.folder) == "remote edit")
    }
}
