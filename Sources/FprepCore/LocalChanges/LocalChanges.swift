import CFprepSys
import FoundationEssentials
import FprepGit
import Glibc

/// One change a user made in the replica since its last sync, found by a
/// stat scan as git's index finds changes: files whose stat data did not
/// change are not read.
public struct LocalChange: Sendable, Encodable, Equatable {
    public enum Kind: String, Sendable, Encodable {
        /// Content or mode changed (bytes written into a placeholder included).
        case modified
        /// A file or symlink the anchor does not have.
        case added
        case deleted
        /// Deleted at `from`, added with the same content at `path`.
        case moved
        /// Only the mode changed (a placeholder's included: no content needed).
        case modeChanged
        /// Bytes written into a placeholder whose content was not on disk:
        /// sync keeps them as a conflict copy beside the remote's version.
        case writtenWhileDataless
    }

    public let kind: Kind
    public let path: String
    /// For a move, the old identifier.
    public let from: String?
}

/// A file with fprep's placeholder marks away from its own index entry
/// (see `LocalScanner.markedPlaceholder`).
struct MarkedPlaceholder {
    /// The blob the placeholder stands for.
    let blob: ObjectID
    /// When something wrote into it: the placeholder entry its bytes are
    /// kept beside (as `WrittenPlaceholder` keeps them).
    let writtenInto: IndexEntry?
    /// Made by another replica (of another remote, most likely): a blob
    /// this replica's remote is not known to have (see `LocalScanner.isKnown`).
    /// Committed, it would name content no one can send, and every push
    /// would fail; it is held back instead.
    var foreign = false
}

/// What the scan found, with what a commit of it needs.
struct LocalChangeSet {
    struct Write {
        let path: RepoPath
        /// The blob of the content on disk; nil until written into the store.
        var id: ObjectID?
        let mode: FileMode
        /// The placeholder this is (a moved placeholder): no content to read.
        let placeholder: Bool
    }

    /// Paths whose entry goes away.
    var removed: [RepoPath] = []
    /// Paths whose entry is new or changes, with what the disk holds there.
    var written: [Write] = []
    /// The changes as a user reads them.
    var changes: [LocalChange] = []
    /// What the scan leaves alone, with why: FIFOs, sockets and devices.
    var skipped: [Skipped] = []
    /// Untracked items git's ignore rules leave out (a folder with a
    /// trailing `/`, its content not looked at), sorted.
    var ignored: [String] = []
    /// `.gitignore` files whose rules were not applied: placeholders
    /// (see `IgnoreRules`).
    var unreadIgnoreFiles: [String] = []
    /// The ignored items as found, for `LocalScanner.placeholdersLeftIgnored`.
    var ignoredItems: [(RepoPath, FileStat)] = []
    /// How many tracked items are in each state, and how many folders.
    var counts: [ItemState: Int] = [:]
    var items = 0
    var folderCount = 0
    /// Disk space of the tree outside `.git` and `.fprep`, as `du` counts.
    var treeBytes: Int64 = 0

    /// Placeholders a program wrote into: the commit keeps their bytes as
    /// conflict copies (`WrittenPlaceholder`).
    var writtenPlaceholders: [IndexEntry] = []
    /// Tracked files with more than one link: they can change through a
    /// link no change journal of this tree sees (see `JournalRecord`).
    var linked: [[UInt8]] = []
    /// The paths of `skipped`.
    var specialPaths: [[UInt8]] = []
    /// Whether the change journal, not a walk of everything, found this.
    var fromJournal = false

    var isEmpty: Bool { removed.isEmpty && written.isEmpty && writtenPlaceholders.isEmpty }

    /// What a change journal's record keeps to look at again: every path
    /// that differs from the index, and files a journal may not see change.
    var pathsToLookAtAgain: [[UInt8]] {
        removed.map(\.bytes) + written.map(\.path.bytes) + writtenPlaceholders.map(\.path) + linked + specialPaths
    }

