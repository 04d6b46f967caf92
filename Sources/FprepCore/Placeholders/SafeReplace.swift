import CFprepSys
import FoundationEssentials
import Glibc
import FprepGit

/// Puts a file written beside a user's file in its place, or removes the
/// file, without losing a byte a program writes into it meanwhile.
///
/// A rename (or unlink) alone would lose a write that lands between the last
/// check and the rename, and every later write of a program that holds the
/// file open (it writes into the replaced file). So:
/// 1. a read lease on the old file: granted only while no one has it open
///    for writing (else this is refused: a program may write it), and
///    every open for writing from then on waits until it is given back;
/// 2. under it, the old file is checked once more and the names are
///    exchanged (`renameat2` RENAME_EXCHANGE; a removal renames it to the
///    temporary name), so the old file lives on under the temporary name;
/// 3. the lease is given back (an open that waited goes on, into the old
///    file) and taken again, which succeeds once no one has it open for
///    writing;
/// 4. the old file is looked at a last time: unchanged, it goes; written
///    into, its bytes are the user's and stay as a conflict copy.
///
/// Readers do not count: a program reading the old file reads it to the
/// end (its name goes, not its bytes) and writes nothing that could be
/// lost, so a viewer holding a file open, or a program waiting for a
/// placeholder's content, does not turn the replaced file into a
/// conflict copy.
///
/// A program that has the old file open for writing (before the swap, or
/// still after it) may write into it at any later time. With `.refuse`
/// the swap does not happen (or, found only after it, the old file is
/// kept as a conflict copy); with `.hold` (sync, which must move to the
/// remote's version) it happens and the old file waits at the temporary
/// name as a `HeldFile`, settled once the program has closed it.
struct SafeReplace {
    let folder: FolderHandle
    let name: [UInt8]
    /// The new file, beside the old one; for a removal, the name the old
    /// file steps aside to (nothing there).
    let temporary: [UInt8]
    let shown: String
    /// The old file is a placeholder: unchanged means it still holds no data.
    let expectsDataless: Bool
    /// Whether the old file goes without a replacement.
    var removing = false
    /// What happens when a program has the old file open for writing.
    var whileWritten = WhileWritten.refuse

    enum WhileWritten {
        case refuse
        /// `record` is given the old file's inode, to record it as a `HeldFile`.
        case hold(record: (Int64) throws -> Void)

        var holds: Bool { if case .hold = self { true } else { false } }
    }

    enum Outcome: Equatable {
        /// Done; `keptAs` names the conflict copy of the old file a program
        /// wrote into meanwhile.
        case replaced(keptAs: [UInt8]?)
        /// Nothing was changed, for this reason.
        case refused(String)
    }

    /// How long step 3 waits for the programs that opened the old file
    /// meanwhile to close it.
    static let closeWait: Double = getenv("FPREP_TEST_CLOSE_WAIT_SECONDS").flatMap { Double(String(cString: $0)) } ?? 10.0

