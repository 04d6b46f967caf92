import Dispatch
import FprepGit

/// The remote's change, diffed on a thread of its own as soon as the fetch
/// brings it, and the disk's lookups of its paths started as soon as it is
/// known, while the sync decides where to move. On a cold disk both wait on
/// reads, so side by side they cost the longer of the two instead of their
/// sum. On a third thread, the new content of materialized files is asked
/// for from the trees alone (see `SyncContentFetch`), so the diff's 7–8 ms
/// at 10^5 files (cold) run inside that round trip instead of before it.
///
/// Started only for a fast-forward, where the sync moves to the remote's
/// tip; `changes(from:to:)` gives it only for that pair of trees, so a sync
/// that ends up elsewhere diffs as before.
final class ChangesAhead: @unchecked Sendable {
    private let fromTree: ObjectID?
    private let toTree: ObjectID
    private let diffed = DispatchSemaphore(value: 0)
    // Written once on the other thread before `diffed` is signalled; read
    // on the sync's thread only after waiting on it.
    private var result: Result<ChangeSet, Error>?
    private var work: BackgroundWork?
    private var guessing: BackgroundWork?
    /// The content asked for ahead; used by the sync's thread only after
    /// `changes(from:to:)`, which waits for the other thread's request.
    let content: SyncContentFetch?

    /// `root`: the replica's work tree, opened again for each thread (a
    /// libgit2 repository is not shared between threads). `content`: where
    /// the new content of the materialized files (listed by the state
    /// database at `databasePath`, on a connection of that thread) goes.
    init(root: String, folder: FolderHandle, from fromTree: ObjectID?, to toTree: ObjectID,
         content: (SyncContentFetch, databasePath: String)? = nil) {
        self.fromTree = fromTree
        self.toTree = toTree
        self.content = content?.0
        if let (fetch, databasePath) = content {
            guessing = BackgroundWork {
                let database = try Database(path: databasePath)
                guard let paths = try StateStore.materializedPaths(database, atMost: SyncContentFetch.materializedForTreeGuess),
                      !paths.isEmpty else { return }
                fetch.request(try SyncContentFetch.guess(materialized: paths, from: fromTree, to: toTree,
                                                         in: try Repository(openingAt: root)))
            }
        }
        work = BackgroundWork { [self] in
            let diff = Result { try ChangeSet.between(Repository(openingAt: root), from: fromTree, to: toTree, marksTrace: false) }
            result = diff
            diffed.signal()
            if case .success(let changes) = diff {
                folder.prefetch(changes.touchedPaths, foldersChange: true)
            }
        }
    }

    /// The change from `fromTree` to `toTree` when it is the one diffed
    /// here (its error, as the diff threw it), else nil.
    func changes(from fromTree: ObjectID?, to toTree: ObjectID) throws -> ChangeSet? {
        // Its request is out (a guess that failed leaves the asking to the
        // diff's). Not the content of these trees: its fetch ends before
        // the sync goes on, and whatever removes quarantines next removes its.
        try? guessing?.wait()
        guard fromTree == self.fromTree, toTree == self.toTree else {
            content?.finish()
            return nil
        }
        diffed.wait()
        diffed.signal()
        return try result?.get()
    }

    /// Waits for the lookups and the content's requests too, so none
    /// outlives the sync.
    func finish() {
        try? guessing?.wait()
        try? work?.wait()
        content?.finish()
    }
}
