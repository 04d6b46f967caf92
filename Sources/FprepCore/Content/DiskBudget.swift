import FoundationEssentials
import Glibc
import FprepGit

/// A replica's disk budget: at most so much materialized content
/// (`fprep.budget.content`) and at least so much free space on its file
/// system (`fprep.budget.minFree`), each in bytes (`500m`, `20g`) or as a
/// share of the file system (`10%`). Above either, the least recently used
/// files are evicted until under both; a file that is pinned, changed here,
/// open in a program, hard-linked, a file of ignore rules, or changed by a
/// commit not pushed yet is never chosen.
public struct DiskBudget: Sendable, Equatable {
    public enum Limit: Sendable, Equatable, CustomStringConvertible {
        case bytes(Int64)
        case percent(Double)

        /// `500m`, `20g`, `1048576`, `10%`; nil when it is none of these.
        public init?(_ text: String) {
            let trimmed = String(text.filter { $0 != " " && $0 != "\t" }).lowercased()
            if trimmed.hasSuffix("%") {
                guard let value = Double(trimmed.dropLast()), value >= 0, value <= 100 else { return nil }
                self = .percent(value)
                return
            }
            guard let bytes = ByteSize.parse(trimmed) else { return nil }
            self = .bytes(bytes)
        }

        /// Bytes, for a file system of `total` bytes.
        func bytes(ofTotal total: Int64) -> Int64 {
            switch self {
            case .bytes(let n): n
            case .percent(let share): Int64(Double(total) * share / 100)
            }
        }

        public var description: String {
            switch self {
            case .bytes(let n): "\(n)"
            case .percent(let share): "\(share)%"
            }
        }
    }

    public var content: Limit?
    public var minFree: Limit?

    public var isSet: Bool { content != nil || minFree != nil }

    public static let contentKey = "fprep.budget.content"
    public static let minFreeKey = "fprep.budget.minFree"

    /// The replica's settings (git config), or a clear error naming the bad one.
    public static func load(_ replica: Replica) throws -> DiskBudget {
        try load(replica.repository)
    }

    /// The settings of the replica at `root`, read without opening it
    /// (no lock, no state database): the agent looks often.
    public static func load(replicaRoot root: String) throws -> DiskBudget {
        try load(try Repository(openingAt: root))
    }

    private static func load(_ repository: Repository) throws -> DiskBudget {
        let config = try repository.config()
        var budget = DiskBudget()
        for (key, path) in [(contentKey, \DiskBudget.content), (minFreeKey, \DiskBudget.minFree)] {
            guard let text = try config.string(key), !text.isEmpty else { continue }
            guard let limit = Limit(text) else {
                throw FprepError(.usage, "the setting \(key) is '\(text)', which is not a size ('500m', '20g') or a share of the disk ('10%'); fix it with 'git config \(key) SIZE'")
            }
            budget[keyPath: path] = limit
        }
        return budget
    }
}

/// What a budget check found and did.
public struct BudgetReport: Sendable, Encodable {
    /// Materialized content of the replica now (blocks on disk of its
    /// tracked files that hold content), and the limit it is held to.
    public var contentBytes: Int64 = 0
    public var contentLimit: Int64?
    /// Free space on the replica's file system, and the floor it is held to.
    public var freeBytes: Int64 = 0
    public var freeFloor: Int64?
    /// Bytes to free to be under both (0: within the budget).
    public var overBy: Int64 = 0
    /// Files evicted (or, for a dry run, that would be), least recently used first.
    public var evicted: [String] = []
    public var bytesFreed: Int64 = 0
    /// Files chosen and then kept, with why (open in a program, changed meanwhile).
    public var kept: [Skipped] = []
    /// Materialized files no budget evicts (pinned, changed, not pushed…).
    public var protectedFiles = 0
    public var dryRun = false
}

