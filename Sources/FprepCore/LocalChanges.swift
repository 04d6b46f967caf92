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
    /// Disk space of the tree outside `.git` and `.fprep`, as `du` counts.
    var treeBytes: Int64 = 0

    var isEmpty: Bool { removed.isEmpty && written.isEmpty }
}

/// Scans the replica for local changes.
struct LocalScanner {
    let replica: Replica
    let index: Index

    /// Folders never scanned: fprep's and git's own.
    static let ignoredTopLevel: Set<[UInt8]> = [Array(".git".utf8), Array(Replica.stateFolderName.utf8)]

    func scan() throws -> LocalChangeSet {
        let classifier = StateClassifier(root: replica.rootFolder, index: index)
        var set = LocalChangeSet()
        // One walk of the tree looks at every file once, with a stat relative
        // to its open folder: a file the index has (found by binary search in
        // libgit2's own index, nothing copied) is classified from its stat
        // data; the others are new.
        let count = index.count
        var seen = [Bool](repeating: false, count: count)
        var added: [(RepoPath, FileStat)] = []
        var deleted: [IndexEntry] = []
        var bytes: Int64 = 0

        func visit(_ folder: FolderHandle, _ prefix: [UInt8]) throws {
            for name in try folder.entryNames() {
                if prefix.isEmpty && Self.ignoredTopLevel.contains(name) { continue }
                guard let stat = folder.stat(name: name) else { continue }
                bytes += stat.blocks * 512
                // fprep's own temporary files are not the user's.
                if name.first == 0x2E, name.count > 8, String(decoding: name, as: UTF8.self).contains(".fprep-") { continue }
                let path = prefix.isEmpty ? name : prefix + [0x2F] + name
                if let (position, entry) = index.find(path) {
                    seen[position] = true
                    let mode = FileMode(raw: entry.mode)
                    if mode == .submodule { continue }
                    set.items += 1
                    let state = classifier.state(of: entry, stat: stat)
                    set.counts[state, default: 0] += 1
                    guard state == .modified else { continue }
                    let itemPath = RepoPath(bytes: path)
                    if stat.isDirectory {
                        // A file turned into a folder: the file is gone; what
                        // is in the folder comes as new files.
                        deleted.append(entry)
                        if let child = try? folder.folder(RepoPath(bytes: name)) { try visit(child, path) }
                        continue
                    }
                    let newMode: FileMode = stat.isSymlink ? .symlink : (stat.isExecutable ? .executable : .blob)
                    set.written.append(LocalChangeSet.Write(path: itemPath, id: nil, mode: newMode, placeholder: false))
                    set.changes.append(LocalChange(kind: .modified, path: itemPath.description, from: nil))
                } else if stat.isDirectory {
                    if index.firstPosition(withPrefix: path + [0x2F]) != nil { set.folderCount += 1 }
                    if let child = try? folder.folder(RepoPath(bytes: name)) { try visit(child, path) }
                } else if stat.isRegular || stat.isSymlink {
                    added.append((RepoPath(bytes: path), stat))
                }
            }
        }
        try visit(replica.rootFolder, [])
        for position in 0..<count where !seen[position] {
            guard let entry = index.entry(at: position), FileMode(raw: entry.mode) != .submodule else { continue }
            set.items += 1
            set.counts[.deleted, default: 0] += 1
            deleted.append(entry)
        }
        set.treeBytes = bytes

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
            if stat.isRegular, let marked = ContentOperations.placeholderBlob(replica.rootFolder, path),
               ContentOperations.holdsNoData(replica.rootFolder, path, stat),
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

}

extension Replica {
    /// The local changes since the last sync.
    public func localChanges() throws -> [LocalChange] {
        try LocalScanner(replica: self, index: repository.index()).scan().changes
    }
}
