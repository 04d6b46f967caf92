/// Which containers a change signals, per the File Provider rules
/// (seed 002): for each change, signal the parent container when the item
/// or its parent is in the working set; for a move whose old parent is in
/// the working set, signal the new parent too; if anything in the working
/// set changed, signal the working set once. One signal per container.
struct SignalPass {
    let workingSet: WorkingSetMembership

    func signals(for changes: ChangeSet) throws -> [(container: String, reason: String)] {
        var reasons: [String: Set<String>] = [:]
        var order: [String] = []
        var workingSetChanged = false
        func signal(_ folder: RepoPath, _ reason: String) {
            let container = ContainerIdentifier.of(folder)
            if reasons[container] == nil { order.append(container) }
            reasons[container, default: []].insert(reason)
        }
        func consider(_ path: RepoPath, _ reason: String) throws {
            if try workingSet.contains(path) || workingSet.contains(path.parent) {
                signal(path.parent, reason)
                workingSetChanged = true
            }
        }
        for update in changes.updated { try consider(update.path, update.old == nil ? "added" : "changed") }
        for deletion in changes.deleted { try consider(deletion.path, "deleted") }
        for folder in changes.addedFolders { try consider(folder.path, "added") }
        for folder in changes.deletedFolders { try consider(folder.path, "deleted") }
        for move in changes.moved {
            let oldSide = try workingSet.contains(move.from) || workingSet.contains(move.from.parent)
            let newSide = try workingSet.contains(move.to.parent)
            if oldSide {
                signal(move.from.parent, "moved out")
                signal(move.to.parent, "moved in")
            } else if newSide {
                signal(move.to.parent, "moved in")
            }
            if oldSide || newSide { workingSetChanged = true }
        }
        var result = order.map { (container: $0, reason: reasons[$0, default: []].sorted().joined(separator: ", ")) }
        if workingSetChanged { result.append((ContainerIdentifier.workingSet, "working set changed")) }
        return result
    }
}
