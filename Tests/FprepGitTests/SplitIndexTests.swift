import Foundation
import Testing
import FprepModel
@testable import FprepGit

/// The split index (`SplitIndex.swift`) against git itself: what fprep
/// writes, git reads entry for entry; what git writes (replacements,
/// deletions, additions), fprep reads entry for entry.
@Suite struct SplitIndexTests {
    /// What `git ls-files --stage -v` says of an entry: tag (H, or S for
    /// skip-worktree), mode, id, stage 0, path.
    static func listing(_ entries: [IndexEntry]) -> [String] {
        entries.sorted { $0.path.lexicographicallyPrecedes($1.path) }.map {
            "\($0.skipWorktree ? "S" : "H") \(String($0.mode, radix: 8)) \($0.id.hex) 0\t\(String(decoding: $0.path, as: UTF8.self))"
        }
    }

    /// A new repository (its work tree `work`) with `core.splitIndex` on.
    static func splitIndexRepository() throws -> (Scratch, String, Repository) {
        let scratch = try Scratch()
        let work = scratch.path + "/work"
        try scratch.git(["init", "-q", "-b", "main", "work"])
        let repository = try Repository(openingAt: work)
        try repository.config().set("core.splitIndex", "true")
        return (scratch, work, repository)
    }

    /// `count` seeded edits of `index`, mirrored in `model`: a removal one
    /// time in `removeOneIn`, else a put, of one of the first `among` paths.
    static func applyRandomEdits(_ count: Int, to index: Index, model: inout [[UInt8]: IndexEntry], among: Int, removeOneIn: UInt64,
                                 next: () -> UInt64, path: (Int) -> [UInt8], entry: (Int) -> IndexEntry) throws {
        for _ in 0..<count {
            let n = Int(next() % UInt64(among))
            if next() % removeOneIn == 0 {
                try index.remove(path: path(n))
                model[path(n)] = nil
            } else {
                let e = entry(n)
                try index.add(e)
                model[e.path] = e
            }
        }
    }

    static func sortedPaths(_ entries: [IndexEntry]) -> [[UInt8]] {
        entries.map(\.path).sorted { $0.lexicographicallyPrecedes($1) }
    }

    static func entries(of index: Index) -> [IndexEntry] {
        (0..<index.count).compactMap { index.entry(at: $0) }
    }

