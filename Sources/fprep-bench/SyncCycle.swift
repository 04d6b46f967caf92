import Foundation

/// What `fprep sync --json` reported (counts of its lists).
struct SyncOutcome: Codable {
    var from: String?
    var to: String?
    var added: Int
    var changed: Int
    var deleted: Int
    var moved: Int
    var bytesFetched: Int64
    var keptLocal: Int
    var signals: Int
}

/// What `fprep changes --json` reported (counts of its lists).
struct ChangesOutcome: Codable {
    var updated: Int
    var deleted: Int
    var moved: Int
    var anchor: String
    var moreComing: Bool
}

/// Times of one sync run, fprep and floors side by side.
struct SyncRunResult: Codable {
    /// `fprep sync --incoming`: the remote's change only, what the floor does.
    /// nil when the command failed (see `failures`).
    var fprepSync: Double?
    /// `fprep sync` both ways on a second replica: a scan of the tree for
    /// local changes first, then the same incoming work.
    var fprepSyncBothWays: Double?
    var fprepChanges: Double?
    /// Floor of sync: `git fetch` (blob:none) in a blobless clone…
    var gitFetch: Double
    /// …plus `git diff-tree -r -M BASE NEW` there…
    var gitDiffTreeRenames: Double
    /// …plus one sparse file with one xattr per added or modified path…
    var writePlaceholders: Double
    var placeholdersWritten: Int
    /// …plus `git fetch` of the new blobs of the modified files the replica
    /// has materialized (one request): the content fprep writes for them.
    var fetchContent: Double = 0
    var contentFetched: Int = 0
    /// Floor of changes: `git diff-tree -r BASE NEW` in the remote.
    var remoteDiffTree: Double
    /// The same two commands with the caches kept, as a consumer polling
    /// for changes runs them: medians of `SyncCycle.warmRepeats` runs.
    var fprepChangesWarm: Double?
    var remoteDiffTreeWarm: Double?
    /// `fprep changes --stdin`: one process answering request after
    /// request, as a long-lived enumerator would (median per request).
    var fprepChangesPerRequest: Double?
    var sync: SyncOutcome?
    var changes: ChangesOutcome?
    /// One line per fprep failure or wrong answer (command, status, stderr).
    var failures: [String] = []

    var syncFloor: Double { gitFetch + gitDiffTreeRenames + writePlaceholders + fetchContent }
}

/// Prepares and times the sync runs of one tree size.
///
/// Each run has its own replica and git clone, made at the base commit
/// before the mutation is published, so no run inherits another's state and
/// the remote is moved once. Every timed step starts after `sync` and, as root,
/// dropped caches.
struct SyncCycle {
    /// The rename detection of the floor's diff. Exact renames only (`-M100%`):
    /// with a plain `-M`, git 2.39 in a blobless clone fetches the blobs of
    /// every unpaired addition and deletion to score inexact renames, one more
    /// round trip fprep does not make (its renames are exact, by id).
    static let renameOption = "-M100%"
    /// Runs behind each warm figure (after one run that warms the caches).
    static let warmRepeats = 11

    let work: String
    let files: Int
    let url: String
    let fprep: String
    let remote: String
    let base: String
    let new: String
    /// Paths to materialize in each replica before the sync.
    let materializeList: String
    /// Sizes of the new tree's blobs, by path (what the manifest tells fprep).
    let newSizes: [String: Int]
    let subprocess: Subprocess
    let floors: FilesystemFloors
    let dropCaches: Bool
    /// Whether the both-ways sync runs with `fprep agent` serving the
    /// replica (its change journal instead of a scan).
    var agent = false

    func replica(_ run: Int) -> String { "\(work)/sync-replica-\(files)-\(run)" }
    func bothWaysReplica(_ run: Int) -> String { "\(work)/sync-replica-both-\(files)-\(run)" }
    func gitClone(_ run: Int) -> String { "\(work)/sync-git-\(files)-\(run)" }

