import CFprepSys
import FoundationEssentials
import Glibc
import FprepGit
import Synchronization

/// What `materialize` did.
public struct MaterializeResult: Sendable, Encodable {
    public var materialized: [String] = []
    public var alreadyMaterialized = 0
    /// Items left as they were, with why (local changes, say).
    public var skipped: [Skipped] = []
    public var fetchedBlobs = 0
    public var bytesWritten: Int64 = 0
}

/// What `evict` did.
public struct EvictResult: Sendable, Encodable {
    public var evicted: [String] = []
    public var alreadyDataless = 0
    /// Items that keep their content, with why; non-empty means exit status 2.
    public var refused: [Skipped] = []
    public var bytesFreed: Int64 = 0
}

/// An item an operation left alone, and why.
public struct Skipped: Sendable, Encodable {
    public let path: String
    public let reason: String
}

/// The journal payload of materialize and evict: which paths, and the
/// temporary name token. (Fetched content lives in `.fprep/fetch-*`
/// quarantines, which recovery removes whole.)
struct ContentJournal: Codable {
    var token: String
    var paths: [Data]
    /// An agent's hydration: the content was being written into the file
    /// itself (no temporary), from the agent's quarantine of `token`.
    var inPlace: Bool? = nil
    /// An agent's fills of placeholders the user moved or copied before a
    /// sync (no index entry at their path): recovery finds them by path and
    /// knows their content by the blob named here, not by an entry.
    var untracked: [UntrackedFill]? = nil
    /// Files of these an agent fills although their owner made them
    /// read-only: they get the owner's write permission for the fill, and
    /// recovery gives back the mode recorded here.
    var readOnly: [ReadOnlyFile]? = nil

    struct ReadOnlyFile: Codable {
        var path: Data
        var mode: UInt32

        /// The record of `path` when its permissions (`mode`) deny its
        /// owner writing; nil otherwise.
        static func ifReadOnly(_ path: RepoPath, mode: UInt32) -> ReadOnlyFile? {
            mode & 0o200 == 0 ? ReadOnlyFile(path: Data(path.bytes), mode: mode & 0o7777) : nil
        }
    }

    struct UntrackedFill: Codable {
        var path: Data
        var blob: String
        var seconds: Int64
        var nanoseconds: Int
    }

    func encoded() -> [UInt8] { Array((try? JSONEncoder().encode(self)) ?? Data()) }
    static func decode(_ bytes: [UInt8]) -> ContentJournal? { try? JSONDecoder().decode(Self.self, from: Data(bytes)) }
}

/// Materialize and evict: content in and out of placeholders, journaled so a
/// crash at any point is settled by the next command.
struct ContentOperations {
    let replica: Replica

    init(_ replica: Replica) { self.replica = replica }


    /// The file entries named by `items` (folders expanded), each once.
    private func fileEntries(_ items: [(RepoPath, String)], index: Index) throws -> [IndexEntry] {
        // On a cold index each lookup would wait for its own read.
        index.willLookUp(items.map(\.0.bytes))
        var seen = Set<[UInt8]>()
        var result: [IndexEntry] = []
        for (item, shown) in items {
            for entry in try replica.indexEntries(under: item, in: index, shown: shown)
            where FileMode(raw: entry.mode).isFile && seen.insert(entry.path).inserted {
                result.append(entry)
            }
        }
        return result
    }

    /// Why an item is left alone when a FIFO, socket or device took its
    /// place, or something else took the place of a folder on its way.
    private func specialReason(_ path: RepoPath) -> String? {
        if let obstruction = replica.rootFolder.obstruction(on: path.parent) { return obstruction }
        guard let stat = replica.rootFolder.stat(path), stat.isSpecial else { return nil }
        return ContentRefusal(path: path.description, reason: .notAFile(stat.kindDescription)).why
    }

    // MARK: materialize

    /// Up to this many items named, their placeholders are asked for their
    /// blob ids before the index is read (see `materialize`).
    static let namedOneByOne = 64

