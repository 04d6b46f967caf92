import CFprepSys
import FoundationEssentials
import FprepGit
import Glibc

/// Asks the kernel to start reading files a command will read soon, so the
/// disk works while the command waits on something else (the network).
enum ReadAhead {
    /// What one piece of advice asks for: within the smallest read-ahead
    /// window a device has by default.
    static let piece = 128 << 10

    static func start(_ paths: [String]) {
        guard !paths.isEmpty else { return }
        start { paths }
    }

    /// On a thread of its own, choosing the files there too: the advice
    /// returns once the reads are queued, but queueing tens of megabytes
    /// waits for the disk's queue (17–29 ms at the start of a cold `sync
    /// --incoming` at 10^5 files, before its fetch could start), and the
    /// choice reads the start of each pack.
    static func start(choosing paths: @escaping () -> [String]) {
        BlockingThread.start {
            for path in paths() {
                let fd = open(path, O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else { continue }
                var info = stat()
                if fstat(fd, &info) == 0 {
                    // In pieces: the kernel reads at most the device's
                    // read-ahead window per call (8 MB here, 128 KB on many
                    // disks) and drops the rest of the range, so advice on a
                    // whole 37 MB file read its first 8 MB only.
                    var offset = 0
                    while offset < Int(info.st_size) {
                        _ = posix_fadvise(fd, off_t(offset), off_t(Self.piece), POSIX_FADV_WILLNEED)
                        offset += Self.piece
                    }
                }
                close(fd)
            }
        }
    }

    /// The packs of history (commits and trees), where a diff between two
    /// anchors reads old trees: their indexes first, then the packs, the
    /// smallest (the latest fetches) first, up to `limit` bytes in all; a
    /// very large history is left to be read as needed.
    ///
    /// Whole packs, not the trees a diff will read: git writes a tree's
    /// subtrees right after it, so the trees of the root's folders lie all
    /// over the pack, and a cold page of it read through libgit2's mapping
    /// brings the device's read-ahead window around it (8 MB here).
    ///
    /// Not the other packs marked `.promisor`: content (the blobs a fetch
    /// of content kept: the pack starts with a blob, a fetch of history with
    /// its newest commit) and the size manifest and remote info (commits of
    /// the empty tree: 27 MB at 10^6 files, of which a sync reads only the
    /// new end). Picked in the order the folder listed them, the manifest had
    /// taken the limit's room before the trees at 10^6 files. A fetch that
    /// brought both the branch and the manifest may start with either; as
    /// a manifest's it is left to be read as needed, which costs one read
    /// of a pack as small as one sync's change.
    static func historyPacks(gitDirectory: String, limit: Int = 64 << 20) -> [String] {
        let folder = gitDirectory + "/objects/pack"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        func size(_ path: String) -> Int? {
            var info = stat()
            return stat(path, &info) == 0 ? Int(info.st_size) : nil
        }
        var paths: [String] = []
        var total = 0
        var packs: [(path: String, size: Int)] = []
        for name in names where name.hasSuffix(".promisor") {
            let base = folder + "/" + name.dropLast(".promisor".count)
            guard PackFile.startsWithHistory(base + ".pack"), let indexSize = size(base + ".idx") else { continue }
            paths.append(base + ".idx")
            total += indexSize
            if let packSize = size(base + ".pack") { packs.append((base + ".pack", packSize)) }
        }
        for pack in packs.sorted(by: { $0.size < $1.size }) {
            total += pack.size
            guard total <= limit else { break }
            paths.append(pack.path)
        }
        return paths
    }
}

/// What fprep reads of a git pack without libgit2: enough to tell which
/// fetch wrote it, from its first object.
enum PackFile {
    static let commit: Int32 = 1

    /// Whether the pack at `path` starts with a commit of a tree that is not
    /// empty (the commits of the size manifest and of the remote's info
    /// have the empty tree).
    static func startsWithHistory(_ path: String) -> Bool {
        var line = [CChar](repeating: 0, count: 80)
        guard fprep_pack_first_object(path, &line, line.count) == commit else { return false }
        let first = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard first.hasPrefix("tree "), let tree = ObjectID(hex: String(first.dropFirst("tree ".count))) else { return false }
        return tree != ObjectID.emptyTree
    }
}
