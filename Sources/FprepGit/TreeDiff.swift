import CLibGit2
import Glibc

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

/// A tree entry whose path is longer than the system takes (PATH_MAX less
/// its NUL): too deep a tree or too long names. The diff stops there, so a
/// tree thousands of folders deep costs a bounded walk, never the stack.
public struct TreePathTooLong: Error, Sendable {
    public let path: [UInt8]
    /// The longest path fprep lays out, in bytes.
    public static let limit = Int(PATH_MAX) - 1
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
        // Folders wait on a list of their own, not on the call stack: a
        // tree thousands of folders deep costs a loop, never a crash.
        var pending: [Pending] = [Pending(old: old, new: new, prefix: [])]
        while let next = pending.popLast() {
            try diff(old: next.old, new: next.new, prefix: next.prefix, into: &result, pending: &pending)
        }
        result.deltas.sort { $0.path.lexicographicallyPrecedes($1.path) }
        // Path order: a folder before what is in it.
        result.addedFolders.sort { $0.path.lexicographicallyPrecedes($1.path) }
        result.deletedFolders.sort { $0.path.lexicographicallyPrecedes($1.path) }
        return result
    }

    /// Two subtrees still to compare.
    private struct Pending {
        let old: ObjectID?
        let new: ObjectID?
        let prefix: [UInt8]
    }

    /// A tree's entries in place (libgit2's parse of the object, which
    /// points into its data): nothing is copied for the entries the two
    /// sides share, which is nearly all of them.
    private final class Listing {
        let tree: OpaquePointer?
        let count: Int

        init(_ id: ObjectID?, in repository: Repository) throws {
            guard let id, id != ObjectID.emptyTree else {
                tree = nil
                count = 0
                return
            }
            var raw = id.raw
            var pointer: OpaquePointer?
            try check(git_tree_lookup(&pointer, repository.pointer, &raw), "git_tree_lookup")
            tree = pointer
            count = pointer.map { git_tree_entrycount($0) } ?? 0
        }

        deinit { if let tree { git_tree_free(tree) } }

        func entry(_ i: Int) -> OpaquePointer { git_tree_entry_byindex(tree, i)! }
    }

    private struct Name {
        let bytes: UnsafeBufferPointer<UInt8>
        let isTree: Bool

        init(_ entry: OpaquePointer) {
            let pointer = git_tree_entry_name(entry)!
            bytes = UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: strlen(pointer))
            isTree = git_tree_entry_filemode_raw(entry).rawValue == 0o040000
        }

        /// git's tree order (`TreeOrder`).
        func order(_ other: Name) -> Int32 {
            TreeOrder.compare(bytes, folder: isTree, other.bytes, folder: other.isTree)
        }

        func sameBytes(_ other: Name) -> Bool {
            bytes.count == other.bytes.count && memcmp(bytes.baseAddress!, other.bytes.baseAddress!, bytes.count) == 0
        }
    }

    /// Walks both trees in git's order at once, as `git diff-tree` does.
    private func diff(old: ObjectID?, new: ObjectID?, prefix: [UInt8], into result: inout TreeDiffResult,
                      pending: inout [Pending]) throws {
        if old == new { return }
        let oldListing = try Listing(old, in: repository)
        let newListing = try Listing(new, in: repository)
        func path(_ name: Name) -> [UInt8] { prefix.isEmpty ? Array(name.bytes) : prefix + [0x2F] + Array(name.bytes) }
        var i = 0, j = 0
        while i < oldListing.count || j < newListing.count {
            let oldEntry = i < oldListing.count ? oldListing.entry(i) : nil
            let newEntry = j < newListing.count ? newListing.entry(j) : nil
            let oldName = oldEntry.map(Name.init)
            let newName = newEntry.map(Name.init)
            // Which side comes first in git's order; an ended side never does.
            let order: Int32
            if let oldName, let newName { order = oldName.order(newName) } else { order = oldName == nil ? 1 : -1 }
            if order < 0, let oldEntry, let oldName {
                i += 1
                try compare(old: Tree.copy(oldEntry), new: nil, path: path(oldName), into: &result, pending: &pending)
                continue
            }
            guard let newEntry, let newName else { break }
            try checkUnique(newName, at: j, in: newListing, prefix: prefix)
            j += 1
            if order == 0, let oldEntry {
                i += 1
                let sameID = git_oid_equal(git_tree_entry_id(oldEntry), git_tree_entry_id(newEntry)) != 0
                let sameMode = FileMode(raw: git_tree_entry_filemode_raw(oldEntry).rawValue)
                    == FileMode(raw: git_tree_entry_filemode_raw(newEntry).rawValue)
                if sameID && sameMode { continue }   // the common case: nothing is copied
                try compare(old: Tree.copy(oldEntry), new: Tree.copy(newEntry), path: path(newName), into: &result, pending: &pending)
            } else {
                try compare(old: nil, new: Tree.copy(newEntry), path: path(newName), into: &result, pending: &pending)
            }
        }
    }

    /// Refuses a tree that names two entries alike. The same name twice
    /// sits side by side in git's order; a file and a folder of one name
    /// sit apart, only names that extend it with a byte below '/' between.
    private func checkUnique(_ name: Name, at index: Int, in listing: Listing, prefix: [UInt8]) throws {
        var k = index - 1
        while k >= 0 {
            let earlier = Name(listing.entry(k))
            if earlier.sameBytes(name) {
                throw DuplicateTreeEntry(path: prefix.isEmpty ? Array(name.bytes) : prefix + [0x2F] + Array(name.bytes))
            }
            guard name.isTree, TreeOrder.sortsBetween(earlier.bytes, fileAndFolderNamed: name.bytes) else { return }
            k -= 1
        }
    }

    private func compare(old: TreeEntry?, new: TreeEntry?, path: [UInt8], into result: inout TreeDiffResult,
                         pending: inout [Pending]) throws {
        if let old, let new, old.id == new.id, old.mode == new.mode { return }
        if path.count > TreePathTooLong.limit { throw TreePathTooLong(path: path) }
        let oldIsTree = old?.mode == .tree
        let newIsTree = new?.mode == .tree
        if oldIsTree && !newIsTree, let old { result.deletedFolders.append(FolderDelta(path: path, id: old.id)) }
        if newIsTree && !oldIsTree, let new { result.addedFolders.append(FolderDelta(path: path, id: new.id)) }
        if oldIsTree || newIsTree {
            pending.append(Pending(old: oldIsTree ? old?.id : nil, new: newIsTree ? new?.id : nil, prefix: path))
        }
        let oldLeaf = oldIsTree ? nil : old
        let newLeaf = newIsTree ? nil : new
        if oldLeaf != nil || newLeaf != nil {
            result.deltas.append(TreeDelta(path: path, old: oldLeaf, new: newLeaf))
        }
    }
}
