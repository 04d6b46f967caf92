import CFprepSys
import FprepCore
import Glibc
import Synchronization

/// Fetching ahead for a program that walks a folder (`grep -r`, `cp -r`,
/// `tar`): when hydrations of three placeholders of one folder come in a row,
/// the folder's other watched placeholders are fetched in ONE git fetch, up
/// to a byte budget, and filled while the reader goes on, so it is not
/// served one round trip per file. They are taken in the folder's own order
/// (the order `readdir` gives, which walkers follow), from the file asked
/// onwards and then the ones before it. Each is filled exactly as a single
/// hydration fills it (same checks: a file a program wrote into is left
/// alone), in chunks of one journal and one index write each. A file the
/// batch does not fill (its fetch failed, the file moved meanwhile) is
/// hydrated on its own for whoever waits for it: a read-ahead never fails
/// a reader.
final class ReadAhead: @unchecked Sendable {
    /// Hydrations this far apart still count as "in a row".
    static let window = 5.0
    /// Single hydrations in one folder that make a walk: two could be a
    /// program opening a file and its neighbour; a third is a pattern.
    static let walk = 3
    /// Files filled under one journal and one index write: readers waiting
    /// on a file of the batch are answered chunk by chunk. The first chunk
    /// is small, so the reader goes on soon; each next one four times
    /// larger, up to `largestChunk`, so a large folder costs a few index writes.
    static let firstChunk = 64
    static let largestChunk = 4096

    private let budget: Int64
    /// Fetches and fills, as the replica's owner.
    private let worker: WorkerClient
    private let rootFD: Int32
    private let log: AgentLog
    private let prefix: String
    /// The folder of the last single hydration, when, and how many came
    /// in a row there (loop thread only).
    private var last: (folder: RepoPath, time: Double, count: Int)?
    /// The folder whose last read-ahead could not fetch, and when: not
    /// tried again there for `pauseAfterFailure` (each access of the walk
    /// would start another batch that fails the same way).
    private let failed = Mutex<(folder: RepoPath, time: Double)?>(nil)
    static let pauseAfterFailure = 30.0

    init(budget: Int64, worker: WorkerClient, rootFD: Int32, log: AgentLog, prefix: String) {
        self.budget = budget
        self.worker = worker
        self.rootFD = rootFD
        self.log = log
        self.prefix = prefix
    }