    func materialize(_ items: [(RepoPath, String)]) throws -> MaterializeResult {
        Trace.mark("start")
        // A few files named one by one carry their blob id on the
        // placeholder: ask the remote for those at once, and read the index
        // while it answers. Many are found faster in the index (1,000 cold
        // lookups took longer than reading an index of 10^5 entries), and
        // are looked at while the remote answers.
        let odb = try replica.repository.objectDatabase()
        replica.removeFetchQuarantines()
        let quarantine = replica.stateFolder + "/fetch-" + Self.newToken()
        let namedFew = items.count <= Self.namedOneByOne
        if namedFew { replica.rootFolder.prefetch(items.map(\.0).filter { !$0.isRoot }) }
        let early = !namedFew ? [] : odb.missing(among: Set(items.compactMap { item -> ObjectID? in
            guard !item.0.isRoot, let stat = replica.rootFolder.stat(item.0), stat.isRegular,
                  Self.holdsNoData(replica.rootFolder, item.0, stat) else { return nil }
            return Self.placeholderBlob(replica.rootFolder, item.0)
        }))
        let gitDirectory = replica.gitDirectory
        let earlyFetch = BackgroundWork {
            try Transport.fetchObjects(early, gitDirectory: gitDirectory, quarantine: quarantine)
        }

        let index = try replica.repository.index()
        let entries: [IndexEntry]
        do {
            entries = try fileEntries(items, index: index)
        } catch {
            try? earlyFetch.wait()
            replica.removeFetchQuarantines()
            throw error
        }
        Trace.mark("read index")
        var result = MaterializeResult()
        let now = Int64(Date().timeIntervalSince1970)

        // Then every other blob a placeholder needs, and a look at the files
        // while the remote answers: a placeholder a program wrote into gets
        // its blob fetched for nothing, which costs less than waiting.
        let asked = Set(early)
        let missing = odb.missing(among: Set(entries.filter(\.skipWorktree).map(\.id)).subtracting(asked))
        replica.progress.report("fetching \(counted(early.count + missing.count, "blob"))", done: 0, total: entries.count)
        let fetch = BackgroundWork {
            try Transport.fetchObjects(missing, gitDirectory: gitDirectory, quarantine: quarantine)
        }
        // Until they are waited for below: an error on the way ends the
        // fetches, and what they brought goes, before it is thrown.
        var fetchesWaited = false
        defer {
            if !fetchesWaited {
                try? earlyFetch.wait()
                try? fetch.wait()
                replica.removeFetchQuarantines()
            }
        }

        var wanted: [IndexEntry] = []
        var alreadyThere: [RepoPath] = []
        // Scattered files on a cold disk: their lookups wait together, not
        // one after another.
        // (Their folders are opened below, where each is made ready for
        // its change: `FolderHandle.willChange`.)
        replica.rootFolder.prefetch(entries.map { RepoPath(bytes: $0.path) })
        let classifier = StateClassifier(root: replica.rootFolder, index: index)
        // Placeholders whose index entry says content (see
        // `StateClassifier.isPlaceholder`): filled like the others, their
        // blobs asked for once the first fetch is in.
        var behindContent: [IndexEntry] = []
        for entry in entries {
            let path = RepoPath(bytes: entry.path)
            switch classifier.state(of: entry) {
            case .dataless where entry.skipWorktree: wanted.append(entry)
            case .dataless:  // a file entry without the bit is dataless only so
                wanted.append(entry)
                behindContent.append(entry)
            case .modified where entry.skipWorktree && replica.rootFolder.stat(path).map({ classifier.holdsNoUserBytes(entry, stat: $0) }) == true:
                wanted.append(entry)  // a placeholder whose mode changed: its content comes with that mode
            case .materialized: alreadyThere.append(path)
            case .modified:
                if let special = specialReason(path) {
                    result.skipped.append(Skipped(path: path.description, reason: special))
                } else if entry.skipWorktree {
                    result.skipped.append(Skipped(path: path.description, reason: "a program wrote into its placeholder; that content is kept (run 'fprep sync')"))
                } else {
                    alreadyThere.append(path)
                }
            case .deleted:
                result.skipped.append(Skipped(path: path.description, reason: specialReason(path) ?? "deleted locally"))
            }
        }
        result.alreadyMaterialized = alreadyThere.count
        Trace.mark("classify")
        // A large fetch shows its bytes arriving, not "0/1".
        let sizes = try replica.store.blobInfoLookup()
        // One read of the store for them all, not one each.
        let expected = try replica.store.reading { try (early + missing).reduce(Int64(0)) { $0 + max(try sizes($1)?.size ?? 0, 0) } }
        let watch = expected >= 4 << 20 ? TransferWatch(folder: quarantine + "/pack", phase: "fetching \(counted(early.count + missing.count, "file"))",
                                                        total: expected, progress: replica.progress) : nil
        defer { watch?.stop() }
        let late = odb.missing(among: Set(behindContent.map(\.id)).subtracting(asked).subtracting(missing))

        // While the remote answers: the journal, begun before the first file
        // is written (the next command settles each of these paths from its
        // bytes on disk if this one stops; its commit waits for the disk),
        // and meanwhile the files' folders, opened four at a time (1,000
        // scattered files at 10^5: 36–47 ms one after another; the commit
        // and the opening one after the other took 55–100 ms, often longer
        // than the fetch). The files of a folder that cannot be opened are
        // skipped, below.
        let journal = ContentJournal(token: Self.newToken(), paths: wanted.map { Data($0.path) })
        let parents = Array(Set(wanted.map { RepoPath(bytes: $0.path).parent }))
        let root = replica.rootFolder
        let folderSlots = OpenedFolders(count: parents.count)
        let opening = BackgroundWork {
            folderSlots.slots.withUnsafeMutableBufferPointer { slots in
                parallelFor(parents.count, threads: 4) { i in
                    slots[i] = Result {
                        let folder = try root.folder(parents[i])
                        folder.willChange()
                        return folder
                    }
                }
            }
        }
        let operation: Int64?
        do {
            operation = wanted.isEmpty ? nil : try replica.store.beginOperation("materialize", payload: journal.encoded())
        } catch {
            try? opening.wait()
            throw error
        }
        try opening.wait()
        var opened = folderSlots.slots
        fetchesWaited = true
        do {
            try earlyFetch.wait()
            try fetch.wait()
            try Transport.fetchObjects(late, gitDirectory: gitDirectory, quarantine: quarantine)
            watch?.stop()
        } catch {
            try? fetch.wait()
            if let operation { try? replica.store.endOperation(operation) }
            replica.removeFetchQuarantines()
            guard let error = error as? GitCommandError else { throw error }
            if let full = FprepError.storage(error, root: replica.root) { throw full }
            throw FprepError("cannot fetch content from '\(replica.remoteURL)': \(error.reason); the placeholders are unchanged (try again when the remote is reachable)",
                             detail: error.standardError)
        }
        Trace.mark("fetch")
        guard let operation else {
            replica.removeFetchQuarantines()
            // When each was last used, in one commit.
            try replica.store.transaction {
                try replica.store.touchMaterialized(alreadyThere, at: now)
                try replica.store.recordRecent(Self.foldersUsed(items.map(\.0), entries: entries), at: now)
            }
            return result
        }
        let fetched = FileManager.default.fileExists(atPath: quarantine)
        if fetched { try odb.addAlternate(quarantine) }
        result.fetchedBlobs = early.count + missing.count + late.count
        // A folder moved, deleted or replaced while the remote answered is
        // opened again at its path (what stands there now, or nothing): its
        // old descriptor would write where the user took it, out of the
        // replica perhaps, or into a folder that is gone.
        opened.withUnsafeMutableBufferPointer { slots in
            parallelFor(parents.count, threads: 4) { i in
                if case .success(let held)? = slots[i], held.isStill(at: parents[i], in: root) { return }
                slots[i] = Result { try root.folder(parents[i]) }
            }
        }
        let folders = Dictionary(uniqueKeysWithValues: zip(parents, opened))

        // Write every file beside its placeholder, then make them durable
        // (one syncfs, or an fsync each for a few: `DurableChanges`), then rename.
        var written: [(IndexEntry, FolderHandle, [UInt8])] = []
        do {
            // A reader of the object database for each writer (see
            // `writeFiles`), opened with the first files written together:
            // 1,000 blobs at 10^5 took 25 ms to read through one handle,
            // whatever the threads, 14 ms through two.
            var readers: [ObjectDatabase] = []
            func openReaders() throws -> [ObjectDatabase] {
                if readers.isEmpty {
                    readers = try [odb] + (1..<min(Self.writers, wanted.count)).map { _ in
                        let reader = try ObjectDatabase(objectsFolder: gitDirectory + "/objects")
                        if fetched { try reader.addAlternate(quarantine) }
                        return reader
                    }
                }
                return readers
            }
            // Small files go out several at a time, each read from the
            // object database, checked and written by one of the writers
            // (each new file waits on the filesystem, its inode and its
            // folder; reading and checking them here first, one after
            // another, took longer than the writing: 60 of 95 ms for 1,000
            // files at 10^5); a large one is written on its own, so that no
            // more than one is held in memory.
            var chunk: [PendingFile] = []
            var chunkBytes = 0
            func writeChunk() throws {
                if !chunk.isEmpty { result.bytesWritten += try Self.writeFiles(chunk, from: openReaders()) }
                chunk = []
                chunkBytes = 0
                replica.progress.report("writing files", done: written.count, total: wanted.count)
            }
            for entry in wanted {
                let path = RepoPath(bytes: entry.path)
                let folder: FolderHandle
                switch folders[path.parent] {
                case .success(let open)??: folder = open
                case .failure(let error)??:
                    result.skipped.append(Skipped(path: path.description, reason: "not materialized: its folder changed while the content was fetched (\(error))"))
                    continue
                default: throw SystemError("open folder", path.parent.description, EIO)
                }
                let temporary = Self.temporaryName(for: path.name, token: journal.token)
                written.append((entry, folder, temporary))
                // The index's size of a file (its low 32 bits: one of 4 GiB
                // or more may pass as small, and is written all the same).
                let size = Int(entry.stat.fileSize)
                guard size <= Self.writtenTogetherBelow else {
                    result.bytesWritten += try withCheckedContent(of: entry, path: path) { bytes in
                        try Self.writeFile(bytes, of: entry, path: path, into: folder, name: temporary)
                    }
                    continue
                }
                chunk.append(PendingFile(entry: entry, path: path, folder: folder, name: temporary))
                chunkBytes += size
                if chunk.count >= 256 || chunkBytes >= 32 << 20 { try writeChunk() }
            }
            try writeChunk()
            Trace.mark("write files")
            var durable = DurableChanges(changes: written.count, limit: DurableChanges.contentLimit)
            for (entry, _, temporary) in written { durable.put(RepoPath(bytes: entry.path).parent.appending(temporary)) }
            try durable.flush(root: replica.rootFolder, shown: replica.root)
        } catch {
            // Nothing was renamed yet: the placeholders are as they were,
            // and what was written (a full disk, most likely) goes at once.
            for (_, folder, temporary) in written { unlinkat(folder.fd, cPath(temporary), 0) }
            replica.removeFetchQuarantines()
            try? replica.store.endOperation(operation)
            throw FprepError.storage(error, root: replica.root) ?? error
        }
        Trace.mark("written files durable")

        // The swaps, two at a time: each is a dozen system calls on a file
        // of its own (a lease, the exchange, the checks), and waits on them
        // (1,000 files at 10^5: 46–56 ms one after another). Their outcomes
        // are taken in order below; the index learns of none until all are done.
        // Placeholders with other names (hard links) go one after another
        // afterwards: a swap changes its file's ctime, and a second swap of
        // the same file at once would take that for a program's write.
        var swaps = [Result<(SafeReplace.Outcome, FileStat?), any Error>?](repeating: nil, count: written.count)
        swaps.withUnsafeMutableBufferPointer { slots in
            func swap(_ i: Int) {
                let (entry, folder, temporary) = written[i]
                let path = RepoPath(bytes: entry.path)
                let swap = SafeReplace(folder: folder, name: path.name, temporary: temporary, shown: path.description, expectsDataless: true)
                slots[i] = Result {
                    let outcome: SafeReplace.Outcome
                    do {
                        outcome = try swap.run(isUnchanged: { classifier.holdsNoUserBytes(entry, stat: $0) })
                    } catch let error as SystemError where error.code == ENOENT {
                        outcome = .refused("it was deleted or moved while its content was fetched")
                    }
                    if case .refused = outcome {
                        unlinkat(folder.fd, cPath(temporary), 0)
                        return (outcome, nil)
                    }
                    return (outcome, folder.stat(name: path.name))
                }
            }
            let linked = written.indices.filter { i in
                let (entry, folder, _) = written[i]
                return (folder.stat(name: RepoPath(bytes: entry.path).name)?.links ?? 1) > 1
            }
            let alone = Set(linked)
            let apart = written.indices.filter { !alone.contains($0) }
            parallelFor(apart.count, threads: 2) { swap(apart[$0]) }
            for i in linked { swap(i) }
        }
        var materialized: [(RepoPath, ObjectID)] = []
        var keptCopies = false
        for ((entry, _, _), swap) in zip(written, swaps) {
            let path = RepoPath(bytes: entry.path)
            guard let (outcome, found) = try swap?.get() else { continue }
            switch outcome {
            case .refused(let reason):
                result.skipped.append(Skipped(path: path.description, reason: "not materialized: \(reason)"))
                continue
            case .replaced(keptAs: let copy):
                if let copy {
                    keptCopies = true
                    result.skipped.append(Skipped(path: path.description, reason: "a program wrote into the placeholder while it was materialized; the content is in place and the bytes written are kept as '\(path.parent.appending(copy))'"))
                }
            }
            guard let stat = found else { throw SystemError("stat", path.description) }
            var updated = entry
            updated.skipWorktree = false
            updated.stat = StatData(stat)
            try index.add(updated)
            materialized.append((path, entry.id))
        }
        Trace.mark("rename")
        // The renames durable before the index says content; bytes a
        // program wrote, kept as a copy, only a whole flush makes durable.
        var renamed = DurableChanges(changes: written.count, limit: DurableChanges.contentLimit, wholeFilesystem: keptCopies)
        for (entry, _, _) in written { renamed.put(RepoPath(bytes: entry.path)) }
        try renamed.flush(root: replica.rootFolder, shown: replica.root)
        Trace.mark(renamed.wholeFilesystem ? "syncfs" : "fsync \(renamed.fsyncCount)")
        try replica.writeIndexKeepingJournal(index, lookAgainAt: materialized.map(\.0.bytes))
        Trace.mark("index write")
        // Not waited for (ext4 would write the whole new index out with
        // it: 20 ms of 1,000 files' materialize at 10^5). A power cut that
        // loses these records leaves the operation open, and the next
        // command settles each path from its bytes on disk, as after a
        // kill: whole content is materialized again, whatever the index
        // held (only when the files were last used is lost).
        try replica.store.transaction(durability: .whenWrittenOut) {
            try replica.store.recordMaterialized(materialized, at: now)
            try replica.store.touchMaterialized(alreadyThere, at: now)
            try replica.store.recordRecent(Self.foldersUsed(items.map(\.0), entries: entries), at: now)
            try replica.store.endOperation(operation)
        }
        // The content is in the files now; keeping the blobs too would cost
        // every materialized file its size twice.
        replica.removeFetchQuarantines()
        Trace.mark("store")
        replica.progress.finish()
        result.materialized = materialized.map { $0.0.description }
        return result
    }

