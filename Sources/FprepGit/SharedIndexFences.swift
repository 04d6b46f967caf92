import Glibc

/// Every 256th path of a shared index fprep wrote, kept beside it
/// (`.git/fprep-sharedindex-fences`, naming the shared file's checksum),
/// so that finding a path touches one run of 256 entries of the shared
/// file instead of a page at every step of a binary search over all of it.
///
/// At 10^6 entries the shared file is 119 MB, and a page fault anywhere in
/// a mapping reads up to the device's read-ahead around it (8 MB on this
/// kind of machine): the twenty steps of each lookup of a sync's hundred
/// paths read most of the file, 120 ms cold where the change is 100 files.
/// With the fences, a lookup is a binary search in memory, then one read
/// of its run (about 30 KB), asked for before it is touched.
///
/// Layout: "FPFN", version (1), the shared index's 20-byte checksum, the
/// interval, the entry count, the fence count; then each fence's path as
/// a 32-bit length and its bytes; numbers 32-bit big-endian. A file that
/// names another checksum or does not fit is not read (lookups then search
/// the whole index, as before).
struct SharedIndexFences {
    /// Entries between two fences in the files this process writes; tests
    /// set a small one so a small index has many runs.
    @TaskLocal static var writingInterval = 256
    static let magic = Array("FPFN".utf8)
    static let version: UInt32 = 1
    static let headerSize = 4 + 4 + 20 + 4 + 4 + 4

    /// Entries between two fences.
    let interval: Int
    /// The paths of shared entries 0, interval, 2·interval, …
    let paths: [[UInt8]]

    static func path(beside indexPath: String) -> String {
        SharedIndexFile.folder(of: indexPath) + "fprep-sharedindex-fences"
    }

    /// Writes the fences of a shared file just written (its `checksum`, its
    /// `entries` entries): `path(i)` gives the path of entry i, from what
    /// the writer holds. Not read back from the file: mapping it and
    /// touching every 256th entry brought the whole file in (119 MB at
    /// 10^6 entries, counted in the clone's peak memory).
    static func write(entries: Int, checksum: [UInt8], table: String, path: (Int) -> [UInt8]?) {
        guard checksum.count == 20 else {
            unlink(table)
            return
        }
        var bytes = magic
        append(&bytes, version)
        bytes += checksum
        let interval = max(1, writingInterval)
        append(&bytes, UInt32(interval))
        append(&bytes, UInt32(entries))
        let fences = Array(stride(from: 0, to: entries, by: interval))
        append(&bytes, UInt32(fences.count))
        for i in fences {
            guard let fence = path(i) else {
                unlink(table)
                return
            }
            append(&bytes, UInt32(fence.count))
            bytes += fence
        }
        if !CacheFile.replace(table, with: bytes) { unlink(table) }
    }