    /// A tracked item whose content, mode or kind changed on disk; a FIFO,
    /// socket or device in its place is skipped (never read, never a deletion).
    mutating func recordModified(_ entry: IndexEntry, _ stat: FileStat, classifier: StateClassifier) {
        let path = RepoPath(bytes: entry.path)
        if stat.isSpecial { return recordSpecial(path, stat) }
        switch classifier.placeholderChange(of: entry, stat: stat) {
        case .mode(let mode):
            recordModeChange(path, entry.id, mode)
        case .written:
            writtenPlaceholders.append(entry)
            changes.append(LocalChange(kind: .writtenWhileDataless, path: path.description, from: nil))
        case nil:
            written.append(Write(path: path, id: nil, mode: stat.gitMode, placeholder: false))
            changes.append(LocalChange(kind: .modified, path: path.description, from: nil))
        }
    }

    /// A placeholder whose execute bit changed: the same blob, a new mode.
    mutating func recordModeChange(_ path: RepoPath, _ blob: ObjectID, _ mode: FileMode) {
        written.append(Write(path: path, id: blob, mode: mode, placeholder: true))
        changes.append(LocalChange(kind: .modeChanged, path: path.description, from: nil))
    }

    /// A placeholder behind an entry that says content (see
    /// `StateClassifier.isPlaceholder`): no change of the user's, but its
    /// entry is written again as the placeholder's, so the agent watches it
    /// and the next look needs no marks. (A submodule found is `.dataless`
    /// too, and is left as it is.)
    mutating func recordPlaceholderEntry(_ entry: IndexEntry) {
        let mode = FileMode(raw: entry.mode)
        guard !entry.skipWorktree, mode.isFile else { return }
        written.append(Write(path: RepoPath(bytes: entry.path), id: entry.id, mode: mode, placeholder: true))
    }

    /// A placeholder moved or copied over a tracked file that is not one:
    /// the path now holds the placeholder's blob (and what was written into
    /// it, as a conflict copy).
    mutating func recordMarked(_ path: RepoPath, _ stat: FileStat, _ marked: MarkedPlaceholder) {
        written.append(Write(path: path, id: marked.blob, mode: stat.gitMode, placeholder: true))
        changes.append(LocalChange(kind: .modified, path: path.description, from: nil))
        recordWrittenInto(marked)
    }

    /// Bytes written into a placeholder found away from its index entry.
    mutating func recordWrittenInto(_ marked: MarkedPlaceholder) {
        guard let entry = marked.writtenInto else { return }
        writtenPlaceholders.append(entry)
        changes.append(LocalChange(kind: .writtenWhileDataless, path: RepoPath(bytes: entry.path).description, from: nil))
    }

    /// A placeholder another replica made (see `MarkedPlaceholder.foreign`):
    /// reported, never committed, looked at again next time.
    mutating func recordForeign(_ path: RepoPath) {
        specialPaths.append(path.bytes)
        skipped.append(Skipped(path: path.description, reason: "a placeholder of another replica: its content is neither on this device nor known to this replica's remote, so fprep does not sync it (materialize it in the replica it came from, then copy it here)"))
    }

    /// A FIFO, socket or device node in the replica: reported, left alone.
    mutating func recordSpecial(_ path: RepoPath, _ stat: FileStat) {
        specialPaths.append(path.bytes)
        skipped.append(Skipped(path: path.description, reason: ContentRefusal(path: path.description, reason: .notAFile(stat.kindDescription)).why))
    }
}

extension FileStat {
    /// The git mode of what is on disk (regular files only by their owner's execute bit).
    var gitMode: FileMode { isSymlink ? .symlink : (isExecutable ? .executable : .blob) }
}

/// Scans the replica for local changes.
struct LocalScanner {
    let replica: Replica
    let index: Index
    /// fprep's temporaries the scan met whose operation has ended (left by
    /// a killed run where its recovery did not look): `sync` settles them.
    let strays = StrayTemporaries()
    /// When this scan began, on the clock the kernel dates inodes with: once
    /// its changes are committed, every placeholder not changed since then
    /// is known to be one (see `PlaceholderCheck`).
    let started = PlaceholderCheck.now()
    /// git's ignore rules, for the items the index does not have.
    let ignoreRules: IgnoreRules

    init(replica: Replica, index: Index) {
        self.replica = replica
        self.index = index
        ignoreRules = IgnoreRules(replica)
    }

    final class StrayTemporaries {
        var paths: [RepoPath] = []
    }

    /// The blob ids of the index, once a scan needs them (see `isKnown`).
    final class KnownBlobs {
        var ids: Set<ObjectID>?
    }
    let knownBlobs = KnownBlobs()

