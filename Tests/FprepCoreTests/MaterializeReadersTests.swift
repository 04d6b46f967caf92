import Foundation
import Testing
import FprepGit
@testable import FprepCore

/// Materialize's writers each read through an object database handle of
/// their own (libgit2 locks a handle over each read). Those handles must
/// read every blob the repository's own handle can, or a blob that handle
/// says needs no fetch is "not sent" to the writers without it.
@Suite struct MaterializeReadersTests {
    /// One process materializes twice (a sync materializes its rule files,
    /// then what arrived under a pin; an agent runs one sync after
    /// another). The first fetch's quarantine is gone when the second
    /// starts, but the repository's handle keeps the pack it read open and
    /// still finds the blob there, so the second fetches nothing for it.
    @Test func aBlobTheFirstMaterializeFetchedIsReadByEveryWriterOfTheNext() throws {
        var files = ["first.txt": "same content\n"]
        for n in 0..<48 { files["many/f\(n).txt"] = "same content\n" }
        let h = try SyncHarness(files: files)
        let replica = try h.replica()
        let first = try replica.materialize(["first.txt"], relativeTo: h.replicaRoot)
        #expect(first.materialized == ["first.txt"])
        // Emptied (its folder stays while it is an alternate of this process).
        let packs = try FileManager.default.contentsOfDirectory(atPath: replica.stateFolder).filter { $0.hasPrefix("fetch-") }.flatMap {
            (try? FileManager.default.contentsOfDirectory(atPath: replica.stateFolder + "/" + $0 + "/pack")) ?? []
        }
        #expect(packs.isEmpty, "the first fetch's packs are still there: \(packs)")

        let second = try replica.materialize(["many"], relativeTo: h.replicaRoot)
        #expect(second.fetchedBlobs == 0, "the blob was fetched again, so this test no longer sees the stale pack")
        #expect(second.materialized.count == 48, "\(second.skipped)")
        for n in 0..<48 {
            #expect(try String(contentsOfFile: h.replicaRoot + "/many/f\(n).txt", encoding: .utf8) == "same content\n")
        }
    }
}
