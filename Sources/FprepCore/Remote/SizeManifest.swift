import FoundationEssentials
import Glibc
import FprepGit

/// The size manifest: blob id → size and date, kept by the remote so that a
/// blobless clone, which knows no sizes, learns them without fetching blobs.
///
/// It is a chain of commits on `refs/fprep/sizes`, each with the empty tree
/// and a message listing the blobs one push added (`<id> <size> <time>` a
/// line). Commits travel with a `blob:none` fetch, so the manifest arrives
/// with the trees; a device reads only the commits it has not read yet.
public enum SizeManifest {
    public static let reference = "refs/fprep/sizes"
    /// Where a replica's fetch puts the remote's manifest.
    public static let trackingReference = "refs/remotes/origin-fprep/sizes"
    static let header = "fprep sizes v1"
    /// The most blobs one manifest commit lists. A remote reads whole the
    /// manifest commits a fetching device names as its own (up to 16 a
    /// fetch), so no commit should be large.
    static let linesPerCommit = 500

    /// Appends one manifest commit listing the blobs that appear between the
    /// trees `old` and `new` (every blob of `new` when `old` is nil). Sizes
    /// come from the object headers of `repository`, which must hold the
    /// blobs (the remote). Returns how many blobs it listed.
    @discardableResult
    public static func extend(_ repository: Repository, from old: ObjectID?, to new: ObjectID,
                              time: Int64, times: [ObjectID: Int64] = [:], whenBusy: () -> Void = {}) throws -> Int {
        let listing = try lines(repository, from: old, to: new, time: time, times: times)
        let (seen, lines) = (listing.blobs, listing.lines)
        guard !seen.isEmpty else { return 0 }
        // Other writers of the ref run at once: another push's hook, and a
        // device's push of its own sizes, whose receive-pack holds the ref's
        // lock meanwhile. A moved tip or a held lock is a wait and a retry on
        // the new tip, for up to `busyPatience`: retrying at once gave up
        // within microseconds of a lock held for milliseconds, and the push's
        // sizes were never listed.
        let deadline = Date().addingTimeInterval(busyPatience)
        var pause: useconds_t = 1_000
        while true {
            let tip = try repository.referenceTarget(reference)
            guard let commit = try append(lines, to: tip, in: repository, time: time) else { return seen.count }
            do {
                try repository.updateReference(reference, to: commit, expecting: tip, message: "fprep: size manifest")
                return seen.count
            } catch let error as GitError where [.locked, .modified, .exists].contains(error.code) && Date() < deadline {
                whenBusy()
                usleep(pause)
                pause = min(pause * 2, 100_000)
            }
        }
    }

    /// How long `extend` waits for the manifest's ref while other writers
    /// hold or move it (git's own wait for a ref's lock is 0.1 s; a hook
    /// that waits longer holds up only the push that ran it).
    static let busyPatience: TimeInterval = 10

    /// The manifest lines of the blobs that appear between the trees `old`
    /// and `new` (every blob of `new` when `old` is nil), sizes from the
    /// object headers of `repository`, which must hold the blobs; blobs in
    /// `known` (listed already) are left out. `blobs` counts every new blob
    /// seen, listed or not.
    public static func lines(_ repository: Repository, from old: ObjectID?, to new: ObjectID, time: Int64,
                             times: [ObjectID: Int64] = [:], skipping known: Set<ObjectID> = []) throws
        -> (blobs: Set<ObjectID>, lines: [String]) {
        let odb = try repository.objectDatabase()
        var seen = Set<ObjectID>()
        var lines: [String] = []
        for delta in try TreeDiff(repository).deltas(from: old, to: new) {
            guard let entry = delta.new, entry.mode != .submodule, !seen.contains(entry.id) else { continue }
            seen.insert(entry.id)
            guard !known.contains(entry.id), let size = try odb.size(of: entry.id) else { continue }
            lines.append(line(entry.id, size: Int64(size), time: times[entry.id] ?? time))
        }
        return (seen, lines)
    }

    /// Every blob the manifest chain from `tip` lists (a mirror that
    /// publishes a whole branch leaves out what devices published already).
    public static func listedBlobs(_ repository: Repository, from tip: ObjectID) throws -> Set<ObjectID> {
        Set(try entries(repository, from: tip, stoppingAt: nil).map(\.0))
    }

    /// One manifest line: `<id> <size> <time>`.
    static func line(_ id: ObjectID, size: Int64, time: Int64) -> String {
        "\(id.hex) \(size) \(time)\n"
    }

    /// Writes manifest commits listing `lines` on top of `parent` (nil: a
    /// new chain) and returns the last one; nil when there is nothing to list.
    /// At most `linesPerCommit` blobs a commit: the first manifest of a large
    /// tree must not be one commit of megabytes.
    public static func append(_ lines: [String], to parent: ObjectID?, in repository: Repository, time: Int64) throws -> ObjectID? {
        guard !lines.isEmpty else { return nil }
        let signature = Signature(name: "fprep", email: "fprep@localhost", time: time)
        var commit = parent
        var written: [ObjectID] = []
        for start in stride(from: 0, to: lines.count, by: linesPerCommit) {
            let message = header + "\n\n" + lines[start..<min(start + linesPerCommit, lines.count)].joined()
            commit = try repository.writeCommit(tree: ObjectID.emptyTree, parents: commit.map { [$0] } ?? [],
                                                message: message, author: signature, committer: signature)
            written += commit.map { [$0] } ?? []
        }
        if written.count >= packAtCommits { packWithoutDeltas(written, in: repository) }
        return commit
    }

