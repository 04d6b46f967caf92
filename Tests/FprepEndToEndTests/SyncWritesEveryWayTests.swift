import Foundation
import Testing

/// A sync writes each incoming item one of several ways: a new placeholder
/// (in a batch), a placeholder replacing the old one, new content for a
/// materialized file, a conflict copy beside bytes written into a
/// placeholder. Placeholders for some items are made before the sync knows
/// which way each goes (`EarlyPlaceholders`), under the temporary names the
/// other ways use too. Every way at once in one sync: each item ends as its
/// way makes it, and no temporary of fprep's is left in the tree.
@Suite("one sync, every way of writing an item")
struct SyncWritesEveryWayTests {
    @Test("changed and added files, written every way in one sync, end right and leave no temporary", arguments: [false, true])
    func everyWayAtOnce(_ bothWays: Bool) throws {
        try withSandbox { box in
            let (_, one, full) = try box.replicaBesideFullClone(materialized: ["docs/readme.md"])
            try box.sh("""
                printf 'remote#1\\n' >> a.txt && printf 'remote#2\\n' >> docs/readme.md && printf 'more' >> bin.dat && \
                printf 'x' >> docs/deep/nested.txt && chmod +x empty.txt && printf 'new\\n' > docs/added.txt && \
                printf 'top\\n' > added-top.txt && git add -A && git commit -qm remote && git push -q origin main
                """, cwd: full)
            try box.sh("printf 'dev#1\\n' >> a.txt", cwd: one)
            try box.fprepOK(bothWays ? ["sync"] : ["sync", "--incoming"], cwd: one)

            let paths = walk(one, skipping: [".git", ".fprep"])
            #expect(paths.filter { $0.contains(".fprep-") }.isEmpty, "temporaries left: \(paths)")
            // New content for the materialized file, without a fetch by hand.
            #expect(contents(one + "/docs/readme.md") == contents(full + "/docs/readme.md"))
            // The bytes written into the placeholder, kept beside the remote's version.
            let copies = conflictCopies(Dictionary(uniqueKeysWithValues: paths.map { ($0, true) }), of: "a.txt")
            #expect(copies.count == 1, "\(paths)")
            if let copy = copies.first {
                #expect(String(decoding: contents(one + "/" + copy) ?? Data(), as: UTF8.self).hasSuffix("dev#1\n"))
            }
            let placeholders = ["a.txt", "bin.dat", "docs/deep/nested.txt", "empty.txt", "docs/added.txt", "added-top.txt"]
            try box.fprepOK(["materialize"] + placeholders, cwd: one)
            for path in placeholders {
                #expect(contents(one + "/" + path) == contents(full + "/" + path), "\(path)")
            }
            #expect((lstatInfo(one + "/empty.txt")?.mode ?? 0) & 0o100 != 0, "the mode the remote gave empty.txt")
            let changes = try box.fprepJSON(["status"], cwd: one).objects("changes")
            #expect(changes.count == (bothWays ? 0 : 1), "only the conflict copy waits (unless pushed): \(changes)")
        }
    }
}
