import FoundationEssentials
import Glibc

/// Cheap checks of a replica's state database, run by every command before
/// SQLite opens it, so damage is found by the next command and not only when
/// a damaged page happens to be read: the header, the write-ahead log the
/// header says exists, the file's length against the page count, and the
/// header of every page (b-tree, overflow and freelist pages each have a
/// shape a page overwritten with anything else lacks). A full
/// `PRAGMA quick_check` reads every cell and costs what the database weighs;
/// this reads a few bytes a page, and only when the file changed since the
/// last scan (`state.db-checked` keeps its inode, size and ctime): a read
/// such as `fprep changes` pays two small reads. Damage inside a page's
/// cells is still found when the page is read, and reported the same way.
///
/// Format: https://www.sqlite.org/fileformat2.html
enum StateFileCheck {
    enum Verdict: Equatable {
        case damaged(String)
        /// Sound; `stamp`: the file as its pages were found sound (nil when
        /// they were not looked at: a log with pages, auto-vacuum).
        case sound(stamp: String?)
    }

    /// The stamp of the file as it is now: inode, size and ctime.
    static func stamp(of path: String) -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return stamp(info)
    }

    private static func stamp(_ info: stat) -> String {
        "\(info.st_ino) \(info.st_size) \(info.st_ctim.tv_sec) \(info.st_ctim.tv_nsec)\n"
    }

    /// After a connection that found the pages sound wrote the file through
    /// SQLite (its checkpoint at close): what it wrote is SQLite's, so the
    /// file as it is now needs no scan by the next command. Only when the
    /// file was as found right up to the close (`closing`, which says
    /// whether it closed), so nothing else wrote it meanwhile; otherwise
    /// the next command scans it. (A program writing the file during the
    /// close itself, milliseconds, is not told apart: a window the scan of
    /// every page by every command would close, at the cost of the size
    /// of the database per command.)
    static func restamp(_ path: String, foundSound stamp: String, closing: () -> Bool) {
        guard Self.stamp(of: path) == stamp else {
            _ = closing()
            return
        }
        TestGate.beforeClose.pass()
        guard Self.stamp(of: path) == stamp, closing() else { return }
        if let now = Self.stamp(of: path), now != stamp { writeSmallFile(path + "-checked", now) }
    }

    /// Whether the database at `path` can be trusted.
    static func verdict(at path: String) -> Verdict {
        if let found = readSmallFile(path + "-damaged") { return .damaged(found.trimmed) }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return errno == ENOENT ? .damaged("it is missing") : .sound(stamp: nil) }  // other errors: SQLite says
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return .sound(stamp: nil) }
        let size = Int(info.st_size)
        guard size >= 100 else { return .damaged("it is truncated to \(size) bytes") }
        var header = [UInt8](repeating: 0, count: 100)
        guard pread(fd, &header, 100, 0) == 100 else { return .damaged("its header cannot be read") }
        guard header.starts(with: Array("SQLite format 3\0".utf8)) else { return .damaged("it is not an SQLite database") }
        let rawPageSize = Int(header[16]) << 8 | Int(header[17])
        let pageSize = rawPageSize == 1 ? 65536 : rawPageSize
        guard pageSize >= 512, pageSize & (pageSize - 1) == 0, Int(header[20]) < pageSize - 480 else {
            return .damaged("its header is damaged")
        }
        // fprep keeps the log and its index between commands (the log
        // emptied, not deleted); another SQLite program that closes the
        // database cleanly deletes both. A log gone without its index was
        // deleted, and the commits it held with it (`logRemoved` checks
        // the other case against git).
        var walInfo = stat()
        let hasWAL = stat(path + "-wal", &walInfo) == 0
        if header[18] == 2, !hasWAL, access(path + "-shm", F_OK) == 0 { return .damaged("its write-ahead log '\(path)-wal' is missing") }
        // Pages in a non-empty log supersede the file's (a killed command
        // left it; SQLite replays it): the file alone is not the database.
        guard !hasWAL || walInfo.st_size == 0 else { return .sound(stamp: nil) }
        guard size % pageSize == 0 else { return .damaged("it is truncated (\(size) bytes, not a whole number of pages)") }
        var pageCount = size / pageSize
        if bigEndian32(header, 24) == bigEndian32(header, 92) {
            let recorded = Int(bigEndian32(header, 28))
            guard recorded <= pageCount else { return .damaged("it is truncated (\(pageCount) of \(recorded) pages)") }
            pageCount = recorded
        }
        // The pages were found sound and nothing wrote the file since (any
        // write, SQLite's or another program's, moves its ctime): skip
        // them. Reading every page costs ~0.4 µs a page here (a page fault
        // each), 0.35 ms for a database of 10^5 sizes, on every command.
        // Pointer-map pages (auto-vacuum, which fprep does not use) have a
        // shape of their own: such a file is left to SQLite.
        guard bigEndian32(header, 52) == 0 else { return .sound(stamp: nil) }
        let stamp = stamp(info)
        let stampPath = path + "-checked"
        if readSmallFile(stampPath) == stamp { return .sound(stamp: stamp) }
        guard let map = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0), map != MAP_FAILED else { return .sound(stamp: nil) }
        defer { munmap(map, size) }
        let bytes = UnsafeRawBufferPointer(start: map, count: size).bindMemory(to: UInt8.self)
        if let problem = Pages(bytes: bytes, pageSize: pageSize, usable: pageSize - Int(header[20]), count: pageCount).problem() {
            unlink(stampPath)
            return .damaged(problem)
        }
        writeSmallFile(stampPath, stamp)
        return .sound(stamp: stamp)
    }

    private static func readSmallFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 128)
        let count = read(fd, &buffer, buffer.count)
        return count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : nil
    }

    /// Best effort: a stamp that is not written only costs the next command a scan.
    private static func writeSmallFile(_ path: String, _ text: String) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return }
        _ = text.withCString { write(fd, $0, strlen($0)) }
        close(fd)
    }

    /// Whether the header says the database has a write-ahead log and
    /// neither the log nor its index is there: closed by another SQLite
    /// program, or both deleted (the caller compares with git to tell).
    static func logRemoved(at path: String) -> Bool {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var mode: UInt8 = 0
        return pread(fd, &mode, 1, 18) == 1 && mode == 2
            && access(path + "-wal", F_OK) != 0 && access(path + "-shm", F_OK) != 0
    }

    /// Records that the database at `path` was found damaged in a way a
    /// later open would no longer see (SQLite makes a new empty log when it
    /// opens one whose log is gone), until `fprep repair` moves it aside.
    static func markDamaged(_ path: String, _ problem: String) {
        writeSmallFile(path + "-damaged", problem + "\n")
    }

    static func bigEndian32<C: RandomAccessCollection>(_ bytes: C, _ offset: Int) -> UInt32 where C.Element == UInt8, C.Index == Int {
        let base = bytes.startIndex + offset
        return UInt32(bytes[base]) << 24 | UInt32(bytes[base + 1]) << 16 | UInt32(bytes[base + 2]) << 8 | UInt32(bytes[base + 3])
    }

    /// The pages of one database file.
    private struct Pages {
        let bytes: UnsafeBufferPointer<UInt8>
        let pageSize: Int
        let usable: Int
        let count: Int

        func byte(_ page: Int, _ offset: Int) -> Int { Int(bytes[(page - 1) * pageSize + offset]) }
        func u16(_ page: Int, _ offset: Int) -> Int { byte(page, offset) << 8 | byte(page, offset + 1) }
        func u32(_ page: Int, _ offset: Int) -> Int { u16(page, offset) << 16 | u16(page, offset + 2) }

        func problem() -> String? {
            // Freelist leaves hold whatever they held before: not checked.
            var free = [Bool](repeating: false, count: count + 1)
            var trunk = u32(1, 32)
            var trunks = 0
            while trunk != 0 {
                guard trunk <= count, !free[trunk], trunks < count else { return "its list of free pages is damaged" }
                free[trunk] = true
                trunks += 1
                let leaves = u32(trunk, 4)
                guard leaves <= usable / 4 - 2 else { return "free page \(trunk) is damaged" }
                for leaf in 0..<leaves {
                    let page = u32(trunk, 8 + 4 * leaf)
                    guard page >= 2, page <= count else { return "free page \(trunk) is damaged" }
                    free[page] = true
                }
                trunk = u32(trunk, 0)
            }
            // The page that holds the byte at 1 GiB is never used (locking).
            let lockPage = (1 << 30) / pageSize + 1
            for page in 1...max(1, count) where page <= count && !free[page] && page != lockPage {
                if let problem = problem(ofPage: page) { return "page \(page) of \(count) \(problem)" }
            }
            return nil
        }

        private func problem(ofPage page: Int) -> String? {
            let start = page == 1 ? 100 : 0
            let flag = byte(page, start)
            switch flag {
            case 2, 5, 10, 13:
                let headerSize = flag == 2 || flag == 5 ? 12 : 8
                let cells = u16(page, start + 3)
                let pointersEnd = start + headerSize + 2 * cells
                let rawContent = u16(page, start + 5)
                let content = rawContent == 0 ? 65536 : rawContent
                let firstFree = u16(page, start + 1)
                guard pointersEnd <= usable, content <= usable || rawContent == 0 && usable == 65536,
                      cells == 0 || content >= pointersEnd,
                      firstFree == 0 || (firstFree >= pointersEnd && firstFree + 4 <= usable),
                      byte(page, start + 7) <= 60 else { return "has a damaged b-tree header" }
                if headerSize == 12 {
                    let child = u32(page, start + 8)
                    guard child >= 2, child <= count else { return "points to a page that does not exist" }
                }
                return nil
            case 0:
                // An overflow page: the next page of the chain, or 0.
                return u32(page, 0) <= count ? nil : "points to a page that does not exist"
            default:
                return "is not a database page"
            }
        }
    }
}
