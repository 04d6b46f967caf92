import FprepGit

/// The rules every remote tree entry meets before fprep lays it out, the
/// same for a clone (`LayoutPlan.scan`), a sync (the entries its diff
/// brings in) and a merge's result (synced like any other tree): a safe
/// name (`EntryNameCheck`, which `import-tree` applies to local names too),
/// a mode git writes, and a path the system takes. Duplicate names are
/// refused where trees are read (`LayoutPlan`, `TreeDiff`). The scan
/// holds back local items that break them (`refusedLocalItem`).
enum TreeEntryRules {
    /// Why the entry `name` of kind `mode` at `path` is refused, or nil.
    static func problem(name: [UInt8], mode: FileMode, path: RepoPath) -> String? {
        if let problem = EntryNameCheck.problem(with: name) { return problem }
        if case .unknown(let raw) = mode { return "an unknown file mode \(String(raw, radix: 8))" }
        if path.bytes.count > TreePathTooLong.limit { return pathTooLong }
        return nil
    }

    static let pathTooLong = "a path longer than \(TreePathTooLong.limit) bytes (too deep a tree or too long names)"

    /// Refuses the entry with `FprepError.unsafeEntry` when it breaks a rule.
    static func check(name: [UInt8], mode: FileMode, path: RepoPath) throws {
        if let problem = problem(name: name, mode: mode, path: path) {
            throw FprepError.unsafeEntry(shown(path), problem)
        }
    }

    /// Checks every entry `changes` brings in, at a cost that follows the
    /// change: the new and changed leaves, the move targets and the new
    /// folders. Every other entry of the new tree is one the replica
    /// already holds (checked when it came in).
    static func check(_ changes: ChangeSet) throws {
        for update in changes.updated { try check(name: update.path.name, mode: update.new.mode, path: update.path) }
        for move in changes.moved { try check(name: move.to.name, mode: move.entry.mode, path: move.to) }
        for folder in changes.addedFolders { try check(name: folder.path.name, mode: .tree, path: folder.path) }
    }

    /// The same rules for what this device would commit, so it never pushes
    /// a tree every other device refuses: the first item of `path` (a local
    /// file or symlink) whose name breaks them, or the whole path when it is
    /// too long, with why; nil when all of it may be committed.
    static func refusedLocalItem(_ path: RepoPath) -> (item: RepoPath, reason: String)? {
        var end = 0
        for component in path.bytes.split(separator: 0x2F, omittingEmptySubsequences: false) {
            end += component.count
            defer { end += 1 }
            if let problem = EntryNameCheck.problem(with: Array(component)) {
                return (RepoPath(bytes: Array(path.bytes[..<end])), problem)
            }
        }
        if path.bytes.count > TreePathTooLong.limit { return (path, pathTooLong) }
        return nil
    }

    /// A path as an error shows it: whole unless it is too long for a line.
    static func shown(_ path: RepoPath) -> String {
        let text = path.description
        guard path.bytes.count > 200 else { return text }
        return String(text.prefix(120)) + "…" + String(text.suffix(40)) + " (\(path.bytes.count) bytes, \(path.components.count) deep)"
    }
}