    static func sharedFiles(_ work: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: work + "/.git").filter { $0.hasPrefix("sharedindex.") }
    }

    /// The shared file `.git/index` names (its link extension), nil when whole.
    static func namedShared(_ work: String) throws -> String? {
        guard let bytes = FileManager.default.contents(atPath: work + "/.git/index") else { return nil }
        guard let link = bytes.range(of: Data("link".utf8), options: .backwards) else { return nil }
        let checksum = bytes[(link.upperBound + 4)..<(link.upperBound + 24)]
        return "sharedindex." + checksum.map { String(format: "%02x", $0) }.joined()
    }

    /// Dates every shared file the index does not name two minutes back,
    /// so the next write may remove them (it keeps younger ones a minute).
    static func ageUnnamed(_ work: String) throws {
        let named = try namedShared(work)
        for name in try sharedFiles(work) where name != named {
            var times = utimbuf(actime: time(nil) - 120, modtime: time(nil) - 120)
            utime(work + "/.git/" + name, &times)
        }
    }

    /// Seeded random edits (adds, removals, new content, stat and
    /// skip-worktree changes; some rounds past a fifth of the entries, so
    /// the shared file is written again), each round written split and
    /// checked: read back by fprep and by git, entry for entry with the
    /// model, the checksums verified by `git fsck`, one shared file left.
    /// Shared files get fences every 4 entries (see `SharedIndexFences`), so
    /// lookups and the merge of added entries go through many runs.
    @Test(arguments: [1, 2, 3]) func whatFprepWritesSplitGitReads(seed: UInt64) throws {
        try SharedIndexFences.$writingInterval.withValue(4) { try splitRounds(seed: seed) }
    }

    /// A shared file written as a stream (a clone's placeholders, entry by
    /// entry) gets fences from the paths as they go by, not from reading
    /// the file back; every path is then found through them.
    @Test func aStreamedSharedFileHasFencesEveryLookupGoesThrough() throws {
        try SharedIndexFences.$writingInterval.withValue(4) {
            let (scratch, work, repository) = try Self.splitIndexRepository()
            defer { withExtendedLifetime(scratch) {} }
            let id = try Array("blob\n".utf8).withUnsafeBytes { try repository.writeBlob($0) }
            let paths = (0..<103).map { Array(String(format: "d%02d/f%03d", $0 / 10, $0).utf8) }
            let stream = try IndexStream(path: work + "/.git/index", count: paths.count, split: true)
            for (n, path) in paths.enumerated() {
                try stream.append(IndexEntry(path: path, id: id, mode: 0o100644,
                                             stat: StatData(ctime: (1_700_000_000, 0), mtime: (1_700_000_000, 0), device: 1,
                                                            inode: Int64(n), uid: 0, gid: 0, size: 5), skipWorktree: true))
            }
            try stream.finish()
            let named = try #require(try Self.namedShared(work))
            let checksum = try #require(named.split(separator: ".").last.map(String.init))
            let index = try repository.index()
            let entries = try #require(index.sharedEntryCount)
            let fences = try #require(SharedIndexFences.read(beside: work + "/.git/index", checksum: ObjectID(hex: checksum)?.bytes ?? [],
                                                             entries: entries))
            #expect(fences.paths == stride(from: 0, to: paths.count, by: 4).map { paths[$0] })
            for path in paths { #expect(index.entry(path: path)?.id == id, "\(String(decoding: path, as: UTF8.self))") }
            #expect(index.entry(path: Array("d05/f0505".utf8)) == nil)
        }
    }

    func splitRounds(seed: UInt64) throws {
        let (scratch, work, repository) = try Self.splitIndexRepository()
        var random = SplitMix64(seed: seed)
        let ids = try (0..<8).map { n in try Array("blob \(n)\n".utf8).withUnsafeBytes { try repository.writeBlob($0) } }
        func path(_ n: Int) -> [UInt8] {
            Array(("d\(n % 7)/" + (n % 3 == 0 ? "sub/" : "") + String(repeating: "x", count: n % 13 + 1) + "\(n)").utf8)
        }
        func entry(_ n: Int) -> IndexEntry {
            IndexEntry(path: path(n), id: ids[Int(random.next() % 8)], mode: random.next() % 5 == 0 ? 0o100755 : 0o100644,
                       stat: StatData(ctime: (1_700_000_000, Int64(random.next() % 1000)), mtime: (1_700_000_000, 0), device: 1,
                                      inode: Int64(n), uid: 0, gid: 0, size: Int64(random.next() % 100)),
                       skipWorktree: random.next() % 2 == 0)
        }
        var model: [[UInt8]: IndexEntry] = [:]
        var (splitWrites, sharedWrites) = (0, 0)
        for round in 0..<40 {
            let index = try repository.index()
            let edits = round == 0 ? 300 : (random.next() % 6 == 0 ? 80 : Int(random.next() % 12) + 1)
            try Self.applyRandomEdits(edits, to: index, model: &model, among: 400, removeOneIn: 4,
                                      next: { random.next() }, path: path, entry: entry)
            let namedBefore = try Self.namedShared(work)
            try Self.ageUnnamed(work)
            try index.write()
            let shared = try Self.sharedFiles(work)
            let named = try #require(try Self.namedShared(work))
            #expect(shared.contains(named), "round \(round): the shared index named is there")
            // The one it replaced stays a minute; older ones are gone.
            #expect(Set(shared).isSubset(of: Set([named] + (namedBefore.map { [$0] } ?? []))), "round \(round): \(shared)")
            if named == namedBefore { splitWrites += 1 } else { sharedWrites += 1 }

            let expected = Self.listing(Array(model.values))
            #expect(Self.listing(Self.entries(of: index)) == expected, "round \(round): the writer's view")
            let reread = try repository.index()
            let rereadEntries = Self.entries(of: reread)
            #expect(Self.listing(rereadEntries) == expected, "round \(round): read back")
            for e in rereadEntries { #expect(model[e.path]?.stat == e.stat, "round \(round): stat of \(String(decoding: e.path, as: UTF8.self))") }
            // Every path looked up, present or not (one sorting just after
            // each, and before the first), as a sync looks its changes up.
            let checksum = try #require(named.split(separator: ".").last.map(String.init))
            #expect(SharedIndexFences.read(beside: work + "/.git/index", checksum: ObjectID(hex: checksum)?.bytes ?? [],
                                           entries: try #require(reread.sharedEntryCount)) != nil, "round \(round): the shared file has fences")
            for n in 0..<410 {
                let found = reread.entry(path: path(n))
                #expect(found?.id == model[path(n)]?.id && found?.stat == model[path(n)]?.stat, "round \(round): lookup of \(String(decoding: path(n), as: UTF8.self))")
                #expect(reread.entry(path: path(n) + [0x21]) == nil && reread.contains(path(n)) == (model[path(n)] != nil))
            }
            #expect(reread.entry(path: Array("a".utf8)) == nil && reread.entry(path: Array("zz".utf8)) == nil)
            let git = try scratch.git(["ls-files", "--stage", "-v"], in: work).split(separator: "\n").map(String.init)
            #expect(git == expected, "round \(round): git's view")
            if round % 8 == 7 { _ = try scratch.git(["fsck", "--no-dangling"], in: work) }
        }
        #expect(splitWrites > 10 && sharedWrites > 2, "both kinds of write: \(splitWrites) split, \(sharedWrites) shared")

        // Unset, a small index is written whole again: no shared file left.
        try scratch.git(["config", "--unset", "core.splitIndex"], in: work)
        let index = try repository.index()
        try index.add(entry(1000))
        model[path(1000)] = index.entry(path: path(1000))
        try index.write()
        #expect(try Self.namedShared(work) == nil)
        try Self.ageUnnamed(work)
        try index.write()
        #expect(try Self.sharedFiles(work).isEmpty, "the shared file goes a minute after")
        #expect(try scratch.git(["ls-files", "--stage", "-v"], in: work).split(separator: "\n").map(String.init) == Self.listing(Array(model.values)))
    }

    /// One index kept through many writes, as a long-lived process keeps
    /// it: a split write leaves its file to be read back by the next edit
    /// or write, so between the two every lookup answers from memory, and
    /// the write after goes on from the file read back (in place when the
    /// edits keep each entry's size, split or whole otherwise). Seeded
    /// edits of all kinds; after each write the same index, a fresh read
    /// and git must all agree with the model, entry for entry.
    @Test(arguments: [7, 8]) func oneIndexThroughManyWrites(seed: UInt64) throws {
        try SharedIndexFences.$writingInterval.withValue(4) {
            let (scratch, work, repository) = try Self.splitIndexRepository()
            var random = SplitMix64(seed: seed)
            let ids = try (0..<4).map { n in try Array("blob \(n)\n".utf8).withUnsafeBytes { try repository.writeBlob($0) } }
            func path(_ n: Int) -> [UInt8] { Array(("d\(n % 6)/" + String(repeating: "z", count: n % 5 + 1) + "\(n)").utf8) }
            // Sizes under 100 and the same mode: many edits keep an entry's
            // encoded size, so writes in place come up too.
            func entry(_ n: Int) -> IndexEntry {
                IndexEntry(path: path(n), id: ids[Int(random.next() % 4)], mode: 0o100644,
                           stat: StatData(ctime: (1_700_000_000, 0), mtime: (1_700_000_000, Int64(random.next() % 1000)), device: 1,
                                          inode: Int64(n), uid: 0, gid: 0, size: Int64(random.next() % 100)),
                           skipWorktree: random.next() % 2 == 0)
            }
            var model: [[UInt8]: IndexEntry] = [:]
            let index = try repository.index()
            var sharedNames: Set<String> = []
            for round in 0..<30 {
                let edits = round == 0 ? 400 : (random.next() % 7 == 0 ? 120 : Int(random.next() % 10) + 1)
                if round > 0 && random.next() % 3 == 0 {
                    // Only new stat data for entries there: a write in place.
                    for _ in 0..<edits {
                        let n = Int(random.next() % 500)
                        guard let old = model[path(n)] else { continue }
                        let e = IndexEntry(path: old.path, id: old.id, mode: old.mode,
                                           stat: StatData(ctime: (1_700_000_001, 0), mtime: (1_700_000_001, Int64(round)), device: 1,
                                                          inode: Int64(n), uid: 0, gid: 0, size: Int64(old.stat.fileSize)),
                                           skipWorktree: old.skipWorktree)
                        try index.add(e)
                        model[e.path] = e
                    }
                } else {
                    try Self.applyRandomEdits(edits, to: index, model: &model, among: 500, removeOneIn: 4,
                                              next: { random.next() }, path: path, entry: entry)
                }
                try Self.ageUnnamed(work)
                try index.write()
                if let named = try Self.namedShared(work) { sharedNames.insert(named) }
                let expected = Self.listing(Array(model.values))
                for n in 0..<505 {
                    let found = index.entry(path: path(n))
                    #expect(found?.id == model[path(n)]?.id && found?.stat == model[path(n)]?.stat,
                            "round \(round): the writer's lookup of \(String(decoding: path(n), as: UTF8.self))")
                }
                #expect(Self.listing(Self.entries(of: index)) == expected, "round \(round): the writer's view")
                let reread = Self.entries(of: try repository.index())
                #expect(Self.listing(reread) == expected, "round \(round): read back")
                for e in reread { #expect(model[e.path]?.stat == e.stat, "round \(round): stat of \(String(decoding: e.path, as: UTF8.self))") }
                let git = try scratch.git(["ls-files", "--stage", "-v"], in: work).split(separator: "\n").map(String.init)
                #expect(git == expected, "round \(round): git's view")
            }
            _ = try scratch.git(["fsck", "--no-dangling"], in: work)
            #expect(sharedNames.count > 1, "the shared file was written again at least once: \(sharedNames.count)")
        }
    }

    /// Lookups between batches of edits made in memory (never written in
    /// between), as a sync looks up paths after its scan changed a few
    /// entries: each batch is merged into the entries read, and the fences'
    /// bounds must follow every merge (`FenceBounds`), or a lookup would
    /// miss an entry that is there or find one that is gone. Every path,
    /// present or not, is looked up after each batch and checked against
    /// the model; fences every 4 entries, so most lookups go through them.
    @Test(arguments: [4, 5, 6]) func lookupsBetweenEditsMadeInMemory(seed: UInt64) throws {
        try SharedIndexFences.$writingInterval.withValue(4) {
            // The scratch folder lives as long as the test, the repository in it.
            let (scratch, _, repository) = try Self.splitIndexRepository()
            defer { withExtendedLifetime(scratch) {} }
            var random = SplitMix64(seed: seed)
            let ids = try (0..<4).map { n in try Array("blob \(n)\n".utf8).withUnsafeBytes { try repository.writeBlob($0) } }
            func path(_ n: Int) -> [UInt8] { Array(("d\(n % 5)/" + String(repeating: "y", count: n % 7 + 1) + "\(n)").utf8) }
            func entry(_ n: Int) -> IndexEntry {
                IndexEntry(path: path(n), id: ids[Int(random.next() % 4)], mode: 0o100644,
                           stat: StatData(ctime: (1_700_000_000, 0), mtime: (1_700_000_000, 0), device: 1, inode: Int64(n),
                                          uid: 0, gid: 0, size: Int64(random.next() % 100)),
                           skipWorktree: true)
            }
            var model: [[UInt8]: IndexEntry] = [:]
            let first = try repository.index()
            for n in stride(from: 0, to: 600, by: 2) {
                let e = entry(n)
                try first.add(e)
                model[e.path] = e
            }
            try first.write()
            for round in 0..<6 {
                let index = try repository.index()
                #expect(index.sharedEntryCount != nil, "round \(round): a split index")
                for batch in 0..<5 {
                    try Self.applyRandomEdits(Int(random.next() % 40) + 1, to: index, model: &model, among: 610, removeOneIn: 3,
                                              next: { random.next() }, path: path, entry: entry)
                    for n in 0..<615 {
                        let found = index.entry(path: path(n))
                        #expect(found?.id == model[path(n)]?.id && found?.stat == model[path(n)]?.stat,
                                "round \(round), batch \(batch): lookup of \(String(decoding: path(n), as: UTF8.self))")
                    }
                    // A folder's entries, edits not merged yet included, without a merge.
                    for prefix in ["d0/", "d3/", "d4/yyy", "d9/", "a"] {
                        let listed = index.entries(withPrefix: Array(prefix.utf8))
                        let expected = model.values.filter { $0.path.starts(with: Array(prefix.utf8)) }
                        #expect(Self.listing(listed) == Self.listing(Array(expected)) && listed.map(\.path) == Self.sortedPaths(expected),
                                "round \(round), batch \(batch): entries under \(prefix)")
                    }
                    #expect(index.count == model.count, "round \(round), batch \(batch): count")
                }
                try index.write()
                #expect(Self.listing(Self.entries(of: try repository.index())) == Self.listing(Array(model.values)), "round \(round): read back")
            }
        }
    }

    /// git's own split index: changed entries as replacements (entries
    /// without a path), removed ones in the delete bitmap, new ones added.
    /// fprep reads what git lists; then fprep writes its own split against
    /// git's shared file, and git reads that.
    @Test func whatGitWritesSplitFprepReads() throws {
        let scratch = try Scratch()
        let work = scratch.path + "/work"
        try scratch.git(["init", "-q", "-b", "main", "work"])
        for n in 0..<150 {
            let folder = work + "/f\(n % 6)"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            try Data("file \(n)\n".utf8).write(to: URL(fileURLWithPath: folder + "/n\(n).txt"))
        }
        try scratch.git(["add", "-A"], in: work)
        try scratch.git(["update-index", "--split-index"], in: work)
        // Replacements: new content, a skip-worktree bit; deletions; additions.
        for n in stride(from: 0, to: 150, by: 7) { try Data("changed \(n)\n".utf8).write(to: URL(fileURLWithPath: work + "/f\(n % 6)/n\(n).txt")) }
        try scratch.git(["add", "-A"], in: work)
        try scratch.git(["update-index", "--skip-worktree", "f1/n1.txt", "f2/n8.txt"], in: work)
        try scratch.git(["rm", "-q", "--cached", "f3/n3.txt", "f4/n4.txt", "f5/n149.txt"], in: work)
        try Data("new\n".utf8).write(to: URL(fileURLWithPath: work + "/f0/added.txt"))
        try Data("new\n".utf8).write(to: URL(fileURLWithPath: work + "/a-first.txt"))
        try scratch.git(["add", "f0/added.txt", "a-first.txt"], in: work)
        #expect(try Self.sharedFiles(work).count == 1)
        let gitIndex = try Data(contentsOf: URL(fileURLWithPath: work + "/.git/index"))
        #expect(gitIndex.range(of: Data("link".utf8)) != nil, "git wrote a split index")

        let repository = try Repository(openingAt: work)
        let gitsListing = try scratch.git(["ls-files", "--stage", "-v"], in: work).split(separator: "\n").map(String.init)
        let index = try repository.index()
        #expect(Self.listing(Self.entries(of: index)) == gitsListing)
        #expect(index.count == 149)
        #expect(index.entry(path: Array("f1/n1.txt".utf8))?.skipWorktree == true)
        #expect(index.entry(path: Array("f4/n4.txt".utf8)) == nil)

        // fprep's own split against git's shared file, then git reads it.
        index.splitSetting = { true }
        let removed = Array("f0/n6.txt".utf8)
        try index.remove(path: removed)
        let id = try Array("x\n".utf8).withUnsafeBytes { try repository.writeBlob($0) }
        try index.add(IndexEntry(path: Array("f1/n7.txt".utf8), id: id, mode: 0o100644, skipWorktree: true))
        try index.write()
        var expected = gitsListing.filter { !$0.hasSuffix("\tf0/n6.txt") && !$0.hasSuffix("\tf1/n7.txt") }
        expected.append("S 100644 \(id.hex) 0\tf1/n7.txt")
        expected.sort { Array($0.split(separator: "\t")[1].utf8).lexicographicallyPrecedes(Array($1.split(separator: "\t")[1].utf8)) }
        #expect(try scratch.git(["ls-files", "--stage", "-v"], in: work).split(separator: "\n").map(String.init) == expected)
        #expect(Self.listing(Self.entries(of: try repository.index())) == expected)
        _ = try scratch.git(["fsck", "--no-dangling"], in: work)

        // git writes the index again (a refresh), and fprep reads it.
        _ = try scratch.git(["status", "--porcelain"], in: work)
        #expect(Self.listing(Self.entries(of: try repository.index())) == expected)
    }

    /// A write removes a shared file left over (a crash between a shared
    /// file's rename and the index's) once a minute old; a young one, which
    /// a git command may be about to name, stays, and so does the one it
    /// replaced for a minute (a git command may have read the old index).
    @Test func leftoverSharedFilesGo() throws {
        let scratch = try Scratch()
        let work = scratch.path + "/work"
        try scratch.git(["init", "-q", "-b", "main", "work"])
        let repository = try Repository(openingAt: work)
        try repository.config().set("core.splitIndex", "true")
        let id = try Array("x\n".utf8).withUnsafeBytes { try repository.writeBlob($0) }
        let index = try repository.index()
        try index.add(IndexEntry(path: Array("a".utf8), id: id, mode: 0o100644, skipWorktree: false))
        try index.write()
        let current = try Self.sharedFiles(work)
        #expect(current.count == 1)
        let old = work + "/.git/sharedindex." + String(repeating: "1", count: 40)
        let young = work + "/.git/sharedindex." + String(repeating: "2", count: 40)
        for path in [old, young] { try Data("left over".utf8).write(to: URL(fileURLWithPath: path)) }
        var times = utimbuf(actime: time(nil) - 120, modtime: time(nil) - 120)
        utime(old, &times)
        try index.add(IndexEntry(path: Array("b".utf8), id: id, mode: 0o100644, skipWorktree: false))
        try index.write()
        let after = try Self.sharedFiles(work)
        #expect(after.contains("sharedindex." + String(repeating: "2", count: 40)), "\(after)")
        #expect(!after.contains("sharedindex." + String(repeating: "1", count: 40)))
        #expect(after.contains(try #require(try Self.namedShared(work))))
        #expect(Set(after).isSubset(of: Set(current + ["sharedindex." + String(repeating: "2", count: 40), try Self.namedShared(work) ?? ""])))
        #expect(try scratch.git(["ls-files"], in: work) == "a\nb")
    }

    /// Conflict stages git wrote into a split index (a merge that stopped)
    /// survive fprep's next split write of it, as git lists them.
    @Test func conflictStagesSurviveASplitWrite() throws {
        let scratch = try Scratch()
        let work = scratch.path + "/work"
        try scratch.git(["init", "-q", "-b", "main", "work"])
        func commit(_ text: String, _ message: String) throws {
            try Data(text.utf8).write(to: URL(fileURLWithPath: work + "/c.txt"))
            try scratch.git(["commit", "-q", "-a", "-m", message], in: work)
        }
        try Data("base\n".utf8).write(to: URL(fileURLWithPath: work + "/c.txt"))
        try Data("other\n".utf8).write(to: URL(fileURLWithPath: work + "/z.txt"))
        try scratch.git(["add", "c.txt", "z.txt"], in: work)
        try scratch.git(["commit", "-q", "-m", "base"], in: work)
        try scratch.git(["checkout", "-q", "-b", "side"], in: work)
        try commit("side\n", "side")
        try scratch.git(["checkout", "-q", "main"], in: work)
        try commit("main\n", "main")
        try scratch.git(["update-index", "--split-index"], in: work)
        _ = try? scratch.git(["merge", "-q", "side"], in: work)   // stops on the conflict
        let before = try scratch.git(["ls-files", "--stage"], in: work)
        #expect(before.contains(" 1\tc.txt") && before.contains(" 2\tc.txt") && before.contains(" 3\tc.txt"), "\(before)")

        let repository = try Repository(openingAt: work)
        let index = try repository.index()
        index.splitSetting = { true }
        let id = try Array("x\n".utf8).withUnsafeBytes { try repository.writeBlob($0) }
        try index.add(IndexEntry(path: Array("new.txt".utf8), id: id, mode: 0o100644, skipWorktree: false))
        try index.write()
        let after = try scratch.git(["ls-files", "--stage"], in: work)
        #expect(after == (before + "\n100644 \(id.hex) 0\tnew.txt").split(separator: "\n").sorted {
            Array($0.split(separator: "\t")[1].utf8).lexicographicallyPrecedes(Array($1.split(separator: "\t")[1].utf8))
        }.joined(separator: "\n"))
    }

    /// A missing or mismatched shared file is one clear error, not a crash.
    @Test func aMissingSharedIndexIsAClearError() throws {
        let scratch = try Scratch()
        let work = scratch.path + "/work"
        try scratch.git(["init", "-q", "-b", "main", "work"])
        try Data("x\n".utf8).write(to: URL(fileURLWithPath: work + "/a"))
        try scratch.git(["add", "a"], in: work)
        try scratch.git(["update-index", "--split-index"], in: work)
        for name in try Self.sharedFiles(work) { try FileManager.default.removeItem(atPath: work + "/.git/" + name) }
        do {
            _ = try Repository(openingAt: work).index()
            Issue.record("an index naming a missing shared file was read")
        } catch let error as GitError {
            #expect(error.message.contains("shared index") && error.message.contains("git read-tree HEAD"), "\(error.message)")
        }
    }

    /// EWAH bitmaps round-trip: empty, dense runs, a long gap, word edges.
    @Test func bitmapsRoundTrip() throws {
        var random = SplitMix64(seed: 7)
        var sets: [[Int]] = [[], [0], [63], [64], [0, 1, 2, 63, 64, 65, 127, 128], Array(0..<1000), [5, 1 << 20, (1 << 20) + 1]]
        for _ in 0..<50 {
            var set = Set<Int>()
            let span = Int(random.next() % 5000) + 1
            for _ in 0..<Int(random.next() % 200) { set.insert(Int(random.next() % UInt64(span))) }
            sets.append(set.sorted())
        }
        for positions in sets {
            let bytes = EWAH.encode(positions)
            let (decoded, used) = try bytes.withUnsafeBytes { try EWAH.decode($0.baseAddress!, length: $0.count, limit: 1 << 30) }
            #expect(decoded == positions)
            #expect(used == bytes.count)
        }
    }
}
