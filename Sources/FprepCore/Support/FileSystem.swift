import CFprepSys
import Dispatch
import FoundationEssentials
import Glibc
import FprepGit

/// The part of `lstat` fprep looks at.
struct FileStat: Equatable {
    var device: Int64
    var inode: Int64
    var mode: Int64
    var uid: Int64
    var gid: Int64
    var size: Int64
    var blocks: Int64
    /// How many names the inode has (more than one: hard links).
    var links: Int64
    var mtime: (Int64, Int64)
    var ctime: (Int64, Int64)
    var atime: (Int64, Int64)

    init(_ raw: fprep_stat) {
        device = raw.dev
        inode = raw.ino
        mode = raw.mode
        uid = raw.uid
        gid = raw.gid
        size = raw.size
        blocks = raw.blocks
        links = raw.nlink
        mtime = (raw.mtime_sec, raw.mtime_nsec)
        ctime = (raw.ctime_sec, raw.ctime_nsec)
        atime = (raw.atime_sec, raw.atime_nsec)
    }

    var isRegular: Bool { mode_t(truncatingIfNeeded: mode) & S_IFMT == S_IFREG }
    var isDirectory: Bool { mode_t(truncatingIfNeeded: mode) & S_IFMT == S_IFDIR }
    var isSymlink: Bool { mode_t(truncatingIfNeeded: mode) & S_IFMT == S_IFLNK }
    var isExecutable: Bool { mode & 0o100 != 0 }
    /// A FIFO, socket or device node: never read, never committed.
    var isSpecial: Bool { !isRegular && !isDirectory && !isSymlink }

    /// What is there, as a user reads it ("a FIFO", "a folder"…).
    var kindDescription: String {
        switch mode_t(truncatingIfNeeded: mode) & S_IFMT {
        case S_IFREG: "a file"
        case S_IFDIR: "a folder"
        case S_IFLNK: "a symlink"
        case S_IFIFO: "a FIFO"
        case S_IFSOCK: "a socket"
        case S_IFCHR: "a character device"
        case S_IFBLK: "a block device"
        default: "not a file"
        }
    }

    static func == (lhs: FileStat, rhs: FileStat) -> Bool {
        lhs.device == rhs.device && lhs.inode == rhs.inode && lhs.mode == rhs.mode && lhs.size == rhs.size
            && lhs.blocks == rhs.blocks && lhs.mtime == rhs.mtime && lhs.ctime == rhs.ctime
    }
}

/// A C string of a path's bytes, for the calls below.
func cPath(_ bytes: [UInt8]) -> [CChar] {
    var result = bytes.map { CChar(bitPattern: $0) }
    result.append(0)
    return result
}

/// An open folder; owns its file descriptor (closed in deinit). Every open
/// below it goes through `fprep_open_beneath`, so nothing fprep writes ever
/// goes through a symlink or leaves the replica.
/// Immutable after init and used only through thread-safe system calls.
final class FolderHandle: @unchecked Sendable {
    let fd: Int32
    let shownPath: String

    init(fd: Int32, shownPath: String) {
        self.fd = fd
        self.shownPath = shownPath
    }

