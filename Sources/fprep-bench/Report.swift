import Foundation

/// The benchmark's result: generation facts, per-run times and their medians,
/// rendered as a table or as one JSON object.
struct Report: Encodable {
    /// Ratios fprep/floor the project holds itself to (issue 14).
    static let cloneTarget = 1.2
    static let materializeTarget = 1.0
    /// Evict against the punch-hole loop alone.
    static let evictTarget = 1.2

    struct Medians: Encodable {
        var fprepClone: Double?
        var fprepMaterialize: Double?
        var fprepEvict: Double?
        var gitClone: Double
        var createPlaceholders: Double
        var cloneFloor: Double
        var gitFetchBlobs: Double
        var gitCheckout: Double
        var materializeFloor: Double
        var punchHoles: Double
        var bytesAfterClone: Int64?
        var bytesAfterMaterialize: Int64?
        var bytesAfterEvict: Int64?
        /// fprep's own peak resident memory per step (its git children not counted), KiB.
        var clonePeakKiB: Int?
        var materializePeakKiB: Int?
        var evictPeakKiB: Int?
    }

    struct Verdict: Encodable {
        var ratio: Double?
        var target: Double
        var met: Bool?
    }

    var generation: GenerationFacts
    var remoteReused: Bool
    var remote: String
    var transport: String
    var url: String
    var fprep: String?
    var sampleFiles: Int
    var runs: Int
    var cachesDropped: Bool
    var medians: Medians
    var clone: Verdict
    var materialize: Verdict
    var evict: Verdict
    /// (after evict − after clone) / after clone, in percent.
    var evictVsBeforeMaterializePercent: Double?
    var perRun: [CycleResult]

    init(generation: GenerationFacts, remoteReused: Bool, remote: String, transport: String, url: String,
         fprep: String?, sampleFiles: Int, cachesDropped: Bool, results: [CycleResult]) {
        self.generation = generation
        self.remoteReused = remoteReused
        self.remote = remote
        self.transport = transport
        self.url = url
        self.fprep = fprep
        self.sampleFiles = sampleFiles
        self.runs = results.count
        self.cachesDropped = cachesDropped
        self.perRun = results
        let m = Medians(
            fprepClone: median(results.compactMap(\.fprepClone)),
            fprepMaterialize: median(results.compactMap(\.fprepMaterialize)),
            fprepEvict: median(results.compactMap(\.fprepEvict)),
            gitClone: median(results.map(\.gitClone)) ?? 0,
            createPlaceholders: median(results.map(\.createPlaceholders)) ?? 0,
            cloneFloor: median(results.map(\.cloneFloor)) ?? 0,
            gitFetchBlobs: median(results.map(\.gitFetchBlobs)) ?? 0,
            gitCheckout: median(results.map(\.gitCheckout)) ?? 0,
            materializeFloor: median(results.map(\.materializeFloor)) ?? 0,
            punchHoles: median(results.map(\.punchHoles)) ?? 0,
            bytesAfterClone: median(results.compactMap(\.bytesAfterClone)),
            bytesAfterMaterialize: median(results.compactMap(\.bytesAfterMaterialize)),
            bytesAfterEvict: median(results.compactMap(\.bytesAfterEvict)),
            clonePeakKiB: results.compactMap(\.clonePeakKiB).max(),
            materializePeakKiB: results.compactMap(\.materializePeakKiB).max(),
            evictPeakKiB: results.compactMap(\.evictPeakKiB).max())
        medians = m
        clone = Report.verdict(m.fprepClone, floor: m.cloneFloor, target: Report.cloneTarget)
        materialize = Report.verdict(m.fprepMaterialize, floor: m.materializeFloor, target: Report.materializeTarget)
        evict = Report.verdict(m.fprepEvict, floor: m.punchHoles, target: Report.evictTarget)
        if let before = m.bytesAfterClone, let after = m.bytesAfterEvict, before > 0 {
            evictVsBeforeMaterializePercent = Double(after - before) * 100 / Double(before)
        }
    }

    private static func verdict(_ value: Double?, floor: Double, target: Double) -> Verdict {
        guard let value, floor > 0 else { return Verdict(ratio: nil, target: target, met: nil) }
        let ratio = value / floor
        return Verdict(ratio: ratio, target: target, met: ratio <= target)
    }

