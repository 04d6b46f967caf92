import Foundation

/// The changes the mutation commit was drawn with (what fprep should report).
struct PlannedChanges: Encodable {
    var changes: Int
    var seed: UInt64
    var modified: Int
    var added: Int
    var addedInNewFolders: Int
    var newFolders: Int
    var deleted: Int
    var renamed: Int
    var folderRename: String?
    var folderRenameFiles: Int

    init(_ plan: MutationPlan) {
        changes = plan.changes
        seed = plan.seed
        modified = plan.modified.count
        added = plan.added.count
        addedInNewFolders = plan.addedInNewFolders
        newFolders = plan.newFolders.count
        deleted = plan.deleted.count
        renamed = plan.renamed.count
        folderRename = plan.folderRename.map { "\($0.from) → \($0.to)" }
        folderRenameFiles = plan.folderFiles.count
    }

    var summary: String {
        var text = "\(modified) modified, \(added) added (\(addedInNewFolders) in \(newFolders) new folders), "
            + "\(deleted) deleted, \(renamed) renamed across folders"
        if let folderRename { text += ", folder \(folderRename) (\(folderRenameFiles) files)" }
        return text
    }
}

/// One tree size: its remote, mutation, per-run times, medians and verdicts.
struct SyncSizeResult: Encodable {
    struct Medians: Encodable {
        var fprepSync: Double?
        var fprepSyncBothWays: Double?
        var syncFloor: Double
        var gitFetch: Double
        var gitDiffTreeRenames: Double
        var writePlaceholders: Double
        var fetchContent: Double
        var fprepChanges: Double?
        var remoteDiffTree: Double
        var fprepChangesWarm: Double?
        var remoteDiffTreeWarm: Double?
        var fprepChangesPerRequest: Double?
    }

    var files: Int
    var remote: String
    var remoteReused: Bool
    var url: String
    var base: String
    var mutation: String
    var reference: String
    var planned: PlannedChanges
    /// Status letter → entries of `git diff-tree -r -M100%` between the anchors.
    var gitDiffStatus: [String: Int]
    var materializedBeforeSync: Int
    var medians: Medians
    var sync: Report.Verdict
    var changes: Report.Verdict
    var changesWarm: Report.Verdict
    var changesPerRequest: Report.Verdict
    /// The machine's noise: lowest and highest ratio of the runs.
    var syncRange: [Double]?
    var changesWarmRange: [Double]?
    var perRun: [SyncRunResult]

    static func range(_ ratios: [Double?]) -> [Double]? {
        let known = ratios.compactMap { $0 }
        guard let low = known.min(), let high = known.max() else { return nil }
        return [low, high]
    }

    init(files: Int, remote: String, remoteReused: Bool, url: String, base: String, mutation: String, reference: String,
         plan: MutationPlan, gitDiffStatus: [String: Int], materialized: Int, runs: [SyncRunResult]) {
        self.files = files
        self.remote = remote
        self.remoteReused = remoteReused
        self.url = url
        self.base = base
        self.mutation = mutation
        self.reference = reference
        self.planned = PlannedChanges(plan)
        self.gitDiffStatus = gitDiffStatus
        self.materializedBeforeSync = materialized
        self.perRun = runs
        let m = Medians(fprepSync: median(runs.compactMap(\.fprepSync)),
                        fprepSyncBothWays: median(runs.compactMap(\.fprepSyncBothWays)), syncFloor: median(runs.map(\.syncFloor)) ?? 0,
                        gitFetch: median(runs.map(\.gitFetch)) ?? 0,
                        gitDiffTreeRenames: median(runs.map(\.gitDiffTreeRenames)) ?? 0,
                        writePlaceholders: median(runs.map(\.writePlaceholders)) ?? 0,
                        fetchContent: median(runs.map(\.fetchContent)) ?? 0,
                        fprepChanges: median(runs.compactMap(\.fprepChanges)),
                        remoteDiffTree: median(runs.map(\.remoteDiffTree)) ?? 0,
                        fprepChangesWarm: median(runs.compactMap(\.fprepChangesWarm)),
                        remoteDiffTreeWarm: median(runs.compactMap(\.remoteDiffTreeWarm)),
                        fprepChangesPerRequest: median(runs.compactMap(\.fprepChangesPerRequest)))
        medians = m
        sync = SyncBenchReport.verdict(m.fprepSync, floor: m.syncFloor, target: SyncBenchReport.syncTarget)
        changes = SyncBenchReport.verdict(m.fprepChanges, floor: m.remoteDiffTree, target: SyncBenchReport.target)
        changesWarm = SyncBenchReport.verdict(m.fprepChangesWarm, floor: m.remoteDiffTreeWarm ?? 0, target: SyncBenchReport.changesWarmTarget)
        changesPerRequest = SyncBenchReport.verdict(m.fprepChangesPerRequest, floor: m.remoteDiffTreeWarm ?? 0,
                                                    target: SyncBenchReport.changesWarmTarget)
        syncRange = Self.range(runs.map { r in r.fprepSync.map { $0 / max(r.syncFloor, 1e-9) } })
        changesWarmRange = Self.range(runs.map { r in
            guard let fprep = r.fprepChangesWarm, let floor = r.remoteDiffTreeWarm, floor > 0 else { return nil }
            return fprep / floor
        })
    }
}

