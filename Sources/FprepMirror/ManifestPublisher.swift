import FoundationEssentials
import FprepCore
import FprepGit

/// Publishes the sizes of pushed blobs to the host's size manifest
/// (`refs/fprep/sizes`), as the post-receive hook of an fprep remote does
/// in place: the mirror holds every blob, so it knows their sizes. The
/// manifest commits go on top of the host's tip as fetched and are pushed
/// leased on it; when a device's push moved it meanwhile, the tip is
/// fetched again and the sizes go on top (a few tries). A host that refuses
/// the ref is reported, never fatal: devices then show "size unknown".
struct ManifestPublisher {
    let mirror: MirrorRepository
    static let tries = 4

    /// One branch's move: `old` nil for a branch the mirror had not seen.
    struct Move {
        let old: ObjectID?
        let new: ObjectID
    }

    /// Publishes the sizes of the blobs `moves` bring; returns a line for
    /// the log, or nil when there was nothing to list.
    func publish(_ moves: [Move]) -> String? {
        do {
            let repository = try Repository(openingAt: mirror.gitDirectory)
            let lines = try manifestLines(moves, in: repository)
            guard !lines.isEmpty else { return nil }
            var tip = try repository.referenceTarget(SizeManifest.reference)
            for attempt in 1...Self.tries {
                guard let commit = try SizeManifest.append(lines, to: tip, in: repository, time: Int64(Date().timeIntervalSince1970)) else {
                    return nil
                }
                let update = Transport.LeasedUpdate(reference: SizeManifest.reference, target: commit, expected: tip)
                guard let refusal = try Transport.push(update, gitDirectory: mirror.gitDirectory) else {
                    try? repository.updateReference(SizeManifest.reference, to: commit, expecting: tip, message: "fprep mirror: size manifest")
                    return "published the sizes of \(counted(lines.count, "blob")) to the host's size manifest"
                }
                guard ["stale info", "fetch first", "non-fast-forward"].contains(refusal), attempt < Self.tries else {
                    return "the host refused \(SizeManifest.reference) (\(refusal)); devices show \(counted(lines.count, "new file")) as size unknown"
                }
                try mirror.fetchManifest()
                tip = try repository.referenceTarget(SizeManifest.reference)
            }
            return nil
        } catch let error as GitCommandError {
            return "cannot publish sizes to the host's size manifest: \(error.reason)"
        } catch {
            return "cannot publish sizes to the host's size manifest: \(error)"
        }
    }

    /// The manifest lines of the moves' new blobs, each blob once. A branch
    /// seen for the first time lists its whole tree, less what the manifest
    /// has already (devices' pushes published much of it).
    private func manifestLines(_ moves: [Move], in repository: Repository) throws -> [String] {
        var listed = Set<ObjectID>()
        if moves.contains(where: { $0.old == nil }), let tip = try repository.referenceTarget(SizeManifest.reference) {
            listed = try SizeManifest.listedBlobs(repository, from: tip)
        }
        var lines: [String] = []
        for move in moves {
            let commit = try repository.commit(move.new)
            let oldTree = try move.old.map { try repository.commit($0).treeID }
            let found = try SizeManifest.lines(repository, from: oldTree, to: commit.treeID, time: commit.time, skipping: listed)
            lines += found.lines
            listed.formUnion(found.blobs)
        }
        return lines
    }
}
