import Foundation
import Glibc
import Testing

// `fprep gc`: content git fetched by itself into .git is given back; the
// device's own content (a local commit waiting to be pushed) never is.

@Suite("gc")
struct GarbageCollectTests {
    @Test("git log -p fetches content into .git; gc gives it back (dry run first), keeps unpushed content, and everything still works")
    func gcDropsFetchedContentOnly() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let before = try box.fprepJSON(["status"], cwd: replica).int("gitBytes") ?? 0
            // git fetches every blob of the commit by itself.
            _ = try box.gitOK(["log", "-p", "-1"], cwd: replica)
            let grown = try box.fprepJSON(["status"], cwd: replica).int("gitBytes") ?? 0
            #expect(grown >= before + 12_000, "\(before) → \(grown)")

            // Unpushed content of this device: the remote is away.
            let away = box.at("away.git")
            #expect(rename(remote.path, away) == 0)
            try "mine, not pushed\n".write(toFile: replica + "/mine.txt", atomically: true, encoding: .utf8)
            _ = try box.fprep(["sync"], cwd: replica)
            #expect(rename(away, remote.path) == 0)

            let packs = packFiles(replica)
            let beforeGC = try box.fprepJSON(["status"], cwd: replica).int("gitBytes") ?? 0
            let dry = try box.fprepJSON(["gc", "--dry-run"], cwd: replica)
            #expect((dry.int("blobs") ?? 0) >= 5 && (dry.int("bytesFreed") ?? 0) >= 12_000, "\(dry)")
            #expect(packFiles(replica) == packs, "a dry run removed packs")
            let done = try box.fprepJSON(["gc"], cwd: replica)
            #expect(done.int("blobs") == dry.int("blobs"), "\(done)")
            let after = try box.fprepJSON(["status"], cwd: replica).int("gitBytes") ?? 0
            #expect(after <= beforeGC - 12_000, "\(beforeGC) → \(after)")
            #expect(try box.fprepJSON(["gc"], cwd: replica).int("blobs") == 0, "a second gc found more")

            // The unpushed commit's content is still here: the push lands it.
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.gitOK(["show", "main:mine.txt"], cwd: remote.path) == "mine, not pushed")
            // And the replica still works: content comes again when asked.
            try box.fprepOK(["materialize", "bin.dat"], cwd: replica)
            #expect(contents(replica + "/bin.dat") == remote.files["bin.dat"])
            #expect(try box.fprepJSON(["status"], cwd: replica).objects("changes").isEmpty)
        }
    }

    @Test("a sync gives fetched content back once it passes fprep.gcThreshold, not below it; a bad threshold stops the sync in one line before anything")
    func syncCollectsAboveTheThreshold() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            _ = try box.gitOK(["log", "-p", "-1"], cwd: replica)
            let grown = try box.fprepJSON(["status"], cwd: replica).int("gitBytes") ?? 0
            let packs = packFiles(replica)

            // The default threshold (256 MiB) is far above these few files.
            let under = try box.fprepJSON(["sync"], cwd: replica)
            #expect(under["fetchedContentCollected"] == nil, "\(under)")
            #expect(packFiles(replica) == packs)

            try box.gitOK(["config", "fprep.gcThreshold", "nonsense"], cwd: replica)
            let refused = try box.fprep(["sync"], cwd: replica)
            expectOneLineError(refused, mentioning: ["fprep.gcThreshold", "nonsense", "256m"])
            #expect(refused.status == 64, "\(refused)")

            try box.gitOK(["config", "fprep.gcThreshold", "1k"], cwd: replica)
            let above = try box.fprepJSON(["sync"], cwd: replica)
            let collected = above["fetchedContentCollected"] as? [String: Any] ?? [:]
            #expect((collected["blobs"] as? Int ?? 0) >= 5 && (collected["bytesFreed"] as? Int ?? 0) >= 12_000, "\(above)")
            let after = try box.fprepJSON(["status"], cwd: replica).int("gitBytes") ?? 0
            #expect(after <= grown - 12_000, "\(grown) → \(after)")
            // What is left holds more than fetched content: the next sync reads no pack index again and collects nothing.
            let again = try box.fprepJSON(["sync"], cwd: replica)
            #expect(again["fetchedContentCollected"] == nil, "\(again)")
            let text = try box.fprepOK(["sync"], cwd: replica)
            #expect(!text.stdout.contains("gave back"), "\(text)")
            try box.fprepOK(["materialize", "bin.dat"], cwd: replica)
            #expect(contents(replica + "/bin.dat") == remote.files["bin.dat"])
        }
    }
}