    /// Replaces, when `isUnchanged` says the old file (its stat given) is
    /// still as fprep last saw it. The temporary is left to the caller when
    /// refused.
    func run(isUnchanged: (FileStat) -> Bool) throws -> Outcome {
        let fd: Int32
        let opened: FileStat
        do {
            (fd, opened) = try folder.openRegular(RepoPath(bytes: name), flags: O_RDONLY)
        } catch let refusal as ContentRefusal {
            return .refused(refusal.why)
        }
        // Handed over once its file has no name left (see `UnlinkedFiles`).
        var handedOver = false
        defer { if !handedOver { close(fd) } }
        // Checked before the lease: the check may open the file itself.
        guard isUnchanged(opened) else { return .refused(Self.changed) }
        let leased = Self.takeLease(fd, reading: true)
        // Whether a program has it open for writing; only `.hold` goes on then.
        var written = !leased && errno == EAGAIN
        if written && !whileWritten.holds {
            return .refused("it is open for writing in another program; run the command again once that program closes it")
        }
        var raw = fprep_stat()
        guard fprep_fstat(fd, &raw) == 0 else {
            if leased { _ = fprep_release_lease(fd) }
            throw SystemError("stat", shown)
        }
        let checked = FileStat(raw)
        guard checked.sameWrites(as: opened) else {
            if leased { _ = fprep_release_lease(fd) }
            return .refused(Self.changed)
        }
        var aside = true
        CrashPoint.reach()
        TestGate.beforeExchange.pass()
        let moved = removing ? renameat(folder.fd, cPath(name), folder.fd, cPath(temporary))
                             : fprep_rename_exchange(folder.fd, cPath(temporary), cPath(name))
        if moved != 0 {
            let code = errno
            guard !removing, code == EINVAL || code == ENOSYS,
                  renameat(folder.fd, cPath(temporary), folder.fd, cPath(name)) == 0 else {
                if leased { _ = fprep_release_lease(fd) }
                throw SystemError(removing ? "remove" : "rename", shown, code)
            }
            // A filesystem without exchange: a plain rename, as before.
            aside = false
        }
        TestGate.afterExchange.pass()
        if aside, !holdsTheOldFile(checked) {
            // A lease holds opens, not renames: a program renamed a file of
            // its own over the name between the check and the exchange (an
            // editor's save), so that file is what stepped aside. It goes
            // back to its name, and the caller treats the item as changed here.
            let back = removing ? fprep_rename_noreplace(folder.fd, cPath(temporary), cPath(name))
                                : fprep_rename_exchange(folder.fd, cPath(temporary), cPath(name))
            if leased { _ = fprep_release_lease(fd) }
            guard back == 0 else { throw SystemError("put back", shown) }
            return .refused(Self.changed)
        }
        // Whether a program still has the old file open for writing (one
        // whose open waited for the lease went on into it): it may write
        // into it later. `.refuse` waits a while for it to close, then keeps
        // the old file; `.hold` leaves it to be settled later.
        if leased {
            _ = fprep_release_lease(fd)
            written = whileWritten.holds ? Self.openForWriting(fd) : !waitUntilClosedElsewhere(fd)
        } else if written {
            written = Self.openForWriting(fd)
        }
        guard aside else { return .replaced(keptAs: nil) }
        if written, case .hold(let record) = whileWritten {
            try record(checked.inode)
            return .replaced(keptAs: nil)
        }
        guard fprep_fstat(fd, &raw) == 0 else { throw SystemError("stat", shown) }
        let last = FileStat(raw)
        // The rename itself changes the ctime only; the block count moves by
        // itself when delayed allocation is written back, so a write shows in
        // the size, the date, or (for a placeholder) data where none was.
        let untouched = !written && last.size == checked.size && last.mtime == checked.mtime
            && (!expectsDataless || fprep_holds_no_data(fd) == 1)
        if untouched {
            unlinkat(folder.fd, cPath(temporary), 0)
            UnlinkedFiles.close(fd)
            handedOver = true
            return .replaced(keptAs: nil)
        }
        _ = fprep_clear_placeholder_marks(fd)
        return .replaced(keptAs: try keepAsConflictCopy())
    }

    /// Takes a write lease on `fd`, waiting a little while the kernel refuses
    /// it (EAGAIN: the file is open elsewhere). An open that goes away at
    /// once must not count as a program holding the file: a child another
    /// thread forks inherits every descriptor until it execs, a brief open
    /// of this process's own (an xattr read) among them, and the lease is
    /// refused until then. A program that keeps the file open still
    /// refuses it after the wait. errno is EAGAIN when refused.
    static func takeWriteLease(_ fd: Int32, patience: Double = 0.5) -> Bool {
        takeLease(fd, reading: false, patience: patience)
    }

    /// As `takeWriteLease`; `reading`: a read lease, refused only while
    /// the file is open for writing elsewhere.
    static func takeLease(_ fd: Int32, reading: Bool, patience: Double = 0.5) -> Bool {
        let deadline = Date().timeIntervalSince1970 + patience
        var pause: useconds_t = 1_000
        while (reading ? fprep_take_read_lease(fd) : fprep_take_write_lease(fd)) != 0 {
            let code = errno
            guard code == EAGAIN, Date().timeIntervalSince1970 < deadline else {
                errno = code
                return false
            }
            usleep(pause)
            pause = min(pause * 2, 50_000)
        }
        return true
    }

    /// Whether another program has the file open for writing now (a read
    /// lease is refused only then). A file no lease can be taken on counts
    /// as not written: what can be known of it is looked at at once.
    static func openForWriting(_ fd: Int32) -> Bool {
        guard takeLease(fd, reading: true, patience: 0.05) else { return errno == EAGAIN }
        _ = fprep_release_lease(fd)
        return false
    }

    /// Waits (up to `closeWait`) until no one else has the file open for
    /// writing: the lease is granted only then. False when someone still has.
    private func waitUntilClosedElsewhere(_ fd: Int32) -> Bool {
        guard Self.takeLease(fd, reading: true, patience: Self.closeWait) else { return errno != EAGAIN }
        _ = fprep_release_lease(fd)
        return true
    }

    /// Whether the file at the temporary name is the old file (`checked`,
    /// open as the caller's descriptor).
    private func holdsTheOldFile(_ checked: FileStat) -> Bool {
        guard let atTemporary = folder.stat(name: temporary) else { return false }
        return atTemporary.device == checked.device && atTemporary.inode == checked.inode
    }

