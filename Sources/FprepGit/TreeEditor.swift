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
    /// are '/'-separated bytes. A put below a path that holds a file
    /// replaces that file with a folder.
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
            let existing = entries[name].flatMap { $0.mode == .tree ? $0.id : nil }
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
