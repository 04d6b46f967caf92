import FoundationEssentials
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

    /// Adds `path` to `.git/info/exclude` (this replica's own rules, never
    /// pushed) under a comment saying why, so the rules leave it out as
    /// they did the item it was.
    static func excludeHere(_ path: RepoPath, in replica: Replica, why: String) throws {
        guard let pattern = pattern(naming: path) else {
            throw FprepError("'\(path)' cannot be written as an ignore rule (its name holds a line break); move the item out of the way and sync again")
        }
        let folder = replica.gitDirectory + "/info"
        if mkdir(folder, 0o777) != 0 && errno != EEXIST { throw SystemError("make the folder", folder) }
        let file = folder + "/exclude"
        let fd = open(file, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw SystemError("open", file) }
        defer { close(fd) }
        var last: UInt8 = 0x0A
        var info = stat()
        let measured = fstat(fd, &info) == 0
        if measured, info.st_size > 0, pread(fd, &last, 1, info.st_size - 1) != 1 { last = 0x0A }
        let text = (last == 0x0A ? "" : "\n") + "# fprep: " + why + "\n" + pattern + "\n"
        do {
            try Array(text.utf8).withUnsafeBytes { try writeAll(fd, $0, shown: file) }
        } catch {
            // A rule cut short (a full disk) would name another path: the
            // file goes back to its length before.
            if measured { _ = ftruncate(fd, info.st_size) }
            throw error
        }
        // Durable before the item it names is renamed into place: the
        // sync's barrier flushes the replica's items, not this file.
        _ = fsync(fd)
    }

    /// A rule that matches exactly `path` from the root: git's special
    /// characters escaped, trailing spaces kept; nil when the path holds a
    /// line break, which no rule can.
    static func pattern(naming path: RepoPath) -> String? {
        guard !path.bytes.contains(0x0A), !path.bytes.contains(0x0D) else { return nil }
        var out: [UInt8] = [0x2F]
        for byte in path.bytes {
            if [0x5C, 0x2A, 0x3F, 0x5B].contains(byte) { out.append(0x5C) }  // \ * ? [
            out.append(byte)
        }
        // Trailing spaces are dropped from a rule unless escaped.
        var end = out.count
        while end > 1, out[end - 1] == 0x20 { end -= 1 }
        let spaces = out.count - end
        out.removeLast(spaces)
        for _ in 0..<spaces { out += [0x5C, 0x20] }
        return String(decoding: out, as: UTF8.self)
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
            // An old version a sync held (kept out of git's view by an
            // exclude line): a program's write into it is for a sync to settle.
            if LocalScanner.carriesHeldMark(root, path) { return false }
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

extension Replica {
    /// Whether the item at `path` is one the ignore rules leave out: not in
    /// the index on disk (during a sync, the one from before it: a tracked
    /// item is the user's synced work whatever the rules say) and matched.
    func rulesLeaveOut(_ path: RepoPath) -> Bool {
        guard let stat = rootFolder.stat(path) else { return false }
        if let before = try? repository.index(), before.contains(path.bytes) { return false }
        return IgnoreRules(self).isIgnored(path, isFolder: stat.isDirectory)
    }
}
