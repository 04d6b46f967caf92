import CFprepSys
import FoundationEssentials
import FprepGit
import Glibc

/// Bytes a program wrote into a placeholder without its content being on
/// disk (an append, a truncate, a write at an offset, an editor's save over
/// what read as zeros). They are the user's, but not a new version of the
/// file: the local commit puts them beside it as a conflict copy, and the
/// name keeps the remote's content as a placeholder again. Nothing is
/// dropped and no zeros reach the remote's version of the file.
///
/// The written file itself becomes the copy: it gets the copy's name as a
/// second link (so a program still writing it keeps writing the copy), then
/// a fresh placeholder takes the name by an atomic exchange, and the old
/// name is checked to still be the file that was read; if another program
/// put a new file there meanwhile, that file is left at the name for the
/// next sync. Every step can be repeated after a crash: the commit records
/// the copy first, and a copy already linked or already in the tree with the
/// same content is taken as it is.
final class WrittenPlaceholder {
    /// The placeholder's index entry: the remote's version, which stays.
    let entry: IndexEntry
    let path: RepoPath
    /// Where the written bytes go.
    let copy: RepoPath
    /// The blob of the written bytes, as read.
    let blob: ObjectID
    let mode: FileMode
    /// The written file when it was read.
    let stat: FileStat
    /// The written file, open: the link and the checks go by this inode.
    private let fd: Int32

    private init(entry: IndexEntry, copy: RepoPath, blob: ObjectID, mode: FileMode, stat: FileStat, fd: Int32) {
        self.entry = entry
        path = RepoPath(bytes: entry.path)
        self.copy = copy
        self.blob = blob
        self.mode = mode
        self.stat = stat
        self.fd = fd
    }

    deinit { close(fd) }

    /// Reads the written file and chooses its copy's name; nil when no
    /// regular file stands at the name any more. `inTree` says what the
    /// anchor's tree has at a path; `taken` holds the names chosen so far.
    static func capture(_ entry: IndexEntry, replica: Replica, inTree: (RepoPath) throws -> TreeEntry?,
                        taken: inout Set<RepoPath>) throws -> WrittenPlaceholder? {
        let path = RepoPath(bytes: entry.path)
        guard let (fd, stat) = try? replica.rootFolder.openRegular(path, flags: O_RDONLY) else { return nil }
        let blob: ObjectID
        do {
            blob = try readContent(fd, size: stat.size, shown: path.description)
                .withUnsafeBytes { try replica.repository.writeBlob($0) }
        } catch {
            close(fd)
            throw error
        }
        let folder = try replica.rootFolder.folder(path.parent)
        for counter in 1...1000 {
            let name = TreeMerge.conflictFileName(path.name, device: DeviceName.current, date: Replica.conflictDate(),
                                                  counter: counter)
            let candidate = path.parent.appending(name)
            if taken.contains(candidate) { continue }
            // A name free on disk, or already this file (a link made by a
            // run that crashed before it finished).
            if let there = folder.stat(name: name), there.inode != stat.inode || there.device != stat.device { continue }
            // A name the tree does not have, or has with these bytes (a
            // commit made by that run).
            if let recorded = try inTree(candidate), recorded.id != blob { continue }
            taken.insert(candidate)
            return WrittenPlaceholder(entry: entry, copy: candidate, blob: blob, mode: stat.gitMode, stat: stat, fd: fd)
        }
        close(fd)
        throw FprepError("no free name for a conflict copy of '\(path)'; rename some of its conflict copies and sync again")
    }

    /// What the index says of the copy: its blob, with the stat data of the
    /// file when it was read (the link changed its ctime, so the next scan
    /// checks its content once: bytes written since are then found).
    var copyEntry: IndexEntry {
        IndexEntry(path: copy.bytes, id: blob, mode: mode.raw, stat: StatData(stat), skipWorktree: false)
    }

    /// Moves the written file to the copy's name and puts a placeholder of
    /// the remote's version back at the name. Returns false when the name
    /// no longer holds the file that was read (it stays as it is).
    /// `token` names the temporary placeholder (the journal record's, so
    /// recovery removes one a crash left).
    func settleOnDisk(_ replica: Replica, size: Int64, token: String) throws -> Bool {
        let folder = try replica.rootFolder.folder(path.parent)
        // The file is content now, not a placeholder: its marks go first, so
        // no name of it (the copy's, after a crash) passes for one.
        guard fprep_clear_placeholder_marks(fd) == 0 else { throw SystemError("clear the placeholder marks of", path.description) }
        CrashPoint.reach()
        if let there = folder.stat(name: copy.name) {
            // Already this file (a run that crashed after linking it), or
            // something that appeared there since the copy's name was chosen:
            // then nothing moves; the next sync chooses again.
            guard there.inode == stat.inode, there.device == stat.device else { return false }
        } else {
            let source = "/proc/self/fd/\(fd)"
            guard linkat(AT_FDCWD, source, folder.fd, cPath(copy.name), AT_SYMLINK_FOLLOW) == 0 else {
                throw SystemError("keep a conflict copy of", path.description)
            }
        }
        CrashPoint.reach()
        let temporary = ContentOperations.temporaryName(for: path.name, token: token)
        let id = entry.id.bytes
        let created = id.withUnsafeBufferPointer { raw in
            fprep_create_placeholder(folder.fd, cPath(temporary), entry.mode == 0o100755 ? 0o777 : 0o666, off_t(max(size, 0)),
                                     raw.baseAddress, raw.count, Int64(entry.stat.mtimeSeconds), Int(entry.stat.mtimeNanoseconds), nil)
        }
        guard created == 0 else { throw SystemError("create placeholder", path.description) }
        replica.letAgentWatch([WatchedPlaceholder(path: path, blob: entry.id, markAt: path.parent.appending(temporary))])
        guard fprep_rename_exchange(folder.fd, cPath(temporary), cPath(path.name)) == 0 else {
            let code = errno
            unlinkat(folder.fd, cPath(temporary), 0)
            throw SystemError("put the placeholder back at", path.description, code)
        }
        CrashPoint.reach()
        // What the exchange took from the name must be the file read.
        if let old = folder.stat(name: temporary), old.inode == stat.inode, old.device == stat.device {
            unlinkat(folder.fd, cPath(temporary), 0)
            return true
        }
        // Another program replaced the file since: its file goes back.
        guard fprep_rename_exchange(folder.fd, cPath(temporary), cPath(path.name)) == 0 else {
            throw SystemError("put back the file at", path.description)
        }
        unlinkat(folder.fd, cPath(temporary), 0)
        return false
    }
}
