import FoundationEssentials
import FprepGit
import Glibc

/// What `fprep gc` found and did.
public struct GarbageReport: Sendable, Encodable {
    /// The packs of fetched content removed (or, in a dry run, that would be).
    public var packs: [String] = []
    public var blobs = 0
    public var bytesFreed: Int64 = 0
    /// What the object store takes afterwards.
    public var bytesLeft: Int64 = 0
    /// Promisor packs that hold more than fetched content (commits, trees,
    /// symlink targets): never removed, and not read again after a sync.
    var kept: [String] = []

    private enum CodingKeys: String, CodingKey { case packs, blobs, bytesFreed, bytesLeft }
}

extension Replica {
    /// Gives back the space of content git fetched by itself (`git log -p`,
    /// `git show`, a diff): the promisor packs that hold only blobs. Such a
    /// pack is a copy of what the remote keeps (git fetched it from there,
    /// and fetches it again when asked), never a byte of this device's own:
    /// local commits and their content are never written to promisor packs,
    /// and neither materialized files (on disk) nor placeholders (no content)
    /// need them. Packs holding anything else (commits, trees, the symlink
    /// targets a layout needs) stay whole.
    public func collectGarbage(dryRun: Bool) throws -> GarbageReport {
        try collectGarbage(dryRun: dryRun, skipping: [])
    }

    /// `skipping`: packs known to hold more than fetched content.
    private func collectGarbage(dryRun: Bool, skipping known: Set<String>) throws -> GarbageReport {
        var report = GarbageReport()
        let packFolder = gitDirectory + "/objects/pack"
        let odb = try repository.objectDatabase()
        let index = try repository.index()
        var symlinkTargets = Set<ObjectID>()
        for i in 0..<index.count {
            if let entry = index.entry(at: i), FileMode(raw: entry.mode) == .symlink { symlinkTargets.insert(entry.id) }
        }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: packFolder)) ?? []
        for promisor in names.filter({ $0.hasSuffix(".promisor") }).sorted() {
            let base = String(promisor.dropLast(".promisor".count))
            if known.contains(base) {
                report.kept.append(base)
                continue
            }
            guard let ids = Self.packObjectIDs(packFolder + "/" + base + ".idx"), !ids.isEmpty else { continue }
            var onlyFetchedBlobs = true
            for id in ids {
                guard try odb.isBlob(id) == true, !symlinkTargets.contains(id) else {
                    onlyFetchedBlobs = false
                    break
                }
            }
            guard onlyFetchedBlobs else {
                report.kept.append(base)
                continue
            }
            let files = [".pack", ".idx", ".rev", ".promisor", ".bitmap"].map { packFolder + "/" + base + $0 }
            let bytes = files.reduce(Int64(0)) { total, path in
                var info = stat()
                return total + (lstat(path, &info) == 0 ? Int64(info.st_blocks) * 512 : 0)
            }
            report.packs.append(base)
            report.blobs += ids.count
            report.bytesFreed += bytes
            guard !dryRun else { continue }
            // The index first: a pack without it is ignored, never half read.
            for path in [files[1], files[0], files[2], files[4], files[3]] { unlink(path) }
        }
        if !dryRun && !report.packs.isEmpty { try odb.refresh() }
        report.bytesLeft = diskUsage(of: gitDirectory + "/objects") - (dryRun ? report.bytesFreed : 0)
        return report
    }

    /// The default of `fprep.gcThreshold`.
    static let defaultGarbageThreshold: Int64 = 256 << 20
    /// The store's list of promisor packs that hold more than fetched
    /// content, so a sync does not read their indexes again.
    static let packsKeptKey = "gc_packs_kept"

    /// `fprep.gcThreshold` (default 256m; 0: never), read before a sync
    /// does anything, so a bad setting stops it with one line.
    func garbageThreshold() throws -> Int64 {
        guard let text = try setting("fprep.gcThreshold") else { return Self.defaultGarbageThreshold }
        guard let bytes = ByteSize.parse(text) else {
            throw FprepError(.usage, "fprep.gcThreshold is '\(text)', not a size in bytes, in \(root)/.git/config; set it to a size such as 256m, or 0 to never give fetched content back after a sync")
        }
        return bytes
    }

    /// After a sync: once the packs that may hold only content git fetched
    /// by itself take more than `threshold` bytes, they are given back as
    /// `fprep gc` gives them back. Under it, the cost is one listing of the
    /// pack folder: packs already found to hold more than fetched content
    /// are remembered in the store and not read again.
    func collectGarbage(above threshold: Int64) throws -> GarbageReport? {
        guard threshold > 0 else { return nil }
        let packFolder = gitDirectory + "/objects/pack"
        let known = Set((try store.meta(Self.packsKeptKey) ?? "").split(separator: ",").map(String.init))
        let names = (try? FileManager.default.contentsOfDirectory(atPath: packFolder)) ?? []
        var candidates: Int64 = 0
        for promisor in names where promisor.hasSuffix(".promisor") {
            let base = String(promisor.dropLast(".promisor".count))
            guard !known.contains(base) else { continue }
            var info = stat()
            if lstat(packFolder + "/" + base + ".pack", &info) == 0 { candidates += Int64(info.st_blocks) * 512 }
        }
        guard candidates > threshold else { return nil }
        let report = try collectGarbage(dryRun: false, skipping: known)
        try store.setMeta(Self.packsKeptKey, report.kept.joined(separator: ","))
        return report.packs.isEmpty ? nil : report
    }

    /// The object ids a pack index (version 2) lists; nil when it is not one.
    static func packObjectIDs(_ path: String) -> [ObjectID]? {
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: path)), data.count >= 8 + 256 * 4 else { return nil }
        let bytes = [UInt8](data)
        guard bytes[0..<4] == [0xFF, 0x74, 0x4F, 0x63], bytes[4..<8] == [0, 0, 0, 2] else { return nil }
        let at = 8 + 255 * 4
        let count = Int(bytes[at]) << 24 | Int(bytes[at + 1]) << 16 | Int(bytes[at + 2]) << 8 | Int(bytes[at + 3])
        let start = 8 + 256 * 4
        guard bytes.count >= start + count * 20 else { return nil }
        return (0..<count).compactMap { ObjectID(bytes: Array(bytes[(start + $0 * 20)..<(start + $0 * 20 + 20)])) }
    }
}
