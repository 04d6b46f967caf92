import CFprepSys
import FoundationEssentials
import FprepGit

extension LocalScanner {
    /// The scan from the agent's change journal: the entries at or below
    /// each path the journal names or the record keeps are looked at as a
    /// full scan looks at them, and so is the untracked item each path is
    /// in; nothing else is. Nil when the record does not hold (another
    /// index, changed ignore rules, too old) or the index cannot be read
    /// in place: the caller scans everything.
    func scanJournaled(_ record: JournalRecord, changed: [[UInt8]]) throws -> LocalChangeSet? {
        guard !index.checksum.isEmpty, record.index == index.checksum,
              record.rules == JournalRecord.ruleFilesStamp(replica),
              Int64(Date().timeIntervalSince1970) - record.fullScanAt < JournalRecord.fullScanInterval else { return nil }
        let ruleFile = Array(".gitignore".utf8)
        var candidates = Set(record.paths)
        for path in changed where !path.isEmpty && !candidates.contains(path) {
            let first = path.split(separator: 0x2F, maxSplits: 1).first.map(Array.init) ?? path
            if Self.ignoredTopLevel.contains(first) { continue }
            // New rules may leave out, or let in, anything below.
            if path.split(separator: 0x2F).last.map(Array.init) == ruleFile { return nil }
            // A file newly linked elsewhere in the tree can change through
            // the other name, where the journal names only that one: which
            // other paths share it, only a full scan finds out (and leaves
            // them all in the record, to be looked at every time).
            if let stat = replica.rootFolder.stat(RepoPath(bytes: path)), stat.isRegular, stat.links > 1 { return nil }
            candidates.insert(path)
        }
        candidates.remove([])

        // The index entries to look at, and the untracked items the paths are in.
        var positions = Set<Int>()
        var untracked = Set<[UInt8]>()
        for path in candidates {
            if let (position, _) = index.find(path) { positions.insert(position) }
            if var at = index.firstPosition(withPrefix: path + [0x2F]) {
                while let below = index.path(at: at), below.starts(with: path + [0x2F]) {
                    positions.insert(at)
                    at += 1
                }
            }
            // The first component that is neither a tracked file nor a
            // folder with tracked items is where the untracked item starts
            // (a file turned into a folder is the tracked file's business).
            var prefix: [UInt8] = []
            var inTrackedFolders = true
            for component in path.split(separator: 0x2F, omittingEmptySubsequences: true) {
                prefix = prefix.isEmpty ? Array(component) : prefix + [0x2F] + component
                if let (position, _) = index.find(prefix) {
                    positions.insert(position)
                    inTrackedFolders = false
                    break
                }
                if index.firstPosition(withPrefix: prefix + [0x2F]) != nil { continue }
                untracked.insert(prefix)
                inTrackedFolders = false
                break
            }
            // A folder with tracked items (made again, moved in): what is
            // new in it may have come before the journal followed it.
            if inTrackedFolders { untracked.formUnion(try untrackedBelow(path)) }
        }

        // The entries, as the full scan classifies them.
        let ordered = positions.sorted()
        let checked = try PlaceholderCheck.lastCompleted(replica.store)
        let time = index.fileTime
        let times = fprep_scan_times(index_sec: time.seconds, index_nsec: time.nanoseconds,
                                     checked_sec: checked.seconds, checked_nsec: checked.nanoseconds)
        var states = [UInt8](repeating: 0, count: max(ordered.count, 1))
        var parts = [fprep_scan_result](repeating: fprep_scan_result(), count: Int(FPREP_SCAN_MAX_PARTS))
        var flags = (skipped: 0, submodules: 0)
        let status = index.withEntryLayout { base, offsets -> Int32 in
            if countsItems { flags = Self.countFlags(base, offsets) }
            guard !ordered.isEmpty else { return 0 }
            let subset = ordered.map { offsets[$0] }
            return subset.withUnsafeBufferPointer {
                fprep_scan_index(replica.rootFolder.fd, base, $0.baseAddress, $0.count, times, 1, &states, &parts)
            }
        }
        guard let status, status >= 0 else {
            if status == -1 { throw FprepError("out of memory while scanning '\(replica.root)'") }
            return nil
        }
        defer { for k in 0..<Int(status) { fprep_scan_result_free(&parts[k]) } }
        var set = LocalChangeSet()
        set.fromJournal = true
        var added: [(RepoPath, FileStat)] = []
        var deleted: [IndexEntry] = []
        var bytes: Int64 = 0
        let tally = try classify(states, count: ordered.count, position: { ordered[$0] }, into: &set,
                                 added: &added, deleted: &deleted, bytes: &bytes)

        // Untracked items, as the full scan finds them in a tracked folder.
        for path in untracked.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            let name = path.split(separator: 0x2F).last.map(Array.init) ?? path
            let folder = Array(path.prefix(max(0, path.count - name.count - 1)))
            if isTemporary(name, in: folder) { continue }
            let item = RepoPath(bytes: path)
            guard let stat = replica.rootFolder.stat(item) else { continue }
            if isIgnored(item, stat, in: &set) { continue }
            if stat.isDirectory {
                _ = try collectNew(item, into: &added, set: &set)
            } else {
                added.append((item, stat))
            }
        }

        // Counts: an entry not looked at is as its flags say.
        if countsItems {
            var counts: [ItemState: Int] = [:]
            counts[.dataless] = flags.skipped
            counts[.materialized] = index.count - flags.skipped - flags.submodules
            for position in ordered {
                guard let entry = index.entry(at: position), FileMode(raw: entry.mode) != .submodule else { continue }
                counts[entry.skipWorktree ? .dataless : .materialized, default: 0] -= 1
            }
            for (state, n) in tally { counts[state, default: 0] += n }
            set.counts = counts.filter { $0.value > 0 }
            set.items = counts.values.reduce(0, +)
        }
        set.folderCount = record.folderCount
        set.treeBytes = record.treeBytes

        let result = try finish(set, added: added, deleted: deleted)
        if result.unreadIgnoreFiles.isEmpty, let point = journal.point {
            var next = record
            next.point = point
            next.paths = result.pathsToLookAtAgain + strays.paths.map(\.bytes)
            journal.record = next
            next.save(replica)
        }
        return result
    }

    /// The untracked items anywhere below `folder`, a folder the index has
    /// items in: each the first of its path the index has nothing at or below.
    private func untrackedBelow(_ folder: [UInt8]) throws -> [[UInt8]] {
        guard let handle = try? replica.rootFolder.folder(RepoPath(bytes: folder)) else { return [] }
        var found: [[UInt8]] = []
        for name in try handle.entryNames() {
            let path = folder + [0x2F] + name
            if index.contains(path) { continue }
            if index.firstPosition(withPrefix: path + [0x2F]) != nil {
                found += try untrackedBelow(path)
            } else {
                found.append(path)
            }
        }
        return found
    }

    /// Entries marked skip-worktree (placeholders), and submodules, counted
    /// from the index's bytes (version 2/3 layout) without decoding entries.
    private static func countFlags(_ base: UnsafePointer<UInt8>, _ offsets: UnsafeBufferPointer<Int32>) -> (skipped: Int, submodules: Int) {
        var skipped = 0, submodules = 0
        for offset in offsets {
            let entry = Index.EntryFields(base + Int(offset))
            if entry.mode & 0o170000 == 0o160000 { submodules += 1; continue }
            if entry.skipWorktree { skipped += 1 }
        }
        return (skipped, submodules)
    }
}