    /// From this many commits at once (8,000 blobs), `append` packs them.
    static let packAtCommits = 16

    /// Moves new manifest commits from loose objects into one pack, with no
    /// search for deltas (lines of random ids have none). Left loose, every
    /// clone made the remote's `pack-objects` look for deltas among them
    /// and compress them again: the manifest of 10^6 files (2,000 commits)
    /// took 21 s of a clone's fetch, 2 s once packed, since git does not
    /// retry deltas between objects of one pack. A failure costs that speed
    /// only: the objects stay loose.
    static func packWithoutDeltas(_ commits: [ObjectID], in repository: Repository) {
        let gitDirectory = repository.gitDirectory
        let list = Data(commits.map { $0.hex + "\n" }.joined().utf8)
        guard (try? GitCommand.run(["--git-dir=" + gitDirectory, "pack-objects", "-q", "--window=0",
                                    gitDirectory + "/objects/pack/pack"], input: list)) != nil else { return }
        _ = try? GitCommand.run(["--git-dir=" + gitDirectory, "prune-packed", "-q"])
    }

    /// Brings the remote's commit-graph up to date after the manifest grew
    /// (see `CommitGraph`: without it, every fetch reads the whole manifest
    /// chain). A failure costs speed, not correctness: it is reported on
    /// standard error, and the command that grew the manifest goes on.
    static func updateCommitGraph(of remote: String) {
        do {
            try CommitGraph.update(gitDirectory: remote)
        } catch {
            Console.error("fprep: warning: the commit-graph of '\(remote)' was not updated (\(error)); fetches stay correct, only slower\n")
        }
    }

    /// Reads the manifest commits from `tip` back to (not including) `stop`,
    /// oldest first; the first date recorded for a blob wins when read in
    /// order, so callers insert with "ignore if present" from oldest to newest.
    static func entries(_ repository: Repository, from tip: ObjectID, stoppingAt stop: ObjectID?) throws -> [(ObjectID, BlobInfo)] {
        // Newest first, one commit in memory at a time, read as stored (no
        // parsed copy of its message): each commit's lines are turned round as they
        // are added, and the whole at the end, which gives the oldest
        // commit's lines first, each commit's in its own order.
        let objects = try repository.objectDatabase()
        var result: [(ObjectID, BlobInfo)] = []
        var next: ObjectID? = tip
        while let id = next, id != stop {
            next = try objects.withRawObject(id) { bytes in
                let (parent, message) = commitParts(bytes)
                let start = result.count
                parse(message, into: &result)
                result[start...].reverse()
                return parent
            }
        }
        result.reverse()
        return result
    }

    /// A raw commit's first parent and its message (what follows the
    /// first empty line).
    static func commitParts(_ bytes: UnsafeRawBufferPointer) -> (parent: ObjectID?, message: UnsafeRawBufferPointer) {
        var parent: ObjectID?
        var lineStart = 0
        while lineStart < bytes.count {
            var lineEnd = lineStart
            while lineEnd < bytes.count && bytes[lineEnd] != 0x0A { lineEnd += 1 }
            if lineEnd == lineStart {
                return (parent, UnsafeRawBufferPointer(rebasing: bytes[min(lineEnd + 1, bytes.count)...]))
            }
            let line = UnsafeRawBufferPointer(rebasing: bytes[lineStart..<lineEnd])
            if parent == nil, line.count == 47, line.starts(with: Array("parent ".utf8)) {
                parent = ObjectID(hexBytes: UnsafeRawBufferPointer(rebasing: line[7...]))
            }
            lineStart = lineEnd + 1
        }
        return (parent, UnsafeRawBufferPointer(start: nil, count: 0))
    }

    /// Parses `<40 hex> <size> <time>` lines; anything else is skipped.
    static func parse(_ bytes: UnsafeRawBufferPointer, into result: inout [(ObjectID, BlobInfo)]) {
        var lineStart = 0
        let count = bytes.count
        while lineStart < count {
            var lineEnd = lineStart
            while lineEnd < count && bytes[lineEnd] != 0x0A { lineEnd += 1 }
            if lineEnd - lineStart > 44, bytes[lineStart + 40] == 0x20 {
                let line = UnsafeRawBufferPointer(rebasing: bytes[lineStart..<lineEnd])
                if let parsed = parseLine(line) { result.append(parsed) }
            }
            lineStart = lineEnd + 1
        }
    }

    private static func parseLine(_ line: UnsafeRawBufferPointer) -> (ObjectID, BlobInfo)? {
        guard let id = ObjectID(hexBytes: UnsafeRawBufferPointer(rebasing: line[0..<40])) else { return nil }
        var numbers: [Int64] = []
        var current: Int64 = 0
        var inNumber = false
        for byte in line[41...] {
            if byte >= 0x30 && byte <= 0x39 {
                current = current &* 10 &+ Int64(byte - 0x30)
                inNumber = true
            } else if byte == 0x20 && inNumber {
                numbers.append(current)
                current = 0
                inNumber = false
            } else {
                return nil
            }
        }
        if inNumber { numbers.append(current) }
        guard numbers.count == 2 else { return nil }
        return (id, BlobInfo(size: numbers[0], mtime: numbers[1]))
    }
}
