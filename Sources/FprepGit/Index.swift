import CLibCrypto
import CLibGit2
import Dispatch
import Glibc

/// The stat data an index entry remembers about a work-tree file, as git's
/// index does: when a fresh `lstat` gives the same values, the file is
/// taken as unchanged without reading it.
public struct StatData: Equatable, Sendable {
    public var ctimeSeconds: Int32 = 0
    public var ctimeNanoseconds: UInt32 = 0
    public var mtimeSeconds: Int32 = 0
    public var mtimeNanoseconds: UInt32 = 0
    public var device: UInt32 = 0
    public var inode: UInt32 = 0
    public var uid: UInt32 = 0
    public var gid: UInt32 = 0
    /// The size truncated to 32 bits, as git stores it.
    public var fileSize: UInt32 = 0

    public init() {}

    public init(ctime: (Int64, Int64), mtime: (Int64, Int64), device: Int64, inode: Int64,
                uid: Int64, gid: Int64, size: Int64) {
        ctimeSeconds = Int32(truncatingIfNeeded: ctime.0)
        ctimeNanoseconds = UInt32(truncatingIfNeeded: ctime.1)
        mtimeSeconds = Int32(truncatingIfNeeded: mtime.0)
        mtimeNanoseconds = UInt32(truncatingIfNeeded: mtime.1)
        self.device = UInt32(truncatingIfNeeded: device)
        self.inode = UInt32(truncatingIfNeeded: inode)
        self.uid = UInt32(truncatingIfNeeded: uid)
        self.gid = UInt32(truncatingIfNeeded: gid)
        fileSize = UInt32(truncatingIfNeeded: size)
    }
}

/// One index entry, copied out of the index.
public struct IndexEntry: Sendable {
    /// The full path, bytes, '/'-separated.
    public var path: [UInt8]
    public var id: ObjectID
    public var mode: UInt32
    public var stat: StatData
    /// git's skip-worktree bit: set for every dataless entry, so git leaves
    /// the placeholder alone and never counts it as a change.
    public var skipWorktree: Bool

    public init(path: [UInt8], id: ObjectID, mode: UInt32, stat: StatData = StatData(), skipWorktree: Bool) {
        self.path = path
        self.id = id
        self.mode = mode
        self.stat = stat
        self.skipWorktree = skipWorktree
    }
}

/// The repository's index file (`.git/index`), read and written by fprep
/// itself in git's format (versions 2, 3 and 4 read; 2 or 3 written).
///
/// libgit2's index copies and hashes every entry on each read (0.1 s for
/// 10^5 entries); this one maps the file and finds its entries in place, so
/// a command that looks at a few paths costs what those paths cost. Edits
/// wait in a small table and are merged into the entry order once, when
/// positions are asked for or the file is written. Optional extensions
/// (the cache tree, the untracked cache…) are dropped on write, which git
/// allows; an index that needs a mandatory one fprep does not know (split
/// or sparse index) is refused with a clear error.
public final class Index {
    /// The index file.
    public let filePath: String
    /// The bytes entries are read from: the mapped file (or, for version 4,
    /// its entries re-encoded in the version 2/3 layout).
    private var storage: IndexStorage
    /// The entries in path order: a non-negative value is the offset of an
    /// entry in `storage`, a negative one `~i` is `owned[i]`.
    private var slots: [Int32] = []
    private var owned: [IndexEntry] = []
    /// Adds and removals not merged into `slots` yet, by path.
    private var pending: [[UInt8]: Edit] = [:]
    private var stamp: FileStamp?
    /// The mapped bytes are the file at `filePath` as it stands: false for
    /// version 4 (entries re-encoded) and after a whole new file was
    /// written (the mapping is of the old one).
    private var mappingIsFile = false
    /// For each entry of `owned` that replaced one entry of the file with
    /// the same path, where that entry stands in the file: what a write in
    /// place overwrites. nil once an edit cannot be written in place.
    private var fileOffsets: [Int: Int32]? = [:]
    /// Where each lookup fence's path stands among `slots` (see
    /// `FenceBounds`): from the storage's fences as read, kept true through
    /// edits merged in memory; nil without fences.
    private var fenceBounds: FenceBounds?
    /// A split write left the file to be read back (`adoptWrittenFile`) by
    /// the next edit or write, not at once: until then the entries in
    /// memory are what the file holds, and a command that ends after its
    /// write (a sync) does not pay the read back (5 ms at 10^6 entries: the
    /// merge of the link with every entry of the shared file).
    private var writtenFileToAdopt = false

    private enum Edit {
        case put(IndexEntry)
        case remove
    }

    /// When the index file was last written: git's racy-clean rule says an
    /// entry whose file changed at or after this moment cannot be trusted
    /// on its stat data alone.
    public var fileTime: (seconds: Int64, nanoseconds: Int64) { stamp.map { ($0.mtime, $0.mtimeNanoseconds) } ?? (0, 0) }

    /// The trailing checksum of the file as last read or written here
    /// (empty for an index that does not exist): which version of the
    /// index a record made from it belongs to.
    public private(set) var checksum: [UInt8] = []