    /// Whether a scan through the journal counts the items by state
    /// (`items`, `counts`: what `status` shows). Counting reads every
    /// entry of the index, a walk of pages no other step of a sync needs
    /// (on a cold disk 25–30 ms at 10^5 files): a sync leaves it out.
    var countsItems = true

    /// Parts of the index scanned at once: on a cold cache the scan waits
    /// on inode reads, which overlap across threads.
    static let scanThreads: Int32 = 16

    /// Folders never scanned: fprep's and git's own.
    static let ignoredTopLevel: Set<[UInt8]> = [Array(".git".utf8), Array(Replica.stateFolderName.utf8)]

    /// How this scan used the agent's change journal.
    final class JournalUse {
        /// The journal point the scan began at; nil without a journal.
        var point: JournalToken?
        /// The record the next scan starts from, as this one leaves it.
        var record: JournalRecord?
    }
    let journal = JournalUse()

    /// The local changes. `usingJournal`: when the agent serving the
    /// replica journals its changes and the last scan left a record, only
    /// what changed since is looked at (see `JournalRecord`); else every
    /// item, and a record is left for the next scan.
    func scan(usingJournal: Bool = false) throws -> LocalChangeSet {
        if usingJournal {
            let record = JournalRecord.load(replica)
            let answer = AgentLink.journalChanges(replicaRoot: replica.root, since: record?.point)
            Trace.mark("journal asked")
            switch answer {
            case .since(let now, let paths)?:
                journal.point = now
                if let record, let set = try scanJournaled(record, changed: paths) { return set }
            case .full(let now)?:
                journal.point = now
            case nil:
                break
            }
        }
        guard let set = try scanInPlace() else { return try scanByWalking() }
        if let point = journal.point, set.unreadIgnoreFiles.isEmpty {
            journal.record = JournalRecord(index: index.checksum, point: point, rules: JournalRecord.ruleFilesStamp(replica),
                                           fullScanAt: Int64(Date().timeIntervalSince1970), treeBytes: set.treeBytes,
                                           folderCount: set.folderCount, paths: set.pathsToLookAtAgain + strays.paths.map(\.bytes))
            journal.record?.save(replica)
        }
        return set
    }

    /// The scan as git's index does it: every entry's file looked at once
    /// with fstatat relative to its folder (C, reading the index where it is
    /// mapped), and a folder's names read only when the folder changed since
    /// the last scan or the index names other files in it (the untracked
    /// cache). nil when the index cannot be read in place.
    private func scanInPlace() throws -> LocalChangeSet? {
        let time = index.fileTime
        let checked = try PlaceholderCheck.lastCompleted(replica.store)
        let times = fprep_scan_times(index_sec: time.seconds, index_nsec: time.nanoseconds,
                                     checked_sec: checked.seconds, checked_nsec: checked.nanoseconds)
        let count = index.count
        var states = [UInt8](repeating: 0, count: max(count, 1))
        var parts = [fprep_scan_result](repeating: fprep_scan_result(), count: Int(FPREP_SCAN_MAX_PARTS))
        let status = index.withEntryLayout { base, offsets in
            fprep_scan_index(replica.rootFolder.fd, base, offsets.baseAddress, offsets.count, times,
                             Self.scanThreads, &states, &parts)
        }
        guard let status, status > 0 else {
            if status == -1 { throw FprepError("out of memory while scanning '\(replica.root)'") }
            return nil
        }
        defer { for k in 0..<Int(status) { fprep_scan_result_free(&parts[k]) } }
        // The folders of every part, once each, in the order first met; a
        // folder two parts saw has the sum of their name hashes.
        var folders: [(path: [UInt8], dir: fprep_scan_dir)] = []
        var folderAt: [[UInt8]: Int] = [:]
        var fileBlocks: Int64 = 0
        for k in 0..<Int(status) {
            fileBlocks += Int64(parts[k].blocks)
            for d in 0..<parts[k].dir_count {
                let dir = parts[k].dirs[d]
                let path = dir.length == 0 ? [] : Array((index.path(at: Int(dir.entry)) ?? []).prefix(Int(dir.length)))
                if let at = folderAt[path] {
                    folders[at].dir.names_hash &+= dir.names_hash
                } else {
                    folderAt[path] = folders.count
                    folders.append((path, dir))
                }
            }
        }
        var set = LocalChangeSet()
        var added: [(RepoPath, FileStat)] = []
        var deleted: [IndexEntry] = []
        var bytes = fileBlocks * 512
        let tally = try classify(states, count: count, position: { $0 }, into: &set, added: &added, deleted: &deleted, bytes: &bytes)
        let (clean, dataless, modified, gone) = (tally[.materialized] ?? 0, tally[.dataless] ?? 0, tally[.modified] ?? 0, tally[.deleted] ?? 0)
        set.items = clean + dataless + modified + gone
        for (state, n) in [(ItemState.materialized, clean), (.dataless, dataless), (.modified, modified), (.deleted, gone)] where n > 0 {
            set.counts[state] = n
        }

        // Names the index does not have, folder by folder.
        var cache = UntrackedCache.load(replica)
        var refreshed = UntrackedCache()
        var changed = false
        let now = Date().timeIntervalSince1970
        for (folderPath, dir) in folders {
            guard dir.opened != 0 else { continue }
            if !folderPath.isEmpty {
                set.folderCount += 1
                bytes += dir.blocks * 512
            }
            let stamp = UntrackedCache.Stamp(dir)
            let names: [UntrackedCache.Name]
            if let known = cache.folders.removeValue(forKey: folderPath), known.stamp == stamp {
                names = known.names
            } else {
                names = try untrackedNames(in: folderPath)
                changed = true
            }
            // A folder changed within the last second may change again
            // within the same tick of its clock: it is read again next time.
            if stamp.isSettled(at: now) {
                refreshed.folders[folderPath] = UntrackedCache.Entry(stamp: stamp, names: names)
            }
            for name in names {
                let path = RepoPath(bytes: folderPath.isEmpty ? name.bytes : folderPath + [0x2F] + name.bytes)
                guard let stat = replica.rootFolder.stat(path) else { continue }
                bytes += stat.blocks * 512
                if isIgnored(path, stat, in: &set) { continue }
                if stat.isDirectory {
                    bytes += try collectNew(path, into: &added, set: &set)
                } else {
                    added.append((path, stat))
                }
            }
        }
        if changed || !cache.folders.isEmpty { refreshed.save(replica) }
        set.treeBytes = bytes
        return try finish(set, added: added, deleted: deleted)
    }

