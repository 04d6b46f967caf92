import FoundationEssentials
import FprepGit
import Glibc

/// One change a user made in the replica since its last sync, found by a
/// stat scan as git's index finds changes: files whose stat data did not
/// change are not read.
public struct LocalChange: Sendable, Encodable, Equatable {
    public enum Kind: String, Sendable, Encodable {
        /// Content or mode changed (bytes written into a placeholder included).
        case modified
        /// A file or symlink the anchor does not have.
        case added
        case deleted
        /// Deleted at `from`, added with the same content at `path`.
        case moved
    }

    public let kind: Kind
    public let path: String
    /// For a move, the old identifier.
    public let from: String?
}

/// What the scan found, with what a commit of it needs.
struct LocalChangeSet {
    struct Write {
        let path: RepoPath
        /// The blob of the content on disk; nil until written into the store.
        var id: ObjectID?
        let mode: FileMode
        /// The placeholder this is (a moved placeholder): no content to read.
        let placeholder: Bool
    }

    /// Paths whose entry goes away.
    var removed: [RepoPath] = []
    /// Paths whose entry is new or changes, with what the disk holds there.
    var written: [Write] = []
    /// The changes as a user reads them.
    var changes: [LocalChange] = []
    /// How many tracked items are in each state, and how many folders.
    var counts: [ItemState: Int] = [:]
    var items = 0
    var folderCount = 0

    var isEmpty: Bool { removed.isEmpty && written.isEmpty }
}

/// Scans the replica for local changes.
struct LocalScanner {
    let replica: Replica
    let index: Index

    /// Folders never scanned: fprep's and git's own.
    static let ignoredTopLevel: Set<[UInt8]> = [Array(".git".utf8), Array(Replica.stateFolderName.utf8)]

    func scan() throws -> LocalChangeSet {
        let classifier = StateClassifier(root: replica.rootFolder)
        var tracked = Set<[UInt8]>()
        var folders = Set<[UInt8]>()
        var deleted: [IndexEntry] = []
        var set = LocalChangeSet()
        for position in 0..<index.count {
            guard let entry = index.entry(at: position) else { continue }
            tracked.insert(entry.path)
            var parent = RepoPath(bytes: entry.path).parent
            while !parent.isRoot, folders.insert(parent.bytes).inserted { parent = parent.parent }
            let mode = FileMode(raw: entry.mode)
            if mode == .submodule { continue }
            let path = RepoPath(bytes: entry.path)
            set.items += 1
            guard let stat = replica.rootFolder.stat(path) else {
                set.counts[.deleted, default: 0] += 1
                deleted.append(entry)
                continue
            }
            let state = classifier.state(of: entry, stat: stat)
            set.counts[state, default: 0] += 1
            guard state == .modified else { continue }
            if stat.isDirectory {
                // A file turned into a folder: the file is gone; what is in
                // the folder comes as new files below.
                deleted.append(entry)
                continue
            }
            let newMode: FileMode = stat.isSymlink ? .symlink : (stat.isExecutable ? .executable : .blob)
            set.written.append(LocalChangeSet.Write(path: path, id: nil, mode: newMode, placeholder: false))
            set.changes.append(LocalChange(kind: .modified, path: path.description, from: nil))
        }
        set.folderCount = folders.count
        // New files: walk the folders (git's untracked-file search).
        var added: [(RepoPath, FileStat)] = []
        try walk(.root, tracked: tracked, folders: folders, into: &added)

        // Moves: a deleted entry and a new file with the same content. A
        // moved placeholder carries its blob id in its attributes; other new
        // files are hashed only when some deleted entry could match.
        var deletedByID: [ObjectID: [IndexEntry]] = [:]
        for entry in deleted { deletedByID[entry.id, default: []].append(entry) }
        var movedFrom = Set<[UInt8]>()
        for (path, stat) in added {
            let mode: FileMode = stat.isSymlink ? .symlink : (stat.isExecutable ? .executable : .blob)
            var id: ObjectID?
            var placeholder = false
            if stat.isRegular, stat.blocks == 0, let marked = ContentOperations.placeholderBlob(replica.rootFolder, path),
               ContentOperations.isMarkedDataless(replica.rootFolder, path),
               let candidates = deletedByID[marked], candidates.contains(where: { Int64($0.stat.fileSize) == stat.size & 0xFFFF_FFFF }) {
                id = marked
                placeholder = true
            } else if !deletedByID.isEmpty {
                id = try? hashOnDisk(path, stat: stat)
            }
            if let id, var candidates = deletedByID[id], let source = candidates.first(where: { !movedFrom.contains($0.path) }) {
                candidates.removeAll { $0.path == source.path }
                deletedByID[id] = candidates
                movedFrom.insert(source.path)
                set.removed.append(RepoPath(bytes: source.path))
                set.written.append(LocalChangeSet.Write(path: path, id: id, mode: mode, placeholder: placeholder))
                set.changes.append(LocalChange(kind: .moved, path: path.description, from: RepoPath(bytes: source.path).description))
            } else {
                set.written.append(LocalChangeSet.Write(path: path, id: id, mode: mode, placeholder: false))
                set.changes.append(LocalChange(kind: .added, path: path.description, from: nil))
            }
        }
        for entry in deleted where !movedFrom.contains(entry.path) {
            let path = RepoPath(bytes: entry.path)
            set.removed.append(path)
            set.changes.append(LocalChange(kind: .deleted, path: path.description, from: nil))
        }
        set.changes.sort { ($0.path, $0.kind.rawValue) < ($1.path, $1.kind.rawValue) }
        return set
    }

    /// The blob id of what is on disk at `path` (a symlink's target, or a
    /// file's bytes, holes read as zeros).
    func hashOnDisk(_ path: RepoPath, stat: FileStat) throws -> ObjectID {
        if stat.isSymlink {
            return try replica.rootFolder.readLink(path).withUnsafeBytes { try ObjectDatabase.blobID(of: $0) }
        }
        return try replica.rootFolder.readFile(path).withUnsafeBytes { try ObjectDatabase.blobID(of: $0) }
    }

    /// Finds files and symlinks below `folder` that the index does not have.
    /// A folder the index knows nothing of is new as a whole.
    private func walk(_ folder: RepoPath, tracked: Set<[UInt8]>, folders: Set<[UInt8]>,
                      into added: inout [(RepoPath, FileStat)]) throws {
        guard let handle = try? replica.rootFolder.folder(folder) else { return }
        for name in try handle.entryNames() {
            if folder.isRoot && Self.ignoredTopLevel.contains(name) { continue }
            // fprep's own temporary files are not the user's.
            if name.first == 0x2E, name.count > 8, String(decoding: name, as: UTF8.self).contains(".fprep-") { continue }
            let path = folder.appending(name)
            if tracked.contains(path.bytes) { continue }
            guard let stat = handle.stat(name: name) else { continue }
            if stat.isDirectory {
                try walk(path, tracked: tracked, folders: folders, into: &added)
            } else if stat.isRegular || stat.isSymlink {
                added.append((path, stat))
            }
        }
    }
}

extension Replica {
    /// The local changes since the last sync.
    public func localChanges() throws -> [LocalChange] {
        try LocalScanner(replica: self, index: repository.index()).scan().changes
    }
}
