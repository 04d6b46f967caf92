import Foundation
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
