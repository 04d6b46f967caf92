import CFprepSys
import FoundationEssentials
import Glibc
import FprepGit

extension Replica {
    /// Fills several placeholders from the quarantine of `token` (one
    /// fetch for them all: an agent's read-ahead), each written through its
    /// descriptor, under one journal and one index write. Each file gets
    /// its own answer, in the order given: one that moved, holds data or
    /// changed size is left alone, exactly as for a single hydration, and
    /// does not hold up the others. `used`: a program opened them (recorded
    /// as recent, as 'fprep open' does); files read ahead are not, until
    /// something opens them. Call with the replica opened exclusively.
    ///
    /// `filled` is told of each file (its position in `files`, its bytes) as
    /// soon as its content is in place, before the batch's index write: the
    /// agent lets that file's readers go on (were the process killed before
    /// the write, recovery finds the content whole and keeps it).
    public func hydrateInPlace(_ files: [(path: RepoPath, fd: Int32)], token: String, used: Bool = true,
                               filled tell: (Int, Int64) -> Void = { _, _ in }) throws -> [Result<InPlaceOutcome, any Error>] {
        Trace.start()
        let index = try repository.index()
        Trace.mark("fill: read index")
        var results = [Result<InPlaceOutcome, any Error>?](repeating: nil, count: files.count)
        // Looked at before anything is journaled: only files still
        // placeholders at their path, at the size the index gave them.
        var fillable: [(position: Int, entry: IndexEntry, size: Int64, tracked: Bool)] = []
        // Those their owner made read-only, and the mode to give back after a crash.
        var readOnly: [ContentJournal.ReadOnlyFile] = []
        // Placeholders with no name left (replaced by a sync), and the blob their marks name.
        var detached: [(position: Int, blob: ObjectID, size: Int64)] = []
        // Where each file is now: its listed path, or where a sync moved it.
        var paths = files.map(\.path)
        for (position, file) in files.enumerated() {
            var opened = fprep_stat()
            guard fprep_fstat(file.fd, &opened) == 0 else {
                results[position] = .failure(SystemError("stat", file.path.description))
                continue
            }
            // Real bytes (materialized meanwhile, or written by a program): nothing to fill.
            guard fprep_holds_no_data(file.fd) == 1 else {
                results[position] = .success(.notAPlaceholder("it holds data"))
                continue
            }
            guard let (path, entry, tracked) = placeholderEntry(of: file.fd, opened, listedAt: file.path, in: index) else {
                // Holding no data and no placeholder of the index's: its
                // content is not known here, and zeros are never an answer
                // (an empty file has none to give).
                if opened.nlink == 0, let blob = Self.markedBlob(file.fd) {
                    // A sync replaced it while its fill waited for the lock:
                    // the program that opened it reads the version it opened.
                    detached.append((position, blob, opened.size))
                } else if opened.size == 0 {
                    results[position] = .success(.notAPlaceholder("it is empty"))
                } else {
                    results[position] = .failure(FprepError("the file is no longer a placeholder at its path (moved or replaced); run 'fprep sync': a file moved within the replica is then filled at its new path, and one moved out of it is a deletion there, which 'fprep trash' lists and 'fprep restore PATH' brings back with its content"))
                }
                continue
            }
            paths[position] = path
            // Laid out at another size: a program truncated it, a change of the user's.
            guard UInt32(truncatingIfNeeded: opened.size) == entry.stat.fileSize else {
                results[position] = .success(.notAPlaceholder("a program changed its size"))
                continue
            }
            fillable.append((position, entry, opened.size, tracked))
            if let record = ContentJournal.ReadOnlyFile.ifReadOnly(path, mode: UInt32(truncatingIfNeeded: opened.mode)) { readOnly.append(record) }
        }
        Trace.mark("fill: \(files.count) looked at")
        guard !fillable.isEmpty || !detached.isEmpty else { return results.map { $0 ?? .success(.notAPlaceholder("nothing to fill")) } }

        let odb = try repository.objectDatabase()
        let quarantine = stateFolder + "/" + InPlaceHydration.quarantinePrefix + token
        if FileManager.default.fileExists(atPath: quarantine) { try odb.addAlternate(quarantine) }
        for (position, blob, size) in detached {
            results[position] = Result { try fillDetached(files[position].fd, blob: blob, size: size, shown: files[position].path.description) }
            if case .success(.hydrated(let bytes)) = results[position], files.count > 1 { tell(position, bytes) }
        }
        guard !fillable.isEmpty else { return results.map { $0 ?? .success(.notAPlaceholder("nothing to fill")) } }
        // Journaled, so a kill midway leaves no partial fill taken for the
        // user's bytes: the tracked files by path (recovery reads their
        // entries), the moved ones by path and the blob that fills them.
        let untracked = fillable.filter { !$0.tracked }.map {
            ContentJournal.UntrackedFill(path: Data(paths[$0.position].bytes), blob: $0.entry.id.hex,
                                         seconds: Int64($0.entry.stat.mtimeSeconds), nanoseconds: Int($0.entry.stat.mtimeNanoseconds))
        }
        let journal = ContentJournal(token: token, paths: fillable.filter(\.tracked).map { Data(paths[$0.position].bytes) }, inPlace: true,
                                     untracked: untracked.isEmpty ? nil : untracked, readOnly: readOnly.isEmpty ? nil : readOnly)
        let operation = try store.beginOperation("materialize", payload: journal.encoded())
        var filled: [(RepoPath, ObjectID)] = []
        // A file whose failed write could not be punched back: the journal
        // stays open, for the next command to settle.
        var unsettled = false
        for (position, entry, size, tracked) in fillable {
            let path = paths[position]
            do {
                let file = try WritableFile(reopening: files[position].fd, shown: path.description)
                defer { file.close() }
                let fd = file.fd
                let blob = try fetchedBlob(entry.id, shown: path.description)
                let written = try blob.withContent { bytes -> Int64 in
                    guard ObjectDatabase.isBlob(bytes, id: entry.id) else {
                        throw FprepError("the content fetched for '\(path)' does not match its id \(entry.id)")
                    }
                    let after: fprep_stat
                    do {
                        after = try fill(file, with: bytes, entry: entry, path: path, size: size, flush: fillable.count == 1)
                    } catch {
                        // A write that failed midway (a full disk): the placeholder
                        // again at once, so none of its bytes is taken for content.
                        var restored = stat_t()
                        let id = entry.id.bytes
                        if size != Int64(bytes.count) { _ = ftruncate(fd, off_t(size)) }
                        if fprep_punch_to_placeholder(fd, id, id.count, Int64(entry.stat.mtimeSeconds),
                                                      Int(entry.stat.mtimeNanoseconds), &restored) != 0 {
                            unsettled = true
                        }
                        throw error
                    }
                    // A placeholder the user moved or copied has no entry
                    // of its own until a sync: its content is all it gets.
                    guard tracked else { return Int64(bytes.count) }
                    var updated = entry
                    updated.skipWorktree = false
                    updated.stat = StatData(FileStat(after))
                    try index.add(updated)
                    return Int64(bytes.count)
                }
                if tracked { filled.append((path, entry.id)) }
                results[position] = .success(.hydrated(bytes: written))
                if fillable.count > 1 { tell(position, written) }
            } catch {
                results[position] = .failure(error)
            }
        }
        Trace.mark("fill: \(filled.count) written")
        if !filled.isEmpty {
            // Several files: one flush of the filesystem before the index
            // says they are content, not one fsync each.
            if fillable.count > 1, fprep_syncfs(rootFolder.fd) != 0 { throw SystemError("syncfs", root) }
            // Filled through the event's descriptor, which raises no change
            // event: the entries now say materialized, as the disk does.
            try writeIndexKeepingJournal(index)
        }
        Trace.mark("fill: syncfs, index write")
        let now = Int64(Date().timeIntervalSince1970)
        try store.transaction {
            try store.recordMaterialized(filled, at: now)
            if used { try store.recordRecent(filled.map(\.0), at: now) }
            if !unsettled { try store.endOperation(operation) }
        }
        Trace.mark("fill: recorded")
        return results.map { $0 ?? .success(.notAPlaceholder("nothing to fill")) }
    }
}

