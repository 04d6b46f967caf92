import FoundationEssentials
import FprepGit
import Glibc

/// One change to the working-set metadata every device shares: a tag or a
/// favorite set or cleared, or items renamed (their marks follow them).
struct MetadataOperation: Codable, Equatable {
    enum Kind: String, Codable { case tag, untag, favorite, unfavorite, move }

    var kind: Kind
    var path: String
    var name: String?
    /// For a move, the new identifier.
    var to: String?
    var time: Int64
    var device: String
}

/// Tags and favorites synced across devices through `refs/fprep/meta` on
/// the remote: a chain of commits (empty tree) whose messages hold the
/// operations each device made, one JSON object a line. Commits travel with
/// a blobless fetch. Every device folds the whole chain, in time order, into
/// the same state (the last write of a tag or favorite wins), so concurrent
/// offline edits on two devices merge without conflict.
struct SharedMetadata {
    static let reference = "refs/fprep/meta"
    static let trackingReference = "refs/remotes/origin-fprep/meta"
    static let header = "fprep meta v1"
    /// The store's note of the chain tip last folded with no pending
    /// operations ("" for no chain; "-" after a fold with pending ones; absent
    /// until the first fold).
    static let foldedKey = "meta_folded_tip"

    let replica: Replica

    /// Records an operation to be pushed with the next sync.
    static func record(_ operation: MetadataOperation, in store: StateStore) throws {
        let data = try JSONEncoder().encode(operation)
        try store.database.prepare("INSERT INTO meta_ops(operation) VALUES(?1)").bind(.blob(Array(data))).run()
    }

    /// Pushes this device's pending operations on top of the remote's chain
    /// (retrying when another device pushed first) and folds the chain into
    /// the local tags and favorites. Offline, the operations stay pending.
    func synchronize() throws {
        let store = replica.store
        let pending = try pendingOperations()
        var remoteTip = try replica.repository.referenceTarget(Self.trackingReference)
        if !pending.isEmpty {
            for attempt in 1...5 {
                let message = Self.header + "\n\n" + pending.map { String(decoding: (try? JSONEncoder().encode($0.1)) ?? Data(), as: UTF8.self) }.joined(separator: "\n") + "\n"
                let signature = Signature(name: "fprep", email: "fprep@localhost", time: Int64(Date().timeIntervalSince1970))
                let commit = try replica.repository.writeCommit(tree: ObjectID.emptyTree, parents: remoteTip.map { [$0] } ?? [],
                                                                message: message, author: signature, committer: signature)
                do {
                    try GitCommand.run(["--git-dir=\(replica.gitDirectory)", "push", "--quiet", "--no-thin", "origin",
                                        "\(commit.hex):\(Self.reference)"])
                    try replica.repository.setReference(Self.trackingReference, to: commit, message: "fprep: metadata pushed")
                    remoteTip = commit
                    let last = pending.map(\.0).max() ?? 0
                    try store.database.prepare("DELETE FROM meta_ops WHERE seq <= ?1").bind(.int(last)).run()
                    break
                } catch let error as GitCommandError {
                    let rejected = error.standardError.contains("[rejected]") || error.standardError.contains("fetch first")
                    guard rejected, attempt < 5 else { break }  // offline: stays pending
                    _ = try? GitCommand.run(["--git-dir=\(replica.gitDirectory)", "fetch", "--quiet", "--no-tags", "origin",
                                         "+\(Self.reference):\(Self.trackingReference)"])
                    remoteTip = try replica.repository.referenceTarget(Self.trackingReference)
                }
            }
        }
        try fold(remoteTip: remoteTip)
    }

    /// The operations not pushed yet, oldest first.
    func pendingOperations() throws -> [(Int64, MetadataOperation)] {
        let statement = try replica.store.database.prepare("SELECT seq, operation FROM meta_ops ORDER BY seq")
        var result: [(Int64, MetadataOperation)] = []
        while try statement.step() {
            if let operation = try? JSONDecoder().decode(MetadataOperation.self, from: Data(statement.blob(1))) {
                result.append((statement.int(0), operation))
            }
        }
        return result
    }

    /// Rebuilds the local tags and favorites from the remote's chain plus
    /// the pending operations.
    func fold(remoteTip: ObjectID?) throws {
        // Nothing new since the last fold (the usual sync: no tag or
        // favorite changed anywhere): the tables are what a fold would
        // write, so neither the chain nor a transaction is needed.
        let folded = remoteTip?.hex ?? ""
        let pending = try pendingOperations()
        // A replica that never folded has empty tables: what a fold of no
        // chain writes (so a first sync commits nothing here either).
        if pending.isEmpty, try (replica.store.meta(Self.foldedKey) ?? "") == folded { return }
        // The chain is walked from its tip; its commits, reversed, are oldest
        // first, and each device's operations keep that order (then the
        // pending ones) when several fall in the same second.
        var commits: [[MetadataOperation]] = []
        var seen = Set<ObjectID>()
        var queue: [ObjectID] = remoteTip.map { [$0] } ?? []
        while let id = queue.popLast() {
            guard seen.insert(id).inserted, let commit = try? replica.repository.commit(id) else { continue }
            commits.append(commit.message.split(separator: "\n").filter { $0.hasPrefix("{") }.compactMap { line in
                try? JSONDecoder().decode(MetadataOperation.self, from: Data(line.utf8))
            })
            queue += commit.parentIDs
        }
        let ordered = Array(commits.reversed().joined()) + pending.map(\.1)
        let operations = ordered.enumerated()
            .sorted { ($0.element.time, $0.element.device, $0.offset) < ($1.element.time, $1.element.device, $1.offset) }
            .map(\.element)
        var tags: [String: Set<String>] = [:]
        var favorites = Set<String>()
        for operation in operations {
            switch operation.kind {
            case .tag: if let name = operation.name { tags[operation.path, default: []].insert(name) }
            case .untag: if let name = operation.name { tags[operation.path]?.remove(name) }
            case .favorite: favorites.insert(operation.path)
            case .unfavorite: favorites.remove(operation.path)
            case .move:
                guard let to = operation.to else { continue }
                let from = operation.path
                func moved(_ path: String) -> String? {
                    if path == from { return to }
                    if path.hasPrefix(from + "/") { return to + path.dropFirst(from.count) }
                    return nil
                }
                for (path, names) in tags { if let target = moved(path) { tags[path] = nil; tags[target, default: []].formUnion(names) } }
                for path in favorites { if let target = moved(path) { favorites.remove(path); favorites.insert(target) } }
            }
        }
        let now = Int64(Date().timeIntervalSince1970)
        try replica.store.transaction {
            try replica.store.database.execute("DELETE FROM tags; DELETE FROM favorites;")
            for (path, names) in tags {
                for name in names { try replica.store.setTag(RepoPath(identifier: path), name, present: true, at: now) }
            }
            for path in favorites { try replica.store.setFavorite(RepoPath(identifier: path), present: true, at: now) }
            // Only a fold of the chain alone can be skipped next time.
            try replica.store.setMeta(Self.foldedKey, pending.isEmpty ? folded : "-")
        }
    }
}