    /// Looks closer at the entries the stat scan could not settle (`states`
    /// as `fprep_scan_index` left them, the `k`th for the index entry at
    /// `position(k)`), records what changed in `set`, and counts the
    /// entries by state. A file with other links is noted in `set.linked`.
    func classify(_ states: [UInt8], count: Int, position: (Int) -> Int, into set: inout LocalChangeSet,
                  added: inout [(RepoPath, FileStat)], deleted: inout [IndexEntry], bytes: inout Int64) throws -> [ItemState: Int] {
        let classifier = StateClassifier(root: replica.rootFolder, index: index)
        let sizes = try replica.store.blobInfoLookup()
        var clean = 0, dataless = 0, modified = 0, gone = 0
        for k in 0..<count {
            let position = position(k)
            if states[k] & UInt8(FPREP_SCAN_LINKED) != 0, let path = index.path(at: position) { set.linked.append(path) }
            switch Int32(states[k] & 0x0F) {
            case Int32(FPREP_SCAN_CLEAN): clean += 1
            case Int32(FPREP_SCAN_DATALESS): dataless += 1
            case Int32(FPREP_SCAN_SUBMODULE): continue
            case Int32(FPREP_SCAN_MISSING):
                gone += 1
                if let entry = index.entry(at: position) { deleted.append(entry) }
            default:
                guard let entry = index.entry(at: position) else { continue }
                let path = RepoPath(bytes: entry.path)
                guard let stat = replica.rootFolder.stat(path) else {
                    gone += 1
                    deleted.append(entry)
                    continue
                }
                let state = classifier.state(of: entry, stat: stat)
                switch state {
                case .dataless:
                    dataless += 1
                    set.recordPlaceholderEntry(entry)
                    continue
                case .materialized: clean += 1; continue
                case .deleted: gone += 1
                case .modified: modified += 1
                }
                if stat.isDirectory {
                    // A file turned into a folder: the file is gone; what
                    // is in the folder comes as new files.
                    deleted.append(entry)
                    bytes += try collectNew(path, into: &added, set: &set)
                    continue
                }
                if try recordChanged(entry, at: path, stat, sizes: sizes, classifier: classifier, in: &set) {
                    modified -= 1
                    dataless += 1
                }
            }
        }
        return [.materialized: clean, .dataless: dataless, .modified: modified, .deleted: gone]
    }

