import Dispatch
import FprepGit

/// The remote's change, diffed on a thread of its own as soon as the fetch
/// brings it, and the disk's lookups of its paths started as soon as it is
/// known, while the sync takes in the size manifest (its inserts wait on
/// cold pages of the state database: 20 ms at 10^6 files) and decides
/// where to move. On a cold disk both wait on reads, so side by side they
/// cost the longer of the two instead of their sum.
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

    /// `root`: the replica's work tree, opened again for the other thread
    /// (a libgit2 repository is not shared between threads).
    init(root: String, folder: FolderHandle, from fromTree: ObjectID?, to toTree: ObjectID) {
        self.fromTree = fromTree
        self.toTree = toTree
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
        guard fromTree == self.fromTree, toTree == self.toTree else { return nil }
        diffed.wait()
        diffed.signal()
        return try result?.get()
    }

    /// Waits for the lookups too, so none outlives the sync.
    func finish() {
        try? work?.wait()
    }
}
