import FprepGit

/// The sizes a size manifest lists, sorted by blob id and searched by
/// halves: 40 bytes a blob, where a dictionary of the same takes about
/// twice that, which is what a clone of 10^6 files can afford. Of two
/// lines for one blob the first (the oldest) counts, as in the store
/// (`recordBlobInfo` keeps the first).
struct BlobSizeTable {
    /// One line per blob, by id.
    private(set) var entries: [(ObjectID, BlobInfo)]

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
    }

    subscript(id: ObjectID) -> BlobInfo? {
        var low = 0
        var high = entries.count
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