    /// The names in `folderPath` the index has neither as a file nor as a
    /// folder (fprep's own and git's folders, and fprep's temporary files,
    /// left out).
    private func untrackedNames(in folderPath: [UInt8]) throws -> [UntrackedCache.Name] {
        guard let folder = try? replica.rootFolder.folder(RepoPath(bytes: folderPath)) else { return [] }
        var names: [UntrackedCache.Name] = []
        for name in try folder.entryNames() {
            if folderPath.isEmpty && Self.ignoredTopLevel.contains(name) { continue }
            if isTemporary(name, in: folderPath) { continue }
            let path = folderPath.isEmpty ? name : folderPath + [0x2F] + name
            if index.contains(path) { continue }
            let isDirectory = folder.stat(name: name)?.isDirectory == true
            if isDirectory, index.firstPosition(withPrefix: path + [0x2F]) != nil { continue }
            names.append(UntrackedCache.Name(bytes: name, isDirectory: isDirectory))
        }
        return names
    }

    /// Every file and symlink below `path` (a folder the index knows nothing
    /// under) that the ignore rules do not leave out, as new; returns the
    /// disk space they take (ignored folders' content not counted).
    func collectNew(_ path: RepoPath, into added: inout [(RepoPath, FileStat)], set: inout LocalChangeSet) throws -> Int64 {
        guard let folder = try? replica.rootFolder.folder(path) else { return 0 }
        var bytes: Int64 = 0
        for name in try folder.entryNames() where !isTemporary(name, in: path.bytes) {
            guard let stat = folder.stat(name: name) else { continue }
            bytes += stat.blocks * 512
            let child = path.appending(name)
            if isIgnored(child, stat, in: &set) { continue }
            if stat.isDirectory {
                bytes += try collectNew(child, into: &added, set: &set)
            } else {
                added.append((child, stat))
            }
        }
        return bytes
    }

    /// Whether the ignore rules leave out the untracked item at `path`;
    /// recorded in `set` when they do.
    func isIgnored(_ path: RepoPath, _ stat: FileStat, in set: inout LocalChangeSet) -> Bool {
        guard ignoreRules.isIgnored(path, isFolder: stat.isDirectory) else { return false }
        set.ignored.append(path.description + (stat.isDirectory ? "/" : ""))
        set.ignoredItems.append((path, stat))
        return true
    }

    /// The placeholders among the ignored items (and in ignored folders):
    /// a placeholder is never ignored, as it stands for content only the
    /// remote has. `mv big.iso big.iso.bak` under a `*.bak` rule is a move:
    /// were it a deletion, the remote would drop the content the file here
    /// cannot show. Looked for only when a placeholder's entry went.
    private func placeholdersLeftIgnored(_ set: inout LocalChangeSet) throws -> [(RepoPath, FileStat)] {
        let sizes = try replica.store.blobInfoLookup()
        var found: [(RepoPath, FileStat)] = []
        var kept: [(RepoPath, FileStat)] = []
        func look(_ path: RepoPath, _ stat: FileStat) throws -> Bool {
            if stat.isDirectory {
                guard let folder = try? replica.rootFolder.folder(path) else { return false }
                var any = false
                for name in try folder.entryNames() {
                    guard let child = folder.stat(name: name) else { continue }
                    if try look(path.appending(name), child) { any = true }
                }
                return any
            }
            guard stat.isRegular, let marked = try markedPlaceholder(path, stat, sizes: sizes), !marked.foreign else { return false }
            found.append((path, stat))
            return true
        }
        for (path, stat) in set.ignoredItems {
            let held = try look(path, stat)
            if !held || stat.isDirectory { kept.append((path, stat)) }
        }
        set.ignoredItems = kept
        set.ignored = kept.map { $0.0.description + ($0.1.isDirectory ? "/" : "") }
        return found
    }

