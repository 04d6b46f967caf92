import FoundationEssentials
import FprepGit
import Glibc

/// A point in the change journal of the agent serving a replica: the
/// journal's life (`epoch`, new at each start of the agent's worker) and
/// how far into it.
public struct JournalToken: Sendable, Equatable {
    public let epoch: String
    public let sequence: UInt64

    public init(epoch: String, sequence: UInt64) {
        self.epoch = epoch
        self.sequence = sequence
    }
}

/// The journal's answer to "what changed since this point".
public enum JournalAnswer: Sendable, Equatable {
    /// Every path (relative to the root) where something changed since the
    /// point asked about, each at most once; and the point to ask from next.
    case since(JournalToken, [[UInt8]])
    /// The journal cannot say (another life, a gap, too old): scan
    /// everything, and ask from this point next time.
    case full(JournalToken)
}

/// What a scan leaves for the next one: the journal point it was taken at,
/// the index it compared against, and the paths that differed then (local
/// changes, files with other links, FIFOs). The next scan looks only at
/// those paths and at what the journal says changed since, with what is
/// below them: everything else matches the index, as it did then. Any
/// doubt (another index, changed ignore-rule files, a record older than
/// `fullScanInterval`, no agent) means one full scan, which writes a new
/// record. A cache: lost or unreadable, it costs one full scan.
struct JournalRecord: Equatable {
    /// The index's checksum when the record was made (or carried to).
    var index: [UInt8]
    var point: JournalToken
    /// The ignore-rule files outside the tree, as stat saw them.
    var rules: String
    /// When the last full scan was (seconds since 1970).
    var fullScanAt: Int64
    /// What the last full scan measured, for the sizes a status shows.
    var treeBytes: Int64
    var folderCount: Int
    /// Paths to look at again whatever the journal says.
    var paths: [[UInt8]]

    static let fileName = "journal-record"
    /// A full scan at least this often (seconds): a change no event told
    /// of (a write through a hard link from outside the tree, rules from a
    /// `core.excludesFile` elsewhere) is found within this time.
    static let fullScanInterval: Int64 = 3600
    /// More paths than this to look at again (a large materialize or evict,
    /// thousands of local changes): no record, one full scan instead. Every
    /// index write of an agent's fill carries the record, so its size is
    /// paid on each first read of a file.
    static let maxPaths = 4096
    private static let magic = "fprep journal record 1"

    static func load(_ replica: Replica) -> JournalRecord? {
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: replica.stateFolder + "/" + fileName)) else { return nil }
        // Counted before anything is decoded: a record past the bound (one
        // an older fprep let grow) is not worth reading.
        guard data.reduce(0, { $0 + ($1 == 0x0A ? 1 : 0) }) <= maxPaths + 7 else {
            remove(replica)
            return nil
        }
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count >= 7, lines[0] == magic, let index = AgentLink.unhex(lines[1]) ?? (lines[1].isEmpty ? [] : nil) else {
            return nil
        }
        let point = lines[2].split(separator: " ")
        let sizes = lines[5].split(separator: " ")
        guard point.count == 2, let sequence = UInt64(point[1]), let fullScanAt = Int64(lines[4]),
              sizes.count == 2, let treeBytes = Int64(sizes[0]), let folderCount = Int(sizes[1]) else { return nil }
        guard lines.count - 6 <= maxPaths + 1 else { return nil }
        var paths: [[UInt8]] = []
        for line in lines[6...] where !line.isEmpty {
            guard let path = AgentLink.unhex(line) else { return nil }
            paths.append(path)
        }
        return JournalRecord(index: index, point: JournalToken(epoch: String(point[0]), sequence: sequence),
                             rules: String(lines[3]), fullScanAt: fullScanAt, treeBytes: treeBytes,
                             folderCount: folderCount, paths: paths)
    }

    /// Writes the record (a temporary file, then a rename); a failure only
    /// costs the next scan its shortcut.
    func save(_ replica: Replica) {
        // Each path once: carries append what each write looked at again.
        var seen = Set<[UInt8]>()
        let paths = self.paths.filter { seen.insert($0).inserted }
        guard paths.count <= Self.maxPaths else {
            Self.remove(replica)
            return
        }
        var text = Self.magic + "\n" + AgentLink.hex(index) + "\n" + point.epoch + " \(point.sequence)\n" + rules + "\n"
            + "\(fullScanAt)\n\(treeBytes) \(folderCount)\n"
        for path in paths { text += AgentLink.hex(path) + "\n" }
        CacheFile.replace(replica.stateFolder + "/" + Self.fileName, with: Array(text.utf8))
    }

    static func remove(_ replica: Replica) {
        unlink(replica.stateFolder + "/" + fileName)
    }

    /// An index write that keeps every unlisted path matching its entry
    /// (content filled or evicted in place, entries the disk already
    /// showed) carries the record from the index it replaced to the new
    /// one; `paths` are looked at again next time.
    static func carry(_ replica: Replica, from before: [UInt8], to after: [UInt8], paths: [[UInt8]] = []) {
        guard before != after, var record = load(replica), record.index == before else { return }
        record.index = after
        record.paths += paths
        record.save(replica)
    }

    /// The ignore-rule files outside the tree, as stat sees them: when one
    /// changes, which untracked items count may change anywhere.
    static func ruleFilesStamp(_ replica: Replica) -> String {
        let environment = ProcessInfo.processInfo.environment
        let home = environment["HOME"] ?? ""
        let config = environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.config"
        let files = [replica.gitDirectory + "/info/exclude", replica.gitDirectory + "/config",
                     home + "/.gitconfig", config + "/git/config", config + "/git/ignore"]
        return files.map { file -> String in
            var info = stat()
            guard lstat(file, &info) == 0 else { return "-" }
            return "\(info.st_ino).\(info.st_size).\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
        }.joined(separator: ",")
    }
}

extension Replica {
    /// Writes the index for a change that leaves every entry matching what
    /// the disk holds (content filled or evicted, placeholders made again),
    /// carrying the journal record over to it; `paths` are looked at again
    /// by the next scan.
    func writeIndexKeepingJournal(_ index: Index, lookAgainAt paths: [[UInt8]] = []) throws {
        let before = index.checksum
        try index.write()
        JournalRecord.carry(self, from: before, to: index.checksum, paths: paths)
    }
}
