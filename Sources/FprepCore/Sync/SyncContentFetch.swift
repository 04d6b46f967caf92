import FoundationEssentials
import FprepGit

/// The new content a sync writes: new versions of materialized files and
/// the targets of symlinks, fetched into a quarantine.
///
/// Asked for before the applier knows what it needs, so the round trip
/// overlaps the path lookups and the layout instead of following them:
/// first (a fast-forward with few materialized files) from the trees alone,
/// along the materialized files' paths, while the diff is still running;
/// then from the diff, with what the store lists as materialized. Each
/// request not covered by an earlier one goes out beside it. The applier
/// then says what it really needs; anything the guesses missed comes in a
/// last request.
final class SyncContentFetch: @unchecked Sendable {
    let quarantine: String
    /// Every blob asked for so far.
    private(set) var requested: Set<ObjectID> = []
    private var requests: [(ids: Set<ObjectID>, work: BackgroundWork)] = []
    private let gitDirectory: String

    init(replica: Replica, token: String) {
        quarantine = replica.stateFolder + "/fetch-" + token
        gitDirectory = replica.gitDirectory
    }

    /// Whether a request is under way or already done.
    var started: Bool { !requested.isEmpty }

    /// Asks for what of `ids` was not asked for yet, in a request of its
    /// own, under way beside the earlier ones. Not thread-safe: one thread
    /// at a time, each after the previous one's calls.
    func request(_ ids: Set<ObjectID>) {
        let new = ids.subtracting(requested)
        guard !new.isEmpty else { return }
        requested.formUnion(new)
        let gitDirectory = gitDirectory, quarantine = quarantine
        requests.append((new, BackgroundWork { _ = try Transport.fetchObjects(Array(new), gitDirectory: gitDirectory, quarantine: quarantine) }))
    }

    /// The blobs worth asking for once the diff is known: new versions of
    /// changed files the store lists as materialized, symlink targets and
    /// ignore rules, that the object store does not hold yet.
    static func guess(_ changes: ChangeSet, store: StateStore, odb: ObjectDatabase) throws -> Set<ObjectID> {
        let changedFiles = changes.updated.filter { $0.old != nil && $0.new.mode.isFile }.map(\.path)
        let materialized = try store.materialized(among: changedFiles)
        let wanted = changes.updated.filter { update in
            update.new.mode == .symlink
                || (update.new.mode.isFile && IgnoreRules.isRuleFile(update.path))
                || (update.new.mode.isFile && update.old != nil && materialized.contains(update.path))
        }
        return Set(odb.missing(among: wanted.map(\.new.id)))
    }

    /// Materialized files at most for the guess from the trees: it reads
    /// their paths from the store first, and goes through them at each
    /// level of the trees it descends.
    static let materializedForTreeGuess = 4096

    /// The blobs worth asking for before the diff is known: the new
    /// versions of materialized files (`changedFiles`) not in the object store.
    static func guess(materialized paths: [RepoPath], from oldTree: ObjectID?, to newTree: ObjectID,
                      in repository: Repository) throws -> Set<ObjectID> {
        Set(try repository.objectDatabase().missing(among: changedFiles(at: paths, from: oldTree, to: newTree, in: repository)))
    }

    /// The ids of the files at `paths` (byte order) whose entry in
    /// `newTree` is a file that differs from `oldTree`'s. Only subtrees that
    /// changed and hold one of the paths are read, so its cost follows the
    /// change where it meets the paths, not the tree.
    static func changedFiles(at paths: [RepoPath], from oldTree: ObjectID?, to newTree: ObjectID,
                             in repository: Repository) throws -> [ObjectID] {
        var found: [ObjectID] = []
        func walk(_ old: ObjectID?, _ new: ObjectID, _ paths: ArraySlice<[UInt8]>) throws {
            guard old != new, !paths.isEmpty else { return }
            let newEntries = try repository.tree(new)
            let oldEntries = try old.map { try repository.tree($0) }
            var start = paths.startIndex
            while start < paths.endIndex {
                // A run of one name's paths: the name itself, then those
                // below it (the name and '/'). A name such as `a-b` sorts
                // between `a` and `a/c`: the name then has two runs, each
                // taken on its own.
                let first = paths[start]
                let name = first.firstIndex(of: 0x2F).map { Array(first[..<$0]) } ?? first
                let itself = first.count == name.count
                var end = itself ? start + 1 : start
                while end < paths.endIndex, paths[end].count > name.count, paths[end][name.count] == 0x2F,
                      paths[end].starts(with: name) { end += 1 }
                let below = (itself ? start + 1 : start)..<end
                defer { start = end }
                guard let entry = newEntries.entry(named: name) else { continue }
                let before = oldEntries?.entry(named: name)
                if itself, entry.mode.isFile, entry.id != before?.id { found.append(entry.id) }
                if !below.isEmpty, entry.mode == .tree {
                    let oldFolder = before?.mode == .tree ? before?.id : nil
                    guard oldFolder != entry.id else { continue }
                    try walk(oldFolder, entry.id, paths[below].map { Array($0.dropFirst(name.count + 1)) }[...])
                }
            }
        }
        try walk(oldTree, newTree, paths.map(\.bytes)[...])
        return found
    }

    /// Waits for the requests, then fetches what `needed` holds beyond
    /// what they brought: blobs no request asked for, and those of a
    /// request that failed, asked again (its error is the last request's
    /// to give). A request that failed for blobs nobody needs is no error.
    func complete(needing needed: Set<ObjectID>) throws {
        for request in requests {
            do { try request.work.wait() } catch { requested.subtract(request.ids) }
        }
        requests = []
        let rest = needed.subtracting(requested)
        guard !rest.isEmpty else { return }
        requested.formUnion(rest)
        _ = try Transport.fetchObjects(Array(rest), gitDirectory: gitDirectory, quarantine: quarantine)
    }

    /// Waits for every request (a sync that ends early: no git process
    /// outlives the command).
    func finish() {
        for request in requests { try? request.work.wait() }
    }
}
