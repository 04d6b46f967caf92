/// Writes a new tree from a base tree and a set of path edits, rebuilding
/// only the trees along the edited paths (the rest keep their ids). A
/// folder left empty by the edits disappears, as git has no empty trees.
public struct TreeEditor {
    /// What goes at a path: an entry, or nothing.
    public enum Edit: Sendable {
        case put(ObjectID, FileMode)
        case remove
    }

    let repository: Repository

    public init(_ repository: Repository) { self.repository = repository }

    /// The id of `base` (nil: the empty tree) with `edits` applied; paths
    /// are '/'-separated bytes.
    ///
    /// No entry is ever dropped by implication: a put below a path that
    /// holds a file (in the base, or put by the same edits) throws
    /// `TreeEditConflict` unless that file is removed explicitly, and
    /// removals below a path that is not a folder are moot (the folder they
    /// were in is already gone). Callers resolve such collisions (keeping
    /// both sides) before they edit.
    public func apply(_ edits: [[UInt8]: Edit], to base: ObjectID?) throws -> ObjectID {
        try write(base, edits.map { (path: $0.key.split(separator: 0x2F).map(Array.init), edit: $0.value) }) ?? ObjectID.emptyTree
    }

    /// Writes one level; nil when it ends up empty.
    private func write(_ base: ObjectID?, _ edits: [(path: [[UInt8]], edit: Edit)]) throws -> ObjectID? {
        var direct: [[UInt8]: Edit] = [:]
        var below: [[UInt8]: [(path: [[UInt8]], edit: Edit)]] = [:]
        for item in edits where !item.path.isEmpty {
            if item.path.count == 1 {
                direct[item.path[0]] = item.edit
            } else {
                below[item.path[0], default: []].append((Array(item.path.dropFirst()), item.edit))
            }
        }
        var entries: [[UInt8]: TreeEntry] = [:]
        if let base, base != ObjectID.emptyTree {
            for entry in try repository.tree(base).entries { entries[entry.name] = entry }
        }
        for (name, edit) in direct {
            switch edit {
            case .put(let id, let mode): entries[name] = TreeEntry(name: name, id: id, mode: mode)
            case .remove: entries[name] = nil
            }
        }
        for (name, childEdits) in below {
            if let standing = entries[name], standing.mode != .tree {
                // Something that is not a folder stands at `name`: removals
                // below it have nothing left to remove, and a put below it
                // would silently replace it.
                if childEdits.allSatisfy({ if case .remove = $0.edit { true } else { false } }) { continue }
                throw TreeEditConflict(path: name, below: childEdits.first?.path ?? [])
            }
            let existing = entries[name]?.id
            if let child = try write(existing, childEdits) {
                entries[name] = TreeEntry(name: name, id: child, mode: .tree)
            } else {
                entries[name] = nil
            }
        }
        guard !entries.isEmpty else { return nil }
        let builder = try repository.treeBuilder()
        for entry in entries.values { try builder.insert(name: entry.name, id: entry.id, mode: entry.mode) }
        return try builder.write()
    }
}

/// Edits that would put an entry below a file or symlink that stays: git
/// can hold only one of the two, so applying them would lose the other.
public struct TreeEditConflict: Error, Sendable, CustomStringConvertible {
    /// The name of the entry that is not a folder (at the level it was met).
    public let path: [UInt8]
    /// The rest of the path of one put below it.
    public let below: [[UInt8]]

    public var description: String {
        "an edit puts '\(String(decoding: Array(below.joined(separator: [0x2F])), as: UTF8.self))' below '\(String(decoding: path, as: UTF8.self))', which is not a folder"
    }
}