    /// Files up to this size are written several at a time; a larger one on
    /// its own.
    static let writtenTogetherBelow = 4 << 20

    /// A file whose content waits to be written beside its placeholder.
    private struct PendingFile {
        let entry: IndexEntry
        let path: RepoPath
        let folder: FolderHandle
        let name: [UInt8]
    }

    /// Runs `body` with the content of `entry`'s blob, checked against its id.
    private func withCheckedContent<T>(of entry: IndexEntry, path: RepoPath, _ body: (UnsafeRawBufferPointer) throws -> T) throws -> T {
        try Self.withCheckedContent(of: entry, path: path, from: replica.repository.objectDatabase(), body)
    }

    /// The same from `odb` (libgit2's errors are the calling thread's, so
    /// several threads may each read through a handle of their own).
    /// `orElse`: the repository's own handle, asked when `odb` (a reader
    /// of a writer's own, see `writeFiles`) has no such object: it may
    /// still read a pack this process saw before its folder went (an
    /// earlier fetch's quarantine, removed; libgit2 keeps a pack it read
    /// open), which told the caller the blob needs no fetch.
    private static func withCheckedContent<T>(of entry: IndexEntry, path: RepoPath, from odb: ObjectDatabase,
                                              orElse repositoryHandle: ObjectDatabase? = nil,
                                              _ body: (UnsafeRawBufferPointer) throws -> T) throws -> T {
        let read: T?
        do {
            let check = { (bytes: UnsafeRawBufferPointer) throws -> T? in
                guard ObjectDatabase.isBlob(bytes, id: entry.id) else { return nil }
                return try body(bytes)
            }
            do {
                read = try odb.withRawObject(entry.id, check)
            } catch GitError.notFound where repositoryHandle.map({ $0 !== odb }) == true {
                read = try repositoryHandle?.withRawObject(entry.id, check)
            }
        } catch let error as GitError {
            throw FprepError("the remote did not send the content of '\(path)' (\(entry.id)); the placeholder is unchanged", detail: error.description)
        }
        guard let read else {
            throw FprepError("the content fetched for '\(path)' does not match its id \(entry.id); nothing was written")
        }
        return read
    }

