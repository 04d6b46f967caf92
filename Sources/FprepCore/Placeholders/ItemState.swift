import FprepGit

/// Where an item's content is. A file starts **dataless** (a placeholder),
/// becomes **materialized** when its content is fetched, and **modified**
/// when a program changes it (writing into a placeholder included); evict
/// takes a materialized file back to dataless; a modified file waits for
/// sync. **deleted** is a file the index has and the disk no longer does.
///
/// ```
///   clone ──▶ dataless ──materialize──▶ materialized ──evict──▶ dataless
///                │                          │
///                └──── a program writes ────┴──▶ modified ──sync──▶ materialized
/// ```
public enum ItemState: String, Sendable, Codable {
    case dataless, materialized, modified, deleted
}

/// What happened to a placeholder since fprep made it (see
/// `StateClassifier.placeholderChange`).
enum PlaceholderChange: Equatable {
    /// Only its mode changed: it still holds no data.
    case mode(FileMode)
    /// A program wrote into it (appended, truncated, wrote at an offset).
    case written
}

/// Decides an index entry's state from a fresh `lstat`, the way git's index
/// does: unchanged stat data means unchanged content, and only a file whose
/// stat changed is read.
struct StateClassifier {
    let root: FolderHandle
    /// When the index file was written: a file whose date is not before it
    /// may have changed after its stat data was taken, within the same tick
    /// of the clock (git's "racily clean" entry), so its content is checked.
    let indexTime: (seconds: Int64, nanoseconds: Int64)

    init(root: FolderHandle, index: Index) {
        self.root = root
        indexTime = index.fileTime
    }

    func state(of entry: IndexEntry) -> ItemState {
        let path = RepoPath(bytes: entry.path)
        guard let stat = root.stat(path) else { return .deleted }
        return state(of: entry, stat: stat)
    }

    func state(of entry: IndexEntry, stat: FileStat) -> ItemState {
        let mode = FileMode(raw: entry.mode)
        if mode == .submodule { return stat.isDirectory ? .dataless : .modified }
        if mode == .symlink {
            guard stat.isSymlink else { return .modified }
            if matches(entry.stat, stat) && !isRacy(entry.stat) { return .materialized }
            let path = RepoPath(bytes: entry.path)
            guard let target = try? root.readLink(path),
                  let id = try? target.withUnsafeBytes({ try ObjectDatabase.blobID(of: $0) }) else { return .modified }
            return id == entry.id ? .materialized : .modified
        }
        guard stat.isRegular else { return .modified }
        if entry.skipWorktree {
            // A placeholder is unchanged while it holds no data, keeps its
            // size and its execute bit; a touch alone does not make content,
            // a chmod is a change of mode (see `placeholderChange`).
            guard stat.isExecutable == (mode == .executable) else { return .modified }
            if matches(entry.stat, stat) { return .dataless }
            guard UInt32(truncatingIfNeeded: stat.size) == entry.stat.fileSize else { return .modified }
            let path = RepoPath(bytes: entry.path)
            guard ContentOperations.holdsNoData(root, path, stat) else { return .modified }
            // Another placeholder moved over this one (`mv b a`, same size):
            // its marks name another blob.
            if let marked = ContentOperations.placeholderBlob(root, path), marked != entry.id { return .modified }
            return .dataless
        }
        if matches(entry.stat, stat) && !isRacy(entry.stat) && stat.isExecutable == (mode == .executable) { return .materialized }
        if isPlaceholder(of: entry, stat: stat) { return .dataless }
        guard stat.isExecutable == (mode == .executable),
              let bytes = try? root.readFile(RepoPath(bytes: entry.path)),
              let id = try? bytes.withUnsafeBytes({ try ObjectDatabase.blobID(of: $0) }) else { return .modified }
        return id == entry.id ? .materialized : .modified
    }

