import Glibc

/// git's split index, read and written as git does (`core.splitIndex`,
/// Documentation/gitformat-index: the "link" extension): the entries live
/// in a shared file, `.git/sharedindex.<its checksum>`, written once, and
/// `.git/index` holds only what changed since (entries added, and a bitmap
/// of the shared entries deleted), with the shared file's checksum.
///
/// Why fprep writes one: a replica's index names every file, 119 MB at
/// 10^6 files, and a sync that changes 100 of them rewrote and hashed all
/// of it (the largest part of an incoming sync at 10^6 files). Split, the
/// sync writes the few changed entries; the shared file is written again
/// only once the changes pass a fifth of it, as git does.
///
/// fprep writes a changed entry as a deletion of the shared one and an
/// added entry (with its path); git writes it as a "replacement" (an entry
/// without a path, taking the shared entry's): both are read.
public enum SplitIndexPolicy: Sendable, Equatable {
    /// `core.splitIndex` unset: split once the index has `automaticThreshold` entries.
    case automatic
    /// `core.splitIndex = true`: always split.
    case always
    /// `core.splitIndex = false`: never (a split index is written whole again).
    case never

    /// Entries from which an unset `core.splitIndex` splits the index: below
    /// it a whole write costs a few milliseconds.
    public static let automaticThreshold = 8192

    public init(setting: Bool?) {
        switch setting {
        case .some(true): self = .always
        case .some(false): self = .never
        case .none: self = .automatic
        }
    }

    public func splits(entries: Int) -> Bool {
        switch self {
        case .always: true
        case .never: false
        case .automatic: entries >= Self.automaticThreshold
        }
    }
}

/// Names of a split index's files.
public enum SharedIndexFile {
    /// Where fprep writes a shared index before it has its name (its
    /// checksum); under `index.lock`, so one writer at a time.
    public static let temporaryName = "sharedindex.fprep-tmp"

    static func folder(of indexPath: String) -> String {
        guard let slash = indexPath.lastIndex(of: "/") else { return "" }
        return String(indexPath[...slash])
    }

    static func path(beside indexPath: String, checksum: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        let hex = checksum.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] }
        return folder(of: indexPath) + "sharedindex." + String(decoding: hex, as: UTF8.self)
    }

    /// The offsets table of the shared index (see `EntryOffsets`).
    static func offsetsTable(beside indexPath: String) -> String {
        folder(of: indexPath) + "fprep-sharedindex-offsets"
    }

    /// Removes the shared files the index at `indexPath` does not name
    /// (`current`) once they are a minute old: the one this write
    /// `replaced` is dated now (a git command that read the old index a
    /// moment ago still opens it: git keeps such files two weeks), another
    /// one a crash left between a shared file's rename and the index's is
    /// old, and a younger one may be a git command's about to be named.
    /// The next write after that minute removes them (a shared index is
    /// 119 MB at 10^6 entries).
    static func removeUnused(beside indexPath: String, current: String?, replaced: String?) {
        if let replaced, replaced != current { utimensat(AT_FDCWD, replaced, nil, 0) }
        let now = time(nil)
        for path in all(beside: indexPath) where path != current {
            var info = stat()
            guard lstat(path, &info) == 0 else { continue }
            if now - info.st_mtim.tv_sec >= 60 { unlink(path) }
        }
        if current == nil {
            unlink(offsetsTable(beside: indexPath))
            unlink(SharedIndexFences.path(beside: indexPath))
        }
    }

    /// Every shared index file in the folder of `indexPath` (not temporaries).
    static func all(beside indexPath: String) -> [String] {
        let folder = folder(of: indexPath)
        guard let dir = opendir(folder.isEmpty ? "." : folder) else { return [] }
        defer { closedir(dir) }
        var paths: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name.hasPrefix("sharedindex."), name.count == "sharedindex.".count + 40 { paths.append(folder + name) }
        }
        return paths
    }
}