    /// fprep's own temporary files are not the user's: a name of their
    /// shape whose token is an operation's that is open or began recently.
    /// A user's file of that shape (`.a.fprep-notes`) is synced like any
    /// other.
    func isTemporary(_ name: [UInt8], in folder: [UInt8]) -> Bool {
        guard let token = ContentOperations.temporaryToken(in: name) else { return false }
        if replica.pendingTemporaryTokens().contains(token) { return true }
        // An old version a program still has open (settled by the sync).
        let path = RepoPath(bytes: folder).appending(name)
        if replica.heldLocations().contains(path) { return true }
        guard replica.recentTemporaryTokens().contains(token) || Self.carriesHeldMark(replica.rootFolder, path) else { return false }
        strays.paths.append(RepoPath(bytes: folder).appending(name))
        return true
    }

    /// Whether the file at `path` is an old version a sync held (its mark
    /// says so, however old its token).
    static func carriesHeldMark(_ root: FolderHandle, _ path: RepoPath) -> Bool {
        var buffer = [CChar](repeating: 0, count: 21)
        return fprep_get_xattr_at(root.fd, cPath(path.bytes), FPREP_HELD_MARK, &buffer, buffer.count) == 21
    }

    /// The scan by a walk of the tree, for an index with entries not yet
    /// written (none of fprep's scans today) or paths deeper than the
    /// in-place scan takes.
    private func scanByWalking() throws -> LocalChangeSet {
        let classifier = StateClassifier(root: replica.rootFolder, index: index)
        let sizes = try replica.store.blobInfoLookup()
        var set = LocalChangeSet()
        // One walk of the tree looks at every file once, with a stat relative
        // to its open folder: a file the index has (found by binary search in
        // libgit2's own index, nothing copied) is classified from its stat
        // data; the others are new.
        let count = index.count
        var seen = [Bool](repeating: false, count: count)
        var added: [(RepoPath, FileStat)] = []
        var deleted: [IndexEntry] = []
        var bytes: Int64 = 0

        func visit(_ folder: FolderHandle, _ prefix: [UInt8]) throws {
            for name in try folder.entryNames() {
                if prefix.isEmpty && Self.ignoredTopLevel.contains(name) { continue }
                guard let stat = folder.stat(name: name) else { continue }
                bytes += stat.blocks * 512
                if isTemporary(name, in: prefix) { continue }
                let path = prefix.isEmpty ? name : prefix + [0x2F] + name
                if let (position, entry) = index.find(path) {
                    seen[position] = true
                    let mode = FileMode(raw: entry.mode)
                    if mode == .submodule { continue }
                    set.items += 1
                    let state = classifier.state(of: entry, stat: stat)
                    set.counts[state, default: 0] += 1
                    if state == .dataless { set.recordPlaceholderEntry(entry) }
                    guard state == .modified else { continue }
                    if stat.isDirectory {
                        // A file turned into a folder: the file is gone; what
                        // is in the folder comes as new files.
                        deleted.append(entry)
                        if let child = try? folder.folder(RepoPath(bytes: name)) { try visit(child, path) }
                        continue
                    }
                    let itemPath = RepoPath(bytes: path)
                    if try recordChanged(entry, at: itemPath, stat, sizes: sizes, classifier: classifier, in: &set) {
                        set.counts[.modified, default: 0] -= 1
                        set.counts[.dataless, default: 0] += 1
                    }
                } else if stat.isDirectory {
                    // A folder with tracked items is walked whatever the
                    // rules say (tracked files stay tracked); its untracked
                    // items are looked at one by one.
                    if index.firstPosition(withPrefix: path + [0x2F]) != nil {
                        set.folderCount += 1
                    } else if isIgnored(RepoPath(bytes: path), stat, in: &set) {
                        continue
                    }
                    if let child = try? folder.folder(RepoPath(bytes: name)) { try visit(child, path) }
                } else if !isIgnored(RepoPath(bytes: path), stat, in: &set) {
                    added.append((RepoPath(bytes: path), stat))
                }
            }
        }
        try visit(replica.rootFolder, [])
        for position in 0..<count where !seen[position] {
            guard let entry = index.entry(at: position), FileMode(raw: entry.mode) != .submodule else { continue }
            set.items += 1
            set.counts[.deleted, default: 0] += 1
            deleted.append(entry)
        }
        set.treeBytes = bytes
        return try finish(set, added: added, deleted: deleted)
    }