    /// What a program did to a placeholder (an entry with the skip-worktree
    /// bit) that `state` found modified: only its mode changed (it still
    /// holds no data and keeps its size), or something wrote into it. nil
    /// when a file no longer stands there (a folder, a symlink: a change of
    /// kind, committed as what is on disk), or when it stands for an empty
    /// file (no zeros could be read for its content): a plain edit.
    ///
    /// Bytes written into a placeholder were written over content that was
    /// not on disk: a program that read it saw zeros. They are the user's,
    /// but not a new version of the file; sync keeps them as a conflict copy
    /// and the name keeps the remote's content. This is decided from what
    /// fprep recorded (the dataless state, size and blocks), never from the
    /// bytes.
    func placeholderChange(of entry: IndexEntry, stat: FileStat) -> PlaceholderChange? {
        guard entry.skipWorktree, stat.isRegular else { return nil }
        // Another placeholder moved or linked over this one (its marks name
        // another blob) is the user's move, not this item with a new mode:
        // the scan commits it as that blob (`recordMarked`) before asking
        // here, and nothing else may take it for this item's placeholder
        // (materialize would fill it with this item's content).
        if let marked = ContentOperations.placeholderBlob(root, RepoPath(bytes: entry.path)), marked != entry.id {
            return .written
        }
        // A placeholder of an empty file reads as what it is: a program that
        // read it saw its whole content, so what it wrote is a plain edit
        // (a `__init__.py` or `.gitkeep` filled in), never a conflict copy.
        if entry.id == UnknownSizes.emptyBlob { return nil }
        if UInt32(truncatingIfNeeded: stat.size) == entry.stat.fileSize,
           ContentOperations.holdsNoData(root, RepoPath(bytes: entry.path), stat) {
            return .mode(stat.gitMode)
        }
        return .written
    }

    /// Whether the file at an entry the index says has content is an
    /// untouched placeholder of that very blob, by its own marks: no data,
    /// the entry's size and execute bit, marked dataless with the entry's
    /// blob. The index lags the disk so (an index write lost to a power cut
    /// after an evict made its placeholders durable, or an older index put
    /// back by hand); the file holds nothing of the user's and reads as
    /// zeros, which are never its content. The scan and the enumerator take
    /// such a file for the placeholder it is (`markedPlaceholder`,
    /// `FolderEnumerator`); status, evict and materialize do too.
    func isPlaceholder(of entry: IndexEntry, stat: FileStat) -> Bool {
        let mode = FileMode(raw: entry.mode)
        guard !entry.skipWorktree, stat.isRegular, mode.isFile, stat.isExecutable == (mode == .executable),
              UInt32(truncatingIfNeeded: stat.size) == entry.stat.fileSize else { return false }
        let path = RepoPath(bytes: entry.path)
        return ContentOperations.placeholderBlob(root, path) == entry.id
            && ContentOperations.isMarkedDataless(root, path)
            && ContentOperations.holdsNoData(root, path, stat)
    }

    /// Whether a placeholder still holds nothing of the user's: dataless,
    /// or only its mode changed (materializing it keeps that mode).
    func holdsNoUserBytes(_ entry: IndexEntry, stat: FileStat) -> Bool {
        switch state(of: entry, stat: stat) {
        case .dataless: return true
        case .modified: if case .mode = placeholderChange(of: entry, stat: stat) { return true } else { return false }
        default: return false
        }
    }

    func isRacy(_ recorded: StatData) -> Bool {
        let seconds = Int64(recorded.mtimeSeconds)
        return seconds > indexTime.seconds || (seconds == indexTime.seconds && Int64(recorded.mtimeNanoseconds) >= indexTime.nanoseconds)
    }

    /// Whether the index's stat data still describes the file.
    func matches(_ recorded: StatData, _ stat: FileStat) -> Bool {
        recorded == StatData(stat)
    }
}

extension StatData {
    /// What the index keeps of a placeholder: its size and date only (see
    /// `StateClassifier`: a placeholder is unchanged while it has no data
    /// blocks and that size).
    static func placeholder(size: Int64, mtime: Int64) -> StatData {
        var recorded = StatData()
        recorded.fileSize = UInt32(truncatingIfNeeded: max(size, 0))
        recorded.mtimeSeconds = Int32(truncatingIfNeeded: mtime)
        return recorded
    }

    init(_ stat: FileStat) {
        self.init(ctime: stat.ctime, mtime: stat.mtime, device: stat.device, inode: stat.inode,
                  uid: stat.uid, gid: stat.gid, size: stat.size)
    }
}
