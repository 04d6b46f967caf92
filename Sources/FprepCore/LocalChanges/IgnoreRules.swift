import Glibc
import FprepGit

/// git's ignore rules for the replica's untracked items: `.gitignore` files
/// in the tree, `.git/info/exclude` and `core.excludesFile`, as `git status`
/// applies them. A tracked file stays tracked whatever the rules say; an
/// untracked file or folder they match is never synced (editor swap files,
/// build output).
///
/// libgit2 reads the `.gitignore` files itself, so a `.gitignore` that is a
/// placeholder must never reach it: its read would return zeros, or, with
/// the agent running, wait for a hydration that needs the replica's lock
/// this command holds. Such a file's rules are not applied (its folder's
/// untracked items sync, never the other way round: nothing a user wrote is
/// left out by rules fprep could not read) until a sync or `fprep
/// materialize` brings its content; `unread` names it.
final class IgnoreRules {
    static let fileName: [UInt8] = Array(".gitignore".utf8)

    private let repository: Repository
    private let root: FolderHandle
    /// Per folder: whether every `.gitignore` from the root down to it
    /// holds its content (or is absent).
    private var readable: [[UInt8]: Bool] = [:]
    /// The `.gitignore` files whose rules were not applied: placeholders.
    private(set) var unread: [RepoPath] = []

    init(repository: Repository, root: FolderHandle) {
        self.repository = repository
        self.root = root
    }

    convenience init(_ replica: Replica) {
        self.init(repository: replica.repository, root: replica.rootFolder)
    }

    /// Whether `path` names a file of rules (`.gitignore`): such files are
    /// kept with their content on disk (clone and sync write them
    /// materialized), as the scan reads them.
    static func isRuleFile(_ path: RepoPath) -> Bool { path.name == fileName }

    /// Whether the rules leave out the untracked item at `path` (a folder's
    /// whole content with it). False when a rule file on the way cannot be
    /// read, or libgit2 fails: then the item syncs.
    func isIgnored(_ path: RepoPath, isFolder: Bool) -> Bool {
        guard !path.bytes.isEmpty, rulesReadable(down: path.parent.bytes) else { return false }
        return (try? repository.isIgnored(isFolder ? path.bytes + [0x2F] : path.bytes)) ?? false
    }

    /// Whether `.gitignore` at the root and in every folder down to
    /// `folder` holds its content (or is absent).
    private func rulesReadable(down folder: [UInt8]) -> Bool {
        if let known = readable[folder] { return known }
        let above = folder.isEmpty ? true : rulesReadable(down: RepoPath(bytes: folder).parent.bytes)
        let file = folder.isEmpty ? RepoPath(bytes: Self.fileName) : RepoPath(bytes: folder).appending(Self.fileName)
        var here = true
        if let stat = root.stat(file), stat.isRegular, stat.size > 0, ContentOperations.isMarkedDataless(root, file) {
            here = false
            unread.append(file)
        }
        readable[folder] = above && here
        return above && here
    }
}

extension Replica {
    /// Brings the content of the `.gitignore` files at `paths` that are
    /// still placeholders (a replica cloned before fprep read ignore rules,
    /// a fetch that failed at clone). Whether any came; a failure (the
    /// remote unreachable) leaves them for the next time: their rules are
    /// not applied until then, so their folders' untracked items sync.
    @discardableResult
    func materializeRuleFiles(_ paths: [RepoPath]) -> Bool {
        guard !paths.isEmpty else { return false }
        do {
            let result = try ContentOperations(self).materialize(paths.map { ($0, $0.description) })
            return !result.materialized.isEmpty
        } catch {
            return false  // left for the next time, as said above
        }
    }
}

/// For the agent's change watch: whether a change at a path is one the
/// scan leaves out (an item the index does not have, which the ignore rules
/// match), so that an editor's swap file or a build's output does not start
/// a sync. A tracked file under a rule still counts. Used on one thread.
public final class IgnoredChanges {
    private let repository: Repository
    private let root: FolderHandle
    private let indexPath: String
    private var index: Index?
    private var indexTime: (seconds: Int64, nanoseconds: Int64) = (-1, 0)

    public init(replicaRoot: String) throws {
        repository = try Repository(openingAt: replicaRoot)
        root = try FolderHandle(root: replicaRoot)
        indexPath = repository.gitDirectory + "index"
    }

    /// Whether every change at `paths` (relative to the root) is left out.
    /// Read again when the index changed (a sync wrote it).
    public func allLeftOut(_ paths: [[UInt8]]) -> Bool {
        guard !paths.isEmpty else { return false }
        let rules = IgnoreRules(repository: repository, root: root)
        for bytes in paths {
            let path = RepoPath(bytes: bytes)
            let isFolder = root.stat(path)?.isDirectory == true
            guard rules.isIgnored(path, isFolder: isFolder), let index = currentIndex() else { return false }
            if index.contains(bytes) || index.firstPosition(withPrefix: bytes + [0x2F]) != nil { return false }
        }
        return true
    }

    private func currentIndex() -> Index? {
        var info = stat()
        guard lstat(indexPath, &info) == 0 else { return nil }
        let time = (Int64(info.st_mtim.tv_sec), Int64(info.st_mtim.tv_nsec))
        if index == nil || time != indexTime {
            index = try? Index(path: indexPath)
            indexTime = index == nil ? (-1, 0) : time
        }
        return index
    }
}