extension Index {
    /// What a command that looks a few paths up in the index at `path`
    /// reads of it: the index, its entries' offsets tables, and a shared
    /// file up to `sharedLimit` bytes. A larger one (119 MB at 10^6
    /// entries) is left to be read where the lookups land: read whole, it
    /// held up the fetch it was meant to overlap (0.6 s against git's
    /// 0.27 s at 10^6 files).
    public static func readAheadFiles(_ path: String, sharedLimit: Int = 32 << 20) -> [String] {
        var files = [path, EntryOffsets.path(beside: path), SharedIndexFile.offsetsTable(beside: path), SharedIndexFences.path(beside: path)]
        for shared in SharedIndexFile.all(beside: path) {
            var info = stat()
            if stat(shared, &info) == 0, Int(info.st_size) <= sharedLimit { files.append(shared) }
        }
        return files
    }
}

/// The "link" extension: the shared index's checksum, then the bitmaps of
/// its entries deleted and replaced (EWAH-compressed, as git writes them).
struct LinkExtension {
    var sharedChecksum: [UInt8]
    /// Positions in the shared index, ascending.
    var deleted: [Int]
    var replaced: [Int]

    static let signature = Array("link".utf8)

    /// The extension's data as read: the checksum names the shared file;
    /// the bitmaps are decoded once its entry count bounds them.
    struct Raw {
        let sharedChecksum: [UInt8]
        let bitmaps: [UInt8]

        init(_ base: UnsafeRawPointer, at: Int, length: Int) throws {
            guard length >= 20 else { throw EWAH.Malformed() }
            sharedChecksum = Array(UnsafeRawBufferPointer(start: base + at, count: 20))
            bitmaps = Array(UnsafeRawBufferPointer(start: base + at + 20, count: length - 20))
        }

        /// The bitmaps, every position below `entries` (a damaged run of set
        /// bits is refused before it is spelled out).
        func decoded(entries: Int) throws -> LinkExtension {
            guard !bitmaps.isEmpty else { return LinkExtension(sharedChecksum: sharedChecksum, deleted: [], replaced: []) }
            return try bitmaps.withUnsafeBytes { raw in
                guard let base = raw.baseAddress else { throw EWAH.Malformed() }
                let (deleted, used) = try EWAH.decode(base, length: raw.count, limit: entries)
                let (replaced, rest) = try EWAH.decode(base + used, length: raw.count - used, limit: entries)
                guard used + rest == raw.count, deleted.allSatisfy({ $0 < entries }), replaced.allSatisfy({ $0 < entries }) else {
                    throw EWAH.Malformed()
                }
                return LinkExtension(sharedChecksum: sharedChecksum, deleted: deleted, replaced: replaced)
            }
        }
    }

    /// The whole extension: signature, length, data.
    func encoded() -> [UInt8] {
        var data = sharedChecksum
        data += EWAH.encode(deleted)
        data += EWAH.encode(replaced)
        var bytes = Self.signature
        withUnsafeBytes(of: UInt32(data.count).bigEndian) { bytes.append(contentsOf: $0) }
        return bytes + data
    }
}

/// git's serialized EWAH bitmap (ewah/ewah_io.c): the bit count, the
/// number of 64-bit words, the words, the position of the last marker
/// word; all big-endian. A marker word says how many words of all-zero
/// (or all-one) bits come (bits 1–32, the kind in bit 0) and how many
/// literal words follow it (bits 33–63). Bit n is bit n%64 of word n/64.
enum EWAH {
    struct Malformed: Error {}

    static let maximumRun: UInt64 = (1 << 32) - 1
    static let maximumLiterals: UInt64 = (1 << 31) - 1