    /// The fences beside `indexPath`, when they name the shared file of
    /// `checksum` and its `entries` entries, and are in order.
    static func read(beside indexPath: String, checksum: [UInt8], entries: Int) -> SharedIndexFences? {
        let fd = open(path(beside: indexPath), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_size >= headerSize, info.st_size < 64 << 20 else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        guard bytes.withUnsafeMutableBytes({ pread(fd, $0.baseAddress, $0.count, 0) }) == bytes.count else { return nil }
        guard Array(bytes[0..<4]) == magic, u32(bytes, 4) == version, Array(bytes[8..<28]) == checksum,
              Int(u32(bytes, 32)) == entries else { return nil }
        let interval = Int(u32(bytes, 28))
        let count = Int(u32(bytes, 36))
        guard interval > 0 else { return nil }
        guard count == (entries + interval - 1) / interval else { return nil }
        var paths: [[UInt8]] = []
        paths.reserveCapacity(count)
        var at = headerSize
        for _ in 0..<count {
            guard at + 4 <= bytes.count else { return nil }
            let length = Int(u32(bytes, at))
            guard length > 0, at + 4 + length <= bytes.count else { return nil }
            let path = Array(bytes[(at + 4)..<(at + 4 + length)])
            if let last = paths.last, path.lexicographicallyPrecedes(last) { return nil }
            paths.append(path)
            at += 4 + length
        }
        guard at == bytes.count else { return nil }
        return SharedIndexFences(interval: interval, paths: paths)
    }

    /// The fence run `key` falls in: the last fence not after it, -1 before the first.
    func run(of key: UnsafeBufferPointer<UInt8>) -> Int {
        var low = 0, high = paths.count
        while low < high {
            let middle = (low + high) / 2
            let notAfter = paths[middle].withUnsafeBufferPointer { Index.compareBytes($0, key) <= 0 }
            if notAfter { low = middle + 1 } else { high = middle }
        }
        return low - 1
    }

    /// The shared positions among which the first entry not before `key`
    /// is, in a shared index of `count` entries.
    func sharedCandidates(for key: UnsafeBufferPointer<UInt8>, count: Int) -> Range<Int> {
        let k = run(of: key)
        let low = k < 0 ? 0 : max(0, k * interval - LookupFences.slack)
        return low..<max(low, min(count, (k + 1) * interval + LookupFences.slack))
    }

    private static func append(_ bytes: inout [UInt8], _ value: UInt32) { EntryOffsets.append(&bytes, value) }
    private static func u32(_ bytes: [UInt8], _ at: Int) -> UInt32 { EntryOffsets.u32(bytes, at) }
}

/// The fences of a merged split index: for each fence run, where its
/// entries stand among the merged ones (a few entries of slack each way
/// for stages of one path), from which `FenceBounds` starts.
struct LookupFences {
    let fences: SharedIndexFences
    /// For fence k, the merged position the walk of the merge reached when
    /// it came to shared entry k·interval (added entries inserted right
    /// before it counted), and how many of those were inserted right before it.
    let reached: [Int]
    let insertedAt: [Int]
    /// The merged entries' count they were made for.
    let count: Int

    /// Stages of one path: up to three other entries of its path may stand
    /// on either side of a run's bounds.
    static let slack = 4
}

/// Where each fence's path stands among an index's entries as they are
/// now, edits merged in memory included: for fence k, the first entry not
/// before its path lies in `low[k]...high[k]`. Made from the fences of the
/// entries as read (`LookupFences`: a few entries of slack each way), then
/// shifted by each batch of edits the index merges: that position moves by
/// the entries added and removed at paths before the fence's path, and by
/// nothing else, so the bounds stay exact in width however many batches
/// come. Without them every lookup after an edit searched all the entries
/// (a cold index: a page read for most steps of each search).
struct FenceBounds {
    let fences: SharedIndexFences
    private(set) var low: [Int]
    private(set) var high: [Int]
    /// The entries' count they describe.
    private(set) var count: Int

    init?(_ lookup: LookupFences, count: Int) {
        guard lookup.count == count, lookup.reached.count == lookup.fences.paths.count,
              lookup.insertedAt.count == lookup.reached.count else { return nil }
        fences = lookup.fences
        low = zip(lookup.reached, lookup.insertedAt).map { max(0, $0 - $1 - LookupFences.slack) }
        high = lookup.reached.map { $0 + LookupFences.slack }
        self.count = count
    }

    /// The positions among which the first entry not before `key` is.
    func candidates(for key: UnsafeBufferPointer<UInt8>) -> Range<Int> {
        let k = fences.run(of: key)
        let from = min(count, k < 0 ? 0 : low[k])
        let to = k + 1 < high.count ? min(count, high[k + 1] + 1) : count
        return from..<max(from, to)
    }

    /// Follows a batch of edits merged into the entries: per edited path
    /// (in path order), how many entries it added (negative: removed).
    mutating func shift(by changes: [(path: [UInt8], added: Int)]) {
        var next = 0, delta = 0
        for k in fences.paths.indices {
            while next < changes.count, changes[next].path.lexicographicallyPrecedes(fences.paths[k]) {
                delta += changes[next].added
                next += 1
            }
            low[k] = max(0, low[k] + delta)
            high[k] += delta
        }
        count += changes.reduce(0) { $0 + $1.added }
    }
}
