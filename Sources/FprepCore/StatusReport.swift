import FoundationEssentials
import Glibc
import FprepGit

/// What `fprep status` reports about a replica.
public struct StatusReport: Sendable, Encodable {
    public struct Change: Sendable, Encodable {
        public let path: String
        public let state: ItemState
    }

    public let root: String
    public let domain: String
    public let remote: String
    public let branch: String
    public let anchor: String?
    /// Files and symlinks.
    public let items: Int
    public let folders: Int
    public let dataless: Int
    public let materialized: Int
    public let modified: Int
    public let deleted: Int
    /// Sum of the sizes of every file at the anchor, as the remote knows them.
    public let logicalSize: Int64
    /// Disk space the replica takes: its tree, `.git` and `.fprep`, as `du` counts.
    public let bytesOnDisk: Int64
    /// Items with local changes (modified or deleted), path order.
    public let changes: [Change]
}

extension Replica {
    /// Scans every item with `lstat` (content is read only for materialized
    /// files whose stat data changed) and sums up the replica.
    public func status() throws -> StatusReport {
        let index = try repository.index()
        let classifier = StateClassifier(root: rootFolder)
        var counts: [ItemState: Int] = [:]
        var changes: [StatusReport.Change] = []
        var folders = Set<[UInt8]>()
        var items = 0
        for position in 0..<index.count {
            guard let entry = index.entry(at: position) else { continue }
            let path = RepoPath(bytes: entry.path)
            var parent = path.parent
            while !parent.isRoot, folders.insert(parent.bytes).inserted { parent = parent.parent }
            if FileMode(raw: entry.mode) == .submodule { continue }  // reported by clone as unsupported
            items += 1
            let state = classifier.state(of: entry)
            counts[state, default: 0] += 1
            if state == .modified || state == .deleted {
                changes.append(StatusReport.Change(path: path.description, state: state))
            }
        }
        return StatusReport(root: root, domain: domain, remote: remoteURL, branch: branch, anchor: anchor?.hex,
                            items: items, folders: folders.count, dataless: counts[.dataless] ?? 0,
                            materialized: counts[.materialized] ?? 0, modified: counts[.modified] ?? 0,
                            deleted: counts[.deleted] ?? 0,
                            logicalSize: Int64(try store.meta("logical_size") ?? "0") ?? 0,
                            bytesOnDisk: diskUsage(of: root), changes: changes)
    }
}