    /// The trailing checksum of the index file at `path` as it is on disk,
    /// read without the entries (empty when there is none): for a holder of
    /// the replica's lock, which no one else writes the index under.
    public static func checksumOnDisk(_ path: String) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_size >= 32 else { return [] }
        var trailer = [UInt8](repeating: 0, count: 20)
        let n = trailer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 20, off_t(info.st_size) - 20) }
        return n == 20 ? trailer : []
    }

    /// Reads `path` (an index that does not exist is empty).
    public init(path: String) throws {
        filePath = path
        storage = IndexStorage.empty
        try reload(force: true)
    }

    /// Rereads the file; unforced, only when it changed since it was read or written here.
    public func reload(force: Bool = true) throws {
        let current = FileStamp(path: filePath)
        if !force, current == stamp { return }
        writtenFileToAdopt = false
        pending = [:]
        owned = []
        slots = []
        storage = .empty
        checksum = []
        stamp = current
        mappingIsFile = false
        fileOffsets = [:]
        guard current != nil else { return }
        let (storage, slots) = try IndexStorage.read(filePath)
        self.storage = storage
        self.slots = slots
        fenceBounds = storage.lookupFences.flatMap { FenceBounds($0, count: slots.count) }
        checksum = storage.checksum
        mappingIsFile = storage.isFile
    }

    /// Whether fprep wrote the index file as it is now on disk: false once
    /// another program (git) rewrote it, or when none exists.
    public func lastWrittenByFprep() -> Bool {
        EntryOffsets.describes(indexPath: filePath)
    }

    /// How many entries the shared file of a split index holds (nil for a whole index).
    var sharedEntryCount: Int? {
        adoptWrittenFileIfDue()
        return storage.shared?.slots.count
    }

    public var count: Int {
        settle()
        return slots.count
    }

    /// Removes every entry (in memory until `write`).
    public func clear() throws {
        pending = [:]
        owned = []
        slots = []
        fenceBounds = nil
        fileOffsets = nil
    }

    /// The entry at position `i` in path order.
    public func entry(at i: Int) -> IndexEntry? {
        settle()
        guard i >= 0, i < slots.count else { return nil }
        return decode(slots[i])
    }

    /// Asks at once for the pages where each of `paths` is looked up (its
    /// fence run): on a cold cache the lookups that follow find them read,
    /// where each would otherwise wait for its own, one after another (a
    /// sync's changed paths, a materialize's thousand). A hint: an index
    /// without fences, or edits not merged yet, only cost it its effect.
    /// Call it before the lookups, not beside them on another thread.
    public func willLookUp(_ paths: [[UInt8]]) {
        guard let bounds = fenceBounds, bounds.count == slots.count else { return }
        storage.willNeed(ranges: paths.compactMap { path in
            path.withUnsafeBufferPointer { storage.neededBytes(slots[bounds.candidates(for: $0)]) }
        })
    }

    /// The stage-0 entry for `path`.
    public func entry(path: [UInt8]) -> IndexEntry? {
        if let edit = pending[path] {
            if case .put(let entry) = edit { return entry }
            return nil
        }
        guard let position = search(path) else { return nil }
        return decode(slots[position])
    }

    /// The stage-0 entry for `path` and its position, by binary search.
    public func find(_ path: [UInt8]) -> (position: Int, entry: IndexEntry)? {
        settle()
        guard let position = search(path) else { return nil }
        var entry = decode(slots[position])
        entry.path = path
        return (position, entry)
    }

    /// Whether `path` has a stage-0 entry, without copying it out.
    public func contains(_ path: [UInt8]) -> Bool {
        if let edit = pending[path] {
            if case .put = edit { return true }
            return false
        }
        return search(path) != nil
    }

    /// Every entry whose path starts with `prefix` (a folder's, with its
    /// slash), in path order, the edits not merged yet included, without
    /// merging them: a merge copies every entry's slot (4 MB at 10^6
    /// entries, 3–5 ms), and a sync that moves a folder between its other
    /// edits would pay one more.
    public func entries(withPrefix prefix: [UInt8]) -> [IndexEntry] {
        var found: [IndexEntry] = []
        var position = prefix.withUnsafeBufferPointer { lowerBound($0) }
        while position < slots.count, withPath(slots[position], { $0.starts(with: prefix) }) {
            let entry = decode(slots[position])
            if pending[entry.path] == nil { found.append(entry) }
            position += 1
        }
        for (path, edit) in pending where path.starts(with: prefix) {
            if case .put(let entry) = edit { found.append(entry) }
        }
        // Stable: a path's conflict stages keep their order.
        return found.enumerated().sorted {
            $0.element.path == $1.element.path ? $0.offset < $1.offset : $0.element.path.lexicographicallyPrecedes($1.element.path)
        }.map(\.element)
    }

    /// The position of the first entry whose path starts with `prefix`, or
    /// nil when none does.
    public func firstPosition(withPrefix prefix: [UInt8]) -> Int? {
        settle()
        let position = prefix.withUnsafeBufferPointer { lowerBound($0) }
        guard position < slots.count else { return nil }
        let starts = withPath(slots[position]) { $0.starts(with: prefix) }
        return starts ? position : nil
    }

    /// The entries' bytes in git's version 2/3 layout and their offsets in
    /// path order, for a scan that reads them in place; nil while entries
    /// added or removed here are not written and read back.
    public func withEntryLayout<T>(_ body: (UnsafePointer<UInt8>, UnsafeBufferPointer<Int32>) throws -> T) rethrows -> T? {
        guard pending.isEmpty, owned.isEmpty else { return nil }
        let base = storage.base.assumingMemoryBound(to: UInt8.self)
        return try slots.withUnsafeBufferPointer { try body(base, $0) }
    }

    /// Calls `body` for each entry in the index's order with its position,
    /// its first 60 bytes as git lays them out (times, device, inode, mode,
    /// owner, size, object id: everything but the flags and the path) and
    /// its path, read in place: for a caller that compares a whole index
    /// with what it saw before and decodes only what changed. Stops when
    /// `body` returns false; nil while entries added or removed here are not
    /// written and read back.
    public func forEachEntryInPlace(_ body: (_ position: Int, _ fixed: UnsafeRawBufferPointer, _ path: UnsafeBufferPointer<UInt8>) throws -> Bool) rethrows -> Bool? {
        guard pending.isEmpty, owned.isEmpty else { return nil }
        for (position, slot) in slots.enumerated() {
            let at = Int(slot)
            guard at >= 0, at + 62 <= storage.count else { return nil }
            let fixed = UnsafeRawBufferPointer(start: storage.base + at, count: 60)
            guard try body(position, fixed, storage.path(at: at)) else { return false }
        }
        return true
    }

    /// The fields a count reads from an entry of `withEntryLayout` in place,
    /// without decoding the entry (git's layout: big-endian, flags at 60).
    public struct EntryFields {
        private let at: UnsafePointer<UInt8>
        public init(_ at: UnsafePointer<UInt8>) { self.at = at }
        private func u32(_ offset: Int) -> UInt32 { UInt32(bigEndian: UnsafeRawPointer(at).loadUnaligned(fromByteOffset: offset, as: UInt32.self)) }
        private func u16(_ offset: Int) -> UInt16 { UInt16(bigEndian: UnsafeRawPointer(at).loadUnaligned(fromByteOffset: offset, as: UInt16.self)) }
        public var mode: UInt32 { u32(24) }
        public var fileSize: UInt32 { u32(36) }
        public var skipWorktree: Bool { u16(60) & 0x4000 != 0 && u16(62) & 0x4000 != 0 }
    }

    /// The path of the entry at position `i`.
    public func path(at i: Int) -> [UInt8]? {
        settle()
        guard i >= 0, i < slots.count else { return nil }
        return withPath(slots[i]) { Array($0) }
    }

    /// Adds or replaces the entry for its path (every stage of it).
    public func add(_ entry: IndexEntry) throws {
        guard !entry.path.isEmpty, !entry.path.contains(0) else {
            throw GitError(code: .invalid, message: "invalid path in an index entry", function: "index add")
        }
        adoptWrittenFileIfDue()
        pending[entry.path] = .put(entry)
    }

    /// Removes the entry for `path` (every stage of it).
    public func remove(path: [UInt8]) throws {
        adoptWrittenFileIfDue()
        pending[path] = .remove
    }

    /// Whether this index is written split (`SplitIndex.swift`): git's
    /// `core.splitIndex` as the repository has it, read when the index is
    /// written (nil: unset).
    public var splitSetting: () -> Bool? = { nil }

    /// Writes the index file atomically: `index.lock`, then a rename, as
    /// git does (a lock file that exists means another writer; nothing is
    /// written then). A split index writes its changed entries only, and
    /// its shared file again once they pass a fifth of it.
    public func write() throws {
        adoptWrittenFileIfDue()
        // An index that should be split and is not yet is split now (one
        // whole write), not patched in place.
        settle()
        let splits = SplitIndexPolicy(setting: splitSetting()).splits(entries: slots.count)
        if !(splits && storage.shared == nil), try writeInPlace() {
            SharedIndexFile.removeUnused(beside: filePath, current: nil, replaced: nil)
            return
        }
        let previousShared = storage.shared
        // A split write keeps the shared file mapped: nothing to let go, so
        // the read back can wait (see `writtenFileToAdopt`).
        var readBackLater = false
        if splits {
            if let base = storage.shared, let changes = changes(since: base),
               (changes.added.count + changes.deleted.count) * 5 <= base.slots.count {
                try writeSplit(base: base, added: changes.added, deleted: changes.deleted)
                readBackLater = true
            } else {
                try writeShared()
            }
        } else {
            try writeIndexFile { try writeEntries(to: $0) }
        }
        stamp = FileStamp(path: filePath)
        if readBackLater { writtenFileToAdopt = true } else { adoptWrittenFile() }
        SharedIndexFile.removeUnused(beside: filePath, current: storage.shared?.path, replaced: previousShared?.path)
    }

    /// The header and every entry, in path order, to `file`; where each
    /// entry starts. Entries kept from a file go out in runs of adjacent
    /// bytes, straight from the mapping. An entry git wrote without the
    /// extended flags is written with them (see `encodeIndexEntry`).
    private func writeEntries(to file: IndexFileWriter) throws -> [UInt32] {
        let header = indexHeader(entries: slots.count)
        try file.append(header)
        var offsets: [UInt32] = []
        offsets.reserveCapacity(slots.count)
        var position = header.count
        var encoded: [UInt8] = []
        var i = 0
        while i < slots.count {
            let slot = slots[i]
            if slot < 0 || !hasExtendedFlags(slot) {
                encoded.removeAll(keepingCapacity: true)
                if slot < 0 { encodeIndexEntry(owned[Int(~slot)], into: &encoded) } else { widen(slot, into: &encoded) }
                try file.append(encoded)
                offsets.append(UInt32(position))
                position += encoded.count
                i += 1
                continue
            }
            let start = Int(slot)
            offsets.append(UInt32(position))
            var end = start + storage.entrySize(at: start)
            i += 1
            while i < slots.count, slots[i] >= 0, Int(slots[i]) == end, hasExtendedFlags(slots[i]) {
                offsets.append(UInt32(position + end - start))
                end += storage.entrySize(at: end)
                i += 1
            }
            try file.append(UnsafeRawBufferPointer(start: storage.base + start, count: end - start))
            position += end - start
        }
        return offsets
    }

    /// What changed since the shared index `base`: the entries that are not
    /// its own (in path order) and the positions of its entries gone. One
    /// pass over the positions (both orders are git's order); nil when the
    /// shared entries are not in that order (a damaged shared file: it is
    /// written again).
    private func changes(since base: SharedIndexBase) -> (added: [Int32], deleted: [Int])? {
        var added: [Int32] = []
        var deleted: [Int] = []
        var next = 0
        for slot in slots {
            guard slot >= 0, Int(slot) < base.end else {
                added.append(slot)
                continue
            }
            while next < base.slots.count, base.slots[next] != slot {
                deleted.append(next)
                next += 1
            }
            guard next < base.slots.count else { return nil }
            next += 1
        }
        deleted.append(contentsOf: next..<base.slots.count)
        return (added, deleted)
    }

    /// Writes `.git/index` as the changes to `base`: the added entries and
    /// the link to it with the bitmap of its entries deleted.
    private func writeSplit(base: SharedIndexBase, added: [Int32], deleted: [Int]) throws {
        try writeIndexFile { file in
            var offsets: [UInt32] = []
            let header = indexHeader(entries: added.count)
            try file.append(header)
            var position = header.count
            var encoded: [UInt8] = []
            for slot in added {
                offsets.append(UInt32(position))
                if slot >= 0 {
                    // As read (git's conflict stages and flags kept).
                    let size = storage.entrySize(at: Int(slot))
                    try file.append(UnsafeRawBufferPointer(start: storage.base + Int(slot), count: size))
                    position += size
                    continue
                }
                encoded.removeAll(keepingCapacity: true)
                encodeIndexEntry(owned[Int(~slot)], into: &encoded)
                try file.append(encoded)
                position += encoded.count
            }
            try file.append(LinkExtension(sharedChecksum: base.checksum, deleted: deleted, replaced: []).encoded())
            return offsets
        }
    }

    /// Writes `index.lock` with `body` (which returns where each entry
    /// starts), then moves it over the index.
    private func writeIndexFile(_ body: (IndexFileWriter) throws -> [UInt32]) throws {
        let lock = filePath + ".lock"
        let file = try IndexFileWriter(path: lock)
        let offsets: [UInt32]
        let checksum: [UInt8]
        do {
            offsets = try body(file)
            checksum = try file.finish()
        } catch {
            file.abandon()
            throw error
        }
        try installIndexFile(lock: lock, at: filePath, checksum: checksum, offsets: offsets)
        self.checksum = checksum
    }

    /// Writes every entry to a new shared index, then `.git/index` as its
    /// link with nothing changed. The shared file is on the disk before the
    /// index names it: it gets a new name, which ext4 does not order after
    /// its data as it does a rename over the old index.
    private func writeShared() throws {
        let lock = filePath + ".lock"
        let file = try IndexFileWriter(path: lock)   // the index's lock first, as any writer of it
        let temporary = SharedIndexFile.folder(of: filePath) + SharedIndexFile.temporaryName
        let checksum: [UInt8]
        do {
            unlink(temporary)
            let shared = try IndexFileWriter(path: temporary)
            let sharedChecksum: [UInt8]
            let offsets: [UInt32]
            do {
                offsets = try writeEntries(to: shared)
                sharedChecksum = try shared.finish(flush: true)
            } catch {
                shared.abandon()
                throw error
            }
            try nameSharedFile(temporary, checksum: sharedChecksum, offsets: offsets, linkingIn: file, indexPath: filePath) { self.path(at: $0) }
            checksum = try file.finish()
        } catch {
            file.abandon()
            unlink(temporary)
            throw error
        }
        try installIndexFile(lock: lock, at: filePath, checksum: checksum, offsets: [])
        self.checksum = checksum
    }

    /// After a whole write: entries are read from the new file from here
    /// on (as after a fresh read), and the old file's mapping is let go on
    /// another thread. The old file has no name any more, so letting go of
    /// it frees its pages and blocks: 12 ms at 10^5 entries, ten times that
    /// at 10^6, which the command's next steps need not wait for.
    private func adoptWrittenFileIfDue() {
        guard writtenFileToAdopt else { return }
        writtenFileToAdopt = false
        adoptWrittenFile()
    }

    private func adoptWrittenFile() {
        guard let (fresh, freshSlots) = try? IndexStorage.read(filePath),
              fresh.checksum == checksum, freshSlots.count == slots.count else {
            // Another writer came in between, or the file cannot be read
            // back: the old mapping stays, and no edit is made in place.
            mappingIsFile = false
            fileOffsets = nil
            return
        }
        // Nothing else holds the old storage: the other thread only lets it go.
        nonisolated(unsafe) let old = storage
        storage = fresh
        slots = freshSlots
        fenceBounds = nil
        owned = []
        mappingIsFile = fresh.isFile
        fileOffsets = [:]
        DispatchQueue.global(qos: .utility).async { withExtendedLifetime(old) {} }
    }

    /// Writes the edits over the entries they replace, in the index file
    /// itself, when each keeps its path and its size: fprep writes every
    /// entry with the extended flags, so making a file dataless or
    /// materialized changes only its stat data and flags. At 10^6 entries
    /// this reads the file once for its checksum instead of writing a new
    /// one of 119 MB. False (nothing done) when the edits cannot be written
    /// so: an entry added, removed or resized, a file another program
    /// wrote, version 4; the whole file is written then.
    ///
    /// Under `index.lock`, as git writes it, so no git process writes the
    /// index meanwhile. Killed halfway, the file holds some edits and the
    /// old checksum, which git does not check on its commands (only `git
    /// fsck` does); fprep's journal of the operation makes the next command
    /// settle its files and write the index whole.
    private func writeInPlace() throws -> Bool {
        guard mappingIsFile, let known = fileOffsets, let stamp, FileStamp(path: filePath) == stamp else { return false }
        var patches: [(offset: Int, bytes: [UInt8])] = []
        for (k, offset) in known { patches.append((Int(offset), encoded(owned[k]))) }
        for (path, edit) in pending {
            guard case .put(let entry) = edit, let position = search(path) else { return false }
            // A path with conflict stages is more than one entry.
            if position + 1 < slots.count, withPath(slots[position + 1], { $0.elementsEqual(path) }) { return false }
            let slot = slots[position]
            let offset: Int32
            if slot >= 0 { offset = slot } else if let replaced = known[Int(~slot)] { offset = replaced } else { return false }
            patches.append((Int(offset), encoded(entry)))
        }
        // Past a sixteenth of the entries, one write of the whole file costs
        // less than a write per entry.
        guard !patches.isEmpty, patches.count <= max(256, slots.count / 16) else { return false }
        for patch in patches where storage.entrySize(at: patch.offset) != patch.bytes.count { return false }

        let lock = filePath + ".lock"
        let lockFD = open(lock, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard lockFD >= 0 else {
            let code = errno
            if code == EEXIST {
                throw GitError(code: .locked, message: "'\(lock)' exists: another git process is writing the index (remove it if none is)",
                               function: "index write")
            }
            throw GitError(code: .other(-1), message: "cannot create '\(lock)': \(String(cString: strerror(code)))", function: "index write")
        }
        close(lockFD)
        defer { unlink(lock) }
        let fd = open(filePath, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, FileStamp(info) == stamp, Int(info.st_size) == storage.count else { return false }
        func failure(_ what: String) -> GitError {
            GitError(code: .other(-1), message: "cannot \(what) '\(filePath)': \(String(cString: strerror(errno)))", function: "index write")
        }
        for patch in patches {
            guard pwriteAll(fd, patch.bytes, at: patch.offset) else { throw failure("write") }
            CrashPoint.reach()
        }
        if storage.u32(4) == 2, !pwriteAll(fd, [0, 0, 0, 3], at: 4) { throw failure("write") }
        guard let newChecksum = checksumOfFile(fd, length: storage.count - 20) else { throw failure("read") }
        guard pwriteAll(fd, newChecksum, at: storage.count - 20) else { throw failure("write") }
        // On the disk before the caller records what the entries say (fprep's
        // store, made durable next): bytes written over a file's own blocks
        // are not ordered by the filesystem's journal, so a power cut could
        // otherwise keep an evict's punched placeholders and lose the entries
        // that say so. (A whole new index replaces the old by a rename, which
        // ext4 writes out with the rename.)
        guard fdatasync(fd) == 0 else { throw failure("flush") }
        EntryOffsets.replaceChecksum(beside: filePath, old: checksum, new: newChecksum)
        self.stamp = FileStamp(path: filePath)
        checksum = newChecksum
        return true
    }

    /// An entry of the file without the extended flags word (git writes
    /// none when no extended flag is set), with it: every other bit as read,
    /// the conflict stage and assume-valid among them (an `IndexEntry`
    /// carries neither).
    private func widen(_ slot: Int32, into output: inout [UInt8]) {
        let at = Int(slot)
        let start = output.count
        output.append(contentsOf: UnsafeRawBufferPointer(start: storage.base + at, count: 60))
        appendBigEndian(&output, storage.u16(at + 60) | 0x4000)
        appendBigEndian(&output, UInt16(0))
        output.append(contentsOf: storage.path(at: at))
        let size = (output.count - start + 8) & ~7
        output.append(contentsOf: repeatElement(0, count: start + size - output.count))
    }

    private func encoded(_ entry: IndexEntry) -> [UInt8] {
        var bytes: [UInt8] = []
        encodeIndexEntry(entry, into: &bytes)
        return bytes
    }

    // MARK: entries in place

    /// Merges the pending edits into the path order.
    private func settle() {
        guard !pending.isEmpty else { return }
        let edits = pending.sorted { $0.key.lexicographicallyPrecedes($1.key) }
        pending = [:]
        var merged: [Int32] = []
        merged.reserveCapacity(slots.count + edits.count)
        var i = 0
        // Per edit, in path order: how many entries it adds (or takes away).
        var changes: [(path: [UInt8], added: Int)] = []
        changes.reserveCapacity(edits.count)
        for (path, edit) in edits {
            let order: (Int32) -> Int = { slot in self.withPath(slot) { existing in
                path.withUnsafeBufferPointer { Self.compareBytes(existing, $0) }
            } }
            // The entries before this path are copied, not read: a walk
            // comparing each read every entry of the file (a cold index of
            // 10^5 entries: its 10 MB, page by page, for a few edits).
            let at = max(i, path.withUnsafeBufferPointer { lowerBound($0) })
            merged.append(contentsOf: slots[i..<at])
            i = at
            var replaced: [Int32] = []
            while i < slots.count, order(slots[i]) == 0 { replaced.append(slots[i]); i += 1 }  // replaced or removed, every stage
            if case .put(let entry) = edit {
                owned.append(entry)
                merged.append(~Int32(owned.count - 1))
                // Where in the file this entry stands, for a write in place.
                if replaced.count == 1, replaced[0] >= 0 {
                    fileOffsets?[owned.count - 1] = replaced[0]
                } else if replaced.count == 1, let earlier = fileOffsets?[Int(~replaced[0])] {
                    fileOffsets?[Int(~replaced[0])] = nil
                    fileOffsets?[owned.count - 1] = earlier
                } else {
                    fileOffsets = nil
                }
            } else {
                fileOffsets = nil
            }
            var added = -replaced.count
            if case .put = edit { added += 1 }
            changes.append((path, added))
        }
        merged.append(contentsOf: slots[i...])
        fenceBounds?.shift(by: changes)
        slots = merged
    }

    /// The position of the stage-0 entry for `path` in `slots` as they are.
    private func search(_ path: [UInt8]) -> Int? {
        path.withUnsafeBufferPointer { key in
            let position = lowerBound(key)
            guard position < slots.count else { return nil }
            let slot = slots[position]
            guard withPath(slot, { Self.compareBytes($0, key) }) == 0, stage(slot) == 0 else { return nil }
            return position
        }
    }

    /// The first position whose path is not before `key`.
    private func lowerBound(_ key: UnsafeBufferPointer<UInt8>) -> Int {
        var low = 0, high = slots.count
        // A split index with fences: one run of entries, its bytes asked
        // for at once (see `SharedIndexFences`).
        if let bounds = fenceBounds, bounds.count == slots.count {
            let run = bounds.candidates(for: key)
            low = run.lowerBound
            high = run.upperBound
            storage.willNeed(slots[low..<high])
        }
        while low < high {
            let middle = (low + high) / 2
            if withPath(slots[middle], { Self.compareBytes($0, key) }) < 0 { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// Whether path `a` sorts before path `b` in git's order (bytes, unsigned).
    public static func precedes(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool { compareBytes(a, b) < 0 }

    static func compareBytes(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Int {
        let common = min(a.count, b.count)
        if common > 0, let left = a.baseAddress, let right = b.baseAddress {
            let order = memcmp(left, right, common)
            if order != 0 { return Int(order) }
        }
        return a.count - b.count
    }

    private func withPath<T>(_ slot: Int32, _ body: (UnsafeBufferPointer<UInt8>) -> T) -> T {
        if slot < 0 { return owned[Int(~slot)].path.withUnsafeBufferPointer(body) }
        return body(storage.path(at: Int(slot)))
    }

    private func stage(_ slot: Int32) -> Int {
        slot < 0 ? 0 : Int((storage.u16(Int(slot) + 60) >> 12) & 3)
    }

    /// Whether an entry of the file carries the extended flags word (every
    /// entry fprep writes does).
    private func hasExtendedFlags(_ slot: Int32) -> Bool {
        if slot < 0 { return true }
        return storage.u16(Int(slot) + 60) & 0x4000 != 0
    }

    private func decode(_ slot: Int32) -> IndexEntry {
        if slot < 0 { return owned[Int(~slot)] }
        let at = Int(slot)
        var stat = StatData()
        stat.ctimeSeconds = Int32(bitPattern: storage.u32(at))
        stat.ctimeNanoseconds = storage.u32(at + 4)
        stat.mtimeSeconds = Int32(bitPattern: storage.u32(at + 8))
        stat.mtimeNanoseconds = storage.u32(at + 12)
        stat.device = storage.u32(at + 16)
        stat.inode = storage.u32(at + 20)
        stat.uid = storage.u32(at + 28)
        stat.gid = storage.u32(at + 32)
        stat.fileSize = storage.u32(at + 36)
        var oid = git_oid()
        withUnsafeMutableBytes(of: &oid.id) { $0.copyMemory(from: UnsafeRawBufferPointer(start: storage.base + at + 40, count: 20)) }
        let flags = storage.u16(at + 60)
        let skip = flags & 0x4000 != 0 && storage.u16(at + 62) & 0x4000 != 0
        return IndexEntry(path: Array(storage.path(at: at)), id: ObjectID(oid), mode: storage.u32(at + 24), stat: stat, skipWorktree: skip)
    }
}

/// The 12 bytes that start an index file fprep writes: "DIRC", version 3,
/// the entry count.
private func indexHeader(entries: Int) -> [UInt8] {
    var header = Array("DIRC".utf8)
    appendBigEndian(&header, UInt32(3))
    appendBigEndian(&header, UInt32(entries))
    return header
}

private func appendBigEndian<T: FixedWidthInteger>(_ output: inout [UInt8], _ value: T) {
    withUnsafeBytes(of: value.bigEndian) { output.append(contentsOf: $0) }
}

/// One entry in the index's on-disk layout (version 2/3).
private func encodeIndexEntry(_ entry: IndexEntry, into output: inout [UInt8]) {
    let start = output.count
    let stat = entry.stat
    appendBigEndian(&output, UInt32(bitPattern: stat.ctimeSeconds))
    appendBigEndian(&output, stat.ctimeNanoseconds)
    appendBigEndian(&output, UInt32(bitPattern: stat.mtimeSeconds))
    appendBigEndian(&output, stat.mtimeNanoseconds)
    appendBigEndian(&output, stat.device)
    appendBigEndian(&output, stat.inode)
    appendBigEndian(&output, entry.mode)
    appendBigEndian(&output, stat.uid)
    appendBigEndian(&output, stat.gid)
    appendBigEndian(&output, stat.fileSize)
    withUnsafeBytes(of: entry.id.raw.id) { output.append(contentsOf: $0) }
    // Every entry carries the extended flags word (version 3), zero when
    // no flag is set, which git reads as it reads none: a change of the
    // skip-worktree bit then keeps the entry's size, and the index can be
    // written in place (`Index.writeInPlace`). git drops the word when it
    // rewrites the index; fprep's next whole write puts it back.
    let nameLength = UInt16(min(entry.path.count, 0xFFF))
    appendBigEndian(&output, UInt16(0x4000) | nameLength)
    appendBigEndian(&output, UInt16(entry.skipWorktree ? 0x4000 : 0))
    output += entry.path
    // NUL-padded to a multiple of 8, with at least one NUL.
    let size = (output.count - start + 8) & ~7
    output.append(contentsOf: repeatElement(0, count: start + size - output.count))
}

/// Moves a finished `index.lock` over the index, as git does, and writes
/// the offsets table beside it.
private func installIndexFile(lock: String, at filePath: String, checksum: [UInt8], offsets: [UInt32]) throws {
    CrashPoint.reach()
    guard rename(lock, filePath) == 0 else {
        let code = errno
        unlink(lock)
        throw GitError(code: .other(-1), message: "cannot rename '\(lock)': \(String(cString: strerror(code)))", function: "index write")
    }
    // Only a speed-up: without it (a crash here, a full disk) the next
    // read walks the entries.
    EntryOffsets.write(offsets, indexChecksum: checksum, table: EntryOffsets.path(beside: filePath))
}

/// A whole new index written entry by entry, in path order, holding none
/// of them: how a clone records a tree of any size in memory that does not
/// grow with it (an `Index` keeps every edit until it writes). The count is
/// in the header, so it is given first; an entry out of order, or a count
/// that does not match, abandons the file and leaves the index as it was.
public final class IndexStream {
    private let filePath: String
    private let lock: String
    /// The index's lock, written last; the entries go to `file`, which is
    /// the lock itself, or for a split index the shared file's temporary.
    private let lockFile: IndexFileWriter
    private let file: IndexFileWriter
    private let split: Bool
    private let declared: Int
    private var offsets: [UInt32] = []
    private var position: Int
    private var previous: [UInt8] = []
    private var encoded: [UInt8] = []
    /// The paths of every `fenceInterval`-th entry, for the shared file's
    /// fences (see `SharedIndexFences`).
    private var fencePaths: [[UInt8]] = []
    private let fenceInterval = max(1, SharedIndexFences.writingInterval)
    private var ended = false

    /// `split`: the entries go to a shared index and `.git/index` links to
    /// it (see `SplitIndexPolicy`).
    public init(path: String, count: Int, split: Bool = false) throws {
        filePath = path
        lock = path + ".lock"
        declared = count
        self.split = split
        lockFile = try IndexFileWriter(path: lock)
        let header = indexHeader(entries: count)
        var entriesFile: IndexFileWriter?
        do {
            if split {
                let temporary = SharedIndexFile.folder(of: path) + SharedIndexFile.temporaryName
                unlink(temporary)
                entriesFile = try IndexFileWriter(path: temporary)
            } else {
                entriesFile = lockFile
            }
            try entriesFile?.append(header)
        } catch {
            if split { entriesFile?.abandon() }
            lockFile.abandon()
            throw error
        }
        file = entriesFile ?? lockFile
        position = header.count
        offsets.reserveCapacity(count)
        encoded.reserveCapacity(256)
    }

    deinit { if !ended { abandon() } }

    /// Adds the entry after the last one; its path must sort after it.
    public func append(_ entry: IndexEntry) throws {
        guard !ended else { throw GitError(code: .invalid, message: "the index stream is closed", function: "index write") }
        let ordered = entry.path.withUnsafeBufferPointer { path in
            previous.withUnsafeBufferPointer { Index.compareBytes($0, path) < 0 }
        }
        guard !entry.path.isEmpty, !entry.path.contains(0), offsets.isEmpty || ordered else {
            abandon()
            throw GitError(code: .invalid, message: "index entries out of order at '\(String(decoding: entry.path, as: UTF8.self))'",
                           function: "index write")
        }
        guard offsets.count < declared else {
            abandon()
            throw GitError(code: .invalid, message: "more index entries than the \(declared) announced", function: "index write")
        }
        encoded.removeAll(keepingCapacity: true)
        encodeIndexEntry(entry, into: &encoded)
        do {
            try file.append(encoded)
        } catch {
            abandon()
            throw error
        }
        if split && offsets.count % fenceInterval == 0 { fencePaths.append(entry.path) }
        offsets.append(UInt32(truncatingIfNeeded: position))
        position += encoded.count
        previous = entry.path
    }

    /// Ends the file and moves it over the index (split: the shared file
    /// to its name, on the disk first, then the index linking to it).
    public func finish() throws {
        guard !ended else { return }
        guard offsets.count == declared else {
            abandon()
            throw GitError(code: .invalid, message: "\(offsets.count) index entries written, \(declared) announced", function: "index write")
        }
        let written: [UInt8]
        do {
            let checksum = try file.finish(flush: split)
            if split {
                let fences = fencePaths, interval = fenceInterval
                try nameSharedFile(file.path, checksum: checksum, offsets: offsets, linkingIn: lockFile, indexPath: filePath) { i in
                    i % interval == 0 && i / interval < fences.count ? fences[i / interval] : nil
                }
                written = try lockFile.finish()
            } else {
                written = checksum
            }
        } catch {
            abandon()
            throw error
        }
        ended = true
        try installIndexFile(lock: lock, at: filePath, checksum: written, offsets: split ? [] : offsets)
    }

    /// Removes the unfinished file (the index stays as it was).
    public func abandon() {
        guard !ended else { return }
        ended = true
        file.abandon()
        if split { lockFile.abandon() }
    }
}

/// Gives a finished shared index (on the disk) its name, records its
/// entries' offsets, and writes into `lock` the index that links to it with
/// nothing changed.
private func nameSharedFile(_ temporary: String, checksum: [UInt8], offsets: [UInt32], linkingIn lock: IndexFileWriter,
                            indexPath: String, path: (Int) -> [UInt8]?) throws {
    CrashPoint.reach()
    guard rename(temporary, SharedIndexFile.path(beside: indexPath, checksum: checksum)) == 0 else {
        throw GitError(code: .other(-1), message: "cannot rename '\(temporary)': \(String(cString: strerror(errno)))", function: "index write")
    }
    EntryOffsets.write(offsets, indexChecksum: checksum, table: SharedIndexFile.offsetsTable(beside: indexPath))
    SharedIndexFences.write(entries: offsets.count, checksum: checksum, table: SharedIndexFences.path(beside: indexPath), path: path)
    try lock.append(indexHeader(entries: 0))
    try lock.append(LinkExtension(sharedChecksum: checksum, deleted: [], replaced: []).encoded())
}

/// A new index file: bytes written through a buffer, their SHA-1 computed
/// as they go and appended at the end.
private final class IndexFileWriter {
    let path: String
    private let fd: Int32
    private let hash: UnsafeMutableRawPointer
    private var buffer: [UInt8] = []
    private var ended = false
    private var closed = false

    init(path: String) throws {
        self.path = path
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            let code = errno
            if code == EEXIST {
                throw GitError(code: .locked, message: "'\(path)' exists: another git process is writing the index (remove it if none is)",
                               function: "index write")
            }
            throw GitError(code: .other(-1), message: "cannot create '\(path)': \(String(cString: strerror(code)))", function: "index write")
        }
        guard let context = fprep_sha1_begin() else {
            close(fd)
            unlink(path)
            throw GitError(code: .other(-1), message: "no SHA-1 from libcrypto", function: "index write")
        }
        hash = context
        buffer.reserveCapacity(1 << 16)
    }

    func append(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try append($0) }
    }

    func append(_ bytes: UnsafeRawBufferPointer) throws {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        guard fprep_sha1_update(hash, base, bytes.count) == 0 else {
            throw GitError(code: .other(-1), message: "SHA-1 of the index failed", function: "index write")
        }
        if buffer.count + bytes.count <= 1 << 16 {
            buffer.append(contentsOf: bytes)
            return
        }
        try flush()
        try writeAll(bytes)
    }

    /// Appends the checksum and closes the file (`flush`: once on the
    /// disk); returns the checksum.
    func finish(flush durable: Bool = false) throws -> [UInt8] {
        var checksum = [UInt8](repeating: 0, count: 20)
        ended = true
        guard fprep_sha1_end(hash, &checksum) == 0 else { throw GitError(code: .other(-1), message: "SHA-1 of the index failed", function: "index write") }
        buffer += checksum
        try flush()
        if durable, fdatasync(fd) != 0 {
            throw GitError(code: .other(-1), message: "cannot flush '\(path)': \(String(cString: strerror(errno)))", function: "index write")
        }
        closed = true
        guard close(fd) == 0 else {
            throw GitError(code: .other(-1), message: "cannot write '\(path)': \(String(cString: strerror(errno)))", function: "index write")
        }
        return checksum
    }

    /// Removes the unfinished file (the index stays as it was).
    func abandon() {
        if !ended {
            var unused = [UInt8](repeating: 0, count: 20)
            _ = fprep_sha1_end(hash, &unused)
        }
        if !closed { close(fd) }
        closed = true
        unlink(path)
    }

    private func flush() throws {
        try buffer.withUnsafeBytes { try writeAll($0) }
        buffer.removeAll(keepingCapacity: true)
    }

    private func writeAll(_ bytes: UnsafeRawBufferPointer) throws {
        guard let base = bytes.baseAddress else { return }
        var written = 0
        while written < bytes.count {
            let n = Glibc.write(fd, base + written, bytes.count - written)
            if n < 0 {
                if errno == EINTR { continue }
                throw GitError(code: .other(-1), message: "cannot write '\(path)': \(String(cString: strerror(errno)))", function: "index write")
            }
            written += n
        }
    }
}

/// What says an index file changed: size, date and inode.
private struct FileStamp: Equatable {
    let size: Int64
    let mtime: Int64
    let mtimeNanoseconds: Int64
    let inode: UInt64

    init?(path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        self.init(info)
    }

    init(_ info: stat) {
        size = Int64(info.st_size)
        mtime = Int64(info.st_mtim.tv_sec)
        mtimeNanoseconds = Int64(info.st_mtim.tv_nsec)
        inode = UInt64(info.st_ino)
    }
}

/// Writes all of `bytes` at `offset`.
private func pwriteAll(_ fd: Int32, _ bytes: [UInt8], at offset: Int) -> Bool {
    var done = 0
    while done < bytes.count {
        let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, $0.count - done, off_t(offset + done)) }
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { return false }
        done += n
    }
    return true
}

/// The SHA-1 of the first `length` bytes of the file, read through a small
/// buffer (not the mapping: a command's memory stays what its work needs).
private func checksumOfFile(_ fd: Int32, length: Int) -> [UInt8]? {
    guard let context = fprep_sha1_begin() else { return nil }
    var buffer = [UInt8](repeating: 0, count: 1 << 20)
    var done = 0
    var ok = true
    while done < length {
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, min($0.count, length - done), off_t(done)) }
        if n < 0 && errno == EINTR { continue }
        guard n > 0, buffer.withUnsafeBytes({ fprep_sha1_update(context, $0.baseAddress, n) }) == 0 else { ok = false; break }
        done += n
    }
    var checksum = [UInt8](repeating: 0, count: 20)
    guard fprep_sha1_end(context, &checksum) == 0, ok else { return nil }
    return checksum
}