    /// The bitmap with the bits at `positions` (ascending, distinct) set.
    static func encode(_ positions: [Int]) -> [UInt8] {
        var words: [UInt64] = [0]
        var marker = 0
        var nextWord = 0   // the first word not yet described
        var index = 0
        func run(_ marker: Int) -> UInt64 { (words[marker] >> 1) & maximumRun }
        func literals(_ marker: Int) -> UInt64 { words[marker] >> 33 }
        while index < positions.count {
            let word = positions[index] / 64
            var value: UInt64 = 0
            while index < positions.count, positions[index] / 64 == word {
                value |= 1 << UInt64(positions[index] % 64)
                index += 1
            }
            var gap = UInt64(word - nextWord)
            while gap > 0 {
                if literals(marker) > 0 || run(marker) == maximumRun {
                    words.append(0)
                    marker = words.count - 1
                }
                let take = min(gap, maximumRun - run(marker))
                words[marker] += take << 1
                gap -= take
            }
            if literals(marker) == maximumLiterals {
                words.append(0)
                marker = words.count - 1
            }
            words[marker] += 1 << 33
            words.append(value)
            nextWord = word + 1
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(12 + 8 * words.count)
        func put32(_ value: UInt32) { withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) } }
        put32(UInt32(truncatingIfNeeded: (positions.last ?? -1) + 1))
        put32(UInt32(words.count))
        for word in words { withUnsafeBytes(of: word.bigEndian) { bytes.append(contentsOf: $0) } }
        put32(UInt32(marker))
        return bytes
    }

    /// The set positions of the bitmap at `base` and the bytes it took.
    static func decode(_ base: UnsafeRawPointer, length: Int, limit: Int) throws -> ([Int], Int) {
        func u32(_ at: Int) -> Int { Int(UInt32(bigEndian: base.loadUnaligned(fromByteOffset: at, as: UInt32.self))) }
        guard length >= 12 else { throw Malformed() }
        let count = u32(4)
        guard count <= (length - 12) / 8 else { throw Malformed() }
        func word(_ i: Int) -> UInt64 { UInt64(bigEndian: base.loadUnaligned(fromByteOffset: 8 + 8 * i, as: UInt64.self)) }
        var positions: [Int] = []
        var bit = 0
        var i = 0
        while i < count {
            let marker = word(i)
            let run = Int((marker >> 1) & maximumRun)
            let literalCount = Int(marker >> 33)
            i += 1
            if marker & 1 != 0 {
                guard bit + run * 64 <= limit else { throw Malformed() }
                positions.append(contentsOf: bit..<(bit + run * 64))
            }
            bit += run * 64
            guard literalCount <= count - i else { throw Malformed() }
            for _ in 0..<literalCount {
                var value = word(i)
                while value != 0 {
                    let low = value.trailingZeroBitCount
                    positions.append(bit + low)
                    value &= value - 1
                }
                bit += 64
                i += 1
            }
            guard bit <= limit + 64 else { throw Malformed() }
        }
        return (positions, 12 + 8 * count)
    }
}

/// What a split index's reader keeps of its shared index, for the next
/// write: which of the entries in storage are the shared file's, and where.
struct SharedIndexBase {
    /// The shared index's checksum (its name).
    let checksum: [UInt8]
    let path: String
    /// Where each shared entry starts in the storage, in the shared order.
    let slots: [Int32]
    /// Offsets below this are the shared file's entries.
    let end: Int
}

