import FoundationEssentials
import FprepGit

/// The sizes a device publishes with its own push: the manifest lines
/// (`SizeManifest`) of the blobs its commit brings to the remote. The device
/// knows them (the files it committed, the objects it holds), so a remote
/// without fprep's hook (a hosted one, a plain bare repository) still tells
/// other devices how large the files are. A hook that lists the same blobs
/// again is harmless: the first line for a blob wins.
struct SizePublication {
    let lines: [String]

    /// The lines of the blobs that `target`'s tree has and the tree of
    /// `remoteTip` (the remote's branch as last fetched; nil: an empty
    /// remote) has not, for those whose size this replica knows. A blob it
    /// knows no size of (a placeholder moved) is left out, never guessed.
    init(replica: Replica, pushing target: ObjectID, over remoteTip: ObjectID?) throws {
        let repository = replica.repository
        let commit = try repository.commit(target)
        let oldTree = try remoteTip.map { try repository.commit($0).treeID }
        let sizes = try replica.store.blobInfoLookup()
        let odb = try repository.objectDatabase()
        var seen = Set<ObjectID>()
        var lines: [String] = []
        for delta in try TreeDiff(repository).deltas(from: oldTree, to: commit.treeID) {
            guard let entry = delta.new, entry.mode != .submodule, seen.insert(entry.id).inserted else { continue }
            if let info = try sizes(entry.id), info.size >= 0 {
                lines.append(SizeManifest.line(entry.id, size: info.size, time: info.mtime))
            } else if let size = try odb.size(of: entry.id) {
                lines.append(SizeManifest.line(entry.id, size: Int64(size), time: commit.time))
            }
        }
        self.lines = lines
    }

    /// The manifest commits of these lines on top of `tip` (the remote's
    /// manifest as last fetched), as an update leased on that tip.
    func update(on tip: ObjectID?, in repository: Repository) throws -> Transport.LeasedUpdate? {
        guard let commit = try SizeManifest.append(lines, to: tip, in: repository, time: Int64(Date().timeIntervalSince1970)) else {
            return nil
        }
        return Transport.LeasedUpdate(reference: SizeManifest.reference, target: commit, expected: tip)
    }
}

extension Replica {
    /// Pushes `target` to the followed branch and, in the same push, the
    /// sizes of the blobs it brings to the remote's size manifest. The
    /// manifest update is leased on the tip this replica last fetched: when
    /// another device or the remote's hook moved it meanwhile, the branch is
    /// pushed all the same, and the sizes go on top of the fetched new tip
    /// (a few tries). Returns why the sizes could not be published, if
    /// they could not (the push itself went through); push refusals of the
    /// branch throw as `Transport.push` throws them.
    func pushPublishingSizes(_ target: ObjectID) throws -> String? {
        // The sizes are an addition to the push: a failure to work them out
        // (an unreadable tree) never stands in its way.
        let remoteTip = try repository.referenceTarget("refs/remotes/origin/" + branch)
        let publication = try? SizePublication(replica: self, pushing: target, over: remoteTip)
        guard let publication,
              let first = try? publication.update(on: repository.referenceTarget(SizeManifest.trackingReference), in: repository) else {
            try Transport.push(target, branch: branch, gitDirectory: gitDirectory)
            return nil
        }
        guard case .refused(var reason) = try Transport.push(target, branch: branch, gitDirectory: gitDirectory, alongside: first) else {
            return nil
        }
        // The branch is on the remote now; only the sizes wait. A manifest
        // that moved meanwhile is fetched and the sizes go on top of it; a
        // remote that refuses the ref itself is not asked again.
        var tries = 0
        while Self.manifestMoved(reason), tries < 3 {
            tries += 1
            do {
                try Transport.fetchFprepReferences(gitDirectory: gitDirectory)
                guard let next = try publication.update(on: repository.referenceTarget(SizeManifest.trackingReference), in: repository),
                      let refused = try Transport.push(next, gitDirectory: gitDirectory) else { return nil }
                reason = refused
            } catch let error as GitCommandError {
                reason = error.reason
            }
        }
        let count = publication.lines.count
        return "the remote did not take the sizes of \(count) pushed file\(count == 1 ? "" : "s") into its size manifest (\(reason)); other devices show \(count == 1 ? "it" : "them") as size unknown until the manifest lists \(count == 1 ? "it" : "them") ('fprep install-hooks' on the remote)"
    }

    /// Whether a refusal of the manifest's update says that its ref moved
    /// on since the last fetch (a push of another device, or the hook's).
    private static func manifestMoved(_ reason: String) -> Bool {
        ["stale info", "fetch first", "non-fast-forward"].contains(reason)
    }
}
