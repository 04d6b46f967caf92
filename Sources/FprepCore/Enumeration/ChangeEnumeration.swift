import FoundationEssentials
import Glibc
import FprepGit

/// One batch of changes between two anchors (File Provider's
/// `enumerateChanges(for:from:)`).
public struct ChangeBatch: Sendable, Encodable {
    public struct MovedItem: Sendable, Encodable {
        public let from: String
        public let to: String
        public let kind: String
    }

    /// Items that are new or changed, with full metadata as `ls` gives it.
    public var updated: [Item] = []
    /// Identifiers of items that are gone.
    public var deleted: [String] = []
    /// Items whose identifier changed (renamed or moved, same content).
    public var moved: [MovedItem] = []
    /// The anchor this batch reaches: pass it as `--from` next time. While
    /// `moreComing` is true it is a continuation token, not a commit id.
    public var anchor: String
    public var moreComing: Bool
}

extension Replica {
    /// The current anchor (the commit the replica is laid out from).
    public func currentAnchor() throws -> String {
        guard let anchor else { throw FprepError("the replica has no anchor yet: its remote is empty") }
        return anchor.hex
    }

    /// The commit an anchor given by a user names: a full id (known or
    /// not: an unknown one has expired), or a unique prefix of a known one.
    func anchorID(_ text: String) throws -> ObjectID? {
        if let id = ObjectID(hex: text) { return id }
        do {
            return try repository.commitID(prefix: text)
        } catch let error as GitError where error.code == .ambiguous {
            throw FprepError(.usage, "'\(text)' names more than one commit; give more of its digits")
        }
    }

    /// The changes from anchor `from` to `to` (default: the current anchor),
    /// for one container (a folder's identifier, the root or the working
    /// set) or all of them, at most `limit` per batch.
    public func changes(from: String, to: String?, container: String?, limit: Int?) throws -> ChangeBatch {
        if let limit, limit < 1 { throw FprepError(.usage, "the limit must be at least 1") }
        var start = try AnchorToken.parse(from, resolve: anchorID)
        if let to {
            guard let target = try anchorID(to) else {
                throw FprepError(.usage, "'\(to)' is not an anchor (a commit id, or a unique prefix of one)")
            }
            if start.to != nil && start.to != target {
                throw FprepError(.usage, "the continuation token '\(from)' belongs to a batch that ends at another anchor")
            }
            start.to = target
        }
        guard let target = start.to ?? anchor else { throw FprepError("the replica has no anchor yet: its remote is empty") }
        let expired = FprepError(.expiredAnchor, "sync anchor '\(start.from.hex)' has expired (it is unknown or history was rewritten); re-enumerate from scratch with 'fprep ls'")
        guard (try? repository.commit(start.from)) != nil, (try? repository.commit(target)) != nil else { throw expired }
        guard try repository.isAncestor(start.from, of: target) else { throw expired }
        Trace.mark("anchors")
        let oldTree = try repository.commit(start.from).treeID
        let newTree = try repository.commit(target).treeID
        // The sync that moved the anchor from there recorded its changes.
        let changes = try RecordedChanges.read(stateFolder, from: oldTree, to: newTree)
            ?? ChangeSet.between(repository, from: oldTree, to: newTree)
        Trace.mark("diff")
        let filter = try ContainerFilter(container, replica: self)
        var events: [ChangeEvent] = []
        for deletion in changes.deleted where try filter.includes(deletion.path) { events.append(.deleted(deletion.path)) }
        for folder in changes.deletedFolders where try filter.includes(folder.path) { events.append(.deleted(folder.path)) }
        for move in changes.moved where try filter.includes(move.from) || filter.includes(move.to) { events.append(.moved(move)) }
        for folder in changes.addedFolders where try filter.includes(folder.path) {
            events.append(.updated(folder.path, TreeEntry(name: folder.path.name, id: folder.id, mode: .tree)))
        }
        for update in changes.updated where try filter.includes(update.path) { events.append(.updated(update.path, update.new)) }

        let end = limit.map { min(events.count, start.offset + $0) } ?? events.count
        let page = start.offset < events.count ? events[start.offset..<end] : []
        var batch = ChangeBatch(anchor: target.hex, moreComing: end < events.count)
        if batch.moreComing { batch.anchor = AnchorToken(from: start.from, to: target, offset: end).text }
        let index = LazyIndex(repository)
        let sizes = try store.blobInfoLookup()
        // Each updated item's state is read from the disk in one pass (on a
        // cold disk the lookups of scattered paths wait together).
        let updatedPaths = page.compactMap { if case .updated(let path, _) = $0 { return path } else { return nil } }
        var probes = rootFolder.probe(updatedPaths)[...]
        Trace.mark("probe")
        try store.reading {
            for event in page {
                switch event {
                case .deleted(let path): batch.deleted.append(path.description)
                case .moved(let move):
                    batch.moved.append(ChangeBatch.MovedItem(from: move.from.description, to: move.to.description,
                                                             kind: move.isFolder ? "folder" : move.entry.mode == .symlink ? "symlink" : "file"))
                case .updated(let path, let entry):
                    guard let probe = probes.popFirst() else { break }
                    batch.updated.append(try makeItem(entry, path: path, probe: probe, index: index, sizes: sizes))
                }
            }
        }
        Trace.mark("items")
        return batch
    }
}

private enum ChangeEvent {
    case deleted(RepoPath)
    case moved(ChangeSet.Move)
    case updated(RepoPath, TreeEntry)
}

/// Which changes a container's enumerator sees: its own children, or, for
/// the working set, its items.
private struct ContainerFilter {
    let folder: RepoPath?
    let workingSet: WorkingSetMembership?

    init(_ container: String?, replica: Replica) throws {
        switch container {
        case nil:
            folder = nil
            workingSet = nil
        case ContainerIdentifier.workingSet?:
            folder = nil
            workingSet = WorkingSetMembership(replica.store, now: Int64(Date().timeIntervalSince1970))
        case ContainerIdentifier.root?:
            folder = .root
            workingSet = nil
        case let identifier?:
            folder = RepoPath(identifier: identifier)
            workingSet = nil
        }
    }

    func includes(_ path: RepoPath) throws -> Bool {
        if let folder { return path.parent == folder && !path.isRoot }
        if let workingSet { return try workingSet.contains(path) || workingSet.contains(path.parent) }
        return true
    }
}

/// An anchor as a consumer passes it: a commit id, or a continuation token
/// `c1.FROM.TO.OFFSET` for a batch that `--limit` cut.
struct AnchorToken {
    var from: ObjectID
    var to: ObjectID?
    var offset: Int

    init(from: ObjectID, to: ObjectID?, offset: Int) {
        self.from = from
        self.to = to
        self.offset = offset
    }

    static func parse(_ text: String, resolve: (String) throws -> ObjectID? = { ObjectID(hex: $0) }) throws -> AnchorToken {
        if let id = try resolve(text) { return AnchorToken(from: id, to: nil, offset: 0) }
        let parts = text.split(separator: ".")
        guard parts.count == 4, parts[0] == "c1", let from = ObjectID(hex: String(parts[1])),
              let to = ObjectID(hex: String(parts[2])), let offset = Int(parts[3]), offset >= 0 else {
            throw FprepError(.usage, "'\(text)' is not a sync anchor (a commit id or a unique prefix of one, or the token a previous batch printed)")
        }
        return AnchorToken(from: from, to: to, offset: offset)
    }

    var text: String { "c1.\(from.hex).\(to?.hex ?? "").\(offset)" }
}