extension IndexStorage {
    /// The entries of the split index at `indexPath` (`main`, its own
    /// entries at `mainSlots`) merged with its shared index's: one storage
    /// whose first part maps the shared file and whose second holds the
    /// main file's entries, each with its path (a replacement takes the
    /// shared entry's), so every entry is read in place, as from one file.
    static func merging(main: IndexStorage, mainSlots: [Int32], link raw: LinkExtension.Raw, indexPath: String, mainChecksum: [UInt8],
                        failure: (String) -> GitError) throws -> (IndexStorage, [Int32]) {
        let sharedPath = SharedIndexFile.path(beside: indexPath, checksum: raw.sharedChecksum)
        let name = String(sharedPath.split(separator: "/").last ?? "")
        // Without its shared file the index cannot be read at all (git
        // stops too): it is made again from the commit, and fprep's next
        // sync puts the placeholders' marks back (see "git in the replica").
        func lost(_ why: String) -> GitError {
            GitError(code: .invalid, message: "the index '\(indexPath)' names the shared index '\(name)', which \(why); remove '\(indexPath)', run 'git read-tree HEAD' in the replica, then 'fprep sync'",
                     function: "index read")
        }
        let fd = open(sharedPath, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw lost("cannot be opened (\(String(cString: strerror(errno))))") }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_size >= 32, info.st_size < Int(Int32.max) / 2 else { throw lost("is truncated or too large") }
        let sharedSize = Int(info.st_size)
        // Only the pages this read touches are asked for, before they are
        // touched: a fault in the mapping would read the device's whole
        // read-ahead around it (8 MB here), most of a large shared file
        // over a few faults (see `SharedIndexFences`).
        func willNeed(_ from: Int, _ to: Int) {
            let start = max(0, min(from, sharedSize)), end = max(start, min(to, sharedSize))
            if end > start { _ = posix_fadvise(fd, off_t(start), off_t(end - start), POSIX_FADV_WILLNEED) }
        }
        willNeed(0, 4096)
        willNeed(sharedSize - 8192, sharedSize)
        // The shared file on its own first: its entries say how large the
        // second part must be (each replacement takes a shared path).
        guard let alone = mmap(nil, sharedSize, PROT_READ, MAP_PRIVATE, fd, 0), alone != MAP_FAILED else {
            throw failure("cannot be mapped: \(String(cString: strerror(errno)))")
        }
        let shared = IndexStorage(base: UnsafeRawPointer(alone), count: sharedSize) { munmap(alone, sharedSize) }
        guard memcmp(shared.base, "DIRC", 4) == 0,
              memcmp(shared.base + sharedSize - 20, raw.sharedChecksum, 20) == 0 else {
            throw lost("does not match its name (damaged)")
        }
        let version = shared.u32(4)
        let sharedCount = Int(shared.u32(8))
        let end = sharedSize - 20
        func noExtension(_ signature: [UInt8], _: Int, _: Int) throws {
            throw failure("names a shared index with the '\(String(decoding: signature, as: UTF8.self))' extension, which fprep does not support")
        }
        // Where the shared entries are read from: the file, or for version 4
        // (paths compressed against each other; git writes it only when
        // asked to) a buffer of them re-encoded.
        let entries: IndexStorage
        let sharedSlots: [Int32]
        var fences: SharedIndexFences?
        if version == 4 {
            let (decoded, offsets, at) = try decodeVersion4(shared, entries: sharedCount, end: end, failure: failure)
            try skipExtensions(shared, from: at, end: end, noExtension)
            entries = decoded
            sharedSlots = offsets
        } else {
            guard version == 2 || version == 3 else { throw failure("names a shared index of version \(version), which fprep does not read") }
            entries = shared
            fences = SharedIndexFences.read(beside: indexPath, checksum: raw.sharedChecksum, entries: sharedCount)
            if let offsets = EntryOffsets.read(table: SharedIndexFile.offsetsTable(beside: indexPath), for: shared, entries: sharedCount, end: end) {
                sharedSlots = offsets
            } else {
                let (offsets, at, stripped) = try walkEntries(shared, version: version, entries: sharedCount, end: end, failure: failure)
                guard !stripped else { throw failure("names a shared index with an entry without a path") }
                try skipExtensions(shared, from: at, end: end, noExtension)
                sharedSlots = offsets
            }
        }
        let link: LinkExtension
        do {
            link = try raw.decoded(entries: sharedCount)
        } catch {
            throw failure("has a damaged link to its shared index")
        }
        guard link.replaced.count <= mainSlots.count else { throw failure("has a link to its shared index that does not fit it") }
        // The second part, exactly: each replacement's fixed part with the
        // shared entry's path, then the added entries as they are.
        if version != 4 {
            for position in link.replaced { willNeed(Int(sharedSlots[position]), Int(sharedSlots[position]) + IndexStorage.entryReach) }
        }
        var extraSize = 8
        for (k, position) in link.replaced.enumerated() {
            let fixed = main.pathStart(Int(mainSlots[k])) - Int(mainSlots[k])
            extraSize += (fixed + entries.path(at: Int(sharedSlots[position])).count + 8) & ~7
        }
        for k in link.replaced.count..<mainSlots.count { extraSize += main.entrySize(at: Int(mainSlots[k])) }

        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        if version == 4 {
            let decodedSpan = (entries.count + 7) & ~7
            let size = decodedSpan + extraSize
            guard size < Int(Int32.max) else { throw failure("with its shared index is larger than 2 GiB") }
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
            buffer.initializeMemory(as: UInt8.self, repeating: 0, count: size)
            buffer.copyMemory(from: entries.base, byteCount: entries.count)
            let storage = IndexStorage(base: UnsafeRawPointer(buffer), count: size) { buffer.deallocate() }
            return try merge(into: storage, writableAt: buffer + decodedSpan, capacity: extraSize, sharedEnd: decodedSpan, sharedSlots: sharedSlots,
                             main: main, mainSlots: mainSlots, link: link, sharedPath: sharedPath, mainChecksum: mainChecksum,
                             fences: fences, willNeed: willNeed, failure: failure)
        }
        // One range: the shared file mapped again at its start (the same
        // pages), the second part after it.
        let sharedSpan = (sharedSize + page - 1) / page * page
        let extraSpan = (extraSize + page - 1) / page * page
        let total = sharedSpan + extraSpan
        guard total < Int(Int32.max) else { throw failure("with its shared index is larger than 2 GiB") }
        guard let region = mmap(nil, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0), region != MAP_FAILED else {
            throw failure("cannot be mapped: \(String(cString: strerror(errno)))")
        }
        let storage = IndexStorage(base: UnsafeRawPointer(region), count: total) { munmap(region, total) }
        guard mmap(region, sharedSize, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) != MAP_FAILED,
              mmap(region + sharedSpan, extraSpan, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS, -1, 0) != MAP_FAILED else {
            throw failure("cannot be mapped: \(String(cString: strerror(errno)))")
        }
        return try merge(into: storage, writableAt: region + sharedSpan, capacity: extraSize, sharedEnd: sharedSpan, sharedSlots: sharedSlots,
                         main: main, mainSlots: mainSlots, link: link, sharedPath: sharedPath, mainChecksum: mainChecksum,
                         fences: fences, willNeed: willNeed, failure: failure)
    }