    /// Threads that write small files together.
    static let writers = 4

    /// Writes `files`, each read and checked, on a writer thread for each
    /// of `readers` (the repository's handle first), each reading through
    /// its own: libgit2 holds a handle's lock over each read, its
    /// inflation included, so writers sharing one would read one at a
    /// time. The first error (by position) is thrown once all are done
    /// (the caller removes what was written).
    private static func writeFiles(_ files: [PendingFile], from readers: [ObjectDatabase]) throws -> Int64 {
        var errors = [(any Error)?](repeating: nil, count: files.count)
        var sizes = [Int64](repeating: 0, count: files.count)
        let next = Atomic<Int>(0)
        errors.withUnsafeMutableBufferPointer { slots in
            sizes.withUnsafeMutableBufferPointer { written in
                parallelFor(min(readers.count, files.count), threads: readers.count) { lane in
                    let odb = readers[lane]
                    while case let i = next.wrappingAdd(1, ordering: .relaxed).oldValue, i < files.count {
                        let file = files[i]
                        do {
                            written[i] = try withCheckedContent(of: file.entry, path: file.path, from: odb, orElse: readers[0]) { bytes in
                                try writeFile(bytes, of: file.entry, path: file.path, into: file.folder, name: file.name)
                            }
                        } catch {
                            slots[i] = error
                        }
                    }
                }
            }
        }
        if let first = errors.lazy.compactMap({ $0 }).first { throw first }
        return sizes.reduce(0, +)
    }

