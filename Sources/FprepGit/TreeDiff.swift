/// One leaf-level difference between two trees: an entry that is only in the
/// old tree (deleted), only in the new one (added), or in both with another
/// id or mode (modified). Folders are never deltas themselves; their
/// contents are.
public struct TreeDelta: Sendable {
    public let path: [UInt8]
    public let old: TreeEntry?
    public let new: TreeEntry?
}

/// A whole folder that is only in the old tree or only in the new one.
public struct FolderDelta: Sendable {
    public let path: [UInt8]
    public let id: ObjectID
}

/// The result of a tree diff: leaf deltas, and the folders that appear or
/// disappear as a whole (so a renamed folder can be seen as one move).
public struct TreeDiffResult: Sendable {
    public var deltas: [TreeDelta] = []
    public var addedFolders: [FolderDelta] = []
    public var deletedFolders: [FolderDelta] = []
}

/// A tree that names two entries alike: git never writes one, and laying it
/// out would let one entry (a symlink) stand where the other (a folder) goes.
public struct DuplicateTreeEntry: Error, Sendable {
    public let path: [UInt8]
}

/// Diffs two trees the way git's `diff-tree -r` does: subtrees with the same
/// id are skipped without being read, so the cost follows the size of the
/// change, not the size of the tree.
public struct TreeDiff {
    let repository: Repository

    public init(_ repository: Repository) { self.repository = repository }

    /// The leaf deltas from `old` to `new` (nil: the empty tree), in path order.
    public func deltas(from old: ObjectID?, to new: ObjectID?) throws -> [TreeDelta] {
        try diff(from: old, to: new).deltas
    }

    /// Leaf deltas and whole-folder deltas from `old` to `new`, in path order.
    public func diff(from old: ObjectID?, to new: ObjectID?) throws -> TreeDiffResult {
        var result = TreeDiffResult()
        try diff(old: old, new: new, prefix: [], into: &result)
        result.deltas.sort { $0.path.lexicographicallyPrecedes($1.path) }
        return result
    }

    private func entries(of id: ObjectID?) throws -> [TreeEntry] {
        guard let id, id != ObjectID.emptyTree else { return [] }
        return try repository.tree(id).entries
    }

    private func diff(old: ObjectID?, new: ObjectID?, prefix: [UInt8], into result: inout TreeDiffResult) throws {
        if old == new { return }
        let oldEntries = try entries(of: old)
        let newEntries = try entries(of: new)
        var oldByName: [[UInt8]: TreeEntry] = [:]
        for entry in oldEntries { oldByName[entry.name] = entry }
        var seen = Set<[UInt8]>()
        for entry in newEntries {
            guard seen.insert(entry.name).inserted else {
                throw DuplicateTreeEntry(path: prefix.isEmpty ? entry.name : prefix + [0x2F] + entry.name)
            }
            let path = prefix.isEmpty ? entry.name : prefix + [0x2F] + entry.name
            try compare(old: oldByName[entry.name], new: entry, path: path, into: &result)
        }
        for entry in oldEntries where !seen.contains(entry.name) {
            let path = prefix.isEmpty ? entry.name : prefix + [0x2F] + entry.name
            try compare(old: entry, new: nil, path: path, into: &result)
        }
    }

    private func compare(old: TreeEntry?, new: TreeEntry?, path: [UInt8], into result: inout TreeDiffResult) throws {
        if let old, let new, old.id == new.id, old.mode == new.mode { return }
        let oldIsTree = old?.mode == .tree
        let newIsTree = new?.mode == .tree
        if oldIsTree && !newIsTree, let old { result.deletedFolders.append(FolderDelta(path: path, id: old.id)) }
        if newIsTree && !oldIsTree, let new { result.addedFolders.append(FolderDelta(path: path, id: new.id)) }
        if oldIsTree || newIsTree {
            try diff(old: oldIsTree ? old?.id : nil, new: newIsTree ? new?.id : nil, prefix: path, into: &result)
        }
        let oldLeaf = oldIsTree ? nil : old
        let newLeaf = newIsTree ? nil : new
        if oldLeaf != nil || newLeaf != nil {
            result.deltas.append(TreeDelta(path: path, old: oldLeaf, new: newLeaf))
        }
    }
}