    /// One JSON object, keys sorted so runs diff cleanly.
    func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }

    /// The human-readable table.
    func table() -> String {
        let g = generation
        let m = medians
        let n = sampleFiles
        var out: [String] = []
        let origin = remoteReused
            ? "reused from cache (generated earlier in \(secs(g.generateSeconds)))"
            : "generated in \(secs(g.generateSeconds)) (import \(secs(g.importSeconds)), repack \(secs(g.repackSeconds)), hook \(secs(g.hookSeconds)))"
        out.append("remote     \(remote) — \(origin)")
        out.append("tree       \(g.files) files (exec \(g.executables), symlinks \(g.symlinks), binary \(g.binaries), empty \(g.emptyFiles)) in \(g.folders) folders, max depth \(g.maxFolderDepth)")
        out.append("size       blobs \(bytes(Int64(g.blobBytes))), pack \(bytes(Int64(g.packBytes))), seed \(g.seed)")
        out.append("commit     \(g.commit)")
        out.append("transport  \(transport): \(url)")
        out.append("runs       \(runs) (medians shown), sample \(n) files, " +
                   (cachesDropped ? "caches dropped before each step" : "caches NOT dropped (not root): times are warm"))
        if let fprep { out.append("fprep      \(fprep)") } else { out.append("fprep      skipped (--skip-fprep): floors only") }
        out.append("")
        out.append(row("operation", "fprep", "floor", "ratio", "target"))
        out.append(row("clone", secs(m.fprepClone), secs(m.cloneFloor), ratio(clone), goal(clone) + spread { ($0.fprepClone, $0.cloneFloor) }))
        out.append(row("  A: git clone --filter=blob:none --no-checkout", "", secs(m.gitClone)))
        out.append(row("  B: create \(g.files) sparse files + 1 xattr", "", secs(m.createPlaceholders)))
        if let phases = perRun.first?.clonePhases, !phases.isEmpty {
            out.append("  fprep's phases (first run): " + phases.joined(separator: ", "))
        }
        // A short step's noise is read from its phases: every run's.
        func phaseLines(step: Int) {
            for (i, run) in perRun.enumerated() {
                guard let phases = run.phases(of: step), !phases.isEmpty else { continue }
                out.append("  fprep's phases (run \(i + 1)): " + phases.map { $0.replacingOccurrences(of: " (resident", with: " (") }.joined(separator: ", "))
            }
        }
        out.append(row("materialize", secs(m.fprepMaterialize), secs(m.materializeFloor), ratio(materialize),
                       goal(materialize) + spread { ($0.fprepMaterialize, $0.materializeFloor) }))
        out.append(row("  git fetch of \(n) blob ids (one request)", "", secs(m.gitFetchBlobs)))
        out.append(row("  git checkout of the \(n) paths", "", secs(m.gitCheckout)))
        phaseLines(step: 1)
        out.append(row("evict", secs(m.fprepEvict), secs(m.punchHoles), ratio(evict), goal(evict) + spread { ($0.fprepEvict, $0.punchHoles) }))
        out.append(row("  a process punching \(n) files to holes, tree of the same size", "", secs(m.punchHoles)))
        phaseLines(step: 2)
        if let c = m.clonePeakKiB {
            out.append("")
            out.append("fprep's own peak memory (VmHWM; git's processes not counted), largest of the runs")
            out.append("  clone \(kib(c)), materialize \(m.materializePeakKiB.map(kib) ?? "—"), evict \(m.evictPeakKiB.map(kib) ?? "—")")
        }
        if let c = m.bytesAfterClone, let ma = m.bytesAfterMaterialize, let e = m.bytesAfterEvict {
            out.append("")
            out.append("disk use of the replica (st_blocks, .git and .fprep included)")
            out.append("  after clone        \(bytes(c))")
            out.append("  after materialize  \(bytes(ma))")
            let pct = evictVsBeforeMaterializePercent.map { String(format: "%+.2f%%", $0) } ?? "—"
            out.append("  after evict        \(bytes(e))  (\(pct) vs before materialize)")
        }
        return out.joined(separator: "\n")
    }

    private func row(_ operation: String, _ fprep: String, _ floor: String, _ ratio: String = "", _ target: String = "") -> String {
        let line = operation.padding(toLength: 48, withPad: " ", startingAt: 0)
            + fprep.leftPadded(10) + floor.leftPadded(10) + ratio.leftPadded(8) + "   " + target
        return String(line.reversed().drop(while: { $0 == " " }).reversed())
    }

    private func kib(_ value: Int) -> String { bytes(Int64(value) * 1024) }

    /// "  (runs a–b×)": each run's own ratio, lowest and highest (the
    /// machine's noise beside the median); empty with one run.
    private func spread(_ pick: (CycleResult) -> (Double?, Double)) -> String {
        let ratios = perRun.compactMap { run -> Double? in
            let (value, floor) = pick(run)
            guard let value, floor > 0 else { return nil }
            return value / floor
        }
        guard ratios.count > 1, let low = ratios.min(), let high = ratios.max() else { return "" }
        return String(format: "  (runs %.2f–%.2f×)", low, high)
    }

    private func ratio(_ v: Verdict) -> String { v.ratio.map { String(format: "%.2f×", $0) } ?? "—" }

    private func goal(_ v: Verdict) -> String {
        let limit = String(format: "≤%.1f×", v.target)
        guard let met = v.met else { return limit }
        return limit + (met ? " ok" : " MISSED")
    }
}

/// Median of a list (mean of the middle two for an even count); nil when empty.
func median<T: BinaryFloatingPoint>(_ values: [T]) -> T? {
    guard !values.isEmpty else { return nil }
    let s = values.sorted()
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

func median(_ values: [Int64]) -> Int64? {
    guard !values.isEmpty else { return nil }
    let s = values.sorted()
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

/// "1.234 s", or "—" for a step that did not run.
func secs(_ value: Double?) -> String {
    guard let value else { return "—" }
    return String(format: "%.3f s", value)
}

/// Binary-prefixed size, e.g. "500.0 MiB".
func bytes(_ n: Int64) -> String {
    var value = Double(n)
    for unit in ["B", "KiB", "MiB", "GiB"] {
        if abs(value) < 1024 || unit == "GiB" {
            return unit == "B" ? "\(n) B" : String(format: "%.1f", value) + " " + unit
        }
        value /= 1024
    }
    return "\(n) B"
}

extension String {
    func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
