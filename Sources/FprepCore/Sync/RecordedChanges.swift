import FoundationEssentials
import FprepGit
import Glibc

/// The change sets the last syncs applied, kept in `.fprep/changes/` so that
/// `fprep changes` from the anchor before a sync reads the answer the sync
/// already worked out instead of diffing the two trees again (the tree diff
/// was most of a `changes` request: 5 of 15 ms at 10^4 files, 9 of 24 at
/// 10^5). A consumer that asks for the changes after each sync asks for
/// exactly that pair.
///
/// A record is a cache of a pure function: `ChangeSet.between` of two tree
/// ids, so it is named by them and can never go stale; one that is missing,
/// torn by a crash, damaged or of another format is computed again. Only a
/// sync writes records (under the replica's lock, each whole by a rename);
/// readers never write. The newest few are kept.
enum RecordedChanges {
    static let folderName = "changes"
    /// Records kept after a write: the syncs a consumer may still be behind on.
    static let kept = 16
    /// A larger change is not recorded (its diff costs what the sync's did;
    /// a record of it would weigh megabytes).
    static let largest = 50_000
    /// Nor one whose record would be larger than this (long paths); a file
    /// larger is no record and is not read.
    static let largestBytes = 16 << 20
    /// Raised whenever `ChangeSet.between` changes what it gives for a pair
    /// of trees (a record of the old answer would be read as the new one);
    /// `RecordedChangesTests.formatVersionPinsTheDiff` fails until it is.
    static let formatVersion = 1
    private static let magic = Array("fprep-changes \(formatVersion)\n".utf8)

    static func folder(_ stateFolder: String) -> String { stateFolder + "/" + folderName }

    private static func name(from old: ObjectID?, to new: ObjectID?) -> String {
        (old ?? ObjectID.zero).hex + "-" + (new ?? ObjectID.zero).hex
    }

    /// The change set recorded for this pair of trees, or nil.
    static func read(_ stateFolder: String, from old: ObjectID?, to new: ObjectID?) -> ChangeSet? {
        let path = folder(stateFolder) + "/" + name(from: old, to: new)
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size > magic.count + 20, info.st_size <= largestBytes else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        let count = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard count == bytes.count else { return nil }
        return decode(bytes)
    }

    /// Records `changes` for this pair of trees; best effort (a record not
    /// written costs the next `changes` a tree diff, nothing more).
    static func write(_ changes: ChangeSet, _ stateFolder: String, from old: ObjectID?, to new: ObjectID?) {
        guard changes.count <= largest else { return }
        let directory = folder(stateFolder)
        if mkdir(directory, 0o755) != 0 && errno != EEXIST { return }
        // Everything below is done in the folder as opened, never through
        // a symlink put in its place (a root sync in another's replica).
        let folder = open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard folder >= 0 else { return }
        defer { close(folder) }
        let target = name(from: old, to: new)
        // The same two trees again (a change undone, then redone): kept
        // as the newest.
        if faccessat(folder, target, F_OK, AT_SYMLINK_NOFOLLOW) == 0 {
            utimensat(folder, target, nil, AT_SYMLINK_NOFOLLOW)
            return
        }
        let bytes = encode(changes)
        guard bytes.count <= largestBytes else { return }
        let temporary = target + ".tmp-\(getpid())"
        unlinkat(folder, temporary, 0)
        let fd = openat(folder, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return }
        let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        close(fd)
        guard written == bytes.count, renameat(folder, temporary, folder, target) == 0 else {
            unlinkat(folder, temporary, 0)
            return
        }
        prune(folder, directory)
    }

