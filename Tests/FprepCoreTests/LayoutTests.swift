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
}