/// The sync mode's result: one table per size and the scaling line, or one JSON object.
struct SyncBenchReport: Encodable {
    /// Ratio fprep/floor that a cold `changes` aims to stay under.
    static let target = 2.0
    /// The "a million files" issue's bars: `sync --incoming` ≤ 1.3× its
    /// floor, `changes` warm as a new process per request ≤ 1.5× `git diff-tree -r`.
    static let syncTarget = 1.3
    static let changesWarmTarget = 1.5

    /// Largest tree's median over the smallest's: near 1 when the cost follows
    /// the change, near the tree ratio when it follows the tree.
    struct Scaling: Encodable {
        var fromFiles: Int
        var toFiles: Int
        var sync: Double?
        var syncBothWays: Double?
        var changes: Double?
        var changesWarm: Double?
        var syncFloor: Double?
        var remoteDiffTree: Double?
        var remoteDiffTreeWarm: Double?
    }

    var changes: Int
    var mutationSeed: UInt64
    var treeSeed: UInt64
    var transport: String
    var fprep: String
    var runs: Int
    var cachesDropped: Bool
    var sizes: [SyncSizeResult]
    var scaling: Scaling?
    /// The both-ways sync ran with `fprep agent` serving (`--agent`): it
    /// reads the agent's change journal instead of scanning the tree.
    var agentServing: Bool

    init(changes: Int, mutationSeed: UInt64, treeSeed: UInt64, transport: String, fprep: String, runs: Int,
         cachesDropped: Bool, sizes: [SyncSizeResult], agentServing: Bool = false) {
        self.agentServing = agentServing
        self.changes = changes
        self.mutationSeed = mutationSeed
        self.treeSeed = treeSeed
        self.transport = transport
        self.fprep = fprep
        self.runs = runs
        self.cachesDropped = cachesDropped
        self.sizes = sizes
        let ordered = sizes.sorted { $0.files < $1.files }
        if let small = ordered.first, let large = ordered.last, large.files > small.files {
            func ratio(_ a: Double?, _ b: Double?) -> Double? {
                guard let a, let b, a > 0 else { return nil }
                return b / a
            }
            scaling = Scaling(fromFiles: small.files, toFiles: large.files,
                              sync: ratio(small.medians.fprepSync, large.medians.fprepSync),
                              syncBothWays: ratio(small.medians.fprepSyncBothWays, large.medians.fprepSyncBothWays),
                              changes: ratio(small.medians.fprepChanges, large.medians.fprepChanges),
                              changesWarm: ratio(small.medians.fprepChangesWarm, large.medians.fprepChangesWarm),
                              syncFloor: ratio(small.medians.syncFloor, large.medians.syncFloor),
                              remoteDiffTree: ratio(small.medians.remoteDiffTree, large.medians.remoteDiffTree),
                              remoteDiffTreeWarm: ratio(small.medians.remoteDiffTreeWarm, large.medians.remoteDiffTreeWarm))
        }
    }

    static func verdict(_ value: Double?, floor: Double, target: Double) -> Report.Verdict {
        guard let value, floor > 0 else { return Report.Verdict(ratio: nil, target: target, met: nil) }
        let ratio = value / floor
        return Report.Verdict(ratio: ratio, target: target, met: ratio <= target)
    }

