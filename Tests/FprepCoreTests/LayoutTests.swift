import Foundation
import Testing
import FprepGit
@testable import FprepCore

@Suite struct LayoutTests {
    /// The folders made first, from the scan's list, or (no list kept: a
    /// tree past its budget, or a scan told not to keep one) as the walk
    /// comes to them: the same tree on disk either way.
    @Test(arguments: [true, false])
    func foldersAreMadeWithOrWithoutTheScansList(listFolders: Bool) throws {
        let folder = NSTemporaryDirectory() + "fprep-layout-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let repository = try Repository(creatingBareAt: folder + "/repo.git", initialBranch: "main")
        func blob(_ text: String) throws -> ObjectID { try Array(text.utf8).withUnsafeBytes { try repository.writeBlob($0) } }
        func tree(_ entries: [(String, ObjectID, FileMode)]) throws -> ObjectID {
            let builder = try repository.treeBuilder()
            for (name, id, mode) in entries { try builder.insert(name: Array(name.utf8), id: id, mode: mode) }
            return try builder.write()
        }
        let leaf = try tree([("x.txt", try blob("x"), .blob)])
        let deep = try tree([("d", leaf, .tree), ("y.txt", try blob("yy"), .blob)])
        let root = try tree([("a", deep, .tree), ("b", leaf, .tree), ("top.txt", try blob("t"), .blob)])
        let plan = try LayoutPlan.scan(repository, tree: root, defaultTime: 1_700_000_000, listFolders: listFolders) { _ in
            BlobInfo(size: 5, mtime: 1_700_000_000)
        }
        #expect(plan.folders == 3 && plan.files == 4)
        #expect(plan.folderPaths.count == (listFolders ? 3 : 0) && plan.folderPaths.isKept == listFolders)
        #expect(plan.folderPaths.map(\.description) == (listFolders ? ["a", "a/d", "b"] : []))

        let work = folder + "/work"
        try FileManager.default.createDirectory(atPath: work + "/.git", withIntermediateDirectories: true)
        let index = try IndexStream(path: work + "/.git/index", count: plan.entryCount)
        let walk = try #require(plan.walk)
        try PlaceholderLayout(root: try FolderHandle(root: work), progress: SilentProgress()).layOut(walk, plan: plan, index: index) { [:] }
        try index.finish()
        func kindAndSize(_ path: String) -> (mode_t, Int64)? {
            var info = stat()
            guard lstat(work + "/" + path, &info) == 0 else { return nil }
            return (info.st_mode & mode_t(S_IFMT), Int64(info.st_size))
        }
        for path in ["a", "a/d", "b"] {
            #expect(kindAndSize(path)?.0 == mode_t(S_IFDIR), "\(path)")
        }
        for path in ["a/d/x.txt", "a/y.txt", "b/x.txt", "top.txt"] {
            let found = kindAndSize(path)
            #expect(found?.0 == mode_t(S_IFREG) && found?.1 == 5, "\(path)")
        }
        #expect(try Index(path: work + "/.git/index").count == 4)
    }

    /// Past its budget the list is dropped, not grown: the layout then
    /// makes the folders as it walks, in the memory of one path.
    @Test func theFolderListIsDroppedPastItsBudget() {
        var list = FolderList()
        let long = RepoPath(bytes: [UInt8](repeating: 0x61, count: 4096))
        for _ in 0..<(FolderList.byteBudget / 4096) { list.append(long) }
        #expect(list.isKept && list.count == FolderList.byteBudget / 4096)
        list.append(long)
        #expect(!list.isKept && list.count == 0 && Array(list).isEmpty)
        list.append(RepoPath(bytes: [0x62]))
        #expect(list.count == 0)
    }

