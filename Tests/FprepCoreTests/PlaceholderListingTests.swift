import Foundation
import FprepGit
import Testing
@testable import FprepCore

/// The agent learns which placeholders to watch from listings that compare
/// the index with the listing before and decode only what changed. After
/// every kind of index change (remote edits, adds, deletes, renames, mode
/// changes, a materialize, an evict), the
/// listing kept up to date must say exactly what a fresh listing says.
@Suite struct PlaceholderListingTests {
    @Test(arguments: [1, 2, 3])
    func anUpdatedListingAgreesWithAFreshOne(seed: UInt64) throws {
        var files: [String: String] = [:]
        for n in 0..<60 { files["d\(n % 5)/f\(n).txt"] = "file \(n)\n" }
        let h = try SyncHarness(files: files)
        var random = SplitMix(seed)
        var listing = PlaceholderListing()
        // What the agent would hold: each watched file's blob and inode.
        func inode(_ path: String) -> UInt64 { h.stat(h.replicaRoot + "/" + path).map { UInt64($0.inode) } ?? 0 }
        var watched: [String: (blob: ObjectID, inode: UInt64)] = [:]
        for file in try h.replica().watchablePlaceholders(since: &listing).watch {
            watched[file.path.description] = (file.blob, inode(file.path.description))
        }
        #expect(watched.count == 60)
        var names = Array(files.keys).sorted()
        for round in 0..<6 {
            // Changes on the remote, synced in.
            try h.push("round \(round)") { work in
                for _ in 0..<4 {
                    guard !names.isEmpty else { break }
                    let k = Int(random.next() % UInt64(names.count))
                    let name = names[k]
                    switch random.next() % 4 {
                    case 0: try Data("edited \(round)\n".utf8).write(to: URL(fileURLWithPath: work + "/" + name))
                    case 1:
                        try FileManager.default.removeItem(atPath: work + "/" + name)
                        names.remove(at: k)
                    case 2:
                        let to = "d\(random.next() % 5)/moved-\(round)-\(k).txt"
                        try FileManager.default.moveItem(atPath: work + "/" + name, toPath: work + "/" + to)
                        names[k] = to
                    default: _ = chmod(work + "/" + name, 0o755)
                    }
                }
                let added = "d\(random.next() % 7)/new-\(round).txt"
                try h.write([added: "new \(round)\n"], under: work)
                names.append(added)
            }
            _ = try h.replica().sync()
            // Changes here: one materialized, one materialized and evicted again.
            let here = names.shuffled(using: &random)
            if here.count >= 2 {
                _ = try h.replica().materialize([here[0], here[1]], relativeTo: h.replicaRoot)
                _ = try h.replica().evict([here[1]], relativeTo: h.replicaRoot)
            }
            let changes = try h.replica().watchablePlaceholders(since: &listing)
            for gone in changes.gone { watched[gone.description] = nil }
            for file in changes.watch { watched[file.path.description] = (file.blob, inode(file.path.description)) }
            let fresh = try h.replica().watchablePlaceholders()
            let kept = Set(watched.keys), listed = Set(fresh.map(\.path.description))
            #expect(kept == listed, "seed \(seed), round \(round): kept \(kept.subtracting(listed).sorted()), missing \(listed.subtracting(kept).sorted())")
            for file in fresh {
                let path = file.path.description
                // The same blob, and the file the agent marked: a placeholder
                // made again (a new inode) must have been listed again.
                #expect(watched[path]?.blob == file.blob, "seed \(seed), round \(round): \(path) watched for another blob")
                #expect(watched[path]?.inode == inode(path), "seed \(seed), round \(round): \(path) made again but not listed")
            }
            // Nothing changed since: the next listing says nothing.
            let again = try h.replica().watchablePlaceholders(since: &listing)
            #expect(again.watch.isEmpty && again.gone.isEmpty, "seed \(seed), round \(round)")
        }
    }
}

/// A small seeded generator (SplitMix64), so a failing seed replays.
struct SplitMix: RandomNumberGenerator {
    private var state: UInt64
    init(_ seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