    /// Pairs deleted entries with new files of the same content as moves,
    /// and lists the changes.
    func finish(_ scanned: LocalChangeSet, added: [(RepoPath, FileStat)], deleted: [IndexEntry]) throws -> LocalChangeSet {
        var set = scanned
        var added = added
        if deleted.contains(where: \.skipWorktree), !set.ignoredItems.isEmpty {
            added += try placeholdersLeftIgnored(&set)
        }
        set.ignored.sort()
        holdBackRefusedNames(&added, in: &set)
        set.unreadIgnoreFiles = ignoreRules.unread.map(\.description).sorted()
        // In path order, whatever order the scan met them in: which of two
        // new files with one content is the move never depends on how the
        // changes were found (a walk, the change journal).
        added.sort { $0.0.bytes.lexicographicallyPrecedes($1.0.bytes) }
        // Moves: a deleted entry and a new file with the same content. A
        // moved placeholder carries its blob id in its attributes; other new
        // files are hashed only when some deleted entry could match.
        var deletedByID: [ObjectID: [IndexEntry]] = [:]
        for entry in deleted { deletedByID[entry.id, default: []].append(entry) }
        var movedFrom = Set<[UInt8]>()
        let sizes = try replica.store.blobInfoLookup()
        for (path, stat) in added {
            if stat.isSpecial {
                set.recordSpecial(path, stat)
                continue
            }
            let mode = stat.gitMode
            var id: ObjectID?
            var placeholder = false
            if let marked = try markedPlaceholder(path, stat, sizes: sizes, knownSize: { id in
                deletedByID[id]?.first.map { Int64($0.stat.fileSize) }
            }) {
                if marked.foreign {
                    set.recordForeign(path)
                    continue
                }
                id = marked.blob
                placeholder = true
                set.recordWrittenInto(marked)
            } else if !deletedByID.isEmpty {
                id = try? hashOnDisk(path, stat: stat)
            }
            if let id, var candidates = deletedByID[id], let source = candidates.first(where: { !movedFrom.contains($0.path) }) {
                candidates.removeAll { $0.path == source.path }
                deletedByID[id] = candidates
                movedFrom.insert(source.path)
                set.removed.append(RepoPath(bytes: source.path))
                set.written.append(LocalChangeSet.Write(path: path, id: id, mode: mode, placeholder: placeholder))
                set.changes.append(LocalChange(kind: .moved, path: path.description, from: RepoPath(bytes: source.path).description))
            } else {
                set.written.append(LocalChangeSet.Write(path: path, id: id, mode: mode, placeholder: placeholder))
                set.changes.append(LocalChange(kind: .added, path: path.description, from: nil))
            }
        }
        for entry in deleted where !movedFrom.contains(entry.path) {
            let path = RepoPath(bytes: entry.path)
            set.removed.append(path)
            set.changes.append(LocalChange(kind: .deleted, path: path.description, from: nil))
        }
        set.changes.sort { ($0.path, $0.kind.rawValue) < ($1.path, $1.kind.rawValue) }
        return set
    }

    /// A tracked file the scan found changed, in both scans' words: a
    /// placeholder another replica made stays here; one moved or copied
    /// over it (marks of another blob, or over content) is that blob; else
    /// the classifier says what a program did to it.
    ///
    /// Returns true when it is no change at all: the placeholder of the
    /// entry's own blob, whole, behind an entry git wrote without fprep's
    /// bit and stat data (`git read-tree`, `git reset`: the classifier,
    /// which compares the entry's recorded size, cannot tell), counted as
    /// dataless, its entry written again as the placeholder's.
    @discardableResult
    private func recordChanged(_ entry: IndexEntry, at path: RepoPath, _ stat: FileStat, sizes: (ObjectID) throws -> BlobInfo?,
                               classifier: StateClassifier, in set: inout LocalChangeSet) throws -> Bool {
        let marked = try markedPlaceholder(path, stat, sizes: sizes)
        if let marked, !marked.foreign, marked.writtenInto == nil, marked.blob == entry.id, !entry.skipWorktree {
            guard stat.gitMode.raw == entry.mode else {
                set.recordModeChange(path, entry.id, stat.gitMode)
                return false
            }
            set.recordPlaceholderEntry(entry)
            return true
        }
        if let marked, marked.foreign {
            set.recordForeign(path)
        } else if let marked, !entry.skipWorktree || marked.blob != entry.id {
            set.recordMarked(path, stat, marked)
        } else {
            set.recordModified(entry, stat, classifier: classifier)
        }
        return false
    }