    /// `RepeatedNames` against a set of every name seen, on random trees:
    /// names from a few bytes around '/' in order ('-', '.', '0'), any
    /// kind, in git's order or not, with names repeated as the same kind or
    /// another. Every tree of the class a set would refuse, it refuses.
    @Test func repeatedNamesAreFoundInAnyOrder() {
        var random = SplitMix(14)
        let bytes: [UInt8] = Array("a-.0".utf8)
        let modes: [FileMode] = [.blob, .tree, .symlink, .submodule, .executable]
        let id = ObjectID(hex: String(repeating: "1", count: 40))!
        func key(_ entry: TreeEntry) -> [UInt8] { entry.name + (entry.mode == .tree ? [0x2F] : []) }
        for round in 0..<4000 {
            var entries: [TreeEntry] = []
            for _ in 0..<Int.random(in: 1...8, using: &random) {
                let name = (0..<Int.random(in: 1...3, using: &random)).map { _ in bytes.randomElement(using: &random)! }
                entries.append(TreeEntry(name: name, id: id, mode: modes.randomElement(using: &random)!))
            }
            if Bool.random(using: &random), let copied = entries.randomElement(using: &random) {
                entries.append(TreeEntry(name: copied.name, id: id, mode: modes.randomElement(using: &random)!))
            }
            // Most trees as git writes them; some as a hostile server might.
            if round % 4 != 0 { entries.sort { key($0).lexicographicallyPrecedes(key($1)) } }
            // Now and then a folder with more names before it than it looks back over.
            if round % 50 == 0 {
                entries = (0..<(RepeatedNames.lookBackLimit + round % 3)).map { TreeEntry(name: Array("a-\($0)".utf8), id: id, mode: .blob) }
                    + [TreeEntry(name: Array("a".utf8), id: id, mode: .tree)]
                if round % 100 == 0 { entries.insert(TreeEntry(name: Array("a".utf8), id: id, mode: .symlink), at: 0) }
                entries.sort { key($0).lexicographicallyPrecedes(key($1)) }
            }
            var checked = RepeatedNames()
            var seen = Set<[UInt8]>()
            for i in entries.indices {
                let expected = !seen.insert(entries[i].name).inserted
                #expect(checked.isRepeated(entries, at: i) == expected,
                        "\(entries.map { String(decoding: $0.name, as: UTF8.self) + ($0.mode == .tree ? "/" : "") }) at \(i)")
            }
        }
    }

    /// A clone's scan refuses a tree that names a file and a folder alike,
    /// with other names between them or the folder first.
    @Test(arguments: [["100644 X", "100644 X-1", "100644 X.y", "40000 X"], ["40000 X", "100644 X"],
                      ["120000 X", "100644 Y", "40000 X"], ["160000 X", "40000 X"]])
    func aFileAndAFolderOfOneNameAreRefused(listing: [String]) throws {
        let folder = NSTemporaryDirectory() + "fprep-layout-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let repository = try Repository(creatingBareAt: folder + "/repo.git", initialBranch: "main")
        let blob = try Array("x".utf8).withUnsafeBytes { try repository.writeBlob($0) }
        let empty = try repository.treeBuilder().write()
        var raw: [UInt8] = []
        for line in listing {
            let parts = line.split(separator: " ")
            let entryID = parts[0] == "40000" ? empty : blob
            raw += Array(parts[0].utf8) + [0x20] + Array(parts[1].utf8) + [0] + entryID.bytes
        }
        let written = try GitCommand.run(["--git-dir=\(folder)/repo.git", "hash-object", "-t", "tree", "--literally", "-w", "--stdin"],
                                         input: Data(raw))
        let tree = try #require(ObjectID(hex: String(decoding: written, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)))
        do {
            _ = try LayoutPlan.scan(repository, tree: tree, defaultTime: 0) { _ in BlobInfo(size: 1, mtime: 0) }
            Issue.record("the scan took \(listing)")
        } catch {
            #expect("\(error)".contains("two entries share this name"), "\(error)")
        }
    }

    /// A walk that reads its trees ahead visits what one that reads them
    /// itself visits, in the same order; a walk stopped at any step (its
    /// visitor throws) ends, whatever the reader had read ahead.
    @Test func aWalkThatReadsAheadVisitsWhatOneThatDoesNotVisits() throws {
        let folder = NSTemporaryDirectory() + "fprep-layout-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let repository = try Repository(creatingBareAt: folder + "/repo.git", initialBranch: "main")
        var random = SplitMix(24)
        let blob = try Array("x".utf8).withUnsafeBytes { try repository.writeBlob($0) }
        // Some 600 folders (more than the reader keeps ahead), a few files each.
        var made = 0
        func tree(depth: Int) throws -> ObjectID {
            let builder = try repository.treeBuilder()
            for i in 0..<Int.random(in: 1...3, using: &random) { try builder.insert(name: Array("f\(i)".utf8), id: blob, mode: .blob) }
            if depth < 6 {
                for i in 0..<3 where made < 600 {
                    made += 1
                    try builder.insert(name: Array("d\(i)".utf8), id: try tree(depth: depth + 1), mode: .tree)
                }
            }
            return try builder.write()
        }
        // And a folder of 5,000 files: several units of the reader's room.
        let wide = try repository.treeBuilder()
        for i in 0..<5000 { try wide.insert(name: Array("w\(i)".utf8), id: blob, mode: .blob) }
        let top = try repository.treeBuilder()
        try top.insert(name: Array("a".utf8), id: try tree(depth: 0), mode: .tree)
        try top.insert(name: Array("wide".utf8), id: try wide.write(), mode: .tree)
        try top.insert(name: Array("z".utf8), id: try tree(depth: 3), mode: .tree)
        let root = try top.write()
        func steps(readingAhead: Bool, stoppingAfter limit: Int = .max) throws -> [String] {
            var walk = TreeWalk(repository: repository, tree: root, defaultTime: 0) { _ in BlobInfo(size: 1, mtime: 0) }
            walk.readsAhead = readingAhead
            var seen: [String] = []
            struct Enough: Error {}
            do {
                try walk.run { step in
                    guard seen.count < limit else { throw Enough() }
                    switch step {
                    case .folder(let path): seen.append(path.description + "/")
                    case .entry(let entry): seen.append(entry.path.description)
                    }
                }
            } catch is Enough {}
            return seen
        }
        let plain = try steps(readingAhead: false)
        #expect(made > 256 && plain.count > 6000)
        #expect(try steps(readingAhead: true) == plain)
        for limit in [0, 1, 7, 300, plain.count / 2, plain.count - 1] {
            #expect(try steps(readingAhead: true, stoppingAfter: limit) == Array(plain.prefix(limit)))
        }
        // The reader serves every tree, in the walk's order (a reader that
        // read another order would leave the walk reading for itself).
        var order: [ObjectID] = []
        func collect(_ id: ObjectID) throws {
            order.append(id)
            for entry in try repository.tree(id).entries where entry.mode == .tree { try collect(entry.id) }
        }
        try collect(root)
        let ahead = TreeReadAhead(gitDirectory: repository.gitDirectory, root: root)
        defer { ahead.stop() }
        for id in order {
            #expect(try ahead.entries(of: id)?.count == repository.tree(id).entries.count, "\(id)")
        }
    }
}