extension Replica {
    /// Measures the replica against its disk budget and, above it, evicts
    /// the least recently used files that may go until under it (all of it
    /// through `evict`'s own checks: nothing changed or open is touched).
    /// Cost follows the materialized files, not the placeholders.
    public func enforceBudget(_ budget: DiskBudget, dryRun: Bool = false) throws -> BudgetReport {
        var report = BudgetReport()
        report.dryRun = dryRun
        var fs = statvfs()
        guard statvfs(root, &fs) == 0 else { throw SystemError("measure the file system of", root) }
        let total = Int64(fs.f_blocks) * Int64(fs.f_frsize)
        report.freeBytes = Int64(fs.f_bavail) * Int64(fs.f_frsize)
        report.contentLimit = budget.content?.bytes(ofTotal: total)
        report.freeFloor = budget.minFree?.bytes(ofTotal: total)

        let index = try repository.index()
        let pins = try PinSet(store)
        let unpushed = try pathsNotPushed()
        let recorded = Dictionary(try store.materializedRecords().map { ($0.path.bytes, $0.lastUsedAt) }, uniquingKeysWith: max)
        let classifier = StateClassifier(root: rootFolder, index: index)
        var candidates: [(path: RepoPath, blob: ObjectID, bytes: Int64, used: Int64)] = []
        for position in 0..<index.count {
            guard let entry = index.entry(at: position), !entry.skipWorktree, FileMode(raw: entry.mode).isFile else { continue }
            let path = RepoPath(bytes: entry.path)
            guard let stat = rootFolder.stat(path), stat.isRegular else { continue }
            let bytes = stat.blocks * 512
            report.contentBytes += bytes
            if pins.covering(path) != nil || IgnoreRules.isRuleFile(path) || unpushed.contains(entry.path) || stat.links > 1
                || classifier.state(of: entry, stat: stat) != .materialized {
                report.protectedFiles += 1
                continue
            }
            // Last use: a read (atime, as relatime keeps it), its content's
            // arrival (ctime), or fprep's own record (`fprep open`).
            guard bytes > 0 else { continue }  // nothing to free
            let used = max(stat.atime.0, recorded[entry.path] ?? stat.mtime.0)
            candidates.append((path, entry.id, bytes, used))
        }
        let overContent = report.contentLimit.map { report.contentBytes - $0 } ?? 0
        let underFloor = report.freeFloor.map { $0 - report.freeBytes } ?? 0
        report.overBy = max(0, overContent, underFloor)
        guard report.overBy > 0 else { return report }

        candidates.sort { $0.used != $1.used ? $0.used < $1.used : $0.path.bytes.lexicographicallyPrecedes($1.path.bytes) }
        var next = 0
        while report.bytesFreed < report.overBy && next < candidates.count {
            // A batch worth what is still over (most often all of it in one).
            var batch: [(RepoPath, String)] = []
            var planned: Int64 = 0
            while planned < report.overBy - report.bytesFreed && next < candidates.count {
                batch.append((candidates[next].path, candidates[next].path.description))
                planned += candidates[next].bytes
                next += 1
            }
            let result = try ContentOperations(self).evict(batch, dryRun: dryRun)
            report.evicted += result.evicted
            report.bytesFreed += result.bytesFreed
            report.kept += result.refused
        }
        return report
    }

    /// Paths a local commit not pushed yet changed: their content is on
    /// this device only until the push, so no budget evicts them.
    func pathsNotPushed() throws -> Set<[UInt8]> {
        guard let waiting = try store.meta(Replica.unpushedKey), let commit = ObjectID(hex: waiting) else { return [] }
        let base = try store.meta(Self.remoteTipKey).flatMap(ObjectID.init(hex:))
        let changes = try ChangeSet.between(repository, from: try base.map { try repository.commit($0).treeID },
                                            to: try repository.commit(commit).treeID)
        return Set(changes.updated.map(\.path.bytes) + changes.moved.map(\.to.bytes))
    }
}
