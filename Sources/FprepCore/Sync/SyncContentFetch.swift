import FoundationEssentials
import FprepGit

/// The new content a sync writes: new versions of materialized files and
/// the targets of symlinks, fetched in one request into a quarantine.
///
/// The request starts as soon as the tree diff is known, with the files the
/// store lists as materialized, so its round trip overlaps the path lookups
/// and the layout instead of following them. The applier then says what it
/// really needs; anything the guess missed comes in a second request.
final class SyncContentFetch: @unchecked Sendable {
    let quarantine: String
    /// Every blob asked for so far.
    private(set) var requested: Set<ObjectID>
    private var work: BackgroundWork?
    private let gitDirectory: String

    init(replica: Replica, token: String, guessed: Set<ObjectID>) {
        quarantine = replica.stateFolder + "/fetch-" + token
        gitDirectory = replica.gitDirectory
        requested = guessed
        guard !guessed.isEmpty else { return }
        let ids = Array(guessed), gitDirectory = gitDirectory, quarantine = quarantine
        work = BackgroundWork { _ = try Transport.fetchObjects(ids, gitDirectory: gitDirectory, quarantine: quarantine) }
    }

    /// Whether a request is under way or already done.
    var started: Bool { !requested.isEmpty }

    /// The blobs worth asking for early: new versions of changed files the
    /// store lists as materialized, and symlink targets, that the object
    /// store does not hold yet.
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

    /// Waits for the early request, then fetches what `needed` holds beyond
    /// it. Throws the git error of either request; an early request that
    /// failed for blobs nobody needs any more is no error.
    func complete(needing needed: Set<ObjectID>) throws {
        let early = work
        work = nil
        do {
            try early?.wait()
        } catch where needed.isEmpty {
            return
        }
        let rest = needed.subtracting(requested)
        guard !rest.isEmpty else { return }
        requested.formUnion(rest)
        _ = try Transport.fetchObjects(Array(rest), gitDirectory: gitDirectory, quarantine: quarantine)
    }
}