extension Replica {
    /// The blob `id` from the object database (an agent's quarantine
    /// among its alternates), or why not.
    func fetchedBlob(_ id: ObjectID, shown: String) throws -> Blob {
        do {
            return try repository.blob(id)
        } catch {
            throw FprepError("the remote did not send the content of '\(shown)' (\(id))")
        }
    }

    /// The blob a placeholder's marks name, or nil.
    static func markedBlob(_ fd: Int32) -> ObjectID? {
        var raw = [UInt8](repeating: 0, count: 20)
        guard fprep_get_xattr(fd, "user.fprep.blob", &raw, raw.count) == 20 else { return nil }
        return ObjectID(bytes: raw)
    }

    /// Fills a placeholder that has no name any more (a sync replaced it
    /// while a program was opening it) with the blob its marks name: only
    /// that program ever sees these bytes, so nothing is journaled or
    /// recorded, and a crash leaves nothing behind.
    func fillDetached(_ fd: Int32, blob id: ObjectID, size: Int64, shown: String) throws -> InPlaceOutcome {
        return try fetchedBlob(id, shown: shown).withContent { bytes -> InPlaceOutcome in
            guard ObjectDatabase.isBlob(bytes, id: id), Int64(bytes.count) == size else {
                throw FprepError("the content fetched for '\(shown)' does not match the replaced placeholder")
            }
            let file = try WritableFile(reopening: fd, shown: shown)
            defer { file.close() }
            if let base = bytes.baseAddress, bytes.count > 0, fprep_pwrite_all(file.fd, base, bytes.count, 0) < 0 {
                throw SystemError("write", shown)
            }
            _ = fprep_clear_placeholder_marks(file.fd)
            return .hydrated(bytes: Int64(bytes.count))
        }
    }