    /// Writes `bytes` into a new file `name` in `folder` with the entry's
    /// mode and the placeholder's date.
    private static func writeFile(_ bytes: UnsafeRawBufferPointer, of entry: IndexEntry, path: RepoPath,
                                  into folder: FolderHandle, name: [UInt8]) throws -> Int64 {
        // The placeholder's own permissions: a chmod made to it before
        // its content came is the user's change of mode, not undone.
        let current = folder.stat(name: path.name).map { mode_t(truncatingIfNeeded: $0.mode) & 0o7777 }
        let mode: mode_t = current ?? (entry.mode == 0o100755 ? 0o777 : 0o666)
        // Marked as fprep's (`settleTemporary` removes only what it can prove it wrote).
        let fd = fprep_create_marked_temporary(folder.fd, cPath(name), mode, ContentOperations.temporaryToken(in: name) ?? "")
        guard fd >= 0 else { throw SystemError("create", path.description) }
        defer { close(fd) }
        if current != nil { _ = fchmod(fd, mode) }  // exactly, whatever the umask
        try writeAll(fd, bytes, shown: path.description)
        _ = fprep_set_mtime(fd, Int64(entry.stat.mtimeSeconds), Int(entry.stat.mtimeNanoseconds))
        return Int64(bytes.count)
    }

    // MARK: evict

    /// With an agent serving the replica, it is asked to watch the files
    /// first (see `AgentLink`), and they go without a write lease (see `punch`).
    func evict(_ items: [(RepoPath, String)], dryRun: Bool = false) throws -> EvictResult {
        // The files named are looked up on the disk while the index is
        // read (on a cold disk each waits for reads of its own).
        let named = items.map(\.0).filter { !$0.isRoot }
        let root = replica.rootFolder
        let early = named.count > 1 ? BackgroundWork { root.prefetch(named) } : nil
        // Also when a step below throws: no lookup outlives the command.
        defer { try? early?.wait() }
        let index = try replica.repository.index()
        Trace.mark("read index")
        var result = EvictResult()
        var candidates: [IndexEntry] = []
        let pins = try PinSet(replica.store)
        let entries = try fileEntries(items, index: index)
        // Scattered files on a cold disk: their lookups wait together, not
        // one after another (1,000 files at 10^5: the classification took
        // longer than the punching).
        try early?.wait()
        replica.rootFolder.prefetch(entries.map { RepoPath(bytes: $0.path) })
        let classifier = StateClassifier(root: replica.rootFolder, index: index)
        // A file its owner made read-only gets the owner's write permission
        // for its punch (`WritableFile`): the journal keeps its mode for recovery.
        var readOnly: [ContentJournal.ReadOnlyFile] = []
        for entry in entries {
            let path = RepoPath(bytes: entry.path)
            let stat = replica.rootFolder.stat(path)
            switch stat.map({ classifier.state(of: entry, stat: $0) }) ?? .deleted {
            case .dataless: result.alreadyDataless += 1
            case .materialized:
                if let pin = pins.covering(path) {
                    result.refused.append(Skipped(path: path.description, reason: PinSet.refusal(pin)))
                } else {
                    candidates.append(entry)
                    if let stat, let file = ContentJournal.ReadOnlyFile.ifReadOnly(path, mode: UInt32(truncatingIfNeeded: stat.mode)) {
                        readOnly.append(file)
                    }
                }
            case .modified:
                result.refused.append(Skipped(path: path.description, reason: specialReason(path) ?? "it has local changes (run 'fprep sync' first)"))
            case .deleted:
                result.refused.append(Skipped(path: path.description, reason: specialReason(path) ?? "it was deleted locally (run 'fprep sync' first)"))
            }
        }
        Trace.mark("classify")
        guard !candidates.isEmpty else { return result }
        if dryRun {
            for entry in candidates {
                let path = RepoPath(bytes: entry.path)
                guard let stat = replica.rootFolder.stat(path) else { continue }
                if stat.links > 1 {
                    result.refused.append(Skipped(path: path.description, reason: Self.hardLinked(stat.links)))
                } else {
                    result.evicted.append(path.description)
                    result.bytesFreed += stat.blocks * 512
                }
            }
            return result
        }
        var watched = false
        if case .ask(let watchFirst) = replica.agentWatch {
            guard watchFirst(candidates.map { WatchedPlaceholder(path: RepoPath(bytes: $0.path), blob: $0.id) }) else {
                result.refused += candidates.map {
                    Skipped(path: RepoPath(bytes: $0.path).description,
                            reason: "the agent serving this replica did not answer a request to watch it first (its content stays; try again, or stop the agent)")
                }
                return result
            }
            watched = true
        }
        let journal = ContentJournal(token: Self.newToken(), paths: candidates.map { Data($0.path) },
                                     readOnly: readOnly.isEmpty ? nil : readOnly)
        // Evict is what frees space: on a full disk its journal record takes the reserve's.
        let operation = try SpaceReserve.using(in: replica.stateFolder) {
            try replica.store.beginOperation("evict", payload: journal.encoded())
        }
        var evicted: [RepoPath] = []
        // Each file is looked at and punched on its own, a few at a time:
        // the filesystem's work for one (its journal, its extents) waits
        // while another's goes on. Chunks keep the progress moving.
        let chunkSize = 256
        for chunkStart in stride(from: 0, to: candidates.count, by: chunkSize) {
            let chunk = Array(candidates[chunkStart..<min(candidates.count, chunkStart + chunkSize)])
            var outcomes = [PunchOutcome](repeating: .refused("not looked at"), count: chunk.count)
            outcomes.withUnsafeMutableBufferPointer { slots in
                parallelFor(chunk.count, threads: 4) { i in
                    slots[i] = punch(chunk[i], path: RepoPath(bytes: chunk[i].path), watched: watched)
                }
            }
            for (entry, outcome) in zip(chunk, outcomes) {
                let path = RepoPath(bytes: entry.path)
                switch outcome {
                case .punched(let updated, let freed):
                    try index.add(updated)
                    result.bytesFreed += freed
                    evicted.append(path)
                case .refused(let reason):
                    result.refused.append(Skipped(path: path.description, reason: reason))
                case .failed(let error):
                    // The journal's record has the next command settle every
                    // file of it, punched or not, from its bytes on disk.
                    throw error
                }
            }
            replica.progress.report("evicting", done: chunkStart + chunk.count, total: candidates.count)
        }
        Trace.mark("punch")
        try replica.writeIndexKeepingJournal(index, lookAgainAt: evicted.map(\.bytes))
        Trace.mark("index write")
        try replica.store.transaction {
            try replica.store.forgetMaterialized(evicted)
            try replica.store.endOperation(operation)
        }
        Trace.mark("store")
        replica.progress.finish()
        result.evicted = evicted.map(\.description)
        return result
    }