    /// Called on the loop thread when a single hydration of `placeholder`
    /// starts: the files to fetch ahead (none unless it makes a walk of
    /// that folder). `skip`: files already being hydrated.
    func plan(after placeholder: WatchedPlaceholder, watchlist: Watchlist,
              skip: (FileKey) -> Bool) -> [(key: FileKey, file: WatchedPlaceholder, size: Int64)] {
        guard budget > 0 else { return [] }
        let folder = placeholder.path.parent
        let now = monotonicNow()
        let inRow = last.map { $0.folder == folder && now - $0.time < Self.window } == true ? (last?.count ?? 0) + 1 : 1
        last = (folder, now, inRow)
        guard inRow >= Self.walk else { return [] }
        if let failure = failed.withLock({ $0 }), failure.folder == folder, now - failure.time < Self.pauseAfterFailure { return [] }

        let dirfd = fprep_open_beneath(rootFD, Self.cString(folder.bytes), O_RDONLY | O_DIRECTORY, 0)
        guard dirfd >= 0, let dir = fdopendir(dirfd) else {
            if dirfd >= 0 { close(dirfd) }
            return []
        }
        defer { closedir(dir) }
        var names: [[UInt8]] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                Array(raw.prefix { $0 != 0 })
            }
            guard name != [0x2E], name != [0x2E, 0x2E] else { continue }
            let type = entry.pointee.d_type
            guard type == UInt8(DT_REG) || type == UInt8(DT_UNKNOWN) else { continue }
            names.append(name)
        }
        if let position = names.firstIndex(of: placeholder.path.name) {
            names = Array(names[(position + 1)...] + names[..<position])
        }
        var chosen: [(key: FileKey, file: WatchedPlaceholder, size: Int64)] = []
        var total: Int64 = 0
        for name in names {
            var raw = fprep_stat()
            guard fprep_lstat_at(dirfd, Self.cString(name), &raw) == 0, raw.mode & 0o170000 == 0o100000 else { continue }
            // Never opened here, on the loop thread: a file being filled
            // holds its opens until the loop answers them, so an open of
            // the loop's own would wait for itself.
            let key = FileKey(device: raw.dev, inode: raw.ino, generation: fprep_file_generation(dirfd, Self.cString(name)))
            guard !skip(key), let watched = watchlist.placeholder(key) else { continue }
            if total + raw.size > budget, !chosen.isEmpty { break }
            total += raw.size
            // Where it is now: a sync may have moved it since it was listed.
            chosen.append((key, WatchedPlaceholder(path: folder.appending(name), blob: watched.blob), raw.size))
        }
        return chosen
    }

    /// On a thread of the agent's: has the replica's worker fetch the
    /// contents of `batch` in one fetch and fill them chunk by chunk (as the
    /// owner, through descriptors of its own: the event loop lets the
    /// worker's accesses through), telling `report` what became of each
    /// file as soon as it is filled (its readers go on then, not when the
    /// whole chunk is), and of every file again when its chunk is done; a
    /// filled file's mark goes with its chunk.
    func run(_ batch: [(FileKey, WatchedPlaceholder)], group: FanotifyGroup,
             indexWritten: @Sendable (fprep_stat, fprep_stat) -> Void,
             report: @escaping @Sendable ([(FileKey, Hydrator.Outcome)]) -> Void) {
        guard let first = batch.first else { return }
        let started = monotonicNow()
        let folder = prefix + (first.1.path.parent.isRoot ? "." : first.1.path.parent.description)
        let token: String
        switch worker.fetchAhead(Array(Set(batch.map(\.1.blob)))) {
        case .success(let fetched): token = fetched
        case .failure(let error):
            failed.withLock { $0 = (first.1.path.parent, monotonicNow()) }
            log.write(.warning, "cannot read ahead in \(folder): \(error.message)")
            report(batch.map { ($0.0, .failed(error.message)) })
            return
        }
        defer { worker.endAhead(token: token) }
        var filled = 0
        var bytes: Int64 = 0
        var start = 0, chunk = Self.firstChunk
        while start < batch.count {
            let part = Array(batch[start..<min(batch.count, start + chunk)])
            start += part.count
            chunk = min(chunk * 4, Self.largestChunk)
            let keys = part.map(\.0)
            let outcomes = worker.fillAhead(part.map { (key: $0.0, placeholder: $0.1) }, token: token, indexWritten: indexWritten) { position, bytes in
                report([(keys[position], .hydrated(bytes: bytes))])
            }
            for ((_, placeholder), outcome) in zip(part, outcomes) {
                switch outcome {
                case .hydrated(let size):
                    filled += 1
                    bytes += size
                    unmark(placeholder, group: group)
                case .notAPlaceholder: unmark(placeholder, group: group)
                case .failed: break
                }
            }
            report(zip(part, outcomes).map { ($0.0, $1) })
        }
        let milliseconds = Int(((monotonicNow() - started) * 1000).rounded())
        log.write(.info, "read ahead \(filled) file\(filled == 1 ? "" : "s") (\(AgentLog.size(bytes))) in \(folder) in one fetch (\(milliseconds) ms)")
    }

    /// Takes the mark off a file the worker filled (opened as marks are,
    /// beneath the root without following a symlink).
    /// By name in its folder (opened beneath the root, never through a
    /// symlink): opening the file would raise an open event of its own.
    private func unmark(_ placeholder: WatchedPlaceholder, group: FanotifyGroup) {
        let folder = fprep_open_beneath(rootFD, Self.cString(placeholder.path.parent.bytes), O_RDONLY | O_DIRECTORY, 0)
        guard folder >= 0 else { return }
        group.unmark(in: folder, name: Self.cString(placeholder.path.name))
        close(folder)
    }

    private static func cString(_ bytes: [UInt8]) -> [CChar] {
        bytes.map { CChar(bitPattern: $0) } + [0]
    }

}

extension FileKey {
    init(device: Int64, inode: Int64, generation: Int64) {
        self.device = device
        self.inode = inode
        self.generation = generation
    }
}