    /// One JSON object, keys sorted so runs diff cleanly.
    func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }

    /// The human-readable tables.
    func table() -> String {
        var out: [String] = []
        out.append("sync       \(changes) changes per mutation (seed \(mutationSeed)), trees of seed \(treeSeed)")
        out.append("runs       \(runs) (medians shown), " +
                   (cachesDropped ? "caches dropped before each step" : "caches kept: times are warm"))
        out.append("transport  \(transport)")
        out.append("fprep      \(fprep)")
        for size in sizes { out += [""] + table(size) }
        if let s = scaling {
            out.append("")
            let factor = Double(s.toFiles) / Double(s.fromFiles)
            out.append("scaling \(s.fromFiles) → \(s.toFiles) files (tree ×\(String(format: "%g", factor)), same \(changes) changes), median \(s.toFiles)/\(s.fromFiles):")
            out.append("  fprep sync --incoming \(times(s.sync)), fprep sync \(times(s.syncBothWays)), fprep changes \(times(s.changes)), "
                       + "warm \(times(s.changesWarm))  (sync floor \(times(s.syncFloor)), remote diff-tree \(times(s.remoteDiffTree)), "
                       + "warm \(times(s.remoteDiffTreeWarm)))")
        }
        let failures = sizes.flatMap { size in
            size.perRun.enumerated().flatMap { run, result in result.failures.map { "  \(size.files) files, run \(run + 1): \($0)" } }
        }
        if !failures.isEmpty {
            out.append("")
            out.append("fprep failures")
            out += failures
        }
        return out.joined(separator: "\n")
    }

    private func table(_ s: SyncSizeResult) -> [String] {
        let m = s.medians
        var out: [String] = []
        let base = String(s.base.prefix(12)), new = String(s.mutation.prefix(12))
        out.append("== \(s.files) files — \(s.remote) (\(s.remoteReused ? "reused" : "generated")), url \(s.url)")
        out.append("anchors    \(base) → \(new) (\(s.reference))")
        out.append("planned    \(s.planned.summary)")
        out.append("git sees   " + s.gitDiffStatus.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
                   + " (diff-tree -r \(SyncCycle.renameOption))")
        out.append("replica    \(s.materializedBeforeSync) files materialized before the sync")
        out.append("")
        let written = s.perRun.first?.placeholdersWritten ?? 0
        out.append(row("operation", "fprep", "floor", "ratio", "target"))
        out.append(row("sync --incoming", secs(m.fprepSync), secs(m.syncFloor), ratio(s.sync), goal(s.sync) + spread(s.syncRange)))
        out.append(row("  git fetch --filter=blob:none", "", secs(m.gitFetch)))
        out.append(row("  git diff-tree -r \(SyncCycle.renameOption) BASE NEW (clone)", "", secs(m.gitDiffTreeRenames)))
        out.append(row("  write \(written) sparse files + 1 xattr (mkdir -p)", "", secs(m.writePlaceholders)))
        out.append(row("  git fetch of \(s.perRun.first?.contentFetched ?? 0) changed materialized blobs", "", secs(m.fetchContent)))
        out.append(row(agentServing ? "sync (both ways, agent serving: its journal)" : "sync (both ways: tree scan first)",
                       secs(m.fprepSyncBothWays), secs(m.syncFloor),
                       m.fprepSyncBothWays.map { String(format: "%.2f×", $0 / max(m.syncFloor, 1e-9)) } ?? "",
                       agentServing ? m.fprepSyncBothWays.map { $0 / max(m.syncFloor, 1e-9) <= 1.3 ? "≤1.3× ok" : "≤1.3× MISSED" } ?? "≤1.3×" : ""))
        out.append(row("changes --from BASE", secs(m.fprepChanges), secs(m.remoteDiffTree), ratio(s.changes), goal(s.changes)))
        out.append(row("  git diff-tree -r BASE NEW (remote)", "", secs(m.remoteDiffTree)))
        out.append(row("changes --from BASE, warm (median of \(SyncCycle.warmRepeats))", secs(m.fprepChangesWarm),
                       secs(m.remoteDiffTreeWarm), ratio(s.changesWarm), goal(s.changesWarm) + spread(s.changesWarmRange)))
        out.append(row("  per request in one process (changes --stdin)", secs(m.fprepChangesPerRequest),
                       secs(m.remoteDiffTreeWarm), ratio(s.changesPerRequest), goal(s.changesPerRequest)))
        if let sync = s.perRun.compactMap(\.sync).last {
            out.append("")
            out.append("fprep sync:    \(sync.added) added, \(sync.changed) changed, \(sync.deleted) deleted, \(sync.moved) moved, "
                       + "\(bytes(sync.bytesFetched)) fetched, \(sync.signals) signals, \(sync.keptLocal) kept local")
        }
        if let changes = s.perRun.compactMap(\.changes).last {
            out.append("fprep changes: \(changes.updated) updated, \(changes.deleted) deleted, \(changes.moved) moved")
        }
        return out
    }

    private func row(_ operation: String, _ fprep: String, _ floor: String, _ ratio: String = "", _ target: String = "") -> String {
        let line = operation.padding(toLength: 48, withPad: " ", startingAt: 0)
            + fprep.leftPadded(10) + floor.leftPadded(10) + ratio.leftPadded(8) + "   " + target
        return String(line.reversed().drop(while: { $0 == " " }).reversed())
    }

    private func ratio(_ v: Report.Verdict) -> String { v.ratio.map { String(format: "%.2f×", $0) } ?? "—" }

    private func goal(_ v: Report.Verdict) -> String {
        let limit = String(format: "≤%.1f×", v.target)
        guard let met = v.met else { return limit }
        return limit + (met ? " ok" : " MISSED")
    }

    private func times(_ value: Double?) -> String { value.map { String(format: "×%.2f", $0) } ?? "—" }

    /// The runs' lowest and highest ratio, when there are several runs.
    private func spread(_ range: [Double]?) -> String {
        guard runs > 1, let range, range.count == 2 else { return "" }
        return String(format: "  (runs %.2f–%.2f×)", range[0], range[1])
    }
}