    /// Why a file with other names is not evicted.
    static func hardLinked(_ links: Int64) -> String {
        "it has \(links) hard links, and evicting would empty the other names too; remove the other links (or copy the file) first"
    }

    /// What became of one file an evict looked at.
    private enum PunchOutcome {
        /// Its blocks are free; its index entry as it is now.
        case punched(IndexEntry, freed: Int64)
        case refused(String)
        case failed(any Error)
    }

    /// Frees the blocks of one unmodified materialized file in place, or
    /// says why not. Safe on several threads at once (nothing shared is
    /// written: the caller records each outcome).
    ///
    /// A file the agent watches keeps no write lease through the punch: a
    /// write into it raises the agent's event first (which waits for this
    /// command, then fills the placeholder), and the kernel's own open of
    /// it for that event would wait on the lease until the kernel broke it
    /// (45 s). The lease is taken and given back at once instead, as a
    /// probe: a program that has the file open in any mode or mapped
    /// (a running program, a loaded library) keeps it, as without the
    /// agent. It opened or mapped the file as content, and its reads and
    /// page faults after a punch never reach the agent: it would read
    /// zeros. (The agent watches the file before the probe, so a program
    /// that opens it later gets its content on access.)
    private func punch(_ entry: IndexEntry, path: RepoPath, watched: Bool) -> PunchOutcome {
        do {
            return try punchFile(entry, path: path, watched: watched)
        } catch {
            return .failed(error)
        }
    }

    private func punchFile(_ entry: IndexEntry, path: RepoPath, watched: Bool) throws -> PunchOutcome {
        let file: WritableFile
        do {
            do {
                file = WritableFile(adopting: try replica.rootFolder.openRegular(path, flags: O_RDWR).fd)
            } catch let error as SystemError where error.code == EACCES {
                // Made read-only by its owner: written with the owner's
                // permission for the punch, its mode given back after.
                let readable = try replica.rootFolder.openRegular(path, flags: O_RDONLY).fd
                defer { close(readable) }
                file = try WritableFile(reopening: readable, shown: path.description)
            }
        } catch let refusal as ContentRefusal {
            return .refused(refusal.why)
        } catch let error as SystemError {
            return .refused("cannot open it: \(String(cString: strerror(error.code)))")
        }
        defer { file.close() }
        TestGate.punch.pass(path)
        let fd = file.fd
        // A write lease: granted only while no one else has the file open,
        // and whoever opens it from now on waits until it is given back, so
        // no write can land between the check below and the punch (it lands
        // in the placeholder afterwards: the user's bytes, kept by sync).
        var leased = SafeReplace.takeWriteLease(fd)
        if !leased && errno == EAGAIN { return .refused("it is open in another program (or mapped, or running); evict it once that program closes it") }
        if leased && watched {
            _ = fprep_release_lease(fd)
            leased = false
        }
        defer { if leased { _ = fprep_release_lease(fd) } }
        var before = fprep_stat()
        guard fprep_fstat(fd, &before) == 0 else { throw SystemError("stat", path.description) }
        // Another name shares these blocks (a hard link, maybe outside the
        // replica): freeing them would empty that file too.
        if before.nlink > 1 { return .refused(Self.hardLinked(Int64(before.nlink))) }
        // Checked again on the open file: nothing written since the scan may be lost.
        if StatData(FileStat(before)) != entry.stat {
            let bytes: [UInt8]
            do {
                bytes = try readContent(fd, size: before.size, shown: path.description)
            } catch let refusal as ContentRefusal {
                return .refused(refusal.why)
            }
            guard try bytes.withUnsafeBytes({ try ObjectDatabase.blobID(of: $0) }) == entry.id else {
                return .refused("it has local changes (run 'fprep sync' first)")
            }
        }
        var after = stat()
        let id = entry.id.bytes
        guard fprep_punch_to_placeholder(fd, id, id.count, Int64(entry.stat.mtimeSeconds),
                                         Int(entry.stat.mtimeNanoseconds), &after) == 0 else {
            throw SystemError("free the blocks of", path.description)
        }
        var flat = fprep_stat()
        fprep_stat_flatten(&after, &flat)
        if file.madeWritable {
            try file.giveBackMode(shown: path.description)
            guard fprep_fstat(fd, &flat) == 0 else { throw SystemError("stat", path.description) }
        }
        var updated = entry
        updated.skipWorktree = true
        updated.stat = StatData(FileStat(flat))
        return .punched(updated, freed: (before.blocks - flat.blocks) * 512)
    }

    // MARK: recovery

