import CLibGit2
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

/// One index entry copied out of libgit2.
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

/// A repository index; owns a `git_index` (freed with `git_index_free`).
public final class Index {
    let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) { self.pointer = pointer }
    deinit { git_index_free(pointer) }

    /// Rereads the index file from disk; wraps `git_index_read`. Unforced,
    /// it reads only when the file changed since the last read.
    public func reload(force: Bool = true) throws {
        try check(git_index_read(pointer, force ? 1 : 0), "git_index_read")
    }

    public var count: Int { git_index_entrycount(pointer) }

    /// Removes every entry (in memory until `write`); wraps `git_index_clear`.
    public func clear() throws {
        try check(git_index_clear(pointer), "git_index_clear")
    }

    /// The entry at position `i` in path order; wraps `git_index_get_byindex`.
    public func entry(at i: Int) -> IndexEntry? {
        // "the entry is owned by the index": copy it out at once.
        guard let raw = git_index_get_byindex(pointer, i) else { return nil }
        return Self.copy(raw.pointee)
    }

    /// The stage-0 entry for `path`; wraps `git_index_get_bypath`.
    public func entry(path: [UInt8]) -> IndexEntry? {
        var cPath = path.map { CChar(bitPattern: $0) }
        cPath.append(0)
        guard let raw = git_index_get_bypath(pointer, cPath, 0) else { return nil }
        return Self.copy(raw.pointee)
    }

    /// The stage-0 entry for `path` and its position, found by binary search
    /// without copying any other entry; wraps `git_index_find`.
    public func find(_ path: [UInt8]) -> (position: Int, entry: IndexEntry)? {
        var position = 0
        let found = path.withUnsafeBufferPointer { buffer -> Bool in
            var cPath = [CChar](repeating: 0, count: buffer.count + 1)
            for i in 0..<buffer.count { cPath[i] = CChar(bitPattern: buffer[i]) }
            return git_index_find(&position, pointer, cPath) == 0
        }
        guard found, let raw = git_index_get_byindex(pointer, position) else { return nil }
        return (position, Self.copy(raw.pointee, path: path))
    }

    /// The position of the first entry whose path starts with `prefix`, or
    /// nil when none does; wraps `git_index_find_prefix`.
    public func firstPosition(withPrefix prefix: [UInt8]) -> Int? {
        var cPrefix = prefix.map { CChar(bitPattern: $0) }
        cPrefix.append(0)
        var position = 0
        guard git_index_find_prefix(&position, pointer, cPrefix) == 0 else { return nil }
        return position
    }

    /// Adds or replaces the entry for its path; wraps `git_index_add`.
    public func add(_ entry: IndexEntry) throws {
        var cPath = entry.path.map { CChar(bitPattern: $0) }
        cPath.append(0)
        try cPath.withUnsafeBufferPointer { pathBuffer in
            var raw = git_index_entry()
            raw.ctime = git_index_time(seconds: entry.stat.ctimeSeconds, nanoseconds: entry.stat.ctimeNanoseconds)
            raw.mtime = git_index_time(seconds: entry.stat.mtimeSeconds, nanoseconds: entry.stat.mtimeNanoseconds)
            raw.dev = entry.stat.device
            raw.ino = entry.stat.inode
            raw.uid = entry.stat.uid
            raw.gid = entry.stat.gid
            raw.file_size = entry.stat.fileSize
            raw.mode = entry.mode
            raw.id = entry.id.raw
            raw.flags_extended = entry.skipWorktree ? UInt16(GIT_INDEX_ENTRY_SKIP_WORKTREE.rawValue) : 0
            raw.path = pathBuffer.baseAddress
            try check(git_index_add(pointer, &raw), "git_index_add")
        }
    }

    /// Removes the stage-0 entry for `path`; wraps `git_index_remove`.
    public func remove(path: [UInt8]) throws {
        var cPath = path.map { CChar(bitPattern: $0) }
        cPath.append(0)
        try check(git_index_remove(pointer, cPath, 0), "git_index_remove")
    }

    /// Writes the index file atomically (lock file, then rename); wraps `git_index_write`.
    public func write() throws {
        try check(git_index_write(pointer), "git_index_write")
    }

    static func copy(_ raw: git_index_entry, path known: [UInt8]? = nil) -> IndexEntry {
        let path: [UInt8]
        if let known {
            path = known
        } else {
            let length = strlen(raw.path)
            path = raw.path.withMemoryRebound(to: UInt8.self, capacity: length) {
                Array(UnsafeBufferPointer(start: $0, count: length))
            }
        }
        var stat = StatData()
        stat.ctimeSeconds = raw.ctime.seconds
        stat.ctimeNanoseconds = raw.ctime.nanoseconds
        stat.mtimeSeconds = raw.mtime.seconds
        stat.mtimeNanoseconds = raw.mtime.nanoseconds
        stat.device = raw.dev
        stat.inode = raw.ino
        stat.uid = raw.uid
        stat.gid = raw.gid
        stat.fileSize = raw.file_size
        let skip = (raw.flags_extended & UInt16(GIT_INDEX_ENTRY_SKIP_WORKTREE.rawValue)) != 0
        return IndexEntry(path: path, id: ObjectID(raw.id), mode: raw.mode, stat: stat, skipWorktree: skip)
    }
}
