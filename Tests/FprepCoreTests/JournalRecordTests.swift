import Foundation
import Testing
@testable import FprepCore

// The journal record is carried over by every index write that keeps the
// disk and the index agreeing (each agent fill among them): what it carries
// must not grow with every write.
struct JournalRecordTests {
    private func record(paths: [[UInt8]]) -> JournalRecord {
        JournalRecord(index: [1, 2, 3], point: JournalToken(epoch: "e1", sequence: 7), rules: "-", fullScanAt: 1_700_000_000,
                      treeBytes: 10, folderCount: 2, paths: paths)
    }

    @Test func carriesEachPathOnceAndDropsTheRecordPastItsBound() throws {
        let harness = try SyncHarness(files: ["a.txt": "a\n"])
        let replica = try harness.replica()
        let names = (0..<100).map { Array("hot/f\($0).txt".utf8) }
        record(paths: names + names).save(replica)
        JournalRecord.carry(replica, from: [1, 2, 3], to: [4, 5, 6], paths: names)
        let carried = try #require(JournalRecord.load(replica))
        #expect(carried.index == [4, 5, 6])
        #expect(carried.paths == names, "each path once, in first-seen order: \(carried.paths.count)")

        // A materialize of thousands of files looks at each again: past the
        // bound, the next scan is a full one instead of a record this large.
        let many = (0..<(JournalRecord.maxPaths + 1)).map { Array("big/f\($0).txt".utf8) }
        JournalRecord.carry(replica, from: [4, 5, 6], to: [7, 8, 9], paths: many)
        #expect(JournalRecord.load(replica) == nil)
    }
}