    /// Settles an operation a crash interrupted: each path ends as what its
    /// bytes on disk say (materialized content, a placeholder, or the user's
    /// change), temporary files go, and the index and store agree with it.
    func settle(_ record: StateStore.JournalRecord) throws {
        if record.operation == "sync" {
            guard let journal = SyncJournal.decode(record.payload) else { return try replica.store.endOperation(record.id) }
            do {
                _ = try replica.applySync(journal, operation: record.id, resuming: true)
            } catch let error as FprepError where error.refusal != nil {
                // A tree refused before anything was written (its record is
                // ended): the replica stays at its anchor, and the command
                // that found the record goes on; the next sync says why.
            }
            return
        }
        guard let journal = ContentJournal.decode(record.payload) else {
            try replica.store.endOperation(record.id)
            return
        }
        let index = try replica.repository.index()
        var materialized: [(RepoPath, ObjectID)] = []
        var dataless: [RepoPath] = []
        for raw in journal.paths {
            let path = RepoPath(bytes: Array(raw))
            if let folder = try? replica.rootFolder.folder(path.parent) {
                SafeReplace(folder: folder, name: path.name, temporary: Self.temporaryName(for: path.name, token: journal.token),
                            shown: path.description, expectsDataless: true).settleTemporary(old: index.entry(path: path.bytes))
            }
            guard var entry = index.entry(path: path.bytes), let stat = replica.rootFolder.stat(path), stat.isRegular else { continue }
            // Only this entry's own placeholder: one whose marks name
            // another blob was moved or linked here by a program (the scan
            // syncs that as the move it is).
            if try entry.stat.fileSize == UInt32(truncatingIfNeeded: stat.size) || isLearnedSizePlaceholder(entry, path, stat),
               Self.holdsNoData(replica.rootFolder, path, stat), Self.isMarkedDataless(replica.rootFolder, path),
               Self.placeholderBlob(replica.rootFolder, path) == entry.id {
                // Punched: finish it, with the item's date (the kill may have
                // come before the date was put back).
                guard let fd = try? replica.rootFolder.openRegular(path, flags: O_RDWR).fd else { continue }
                _ = fprep_set_mtime(fd, Int64(entry.stat.mtimeSeconds), Int(entry.stat.mtimeNanoseconds))
                var after = fprep_stat()
                let statted = fprep_fstat(fd, &after)
                close(fd)
                guard statted == 0 else { continue }
                entry.skipWorktree = true
                entry.stat = StatData(FileStat(after))
                try index.add(entry)
                dataless.append(path)
            } else if let bytes = try? replica.rootFolder.readFile(path),
                      try bytes.withUnsafeBytes({ try ObjectDatabase.blobID(of: $0) }) == entry.id {
                // The content is whole: a file, not a placeholder, whatever
                // marks an evict that never punched it left on it.
                guard let fd = try? replica.rootFolder.openRegular(path, flags: O_RDWR).fd else { continue }
                _ = fprep_clear_placeholder_marks(fd)
                if journal.inPlace == true {
                    // An agent's write may have ended before the item's date was put back.
                    _ = fprep_set_mtime(fd, Int64(entry.stat.mtimeSeconds), Int(entry.stat.mtimeNanoseconds))
                }
                var after = fprep_stat()
                let statted = fprep_fstat(fd, &after)
                close(fd)
                guard statted == 0 else { continue }
                entry.skipWorktree = false
                entry.stat = StatData(FileStat(after))
                try index.add(entry)
                materialized.append((path, entry.id))
            } else if journal.inPlace == true, try replica.settlePartialInPlace(entry.id, mtime: (Int64(entry.stat.mtimeSeconds), Int(entry.stat.mtimeNanoseconds)),
                                                                               path: path, token: journal.token) {
                // An agent died while writing it: only fprep's bytes are
                // there, never to be taken for the user's.
                guard let after = replica.rootFolder.stat(path) else { continue }
                entry.skipWorktree = true
                entry.stat = StatData(after)
                try index.add(entry)
                dataless.append(path)
            }
        }
        for fill in journal.untracked ?? [] {
            try settleUntrackedFill(fill, token: journal.token)
        }
        let settled = Set(materialized.map(\.0.bytes) + dataless.map(\.bytes))
        for file in journal.readOnly ?? [] {
            try giveBackMode(file, index: index, settled: settled)
        }
        if journal.inPlace == true { InPlaceHydration.removeQuarantine(journal.token, replicaRoot: replica.root) }
        try replica.writeIndexKeepingJournal(index, lookAgainAt: dataless.map(\.bytes))
        try replica.store.transaction {
            try replica.store.recordMaterialized(materialized, at: Int64(Date().timeIntervalSince1970))
            try replica.store.forgetMaterialized(dataless)
            try replica.store.endOperation(record.id)
        }
        replica.removeFetchQuarantines()
    }

    /// Gives a read-only file an agent was filling (killed midway) its mode
    /// back, if it still has the one the fill gave it (the owner's mode
    /// plus the owner's write permission); an entry settled above gets the
    /// file's new stat.
    private func giveBackMode(_ file: ContentJournal.ReadOnlyFile, index: Index, settled: Set<[UInt8]>) throws {
        let path = RepoPath(bytes: Array(file.path))
        guard let (fd, stat) = try? replica.rootFolder.openRegular(path, flags: O_RDONLY) else { return }
        defer { close(fd) }
        let mode = mode_t(file.mode) & 0o7777
        guard mode_t(truncatingIfNeeded: stat.mode) & 0o7777 == mode | S_IWUSR, mode != mode | S_IWUSR, fchmod(fd, mode) == 0 else { return }
        var after = fprep_stat()
        guard settled.contains(path.bytes), fprep_fstat(fd, &after) == 0, var entry = index.entry(path: path.bytes) else { return }
        entry.stat = StatData(FileStat(after))
        try index.add(entry)
    }