    /// Opens the replica root itself.
    convenience init(root: String) throws {
        let fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw SystemError("open", root) }
        self.init(fd: fd, shownPath: root)
    }

    deinit { close(fd) }

    /// Opens the folder at `path` below this one, never through a symlink.
    func folder(_ path: RepoPath) throws -> FolderHandle {
        if path.isRoot { return FolderHandle(fd: dup(fd), shownPath: shownPath) }
        let fd = fprep_open_beneath(self.fd, cPath(path.bytes), O_RDONLY | O_DIRECTORY, 0)
        guard fd >= 0 else {
            let code = errno
            if code == ELOOP || code == ENOTDIR, let problem = obstruction(on: path) { throw FprepError(problem) }
            throw SystemError("open folder", path.description, code)
        }
        return FolderHandle(fd: fd, shownPath: path.description)
    }

    /// Removes the folder `name` in this one when it is empty; whether it went.
    /// A method, not `unlinkat(try root.folder(x).fd, …)` at the caller: a
    /// handle made in an expression may be freed (its descriptor closed)
    /// before the call that uses its descriptor, which then fails with
    /// EBADF (or acts on a descriptor opened since).
    @discardableResult
    func removeEmptyFolder(_ name: [UInt8]) -> Bool {
        unlinkat(fd, cPath(name), AT_REMOVEDIR) == 0
    }

    /// Removes the folder `name` in this one when it holds nothing but
    /// folders (empty, or holding only such folders): a tree of names with
    /// no file, symlink or anything else in it. Whether it went; when not,
    /// the empty folders found on the way may be gone, never anything else.
    @discardableResult
    func removeFoldersOnly(_ name: [UInt8]) -> Bool {
        if removeEmptyFolder(name) { return true }
        guard errno == ENOTEMPTY || errno == EEXIST,
              let inner = try? folder(RepoPath(bytes: name)), let names = try? inner.entryNames() else { return false }
        var onlyFolders = true
        for child in names {
            guard inner.stat(name: child)?.isDirectory == true, inner.removeFoldersOnly(child) else {
                onlyFolders = false
                continue
            }
        }
        return onlyFolders && removeEmptyFolder(name)
    }

    /// What stands where `path` has a folder: the first component that is
    /// not one (a user's symlink in place of a folder, say), as a message
    /// that names it; nil when every folder on the way is one.
    func obstruction(on path: RepoPath) -> String? {
        var current = RepoPath.root
        for name in path.components {
            current = current.appending(name)
            guard let stat = stat(current) else { return nil }
            if stat.isDirectory { continue }
            let what = stat.isSymlink ? "a symlink where the replica has a folder; fprep never follows symlinks"
                                      : "\(stat.kindDescription) where the replica has a folder"
            return "'\(current)' is \(what); put the folder back (or run 'fprep sync' to commit the change)"
        }
        return nil
    }

    /// `lstat` of `path` below this folder, never through a symlink (a
    /// symlink in place of a folder on the way reads as nothing there); nil
    /// when nothing is there.
    func stat(_ path: RepoPath) -> FileStat? {
        var raw = fprep_stat()
        guard fprep_lstat_beneath(fd, cPath(path.bytes), &raw) == 0 else { return nil }
        return FileStat(raw)
    }

    /// Whether this is still the folder at `path` below `root` (the same
    /// inode there, never through a symlink): not moved, deleted or
    /// replaced since it was opened.
    func isStill(at path: RepoPath, in root: FolderHandle) -> Bool {
        var raw = fprep_stat()
        guard fprep_fstat(fd, &raw) == 0, let there = path.isRoot ? root.stat(name: Array(".".utf8)) : root.stat(path) else { return false }
        let held = FileStat(raw)
        return there.isDirectory && there.device == held.device && there.inode == held.inode
    }

    /// Readies this folder for names to be added to or removed from it:
    /// each such change writes its inode (its times), and the block that
    /// holds the inode may no longer be in memory where the inode still
    /// is (an agent's marks keep every watched folder's inode, while the
    /// block cache goes), so each change would wait for a read of its own,
    /// one folder after another. Setting the access time now reads it here,
    /// on the caller's threads, together with the others; the change sets
    /// the folder's other times a moment later anyway.
    func willChange() {
        _ = fprep_touch_access_time(fd)
    }

    /// `lstat` of the entry `name` directly in this folder.
    func stat(name: [UInt8]) -> FileStat? {
        var raw = fprep_stat()
        guard fprep_lstat_at(fd, cPath(name), &raw) == 0 else { return nil }
        return FileStat(raw)
    }

    /// Opens the regular file at `path` below this folder for its content,
    /// never through a symlink: a FIFO, socket or device is refused without
    /// being opened. Every read of a user's file starts here.
    func openRegular(_ path: RepoPath, flags: Int32) throws -> (fd: Int32, stat: FileStat) {
        var raw = fprep_stat()
        let fd = fprep_open_regular(self.fd, cPath(path.bytes), flags, &raw)
        if fd == -2 { throw ContentRefusal(path: path.description, reason: .notAFile(FileStat(raw).kindDescription)) }
        guard fd >= 0 else { throw SystemError("open", path.description) }
        return (fd, FileStat(raw))
    }

    /// The content of the regular file at `path` (see `openRegular`).
    func readFile(_ path: RepoPath) throws -> [UInt8] {
        let (fd, stat) = try openRegular(path, flags: O_RDONLY)
        defer { close(fd) }
        return try readContent(fd, size: stat.size, shown: path.description)
    }

    /// Gives the regular file at `path` the execute bits of its read bits
    /// (as git checks out 0755 under the umask), or takes them away; nothing
    /// changes when the owner's bit already says so.
    func setExecutable(_ path: RepoPath, _ executable: Bool) throws {
        let (fd, stat) = try openRegular(path, flags: O_RDONLY)
        defer { close(fd) }
        guard stat.isExecutable != executable else { return }
        let bits = mode_t(truncatingIfNeeded: stat.mode) & 0o7777
        let wanted = executable ? bits | ((bits & 0o444) >> 2) : bits & ~0o111
        guard fchmod(fd, wanted) == 0 else { throw SystemError("change the mode of", path.description) }
    }

    /// The target of the symlink at `path`.
    func readLink(_ path: RepoPath) throws -> [UInt8] {
        let parent = try folder(path.parent)
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = buffer.withUnsafeMutableBytes { raw in
            readlinkat(parent.fd, cPath(path.name), raw.baseAddress!.assumingMemoryBound(to: CChar.self), raw.count)
        }
        guard count >= 0 else { throw SystemError("readlink", path.description) }
        return Array(buffer[0..<count])
    }

    /// The folder at `path` below this one, made (with the folders on the
    /// way) where it is missing; never through a symlink.
    func makeFolder(_ path: RepoPath) throws -> FolderHandle {
        var current = RepoPath.root
        for name in path.components {
            let parent = try folder(current)
            current = current.appending(name)
            if mkdirat(parent.fd, cPath(name), 0o777) != 0 && errno != EEXIST { throw SystemError("mkdir", current.description) }
        }
        return try folder(path)
    }

    /// Names of the entries of this folder, as bytes.
    func entryNames() throws -> [[UInt8]] {
        let copy = dup(fd)
        guard copy >= 0, let dir = fdopendir(copy) else { throw SystemError("opendir", shownPath) }
        defer { closedir(dir) }
        // A dup shares the folder's read position: a second listing of the
        // same handle would start where the first ended, and find nothing.
        rewinddir(dir)
        var names: [[UInt8]] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
            if name == [0x2E] || name == [0x2E, 0x2E] { continue }
            names.append(name)
        }
        return names
    }
}

