import Foundation
import FprepGit
import Glibc
import Testing
@testable import FprepCore

@Suite struct ReadAheadTests {
    /// Advice on a whole file made the kernel read the device's read-ahead
    /// window of it (8 MB on this kind of machine, 128 KB on many disks) and
    /// drop the rest: a sync's read-ahead of a 37 MB state database and of
    /// its packs read their first 8 MB. Here every page of a 24 MB file must
    /// come into the cache.
    @Test func readsTheWholeFileNotItsFirstWindow() throws {
        let folder = FileManager.default.temporaryDirectory.path + "/fprep-readahead-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/large"
        let size = 24 << 20
        let page = Int(getpagesize())
        try Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) }).write(to: URL(fileURLWithPath: path))
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        // Written out, then dropped from the cache: clean pages go at once.
        #expect(fsync(fd) == 0)
        #expect(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0)
        try #require(residentPages(fd, size) < size / page / 2, "the test could not drop the file from the cache")

        ReadAhead.start([path])
        let deadline = Date().addingTimeInterval(60)
        var resident = 0
        while true {
            resident = residentPages(fd, size)
            if resident == size / page || Date() > deadline { break }
            usleep(10_000)
        }
        #expect(resident == size / page, "\(resident) of \(size / page) pages read ahead")
    }

    /// A sync reads ahead the packs of the anchors' trees, never a pack of
    /// content nor the size manifest's: all are marked `.promisor`, and
    /// picked in the folder's order under the limit, the manifest had left
    /// the trees out at 10^6 files.
    @Test func readsAheadTheHistoryNotContentOrTheSizeManifest() throws {
        let h = try SyncHarness(files: ["docs/a.txt": "alpha\n", "docs/b.txt": "beta\n", "src/main.c": "int main;\n"])
        try h.push { work in try Data("gamma\n".utf8).write(to: URL(fileURLWithPath: work + "/src/c.txt")) }
        _ = try h.replica().sync(incoming: true)
        // git's own lazy fetch of a blob keeps it in a pack of its own.
        let blob = try h.git(["rev-parse", "HEAD:docs/a.txt"], in: h.replicaRoot)
        #expect(try h.git(["cat-file", "-p", blob], in: h.replicaRoot) == "alpha")

        let gitDirectory = h.replicaRoot + "/.git"
        let folder = gitDirectory + "/objects/pack"
        let packs = try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasSuffix(".promisor") }
            .map { folder + "/" + $0.dropLast(".promisor".count) + ".pack" }
        let cloneTree = try h.git(["rev-parse", "HEAD~1^{tree}"], in: h.replicaRoot)
        let manifest = try h.git(["rev-parse", "refs/remotes/origin-fprep/sizes~1"], in: h.replicaRoot)
        let read = Set(ReadAhead.historyPacks(gitDirectory: gitDirectory))
        var kinds: [String] = []
        for pack in packs {
            // What the pack holds, asked of git itself.
            let objects = try h.git(["verify-pack", "-v", pack], in: folder)
            let index = String(pack.dropLast(".pack".count)) + ".idx"
            if objects.contains(cloneTree) {
                kinds.append("clone")
                #expect(read.contains(pack) && read.contains(index), "the clone's pack of trees is not read ahead")
            } else if objects.contains(blob) {
                kinds.append("content")
                #expect(!read.contains(pack) && !read.contains(index), "a pack of content is read ahead")
            } else if objects.contains(manifest) {
                kinds.append("manifest")
                #expect(!read.contains(pack) && !read.contains(index), "the size manifest's pack is read ahead")
            }
        }
        #expect(kinds.sorted() == ["clone", "content", "manifest"], "packs found: \(kinds)")
    }

    /// A cold page of a mapped file comes with the device's read-ahead
    /// window around it (8 MB on this kind of machine): while the state
    /// database was read through a mapping, a sync's few dozen lookups in
    /// the 37 MB database of 10^6 files read all of it. Here ten lookups in
    /// a database of more than 16 MB, dropped from the cache, must read less
    /// than a quarter of it.
    @Test func aFewLookupsInALargeStateDatabaseReadAFewPages() throws {
        let folder = FileManager.default.temporaryDirectory.path + "/fprep-coldstate-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/state.db"
        var generator = SystemRandomNumberGenerator()
        let ids = (0..<600_000).compactMap { _ in ObjectID(bytes: (0..<20).map { _ in UInt8.random(in: 0...255, using: &generator) }) }
        do {
            let store = try StateStore(path: path)
            try store.transaction { try store.recordBlobInfo(ids.map { ($0, BlobInfo(size: 1, mtime: 2)) }) }
            try store.database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        }
        // Opened once as every command does: the check of its pages leaves
        // a stamp, so the next open skips them.
        _ = try StateStore(path: path, existing: true)
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        var info = stat()
        try #require(fstat(fd, &info) == 0)
        let size = Int(info.st_size)
        let page = Int(getpagesize())
        try #require(size > 16 << 20, "the database is \(size) bytes, not larger than two read-ahead windows")
        #expect(fsync(fd) == 0)
        #expect(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0)
        try #require(residentPages(fd, size) < size / page / 10, "the test could not drop the database from the cache")

        let store = try StateStore(path: path, existing: true)
        let lookup = try store.blobInfoLookup()
        for k in 0..<10 {
            #expect(try lookup(ids[k * ids.count / 10]) == BlobInfo(size: 1, mtime: 2))
        }
        let resident = residentPages(fd, size)
        #expect(resident < size / page / 4, "\(resident) of \(size / page) pages read for ten lookups")
    }

    /// Pages of the file at `fd` in the page cache (mincore of a mapping,
    /// which reads nothing itself).
    private func residentPages(_ fd: Int32, _ size: Int) -> Int {
        let page = Int(getpagesize())
        guard let map = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0), map != MAP_FAILED else { return -1 }
        defer { munmap(map, size) }
        var vector = [UInt8](repeating: 0, count: (size + page - 1) / page)
        guard mincore(map, size, &vector) == 0 else { return -1 }
        return vector.reduce(0) { $0 + Int($1 & 1) }
    }
}