    /// Removes every replica and clone an earlier sync run of this size left.
    func clear() throws {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: work)) ?? []
        let old = names.filter {
            $0.hasPrefix("sync-replica-\(files)-") || $0.hasPrefix("sync-replica-both-\(files)-") || $0.hasPrefix("sync-git-\(files)-")
        }
        guard !old.isEmpty else { return }
        try subprocess.run(Command(["rm", "-rf"] + old.map { "\(work)/\($0)" }))
    }

    /// Untimed, with the remote's main at the base: a fresh fprep replica
    /// with the sample materialized, and a fresh blobless git clone.
    func prepare(_ run: Int, log: (String) -> Void) throws {
        log("prepare run \(run): fprep clone + materialize, git clone --filter=blob:none --no-checkout")
        for folder in [replica(run), bothWaysReplica(run)] {
            try subprocess.run(Command([fprep, "clone", url, folder]))
            try subprocess.run(Command([fprep, "materialize", "-C", folder, "--paths-from", materializeList]))
        }
        try subprocess.run(Command(["git", "-c", "gc.auto=0", "clone", "-q", "--filter=blob:none", "--no-checkout",
                                    url, gitClone(run)]))
        for (key, value) in [("gc.auto", "0"), ("maintenance.auto", "false")] {
            try subprocess.run(Command(["git", "-C", gitClone(run), "config", key, value]))
        }
    }

    /// The timed steps of one run: the sync floor, the remote's diff-tree,
    /// then fprep sync and fprep changes.
    func run(_ run: Int, log: (String) -> Void) throws -> SyncRunResult {
        let clone = gitClone(run)
        log("run \(run): git fetch + diff-tree \(SyncCycle.renameOption) + placeholders")
        let fetch = try timed(Command(["git", "-C", clone, "fetch", "-q", "--no-tags", "--filter=blob:none", "origin"]))
        let diff = try subprocess.run(Command(["git", "-C", clone, "diff-tree", "-r", "-z", SyncCycle.renameOption, base, new],
                                              environment: ["GIT_NO_LAZY_FETCH": "1"]))
        let raw = try RawDiff(diff.stdout)
        let write = try floors.writePlaceholders(root: clone, items: raw.written, sizes: newSizes)
        let sample = Set(((try? String(contentsOfFile: materializeList, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init))
        let content = raw.written.filter { sample.contains($0.path) }.map(\.oid)
        var contentSeconds = 0.0
        if !content.isEmpty {
            contentSeconds = try subprocess.run(Command(["git", "-C", clone, "-c", "gc.auto=0", "-c", "fetch.negotiationAlgorithm=noop",
                                                         "fetch", "-q", "origin", "--no-tags", "--no-write-fetch-head",
                                                         "--recurse-submodules=no", "--filter=blob:none", "--stdin"],
                                                        input: .bytes(Array(content.map { $0 + "\n" }.joined().utf8)))).seconds
        }

        log("run \(run): git diff-tree -r in the remote")
        let remoteDiff = try timed(Command(["git", "-C", remote, "diff-tree", "-r", base, new]))

        var result = SyncRunResult(gitFetch: fetch.seconds, gitDiffTreeRenames: diff.seconds, writePlaceholders: write,
                                   placeholdersWritten: raw.written.count, fetchContent: contentSeconds,
                                   contentFetched: content.count, remoteDiffTree: remoteDiff.seconds)
        log("run \(run): fprep sync")
        do {
            let sync = try timed(Command([fprep, "sync", "--incoming", "-C", replica(run), "--json"]))
            result.fprepSync = sync.seconds
            let outcome = try SyncCycle.syncOutcome(sync.stdout)
            result.sync = outcome
            if outcome.from != base || outcome.to != new {
                result.failures.append("fprep sync -C \(replica(run)) --json: moved \(outcome.from ?? "nil") → \(outcome.to ?? "nil"), expected \(base) → \(new)")
            }
            let anchor = try subprocess.run(Command([fprep, "anchor", "-C", replica(run)])).stdoutText
                .trimmingCharacters(in: .whitespacesAndNewlines)
            if anchor != new { result.failures.append("fprep anchor -C \(replica(run)): \(anchor), expected \(new)") }
        } catch let error as BenchError {
            result.failures.append(error.description)
            return result
        }
        log("run \(run): fprep sync (both ways) in a second replica\(agent ? ", with the agent serving it" : "")")
        do {
            var served: Process?
            if agent {
                served = try startAgent(fprep: fprep, replica: bothWaysReplica(run), syncs: false)
                _ = try subprocess.run(Command([fprep, "status", "-C", bothWaysReplica(run), "--json"]))  // leaves the journal record
            }
            defer { served?.terminate(); served?.waitUntilExit() }
            let sync = try timed(Command([fprep, "sync", "-C", bothWaysReplica(run), "--json"]))
            result.fprepSyncBothWays = sync.seconds
            let outcome = try SyncCycle.syncOutcome(sync.stdout)
            if outcome.from != base || outcome.to != new {
                result.failures.append("fprep sync -C \(bothWaysReplica(run)) --json: moved \(outcome.from ?? "nil") → \(outcome.to ?? "nil"), expected \(base) → \(new)")
            }
        } catch let error as BenchError {
            result.failures.append(error.description + (agent ? " (the agent's log: \(agentLogPath(bothWaysReplica(run))))" : ""))
        }
        log("run \(run): fprep changes")
        do {
            let changes = try timed(Command([fprep, "changes", "-C", replica(run), "--from", base, "--json"]))
            result.fprepChanges = changes.seconds
            let outcome = try SyncCycle.changesOutcome(changes.stdout)
            result.changes = outcome
            if outcome.anchor != new || outcome.moreComing {
                result.failures.append("fprep changes -C \(replica(run)) --from \(base) --json: anchor \(outcome.anchor), moreComing \(outcome.moreComing); expected \(new), false")
            }
        } catch let error as BenchError {
            result.failures.append(error.description)
        }
        log("run \(run): fprep changes and git diff-tree -r, warm (median of \(SyncCycle.warmRepeats))")
        do {
            result.fprepChangesWarm = try warmMedian(Command([fprep, "changes", "-C", replica(run), "--from", base, "--json"]))
            result.remoteDiffTreeWarm = try warmMedian(Command(["git", "-C", remote, "diff-tree", "-r", base, new]))
            let child = try RequestChild(Command([fprep, "changes", "-C", replica(run), "--stdin"]), subprocess: subprocess)
            defer { child.finish() }
            var times: [Double] = []
            for attempt in 0...SyncCycle.warmRepeats {
                let (seconds, answer) = try child.ask(base)
                let outcome = try SyncCycle.changesOutcome(answer)
                if outcome.anchor != new {
                    result.failures.append("fprep changes --stdin: answered anchor \(outcome.anchor), expected \(new)")
                    break
                }
                if attempt > 0 { times.append(seconds) }   // the first one warms up
            }
            result.fprepChangesPerRequest = median(times)
        } catch let error as BenchError {
            result.failures.append(error.description)
        }
        return result
    }

    /// The median time of a command run again and again with nothing
    /// dropped in between (one untimed run first fills the caches).
    private func warmMedian(_ command: Command) throws -> Double {
        _ = try subprocess.run(command)
        var times: [Double] = []
        for _ in 0..<SyncCycle.warmRepeats { times.append(try subprocess.run(command).seconds) }
        return median(times) ?? 0
    }

    /// A command's output, timed from a quiet, cold start: the data cold,
    /// the binaries of the programs it runs warm (`--version` of each run
    /// first: the step's program and git, which fprep runs too), as for a
    /// user who runs them often (see the default mode's `Cycle.timed`).
    private func timed(_ command: Command) throws -> ProcessOutput {
        settle(dropCaches: dropCaches)
        if let program = command.argv.first, program != "git" { _ = try? subprocess.run(Command([program, "--version"])) }
        _ = try? subprocess.run(Command(Cycle.warmGit))
        return try subprocess.run(command)
    }

    static func syncOutcome(_ json: [UInt8]) throws -> SyncOutcome {
        let object = try jsonObject(json, command: "fprep sync --json")
        guard let added = object["added"] as? Int, let changed = object["changed"] as? Int,
              let deleted = object["deleted"] as? Int, let moved = object["moved"] as? Int,
              let fetched = object["bytesFetched"] as? Int else {
            throw BenchError.message("fprep sync --json: missing counts in \(String(decoding: json.prefix(300), as: UTF8.self))")
        }
        return SyncOutcome(from: object["from"] as? String, to: object["to"] as? String, added: added, changed: changed,
                           deleted: deleted, moved: moved, bytesFetched: Int64(fetched),
                           keptLocal: (object["keptLocal"] as? [Any])?.count ?? 0,
                           signals: (object["signals"] as? [Any])?.count ?? 0)
    }

    static func changesOutcome(_ json: [UInt8]) throws -> ChangesOutcome {
        let object = try jsonObject(json, command: "fprep changes --json")
        guard let updated = object["updated"] as? [Any], let deleted = object["deleted"] as? [Any],
              let moved = object["moved"] as? [Any], let anchor = object["anchor"] as? String,
              let more = object["moreComing"] as? Bool else {
            throw BenchError.message("fprep changes --json: missing fields in \(String(decoding: json.prefix(300), as: UTF8.self))")
        }
        return ChangesOutcome(updated: updated.count, deleted: deleted.count, moved: moved.count, anchor: anchor, moreComing: more)
    }

    private static func jsonObject(_ json: [UInt8], command: String) throws -> [String: Any] {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(json))) as? [String: Any] else {
            throw BenchError.message("\(command): output is not a JSON object: \(String(decoding: json.prefix(300), as: UTF8.self))")
        }
        return object
    }
}
