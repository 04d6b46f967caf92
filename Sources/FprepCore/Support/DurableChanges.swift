import CFprepSys
import Glibc

/// What a step changed in the replica's tree, made durable before a record
/// (the index, the state's anchor) names it: after a power cut, a record
/// must never describe a file the disk does not have.
///
/// `syncfs` does that in one call, but it writes out and waits for every
/// dirty page of the filesystem, other programs' too: beside a database
/// storing 10^5 rows on the same disk, a sync of one file waited 250–430 ms
/// in it. A change of a few items is made durable item by item instead, so
/// its cost follows the change: an fsync of each item put or changed, then
/// of each folder whose entries changed (which makes a creation, rename or
/// removal durable). Past `itemLimit` items the one syncfs costs less than
/// an fsync each, and is kept.
struct DurableChanges {
    /// Changes above which one syncfs replaces the fsyncs: placeholders
    /// and renames are metadata, which the first fsync's journal commit
    /// mostly carries.
    static let itemLimit = 64
    /// The same for files whose content was just written: each fsync
    /// writes the file out and commits the journal on its own.
    static let contentLimit = 8

    /// Items whose inode the step changed (content, size, marks, mode).
    private var items: Set<RepoPath> = []
    /// Folders whose entries the step changed.
    private var folders: Set<RepoPath> = []
    /// The whole filesystem is flushed: too many changes, or bytes the step
    /// did not write itself (a program's, set aside; commits made with git).
    let wholeFilesystem: Bool

    init(changes: Int, limit: Int = Self.itemLimit, wholeFilesystem: Bool = false) {
        self.wholeFilesystem = wholeFilesystem || changes > limit
    }

    /// Something was put at `path` or changed in place: the item, and every
    /// folder from its own up to the root (a folder made on the way is a new
    /// entry of its parent).
    mutating func put(_ path: RepoPath) {
        guard !wholeFilesystem else { return }
        items.insert(path)
        var folder = path.parent
        while folders.insert(folder).inserted, !folder.isRoot { folder = folder.parent }
    }

    /// Something left `path` (removed, or renamed away): its folder.
    mutating func removed(_ path: RepoPath) {
        guard !wholeFilesystem else { return }
        folders.insert(path.parent)
    }

    /// Makes everything noted durable; `shown` names the replica in an error.
    func flush(root: FolderHandle, shown: String) throws {
        if wholeFilesystem { return try Self.flushWholeFilesystem(root, shown: shown) }
        // Items before the folders that name them; deeper folders first.
        // An item that cannot be opened (no permission to read it, a lease,
        // a refusal) is flushed with everything else, by one syncfs.
        for item in items.sorted() where try !flush(item, in: root, folder: false) {
            return try Self.flushWholeFilesystem(root, shown: shown)
        }
        for folder in folders.sorted(by: { $0.bytes.count > $1.bytes.count }) where try !flush(folder, in: root, folder: true) {
            return try Self.flushWholeFilesystem(root, shown: shown)
        }
    }

    /// One syncfs of the filesystem holding `root`.
    static func flushWholeFilesystem(_ root: FolderHandle, shown: String) throws {
        guard fprep_syncfs(root.fd) == 0 else { throw SystemError("syncfs", shown) }
    }

    /// fsync of what is at `path` now; false when it could not be opened.
    /// Nothing there, a symlink on the way or in its place, or a special
    /// file (looked at first: a device is never opened): nothing of the
    /// step's to flush (a symlink is made durable by its folder's flush; a
    /// user moved something away meanwhile). A failing fsync is a failing disk.
    private func flush(_ path: RepoPath, in root: FolderHandle, folder: Bool) throws -> Bool {
        if !path.isRoot {
            guard let found = root.stat(path) else { return true }
            guard found.isRegular || found.isDirectory else { return true }
        }
        let flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | (folder ? O_DIRECTORY : 0)
        let fd = path.isRoot ? dup(root.fd) : fprep_open_beneath(root.fd, cPath(path.bytes), flags, 0)
        guard fd >= 0 else {
            switch errno {
            case ENOENT, ENOTDIR, ELOOP, ENXIO: return true
            default: return false
            }
        }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0 else { return false }
        let kind = status.st_mode & S_IFMT
        guard kind == S_IFREG || kind == S_IFDIR else { return true }
        guard fsync(fd) == 0 else { throw SystemError("fsync", path.isRoot ? root.shownPath : path.description) }
        return true
    }

    /// fsync of the folder at `path` (absent: nothing to flush).
    static func flushFolder(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return }
            throw SystemError("open to flush", path)
        }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw SystemError("fsync", path) }
    }

    /// How many fsyncs a flush makes (0: one syncfs), for the trace.
    var fsyncCount: Int { wholeFilesystem ? 0 : items.count + folders.count }
}

extension Replica {
    /// Makes the objects fprep wrote since the last call durable before a
    /// record (the state's anchor, the sync's journal, a ref) names them:
    /// an fsync of each loose object and its folders for a few, one syncfs
    /// for more (see `DurableChanges`, `Repository.takeWrittenObjects`).
    func flushWrittenObjects() throws {
        let ids = repository.takeWrittenObjects()
        if ids?.isEmpty == true { return }
        let folder = gitDirectory + "/objects"
        let objects = try FolderHandle(root: folder)
        // Loose objects are small: a commit of one deep file is about ten.
        var durable = DurableChanges(changes: ids?.count ?? Int.max, limit: 32)
        for id in ids ?? [] { durable.put(RepoPath(String(id.hex.prefix(2)) + "/" + String(id.hex.dropFirst(2)))) }
        try durable.flush(root: objects, shown: folder)
    }
}