    /// Keeps the newest `kept` records (and removes temporaries a killed sync left).
    private static func prune(_ folder: Int32, _ directory: String) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory), names.count > kept else { return }
        var records: [(name: String, time: Int)] = []
        for name in names {
            var info = stat()
            guard fstatat(folder, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            if name.contains(".tmp-") {
                unlinkat(folder, name, 0)
                continue
            }
            records.append((name, info.st_mtim.tv_sec * 1_000_000_000 + info.st_mtim.tv_nsec))
        }
        records.sort { $0.time > $1.time }
        for record in records.dropFirst(kept) { unlinkat(folder, record.name, 0) }
    }

    // MARK: format
    // magic, five counts (u32, little-endian), the items, then the git blob
    // id of everything before it (a torn or damaged record fails it).
    // A path or name: u32 length, bytes. An entry: name, 20-byte id, u32 mode.

    static func encode(_ changes: ChangeSet) -> [UInt8] {
        var out = magic
        func u32(_ value: Int) { withUnsafeBytes(of: UInt32(truncatingIfNeeded: value).littleEndian) { out += $0 } }
        func bytes(_ value: [UInt8]) {
            u32(value.count)
            out += value
        }
        func entry(_ value: TreeEntry) {
            bytes(value.name)
            out += value.id.bytes
            u32(Int(value.mode.raw))
        }
        for count in [changes.updated.count, changes.deleted.count, changes.moved.count,
                      changes.addedFolders.count, changes.deletedFolders.count] { u32(count) }
        for update in changes.updated {
            bytes(update.path.bytes)
            entry(update.new)
            out.append(update.old == nil ? 0 : 1)
            if let old = update.old { entry(old) }
        }
        for deletion in changes.deleted {
            bytes(deletion.path.bytes)
            entry(deletion.old)
        }
        for move in changes.moved {
            bytes(move.from.bytes)
            bytes(move.to.bytes)
            entry(move.entry)
            out.append(move.isFolder ? 1 : 0)
        }
        for folder in changes.addedFolders + changes.deletedFolders {
            bytes(folder.path.bytes)
            out += folder.id.bytes
        }
        let check = (try? out.withUnsafeBytes { try ObjectDatabase.blobID(of: $0) }) ?? ObjectID.zero
        return out + check.bytes
    }

    static func decode(_ data: [UInt8]) -> ChangeSet? {
        guard data.count > magic.count + 20, data.starts(with: magic) else { return nil }
        let body = data.count - 20
        guard let check = try? data.withUnsafeBytes({ try ObjectDatabase.blobID(of: UnsafeRawBufferPointer(rebasing: $0[0..<body])) }),
              check.bytes.elementsEqual(data[body...]) else { return nil }
        var reader = Reader(data: data, position: magic.count, end: body)
        guard let counts = try? (0..<5).map({ _ in try reader.u32() }) else { return nil }
        var changes = ChangeSet()
        do {
            for _ in 0..<counts[0] {
                let path = RepoPath(bytes: try reader.bytes())
                let new = try reader.entry()
                let old = try reader.byte() == 1 ? try reader.entry() : nil
                changes.updated.append(ChangeSet.Update(path: path, new: new, old: old))
            }
            for _ in 0..<counts[1] {
                let path = RepoPath(bytes: try reader.bytes())
                changes.deleted.append((path, try reader.entry()))
            }
            for _ in 0..<counts[2] {
                let from = RepoPath(bytes: try reader.bytes())
                let to = RepoPath(bytes: try reader.bytes())
                let entry = try reader.entry()
                changes.moved.append(ChangeSet.Move(from: from, to: to, entry: entry, isFolder: try reader.byte() == 1))
            }
            for _ in 0..<counts[3] { changes.addedFolders.append((RepoPath(bytes: try reader.bytes()), try reader.id())) }
            for _ in 0..<counts[4] { changes.deletedFolders.append((RepoPath(bytes: try reader.bytes()), try reader.id())) }
        } catch {
            return nil
        }
        return reader.position == body ? changes : nil
    }

    private struct Truncated: Error {}

    private struct Reader {
        let data: [UInt8]
        var position: Int
        let end: Int

        mutating func take(_ count: Int) throws -> ArraySlice<UInt8> {
            guard count >= 0, end - position >= count else { throw Truncated() }
            defer { position += count }
            return data[position..<position + count]
        }

        mutating func byte() throws -> UInt8 { try take(1).first ?? 0 }

        mutating func u32() throws -> Int {
            try take(4).reversed().reduce(0) { $0 << 8 | Int($1) }
        }

        mutating func bytes() throws -> [UInt8] { Array(try take(try u32())) }

        mutating func id() throws -> ObjectID {
            guard let id = ObjectID(bytes: Array(try take(20))) else { throw Truncated() }
            return id
        }

        mutating func entry() throws -> TreeEntry {
            let name = try bytes()
            let id = try id()
            return TreeEntry(name: name, id: id, mode: FileMode(raw: UInt32(try u32())))
        }
    }
}