    /// Renames the old file (now at the temporary name) to a free conflict
    /// name beside the item; returns that name.
    private func keepAsConflictCopy() throws -> [UInt8] {
        for counter in 1...100 {
            let candidate = TreeMerge.conflictFileName(name, device: DeviceName.current, date: Replica.conflictDate(), counter: counter)
            if folder.stat(name: candidate) != nil { continue }
            // Never over a file that took the name since the look above.
            guard fprep_rename_noreplace(folder.fd, cPath(temporary), cPath(candidate)) == 0 else {
                if errno == EEXIST { continue }
                throw SystemError("rename", shown)
            }
            return candidate
        }
        // No free name: it stays under the temporary name, which recovery
        // and the scan leave alone.
        return temporary
    }

    /// After a crash: what is at the temporary name is fprep's new file
    /// (whole or half-written, marked with the operation's token: it goes),
    /// the old file, swapped out before the kill and told apart by the
    /// inode `old` (the item's index entry) records, or a file of a
    /// program's that a rename put at the item's name just before the
    /// exchange (neither: it stays, as a conflict copy, unless its bytes
    /// are one of `knownBlobs`, the versions git has of the item). The old
    /// file goes only when it provably holds no byte of anyone's: a
    /// placeholder holding no data, or a file with the entry's size and
    /// date or its blob's bytes. Anything else is what a program wrote into
    /// it while the replacement waited for it (the kill came then), and
    /// stays as a conflict copy. An old file a program
    /// still has open for writing is left where it is, given to
    /// `whileWritten`'s `record` when it holds.
    func settleTemporary(old: IndexEntry?, knownBlobs: Set<ObjectID> = []) {
        var raw = fprep_stat()
        guard let (fd, stat) = try? folder.openRegular(RepoPath(bytes: temporary), flags: O_RDONLY) else {
            // Not a file: a temporary symlink of fprep's goes.
            if fprep_lstat_at(folder.fd, cPath(temporary), &raw) == 0, FileStat(raw).isSymlink { unlinkat(folder.fd, cPath(temporary), 0) }
            return
        }
        defer { close(fd) }
        // Open for writing in a program: the old file (nobody else knows
        // the temporary name), which it may still write into.
        if case .hold(let record) = whileWritten, Self.openForWriting(fd), (try? record(stat.inode)) != nil { return }
        let marked = ContentOperations.isMarkedDataless(folder, RepoPath(bytes: temporary))
        if marked {
            // A placeholder: fprep's new one holds no data either way.
            guard fprep_holds_no_data(fd) == 0 else {
                unlinkat(folder.fd, cPath(temporary), 0)
                return
            }
            _ = fprep_clear_placeholder_marks(fd)
            _ = try? keepAsConflictCopy()
            return
        }
        guard let old, old.stat.inode != 0, old.stat.inode == UInt32(truncatingIfNeeded: stat.inode) else {
            let ours = ContentOperations.temporaryToken(in: temporary).map { fprep_is_marked_temporary(fd, $0) == 1 } ?? false
            let known = !knownBlobs.isEmpty && contentBlobID(fd, size: stat.size, shown: shown).map(knownBlobs.contains) == true
            // No data at all: a placeholder of fprep's killed before its
            // marks were on (it is made, then marked), or an empty file,
            // which holds no byte to lose.
            let nothing = stat.blocks == 0 && fprep_holds_no_data(fd) == 1
            if ours || known || nothing {
                unlinkat(folder.fd, cPath(temporary), 0)
            } else {
                _ = try? keepAsConflictCopy()
            }
            return
        }
        let sameAsRecorded = old.stat.fileSize == UInt32(truncatingIfNeeded: stat.size)
            && old.stat.mtimeSeconds == Int32(truncatingIfNeeded: stat.mtime.0)
            && old.stat.mtimeNanoseconds == UInt32(truncatingIfNeeded: stat.mtime.1)
        let sameBytes = sameAsRecorded || contentBlobID(fd, size: stat.size, shown: shown) == old.id
        if sameBytes {
            unlinkat(folder.fd, cPath(temporary), 0)
        } else {
            _ = try? keepAsConflictCopy()
        }
    }

    /// Keeps the file at the temporary name as a conflict copy beside the
    /// item, its placeholder marks cleared (its bytes are a file's now);
    /// returns the copy's name, nil when it stays where it is.
    @discardableResult
    func keepAside() -> [UInt8]? {
        if let (fd, _) = try? folder.openRegular(RepoPath(bytes: temporary), flags: O_RDONLY) {
            _ = fprep_clear_placeholder_marks(fd)
            _ = fprep_clear_held_mark(fd)
            close(fd)
        }
        guard let copy = try? keepAsConflictCopy(), copy != temporary else { return nil }
        return copy
    }

    private static let changed = "it changed meanwhile; the change is kept"
}

extension FileStat {
    /// Whether nothing wrote to the file between two looks at it: the same
    /// inode, size, mode and dates. Not the block count, which ext4 changes
    /// by itself when it writes back delayed allocations.
    func sameWrites(as other: FileStat) -> Bool {
        device == other.device && inode == other.inode && mode == other.mode && size == other.size
            && mtime == other.mtime && ctime == other.ctime
    }
}