    /// New items whose path the remote would refuse (`TreeEntryRules`: a
    /// folder named `.fprep` or `.GIT` below the top, a path longer than the
    /// system takes) are never committed: every other device would refuse
    /// the tree, and git would not build it. They stay on this device,
    /// reported once per refused name, and looked at again by the next scan.
    private func holdBackRefusedNames(_ added: inout [(RepoPath, FileStat)], in set: inout LocalChangeSet) {
        var refused: [RepoPath: String] = [:]
        added.removeAll { item in
            guard let (name, reason) = TreeEntryRules.refusedLocalItem(item.0) else { return false }
            refused[name] = reason
            set.specialPaths.append(item.0.bytes)
            return true
        }
        for (name, reason) in refused.sorted(by: { $0.key.bytes.lexicographicallyPrecedes($1.key.bytes) }) {
            set.skipped.append(Skipped(path: name.description,
                                       reason: "\(reason), which every other device would refuse; fprep does not sync it (rename it; it stays on this device meanwhile)"))
        }
    }

    /// A regular file that carries fprep's placeholder marks where the
    /// index has no such placeholder: one moved or copied here (the marks
    /// travel with `mv`, `cp -a`, `tar --xattrs`), over a new name or over a
    /// tracked file. It stands for the blob it names, never for the zeros it
    /// reads as; bytes written into it (data, or another size) are kept as a
    /// conflict copy, as at its old name.
    func markedPlaceholder(_ path: RepoPath, _ stat: FileStat, sizes: (ObjectID) throws -> BlobInfo?,
                           knownSize: (ObjectID) -> Int64? = { _ in nil }) throws -> MarkedPlaceholder? {
        guard stat.isRegular, let blob = ContentOperations.placeholderBlob(replica.rootFolder, path),
              ContentOperations.isMarkedDataless(replica.rootFolder, path) else { return nil }
        let info = try sizes(blob)
        guard info != nil || isKnown(blob) else { return MarkedPlaceholder(blob: blob, writtenInto: nil, foreign: true) }
        let size = info?.size ?? knownSize(blob)
        let sizeKept = size.map { ($0 & 0xFFFF_FFFF) == (stat.size & 0xFFFF_FFFF) } ?? true
        guard !sizeKept || !ContentOperations.holdsNoData(replica.rootFolder, path, stat) else {
            return MarkedPlaceholder(blob: blob, writtenInto: nil)
        }
        // Written into a placeholder of an empty file: plain new content
        // (see `StateClassifier.placeholderChange`).
        if blob == UnknownSizes.emptyBlob { return nil }
        let recorded = StatData.placeholder(size: size ?? 0, mtime: info?.mtime ?? stat.mtime.0)
        return MarkedPlaceholder(blob: blob, writtenInto: IndexEntry(path: path.bytes, id: blob, mode: stat.gitMode.raw,
                                                                    stat: recorded, skipWorktree: true))
    }

    /// Whether this replica's remote is known to have `blob`: its size is
    /// in the store (the remote's manifest, or content taken in here), the
    /// object store holds it, or an index entry names it (a placeholder
    /// moved or copied within the replica). The index's ids are gathered
    /// once per scan, and only when a placeholder needs them.
    func isKnown(_ blob: ObjectID) -> Bool {
        if (try? replica.repository.objectDatabase().contains(blob)) == true { return true }
        if knownBlobs.ids == nil {
            var ids = Set<ObjectID>()
            ids.reserveCapacity(index.count)
            for i in 0..<index.count { if let entry = index.entry(at: i) { ids.insert(entry.id) } }
            knownBlobs.ids = ids
        }
        return knownBlobs.ids?.contains(blob) == true
    }

    /// The blob id of what is on disk at `path` (a symlink's target, or a
    /// file's bytes, holes read as zeros).
    func hashOnDisk(_ path: RepoPath, stat: FileStat) throws -> ObjectID {
        if stat.isSymlink {
            return try replica.rootFolder.readLink(path).withUnsafeBytes { try ObjectDatabase.blobID(of: $0) }
        }
        return try replica.rootFolder.readFile(path).withUnsafeBytes { try ObjectDatabase.blobID(of: $0) }
    }

}

extension Replica {
    /// The local changes since the last sync.
    public func localChanges() throws -> [LocalChange] {
        try LocalScanner(replica: self, index: repository.index()).scan().changes
    }
}
