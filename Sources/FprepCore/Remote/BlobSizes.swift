import FprepGit

/// The sizes a size manifest lists, sorted by blob id and searched by
/// halves: 40 bytes a blob, where a dictionary of the same takes about
/// twice that, which is what a clone of 10^6 files can afford. Of two
/// lines for one blob the first (the oldest) counts, as in the store
/// (`recordBlobInfo` keeps the first).
///
/// Where the ids of each two-byte prefix start is kept too (256 KB): a
/// search by halves of the whole table missed the processor's cache a
/// dozen times per blob, and a clone looks up every file twice (its check
/// of the tree, then its layout).
struct BlobSizeTable {
    /// One line per blob, by id.
    private(set) var entries: [(ObjectID, BlobInfo)]
    /// For each two-byte prefix p, where its ids start in `entries`
    /// (`starts[p + 1]`: where they end).
    private let starts: [Int32]

    init(_ listed: [(ObjectID, BlobInfo)] = []) {
        var entries = listed
        // Swift's sort is stable: of equal ids the first listed stays first.
        entries.sort { $0.0 < $1.0 }
        var kept = 0
        for i in entries.indices where kept == 0 || entries[kept - 1].0 != entries[i].0 {
            entries[kept] = entries[i]
            kept += 1
        }
        entries.removeLast(entries.count - kept)
        self.entries = entries
        var starts = [Int32](repeating: Int32(entries.count), count: 65537)
        var next = 0
        for (i, entry) in entries.enumerated() {
            let prefix = entry.0.leadingBits16
            while next <= prefix { starts[next] = Int32(i); next += 1 }
        }
        self.starts = starts
    }

    subscript(id: ObjectID) -> BlobInfo? {
        let prefix = id.leadingBits16
        var low = Int(starts[prefix])
        var high = Int(starts[prefix + 1])
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].0 < id { low = middle + 1 } else { high = middle }
        }
        return low < entries.count && entries[low].0 == id ? entries[low].1 : nil
    }
}

/// Sizes the manifest lacks, read from object headers (never the
/// content): the remote's own, when it is a folder on this machine, and the
/// clone's (a `--full` clone holds every blob). Each blob is looked up once;
/// what was found is recorded with the manifest's sizes.
final class SizeFallback {
    private let databases: [ObjectDatabase]
    private let time: Int64
    private var looked: [ObjectID: BlobInfo?] = [:]

    /// `time`: the date given to what is found (the anchor commit's).
    init(url: String, repository: Repository, time: Int64) throws {
        var databases: [ObjectDatabase] = []
        if let path = Cloner.localPath(of: url), let remote = try? Repository(openingAt: path) {
            databases.append(try remote.objectDatabase())
        }
        databases.append(try repository.objectDatabase())
        self.databases = databases
        self.time = time
    }

    func size(of id: ObjectID) throws -> BlobInfo? {
        if let known = looked[id] { return known }
        var found: BlobInfo?
        for database in databases {
            if let size = try database.size(of: id) {
                found = BlobInfo(size: Int64(size), mtime: time)
                break
            }
        }
        looked[id] = found
        return found
    }

    /// Every size found so far.
    var found: [(ObjectID, BlobInfo)] { looked.compactMap { id, info in info.map { (id, $0) } } }
}