/// Why fprep did not read a user's file: it is not a file, or it changed
/// while read (a program writing it meanwhile; it is read again next time).
struct ContentRefusal: Error, CustomStringConvertible, Equatable {
    enum Reason: Equatable {
        case notAFile(String)
        case changedWhileRead
    }

    let path: String
    let reason: Reason

    /// The reason alone, for lists of skipped items.
    var why: String {
        switch reason {
        case .notAFile(let kind): "it is \(kind), not a file; fprep does not read or sync it (move it out of the replica)"
        case .changedWhileRead: "it changed while fprep read it (a program is writing it); run the command again once it is written"
        }
    }

    var description: String { "'\(path)': \(why)" }
}

/// Reads the open regular file `fd` of `size` bytes (its size when opened),
/// never more: a file that grew or shrank meanwhile is a writer's race,
/// refused as changed rather than read without end.
/// The blob id of the `size` bytes of the file open as `fd`; nil when
/// they cannot be read.
func contentBlobID(_ fd: Int32, size: Int64, shown: String) -> ObjectID? {
    try? readContent(fd, size: size, shown: shown).withUnsafeBytes { try ObjectDatabase.blobID(of: $0) }
}

func readContent(_ fd: Int32, size: Int64, shown: String) throws -> [UInt8] {
    var result = [UInt8](repeating: 0, count: Int(max(size, 0)))
    var offset = 0
    while offset < result.count {
        let count = result.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + offset, $0.count - offset, off_t(offset)) }
        if count < 0 {
            if errno == EINTR { continue }
            throw SystemError("read", shown)
        }
        if count == 0 { throw ContentRefusal(path: shown, reason: .changedWhileRead) }
        offset += count
    }
    try expectEnd(fd, at: Int64(offset), shown: shown)
    return result
}

/// Checks that `fd` ends at `offset`: a file that grew while it was read
/// was changed meanwhile (it is read again next time).
private func expectEnd(_ fd: Int32, at offset: Int64, shown: String) throws {
    var extra: UInt8 = 0
    while true {
        let count = pread(fd, &extra, 1, off_t(offset))
        if count < 0 && errno == EINTR { continue }
        if count < 0 { throw SystemError("read", shown) }
        if count > 0 { throw ContentRefusal(path: shown, reason: .changedWhileRead) }
        return
    }
}

/// Copies exactly `size` bytes of `from` into `to` in the kernel
/// (copy_file_range: no user-space buffer, so a file of any size costs no
/// memory), with `readContent`'s rules: never more than the size, and a
/// file that is shorter or longer than it was changed while read.
func copyContent(from: Int32, to: Int32, size: Int64, shown: String) throws {
    var offset: Int64 = 0
    while offset < size {
        var source = offset
        let count = fprep_copy_range(from, &source, to, min(size - offset, 1 << 30))
        if count < 0 {
            if errno == EINTR { continue }
            throw SystemError("copy", shown)
        }
        if count == 0 { throw ContentRefusal(path: shown, reason: .changedWhileRead) }
        offset += count
    }
    try expectEnd(from, at: offset, shown: shown)
}

func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, shown: String) throws {
    var offset = 0
    while offset < bytes.count {
        let count = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
        if count < 0 {
            if errno == EINTR { continue }
            throw SystemError("write", shown)
        }
        offset += count
    }
}