    /// Copies the main file's entries after the shared ones and merges the
    /// two orders: shared entries not deleted (replaced ones by their
    /// replacement), added entries at their place by path and stage.
    private static func merge(into storage: IndexStorage, writableAt extra: UnsafeMutableRawPointer, capacity: Int, sharedEnd: Int, sharedSlots: [Int32],
                              main: IndexStorage, mainSlots: [Int32], link: LinkExtension, sharedPath: String, mainChecksum: [UInt8],
                              fences: SharedIndexFences?, willNeed: (Int, Int) -> Void,
                              failure: (String) -> GitError) throws -> (IndexStorage, [Int32]) {
        let sharedCount = sharedSlots.count
        var slots = sharedSlots
        var used = 0
        func place(_ bytes: UnsafeRawBufferPointer) throws -> Int32 {
            guard used + bytes.count <= capacity else { throw failure("has entries that do not fit their own sizes") }
            let at = sharedEnd + used
            if let source = bytes.baseAddress { (extra + used).copyMemory(from: source, byteCount: bytes.count) }
            used += bytes.count
            return Int32(at)
        }
        // Replacements: the main file's first entries, in the order of the
        // bits, each with the shared entry's path.
        for (k, position) in link.replaced.enumerated() {
            let at = Int(mainSlots[k])
            guard main.path(at: at).isEmpty else { throw failure("has a replacement entry with a path") }
            let path = storage.path(at: Int(sharedSlots[position]))
            let fixed = main.pathStart(at) - at
            var bytes = [UInt8](UnsafeRawBufferPointer(start: main.base + at, count: fixed))
            let flags = (UInt16(bytes[60]) << 8 | UInt16(bytes[61])) & ~0xFFF | UInt16(min(path.count, 0xFFF))
            bytes[60] = UInt8(flags >> 8)
            bytes[61] = UInt8(flags & 0xFF)
            bytes += path
            bytes += [UInt8](repeating: 0, count: ((fixed + path.count + 8) & ~7) - fixed - path.count)
            slots[position] = try bytes.withUnsafeBytes { try place($0) }
        }
        // Added entries: copied as they are, then put in order.
        var added: [Int32] = []
        for k in link.replaced.count..<mainSlots.count {
            let at = Int(mainSlots[k])
            guard !main.path(at: at).isEmpty else { throw failure("has an added entry without a path") }
            added.append(try place(UnsafeRawBufferPointer(start: main.base + at, count: main.entrySize(at: at))))
        }
        let merged = IndexStorage(base: storage.base, count: sharedEnd + used) { [storage] in withExtendedLifetime(storage) {} }
        func order(_ a: Int32, _ b: Int32) -> Int {
            let byPath = Index.compareBytes(merged.path(at: Int(a)), merged.path(at: Int(b)))
            return byPath != 0 ? byPath : merged.stage(at: Int(a)) - merged.stage(at: Int(b))
        }
        added.sort { order($0, $1) < 0 }
        var skip = Set(link.deleted)
        guard skip.isDisjoint(with: link.replaced) else { throw failure("marks a shared entry both deleted and replaced") }
        // Where each added entry goes among the shared ones; one with the
        // path and stage of a shared entry takes its place (as git's
        // `add_index_entry` does).
        var inserts: [(before: Int, slot: Int32)] = []
        inserts.reserveCapacity(added.count)
        // Each added entry's fence run, with slack for other stages of one
        // path (see `LookupFences`), all asked for before the first is
        // searched: asked for and searched one by one, each waited for its
        // own read (1,000 added entries of a cold shared index at 10^6:
        // most of an evict's 0.24 s read of the index).
        let runs = added.map { slot in fences.map { $0.sharedCandidates(for: merged.path(at: Int(slot)), count: sharedCount) } ?? 0..<sharedCount }
        if fences != nil {
            // Where they are in the file, replaced or not.
            for run in runs where !run.isEmpty { willNeed(Int(sharedSlots[run.lowerBound]), Int(sharedSlots[run.upperBound - 1]) + IndexStorage.entryReach) }
        }
        for (slot, run) in zip(added, runs) {
            var (low, high) = (run.lowerBound, run.upperBound)
            while low < high {
                let middle = (low + high) / 2
                if order(slots[middle], slot) < 0 { low = middle + 1 } else { high = middle }
            }
            if low < sharedCount, order(slots[low], slot) == 0 { skip.insert(low) }
            inserts.append((low, slot))
        }
        var result: [Int32] = []
        result.reserveCapacity(sharedCount + added.count)
        var cursor = 0
        let skipped = skip.sorted()
        var nextSkip = 0
        func copy(upTo end: Int) {
            while cursor < end {
                while nextSkip < skipped.count, skipped[nextSkip] < cursor { nextSkip += 1 }
                let stop = nextSkip < skipped.count ? min(skipped[nextSkip], end) : end
                result.append(contentsOf: slots[cursor..<stop])
                cursor = stop
                if cursor < end, nextSkip < skipped.count, skipped[nextSkip] == cursor { cursor += 1 }
            }
        }
        for insert in inserts {
            copy(upTo: insert.before)
            result.append(insert.slot)
        }
        copy(upTo: sharedCount)
        if let fences {
            // Where the merge's walk stood as it came to each fence's entry.
            var reached: [Int] = [], insertedAt: [Int] = []
            reached.reserveCapacity(fences.paths.count)
            insertedAt.reserveCapacity(fences.paths.count)
            var skippedBefore = 0, insertedUpTo = 0
            for k in 0..<fences.paths.count {
                let position = k * fences.interval
                while skippedBefore < skipped.count, skipped[skippedBefore] < position { skippedBefore += 1 }
                var before = insertedUpTo
                while before < inserts.count, inserts[before].before < position { before += 1 }
                insertedUpTo = before
                while insertedUpTo < inserts.count, inserts[insertedUpTo].before == position { insertedUpTo += 1 }
                reached.append(position - skippedBefore + insertedUpTo)
                insertedAt.append(insertedUpTo - before)
            }
            merged.lookupFences = LookupFences(fences: fences, reached: reached, insertedAt: insertedAt, count: result.count)
        }
        merged.checksum = mainChecksum
        merged.shared = SharedIndexBase(checksum: link.sharedChecksum, path: sharedPath, slots: sharedSlots, end: sharedEnd)
        return (merged, result)
    }

    /// The stage of the entry at `at` (git's flags, bits 12–13).
    @inline(__always) func stage(at: Int) -> Int { Int((u16(at + 60) >> 12) & 3) }
}