    /// Settles an agent's fill of a placeholder that has no entry at its
    /// path (moved by the user before a sync), killed midway: whole content
    /// loses its marks (a file, which the scan pairs as the move it is);
    /// fprep's partial bytes become the placeholder again; anything else —
    /// another file there, bytes a program wrote — is left for the scan,
    /// which keeps it.
    private func settleUntrackedFill(_ fill: ContentJournal.UntrackedFill, token: String) throws {
        let path = RepoPath(bytes: Array(fill.path))
        guard let blob = ObjectID(hex: fill.blob), let stat = replica.rootFolder.stat(path), stat.isRegular,
              Self.isMarkedDataless(replica.rootFolder, path), Self.placeholderBlob(replica.rootFolder, path) == blob,
              !Self.holdsNoData(replica.rootFolder, path, stat) else { return }
        if let bytes = try? replica.rootFolder.readFile(path), try bytes.withUnsafeBytes({ try ObjectDatabase.blobID(of: $0) }) == blob {
            guard let fd = try? replica.rootFolder.openRegular(path, flags: O_RDWR).fd else { return }
            defer { close(fd) }
            _ = fprep_clear_placeholder_marks(fd)
            _ = fprep_set_mtime(fd, fill.seconds, fill.nanoseconds)
        } else {
            _ = try replica.settlePartialInPlace(blob, mtime: (fill.seconds, fill.nanoseconds), path: path, token: token)
        }
    }

    /// Whether `path` holds the entry's placeholder laid out again at the
    /// size the store learned for it (`layOutLearnedSizes`), while the index
    /// still records the size it had before (a crash came in between).
    private func isLearnedSizePlaceholder(_ entry: IndexEntry, _ path: RepoPath, _ stat: FileStat) throws -> Bool {
        guard entry.skipWorktree, let info = try replica.store.blobInfoLookup()(entry.id), info.size == stat.size else { return false }
        return Self.placeholderBlob(replica.rootFolder, path) == entry.id
    }

    /// The folders a materialize of `items` makes used: each named folder and
    /// every folder below it, so the working set takes in a materialized
    /// folder's whole subtree.
    static func foldersUsed(_ items: [RepoPath], entries: [IndexEntry]) -> [RepoPath] {
        var folders = Set<RepoPath>()
        for entry in entries {
            var parent = RepoPath(bytes: entry.path).parent
            while !parent.isRoot, items.contains(where: { parent.isWithin($0) && parent != $0 || parent == $0 }) {
                guard folders.insert(parent).inserted else { break }
                parent = parent.parent
            }
        }
        return folders.sorted()
    }

    /// The blob id a placeholder's `user.fprep.blob` names, if it has one.
    static func placeholderBlob(_ root: FolderHandle, _ path: RepoPath) -> ObjectID? {
        var buffer = [CChar](repeating: 0, count: 32)
        let count = fprep_get_xattr_at(root.fd, cPath(path.bytes), "user.fprep.blob", &buffer, buffer.count)
        guard count == 20 else { return nil }
        return ObjectID(bytes: buffer[0..<20].map { UInt8(bitPattern: $0) })
    }

    /// Whether a regular file holds no content of its own: no blocks, or
    /// blocks that are only its attributes or zeros (a copy made with
    /// `cp -a` or restored from a backup). Such a file is still a placeholder,
    /// never content to commit.
    static func holdsNoData(_ root: FolderHandle, _ path: RepoPath, _ stat: FileStat) -> Bool {
        stat.blocks == 0 || fprep_holds_no_data_at(root.fd, cPath(path.bytes)) == 1
    }

    static func isMarkedDataless(_ root: FolderHandle, _ path: RepoPath) -> Bool {
        var buffer = [CChar](repeating: 0, count: 32)
        let count = fprep_get_xattr_at(root.fd, cPath(path.bytes), "user.fprep.state", &buffer, buffer.count)
        return count == 8 && String(decoding: buffer[0..<8].map { UInt8(bitPattern: $0) }, as: UTF8.self) == "dataless"
    }

    static func newToken() -> String {
        String(UInt64.random(in: 0...UInt64.max), radix: 36)
    }

}

extension Replica {
    /// Removes the objects folders content fetches left behind (a killed
    /// command's, or one a `git fetch` that outlived fprep finished later).
    /// One this process added as an alternate is only emptied, unless the
    /// replica is `closing` (its object database goes with it). `kept`: one
    /// a request of this command still fills.
    func removeFetchQuarantines(closing: Bool = false, keeping kept: String? = nil) {
        for name in (try? FileManager.default.contentsOfDirectory(atPath: stateFolder)) ?? [] where name.hasPrefix("fetch-") {
            let path = stateFolder + "/" + name
            if path == kept { continue }
            guard !closing, AlternatesInUse.shared.contains(path) else {
                try? FileManager.default.removeItem(atPath: path)
                continue
            }
            // An alternate of this process's object database: emptied, its
            // folders kept until the process ends (see AlternatesInUse).
            for entry in (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [] {
                let inner = path + "/" + entry
                if entry == "pack" {
                    for pack in (try? FileManager.default.contentsOfDirectory(atPath: inner)) ?? [] {
                        try? FileManager.default.removeItem(atPath: inner + "/" + pack)
                    }
                } else {
                    try? FileManager.default.removeItem(atPath: inner)
                }
            }
        }
    }

    /// Brings the content of the named files (folders: every file below)
    /// into the replica. `paths` are as the user typed them.
    public func materialize(_ paths: [String], relativeTo directory: String) throws -> MaterializeResult {
        let items = try paths.map { (try itemPath(for: $0, relativeTo: directory), $0) }
        return try ContentOperations(self).materialize(items)
    }

    /// Turns the named materialized files back into placeholders; files with
    /// local changes are refused and listed.
    /// `dryRun`: what would be evicted and refused, and the space freed;
    /// nothing changes (a file a program holds open is only found then).
    public func evict(_ paths: [String], relativeTo directory: String, dryRun: Bool = false) throws -> EvictResult {
        let items = try paths.map { (try itemPath(for: $0, relativeTo: directory), $0) }
        return try ContentOperations(self).evict(items, dryRun: dryRun)
    }
}

/// The folders `materialize` opens on another thread while its journal's
/// commit waits for the disk, handed back once that thread is done.
private final class OpenedFolders: @unchecked Sendable {
    var slots: [Result<FolderHandle, any Error>?]
    init(count: Int) { slots = Array(repeating: nil, count: count) }
}