/// The bytes of an index's entries in the version 2/3 layout: the mapped
/// file, or a buffer of re-encoded version 4 entries.
final class IndexStorage {
    let base: UnsafeRawPointer
    let count: Int
    /// The bytes are the mapped file itself (not re-encoded version 4 entries).
    var isFile = false
    /// The file's trailing checksum, when read from a file.
    var checksum: [UInt8] = []
    /// For a split index: which entries are its shared index's.
    var shared: SharedIndexBase?
    /// For a split index whose shared file has fences: where a path's
    /// entry can be among the entries as read (see `SharedIndexFences`).
    var lookupFences: LookupFences?
    private let release: () -> Void

    init(base: UnsafeRawPointer, count: Int, release: @escaping () -> Void) {
        self.base = base
        self.count = count
        self.release = release
    }

    deinit { release() }

    static var empty: IndexStorage {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 8, alignment: 8)
        return IndexStorage(base: UnsafeRawPointer(buffer), count: 0) { buffer.deallocate() }
    }

    /// How far past its start an entry's bytes are asked for: its fixed
    /// part and a path of up to 4 KiB (a hint; a longer path is read when touched).
    static let entryReach = 64 + 4096

    /// The bytes of the shared file's entries among `slots`, from the
    /// page of the first; nil when none of them is in the shared file.
    func neededBytes(_ slots: ArraySlice<Int32>) -> Range<Int>? {
        guard let end = shared?.end else { return nil }
        var low = Int.max, high = -1
        for slot in slots where slot >= 0 && Int(slot) < end {
            low = min(low, Int(slot))
            high = max(high, Int(slot))
        }
        guard high >= 0 else { return nil }
        let start = low & ~4095
        let stop = min(end, high + Self.entryReach)
        return stop > start ? start..<stop : nil
    }

    /// The byte ranges asked for by `willNeed(ranges:)`, sorted, apart:
    /// a search within one asks for nothing more (a materialize's thousand
    /// lookups each asked again for pages already asked for, a system
    /// call each).
    private var asked: [Range<Int>] = []

    /// Asks for the pages of the shared file's entries among `slots` at
    /// once, before a search touches them (see `SharedIndexFences`).
    func willNeed(_ slots: ArraySlice<Int32>) {
        guard let bytes = neededBytes(slots), !wasAsked(bytes) else { return }
        _ = madvise(UnsafeMutableRawPointer(mutating: base + bytes.lowerBound), bytes.count, MADV_WILLNEED)
    }

    /// Asks for all of `ranges` at once, in their order: the order of the
    /// lookups that follow, so that on a cold disk the first lookup's
    /// pages are not queued behind a later one's.
    func willNeed(ranges: [Range<Int>]) {
        var merged: [Range<Int>] = []
        for range in ranges {
            _ = madvise(UnsafeMutableRawPointer(mutating: base + range.lowerBound), range.count, MADV_WILLNEED)
        }
        // Overlapping and adjacent ones as one, for `wasAsked`.
        for range in ranges.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = merged.last, range.lowerBound <= last.upperBound {
                merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        asked = merged
    }

    private func wasAsked(_ bytes: Range<Int>) -> Bool {
        var low = 0, high = asked.count
        while low < high {
            let middle = (low + high) / 2
            if asked[middle].upperBound < bytes.upperBound { low = middle + 1 } else { high = middle }
        }
        return low < asked.count && asked[low].lowerBound <= bytes.lowerBound
    }

    @inline(__always) func u32(_ at: Int) -> UInt32 { UInt32(bigEndian: base.loadUnaligned(fromByteOffset: at, as: UInt32.self)) }
    @inline(__always) func u16(_ at: Int) -> UInt16 { UInt16(bigEndian: base.loadUnaligned(fromByteOffset: at, as: UInt16.self)) }

    /// Where the path of the entry at `at` starts.
    @inline(__always) func pathStart(_ at: Int) -> Int { at + (u16(at + 60) & 0x4000 != 0 ? 64 : 62) }

    /// Never past the end of the bytes, whatever an entry says (entries
    /// found through the offsets table were not each checked).
    @inline(__always) func path(at: Int) -> UnsafeBufferPointer<UInt8> {
        let start = pathStart(at)
        var length = min(Int(u16(at + 60) & 0xFFF), count - start)
        if length == 0xFFF { length = strnlen(base.advanced(by: start).assumingMemoryBound(to: CChar.self), count - start) }
        return UnsafeBufferPointer(start: base.advanced(by: start).assumingMemoryBound(to: UInt8.self), count: length)
    }

    /// The size of the entry at `at`, padding included.
    @inline(__always) func entrySize(at: Int) -> Int {
        let start = pathStart(at)
        return min((start - at + path(at: at).count + 8) & ~7, count - at)
    }

    /// Maps `path` and lists its entries' offsets.
    static func read(_ path: String) throws -> (IndexStorage, [Int32]) {
        func failure(_ message: String) -> GitError {
            GitError(code: .invalid, message: "the index '\(path)' \(message); 'fprep repair' rebuilds it", function: "index read")
        }
        func unsupported(_ name: String) -> GitError {
            GitError(code: .invalid, message: "the index '\(path)' uses the '\(name)' extension (a sparse index), which fprep does not support; run 'git sparse-checkout disable'",
                     function: "index read")
        }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw failure("cannot be opened: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw failure("cannot be read") }
        let size = Int(info.st_size)
        guard size >= 32 else { throw failure("is truncated") }
        // Entry offsets are kept as 32 bits (2 GiB would be some 20 million entries).
        guard size < Int(Int32.max) else { throw failure("is larger than 2 GiB") }
        guard let mapped = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), mapped != MAP_FAILED else {
            throw failure("cannot be mapped: \(String(cString: strerror(errno)))")
        }
        let file = IndexStorage(base: UnsafeRawPointer(mapped), count: size) { munmap(mapped, size) }
        file.isFile = true
        guard memcmp(file.base, "DIRC", 4) == 0 else { throw failure("is not an index file") }
        file.checksum = Array(UnsafeRawBufferPointer(start: file.base + size - 20, count: 20))
        let version = file.u32(4)
        let entries = Int(file.u32(8))
        guard (2...4).contains(version) else { throw failure("has version \(version), which fprep does not read") }
        let end = size - 20
        var slots: [Int32] = []
        var at = 12
        var stripped = false
        let result: IndexStorage
        if version == 4 {
            let (buffer, offsets, next) = try decodeVersion4(file, entries: entries, end: end, failure: failure)
            buffer.checksum = file.checksum
            result = buffer
            slots = offsets
            at = next
            stripped = offsets.contains { buffer.path(at: Int($0)).isEmpty }
        } else if let offsets = EntryOffsets.read(table: EntryOffsets.path(beside: path), for: file, entries: entries, end: end) {
            // Written by fprep whole: where every entry starts is on record,
            // and the entries need not be walked (10^5 of them: 3 ms).
            return (file, offsets)
        } else {
            (slots, at, stripped) = try walkEntries(file, version: version, entries: entries, end: end, failure: failure)
            result = file
        }
        // Extensions: optional ones (uppercase) are skipped; of the
        // mandatory ones, which change what the entries mean, fprep reads
        // the split index's link and refuses any other (a sparse index).
        var link: LinkExtension.Raw?
        try skipExtensions(file, from: at, end: end) { signature, start, length in
            guard signature == LinkExtension.signature, link == nil else { throw unsupported(String(decoding: signature, as: UTF8.self)) }
            do {
                link = try LinkExtension.Raw(file.base, at: start, length: length)
            } catch {
                throw failure("has a damaged link to its shared index")
            }
        }
        if let link {
            return try merging(main: result, mainSlots: slots, link: link, indexPath: path, mainChecksum: file.checksum, failure: failure)
        }
        // Entries without a path replace entries of a shared index.
        guard !stripped else { throw failure("has an entry without a path and no shared index") }
        return (result, slots)
    }

    /// Where each of `entries` entries starts (versions 2 and 3), one pass
    /// reading each entry's flags once; also where the extensions start and
    /// whether an entry had no path (a split index's replacement).
    static func walkEntries(_ file: IndexStorage, version: UInt32, entries: Int, end: Int,
                            failure: (String) -> GitError) throws -> ([Int32], Int, Bool) {
        var slots: [Int32] = []
        slots.reserveCapacity(entries)
        var at = 12
        var stripped = false
        for _ in 0..<entries {
            guard at + 62 <= end else { throw failure("is truncated") }
            let flags = file.u16(at + 60)
            let extended = flags & 0x4000 != 0
            if version == 2, extended { throw failure("has an extended entry in version 2") }
            let start = at + (extended ? 64 : 62)
            var length = Int(flags & 0xFFF)
            if length == 0xFFF {
                guard start < end else { throw failure("is truncated") }
                length = strnlen(file.base.advanced(by: start).assumingMemoryBound(to: CChar.self), end - start)
            }
            if length == 0 { stripped = true }
            guard start + length < end else { throw failure("is truncated") }
            slots.append(Int32(truncatingIfNeeded: at))
            at = at + ((start - at + length + 8) & ~7)
        }
        return (slots, at, stripped)
    }

    /// Walks the extensions from `at` to `end`: an optional one (its
    /// signature uppercase) is skipped, a mandatory one handed to `body`
    /// (signature, where its data starts, its length).
    static func skipExtensions(_ file: IndexStorage, from start: Int, end: Int,
                               _ body: ([UInt8], Int, Int) throws -> Void) throws {
        var at = start
        while at + 8 <= end {
            let signature = (0..<4).map { file.base.load(fromByteOffset: at + $0, as: UInt8.self) }
            let length = Int(file.u32(at + 4))
            guard length <= end - at - 8 else {
                throw GitError(code: .invalid, message: "an index extension runs past the end of the file; 'fprep repair' rebuilds the index", function: "index read")
            }
            if !(0x41...0x5A).contains(signature[0]) { try body(signature, at + 8, length) }
            at += 8 + length
        }
    }

    /// Version 4 compresses each path against the one before; the entries
    /// are re-encoded in the version 3 layout, so the rest reads one layout.
    static func decodeVersion4(_ file: IndexStorage, entries: Int, end: Int,
                                       failure: (String) -> GitError) throws -> (IndexStorage, [Int32], Int) {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(entries * 112)
        var offsets: [Int32] = []
        offsets.reserveCapacity(entries)
        var previous: [UInt8] = []
        var at = 12
        for _ in 0..<entries {
            guard at + 62 <= end else { throw failure("is truncated") }
            let flags = file.u16(at + 60)
            let fixed = flags & 0x4000 != 0 ? 64 : 62
            var cursor = at + fixed
            // The number of bytes to drop from the previous path: git's offset varint.
            var byte = file.base.load(fromByteOffset: cursor, as: UInt8.self)
            cursor += 1
            var drop = Int(byte & 0x7F)
            while byte & 0x80 != 0 {
                guard cursor < end else { throw failure("is truncated") }
                byte = file.base.load(fromByteOffset: cursor, as: UInt8.self)
                cursor += 1
                drop = ((drop + 1) << 7) | Int(byte & 0x7F)
            }
            guard drop <= previous.count else { throw failure("has a malformed version 4 path") }
            let suffixLength = strlen(file.base.advanced(by: cursor).assumingMemoryBound(to: CChar.self))
            guard cursor + suffixLength < end else { throw failure("is truncated") }
            var path = Array(previous.prefix(previous.count - drop))
            path.append(contentsOf: UnsafeRawBufferPointer(start: file.base + cursor, count: suffixLength))
            let start = buffer.count
            offsets.append(Int32(start))
            buffer.append(contentsOf: UnsafeRawBufferPointer(start: file.base + at, count: fixed))
            buffer += path
            buffer += [UInt8](repeating: 0, count: ((fixed + path.count + 8) & ~7) - fixed - path.count)
            previous = path
            at = cursor + suffixLength + 1
        }
        let copy = UnsafeMutableRawPointer.allocate(byteCount: max(buffer.count, 8), alignment: 8)
        buffer.withUnsafeBytes { if let base = $0.baseAddress { copy.copyMemory(from: base, byteCount: $0.count) } }
        let storage = IndexStorage(base: UnsafeRawPointer(copy), count: buffer.count) { copy.deallocate() }
        return (storage, offsets, at)
    }
}