/// Space a folder takes on disk, as `du` counts it (allocated blocks, each
/// inode once, symlinks not followed).
func diskUsage(of path: String) -> Int64 {
    var total: Int64 = 0
    var seen = Set<Int64>()
    func walk(_ fd: Int32) {
        guard let dir = fdopendir(fd) else { close(fd); return }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
            if name == [0x2E] || name == [0x2E, 0x2E] { continue }
            var raw = fprep_stat()
            guard fprep_lstat_at(dirfd(dir), cPath(name), &raw) == 0 else { continue }
            if raw.nlink > 1 {
                if seen.contains(raw.ino) { continue }
                seen.insert(raw.ino)
            }
            total += raw.blocks * 512
            if mode_t(truncatingIfNeeded: raw.mode) & S_IFMT == S_IFDIR {
                let child = openat(dirfd(dir), cPath(name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                if child >= 0 { walk(child) }
            }
        }
    }
    var raw = fprep_stat()
    if fprep_lstat_at(AT_FDCWD, path, &raw) == 0 { total += raw.blocks * 512 }
    let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    if fd >= 0 { walk(fd) }
    return total
}

extension FolderHandle {
    /// Warms the cache for `paths` beneath this folder with lookups, on
    /// several threads when the first ones show a cold cache: a change of
    /// scattered paths then waits for its folder and inode reads together,
    /// not one by one. `foldersChange`: the caller is about to add or
    /// remove a name in each path's folder, whose inode is read too (see
    /// `fprep_prefetch_paths`: its access time is set).
    func prefetch(_ paths: [RepoPath], foldersChange: Bool = false) {
        guard paths.count > 1 else { return }
        withCPaths(paths) { fprep_prefetch_paths(fd, $0.baseAddress, $0.count, Int32(min(16, paths.count)), foldersChange ? 1 : 0) }
    }
}

/// What an enumerator needs from the disk about one item: its lstat and,
/// for a regular file, the placeholder attributes.
struct ItemProbe {
    var stat: FileStat?
    var placeholderBlob: ObjectID?
    var markedDataless = false

    init(_ raw: fprep_probe) {
        guard raw.found != 0 else { return }
        stat = FileStat(raw.stat)
        markedDataless = raw.marked_dataless != 0
        if raw.has_blob != 0 {
            placeholderBlob = withUnsafeBytes(of: raw.blob) { ObjectID(bytes: Array($0)) }
        }
    }
}

extension FolderHandle {
    /// Probes `paths` beneath this folder in one pass each (one lookup, one
    /// open for both attributes); on a cold cache, on several threads.
    func probe(_ paths: [RepoPath]) -> [ItemProbe] {
        guard !paths.isEmpty else { return [] }
        var results = [fprep_probe](repeating: fprep_probe(), count: paths.count)
        withCPaths(paths) { buffer in
            results.withUnsafeMutableBufferPointer { out in
                fprep_probe_paths(fd, buffer.baseAddress, buffer.count, Int32(min(16, paths.count)), out.baseAddress)
            }
        }
        return results.map(ItemProbe.init)
    }
}

/// Calls `body` with `paths` as C strings (NUL-terminated copies of their
/// bytes, valid for the call), for C code that works on many at once.
private func withCPaths<R>(_ paths: [RepoPath], _ body: (UnsafeBufferPointer<UnsafePointer<CChar>?>) -> R) -> R {
    let copies = paths.map { allocatedCString($0.bytes) }
    defer { for copy in copies { copy.deallocate() } }
    let pointers: [UnsafePointer<CChar>?] = copies.map { UnsafePointer($0) }
    return pointers.withUnsafeBufferPointer(body)
}

/// A NUL-terminated copy of raw bytes (paths need not be UTF-8) for C code
/// that keeps it past one call; the caller deallocates it.
func allocatedCString(_ bytes: [UInt8]) -> UnsafeMutablePointer<CChar> {
    let copy = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
    bytes.withUnsafeBytes { if let base = $0.baseAddress { UnsafeMutableRawPointer(copy).copyMemory(from: base, byteCount: $0.count) } }
    copy[bytes.count] = 0
    return copy
}

/// Calls `body(i)` for every `i` below `count` on up to `threads` threads
/// (this one included) and returns when all are done: for work on files
/// that waits on the filesystem (its journal, a cold disk), where one
/// file's wait need not hold up the next. `body` must be safe to call on
/// several threads at once.
func parallelFor(_ count: Int, threads: Int, _ body: (Int) -> Void) {
    guard count > 1, threads > 1 else {
        for i in 0..<count { body(i) }
        return
    }
    final class Job {
        let body: (Int) -> Void
        init(_ body: @escaping (Int) -> Void) { self.body = body }
    }
    withoutActuallyEscaping(body) { body in
        let job = Job(body)
        withExtendedLifetime(job) {
            fprep_parallel_for(count, Int32(min(threads, count)), { context, i in
                guard let context else { return }
                Unmanaged<Job>.fromOpaque(context).takeUnretainedValue().body(Int(i))
            }, Unmanaged.passUnretained(job).toOpaque())
        }
    }
}
