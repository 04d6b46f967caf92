import CFprepSys
import FprepCore
import Glibc

/// Fetching ahead for a program that walks a folder (`grep -r`, `cp -r`,
/// `tar`): when hydrations of three placeholders of one folder come in a row,
/// the folder's other watched placeholders are fetched in ONE git fetch, up
/// to a byte budget, and filled while the reader goes on, so it is not
/// served one round trip per file. They are taken in the folder's own order
/// (the order `readdir` gives, which walkers follow), from the file asked
/// onwards and then the ones before it. Each is filled exactly as a single
/// hydration fills it (same checks: a file a program wrote into is left
/// alone), in chunks of one journal and one index write each.
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
    private let root: String
    private let rootFD: Int32
    private let log: AgentLog
    private let prefix: String
    /// The folder of the last single hydration, when, and how many came
    /// in a row there (loop thread only).
    private var last: (folder: RepoPath, time: Double, count: Int)?

    init(budget: Int64, root: String, rootFD: Int32, log: AgentLog, prefix: String) {
        self.budget = budget
        self.root = root
        self.rootFD = rootFD
        self.log = log
        self.prefix = prefix
    }

    /// Called on the loop thread when a single hydration of `placeholder`
    /// starts: the files to fetch ahead (none unless it makes a walk of
    /// that folder). `skip`: files already being hydrated.
    func plan(after placeholder: WatchedPlaceholder, watchlist: Watchlist,
              skip: (FileKey) -> Bool) -> [(FileKey, WatchedPlaceholder)] {
        guard budget > 0 else { return [] }
        let folder = placeholder.path.parent
        let now = monotonicNow()
        let inRow = last.map { $0.folder == folder && now - $0.time < Self.window } == true ? (last?.count ?? 0) + 1 : 1
        last = (folder, now, inRow)
        guard inRow >= Self.walk else { return [] }

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
        var chosen: [(FileKey, WatchedPlaceholder)] = []
        var total: Int64 = 0
        for name in names {
            var raw = fprep_stat()
            guard fprep_lstat_at(dirfd, Self.cString(name), &raw) == 0 else { continue }
            let key = FileKey(device: raw.dev, inode: raw.ino)
            guard !skip(key), let watched = watchlist.placeholder(key) else { continue }
            if total + raw.size > budget, !chosen.isEmpty { break }
            total += raw.size
            chosen.append((key, watched))
        }
        return chosen
    }

    /// On a worker: fetches the contents of `batch` in one fetch and fills
    /// them, telling `report` what became of each file as its chunk is done.
    /// The fills write through descriptors of the agent's own (not an
    /// event's): the event loop lets the agent's own accesses through.
    func run(_ batch: [(FileKey, WatchedPlaceholder)], group: FanotifyGroup,
             indexWritten: @Sendable (fprep_stat, fprep_stat) -> Void,
             report: ([(FileKey, Hydrator.Outcome)]) -> Void) {
        guard let first = batch.first else { return }
        let started = monotonicNow()
        let folder = prefix + (first.1.path.parent.isRoot ? "." : first.1.path.parent.description)
        let token: String
        do {
            token = try InPlaceHydration.fetch(Array(Set(batch.map(\.1.blob))), replicaRoot: root)
        } catch {
            let why = Self.reason(error)
            log.write(.warning, "cannot read ahead in \(folder): \(why)")
            report(batch.map { ($0.0, .failed(why)) })
            return
        }
        defer { InPlaceHydration.removeQuarantine(token, replicaRoot: root) }
        var filled = 0
        var bytes: Int64 = 0
        var start = 0, chunk = Self.firstChunk
        while start < batch.count {
            let part = Array(batch[start..<min(batch.count, start + chunk)])
            start += part.count
            chunk = min(chunk * 4, Self.largestChunk)
            let outcomes = fill(part, token: token, group: group, indexWritten: indexWritten)
            for case .hydrated(let size) in outcomes.map(\.1) {
                filled += 1
                bytes += size
            }
            report(outcomes)
        }
        let milliseconds = Int(((monotonicNow() - started) * 1000).rounded())
        log.write(.info, "read ahead \(filled) file\(filled == 1 ? "" : "s") (\(AgentLog.size(bytes))) in \(folder) in one fetch (\(milliseconds) ms)")
    }

    private func fill(_ part: [(FileKey, WatchedPlaceholder)], token: String, group: FanotifyGroup,
                      indexWritten: @Sendable (fprep_stat, fprep_stat) -> Void) -> [(FileKey, Hydrator.Outcome)] {
        var outcomes = [Hydrator.Outcome?](repeating: nil, count: part.count)
        var open: [(position: Int, fd: Int32)] = []
        defer { for (_, fd) in open { close(fd) } }
        for (position, (_, placeholder)) in part.enumerated() {
            var raw = fprep_stat()
            let fd = fprep_open_regular(rootFD, Self.cString(placeholder.path.bytes), O_RDWR, &raw)
            if fd >= 0 {
                open.append((position, fd))
            } else {
                outcomes[position] = .failed(fd == -2 ? "it is no longer a file" : "open: \(String(cString: strerror(errno)))")
            }
        }
        do {
            let replica = try Replica.open(containing: root, access: Replica.Access(command: "agent", exclusive: true))
            let before = IndexWatcher.stat(root)
            let results = try replica.hydrateInPlace(open.map { (part[$0.position].1.path, $0.fd) }, token: token, used: false)
            indexWritten(before, IndexWatcher.stat(root))
            for ((position, fd), result) in zip(open, results) {
                switch result {
                case .success(.hydrated(let bytes)):
                    group.unmark(fd)
                    outcomes[position] = .hydrated(bytes: bytes)
                case .success(.notAPlaceholder(let why)):
                    group.unmark(fd)
                    outcomes[position] = .notAPlaceholder(why)
                case .failure(let error):
                    outcomes[position] = .failed(Self.reason(error))
                }
            }
        } catch {
            let why = Self.reason(error)
            for (position, _) in open { outcomes[position] = .failed(why) }
        }
        return zip(part, outcomes).map { ($0.0, $1 ?? .failed("not filled")) }
    }

    private static func cString(_ bytes: [UInt8]) -> [CChar] {
        bytes.map { CChar(bitPattern: $0) } + [0]
    }

    private static func reason(_ error: any Error) -> String {
        if let error = error as? FprepError { return error.message }
        return "\(error)"
    }
}

extension FileKey {
    init(device: Int64, inode: Int64) {
        self.device = device
        self.inode = inode
    }
}