    /// The index's placeholder entry for the file open as `fd` (stat
    /// `opened`): the one at `listed` when that path still names this very
    /// file, else the one a sync moved it to (same inode, the blob its
    /// marks name; the agent lists placeholders again only after the sync,
    /// and an access in between must not miss them), else — for a
    /// placeholder the user moved or copied (`mv`, `cp -a`; the marks go
    /// with it) and opened before a sync — a placeholder entry of the blob
    /// its marks name, not its own, with the path the file has now
    /// (`tracked` false: the fill gives it its content and leaves the index
    /// alone; the sync finds the move), or one made for its blob when no
    /// entry has it. Nil when the size of its blob is not known here, or
    /// the file is not in the replica any more.
    func placeholderEntry(of fd: Int32, _ opened: fprep_stat, listedAt listed: RepoPath, in index: Index) -> (RepoPath, IndexEntry, tracked: Bool)? {
        func isThisFile(_ path: RepoPath) -> Bool {
            guard let onDisk = rootFolder.stat(path) else { return false }
            return onDisk.device == opened.dev && onDisk.inode == opened.ino
        }
        if let entry = index.entry(path: listed.bytes), entry.skipWorktree, FileMode(raw: entry.mode).isFile, isThisFile(listed) {
            return (listed, entry, true)
        }
        guard let blob = Self.markedBlob(fd) else { return nil }
        var sameBlob: IndexEntry?
        for position in 0..<index.count {
            guard let entry = index.entry(at: position), entry.id == blob, entry.skipWorktree, FileMode(raw: entry.mode).isFile else { continue }
            let path = RepoPath(bytes: entry.path)
            if isThisFile(path) { return (path, entry, true) }
            if sameBlob == nil, UInt32(truncatingIfNeeded: opened.size) == entry.stat.fileSize { sameBlob = entry }
        }
        // Filled where it is now (the agent's list names where it was), and
        // journaled there: a placeholder moved out of the replica, or
        // unlinked, is not one fprep can settle after a crash.
        guard let here = currentPath(of: fd, opened) else { return nil }
        if let entry = sameBlob { return (here, entry, false) }
        // No entry has its blob any more (a placeholder a sync set aside as
        // a conflict copy, or a copy whose original the remote changed): it
        // still stands for its blob, at the size the store knows for it and
        // the date it carries. A size the store does not know says nothing.
        guard let known = try? store.blobInfoLookup()(blob), known.size == opened.size else { return nil }
        let stat = StatData(ctime: (opened.ctime_sec, opened.ctime_nsec), mtime: (opened.mtime_sec, opened.mtime_nsec),
                            device: opened.dev, inode: opened.ino, uid: opened.uid, gid: opened.gid, size: opened.size)
        return (here, IndexEntry(path: here.bytes, id: blob, mode: 0o100644, stat: stat, skipWorktree: true), false)
    }

    /// Where in the replica the file open as `fd` is now (the kernel's name
    /// for the descriptor, checked against the file's inode), or nil when
    /// it is outside the replica or has no name.
    func currentPath(of fd: Int32, _ opened: fprep_stat) -> RepoPath? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/fd/\(fd)", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        let name = Array(buffer[0..<count].map { UInt8(bitPattern: $0) })
        let prefix = Array((root + "/").utf8)
        guard name.count > prefix.count, Array(name[0..<prefix.count]) == prefix else { return nil }
        let path = RepoPath(bytes: Array(name[prefix.count...]))
        guard let onDisk = rootFolder.stat(path), onDisk.device == opened.dev, onDisk.inode == opened.ino else { return nil }
        return path
    }
}

extension Replica {
    /// A setting of the replica's git configuration (`fprep.agent.*`), or nil when unset.
    public func setting(_ name: String) throws -> String? {
        try repository.config().string(name)
    }
}
