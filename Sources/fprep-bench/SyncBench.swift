import ArgumentParser
import Foundation
import Glibc

/// `fprep-bench sync`: fprep sync and fprep changes after a seeded mutation
/// commit, beside git floors, for several tree sizes in one run.
struct SyncBench: ParsableCommand {
    /// The first argument that selects this mode.
    static let mode = "sync"

    static let configuration = CommandConfiguration(
        commandName: "fprep-bench \(mode)",
        abstract: "Time fprep sync/changes after a seeded mutation commit against git floors.",
        discussion: """
        For each size: reuses (or generates) the base remote WORK/remote-N.git as the \
        default mode does, then writes a mutation commit of --changes changes on top of \
        main into refs/bench/mutation-K with `git fast-import` (~40% modified, 20% added, \
        some in new folders, 20% deleted, 15% exact renames across folders, one small \
        folder renamed). Untimed, with main at the base: one fprep replica per run \
        (WORK/sync-replica-N-R and WORK/sync-replica-both-N-R, with --materialize files materialized, among them \
        modified, renamed and deleted ones) and one `git clone --filter=blob:none \
        --no-checkout` per run (WORK/sync-git-N-R). Then the mutation is published: \
        main moves with `git update-ref` and `fprep hook post-receive` gets the line \
        git would give it. Timed, after `sync`, (as root) dropped caches and an \
        untimed `--version` of the step's programs (git's, and fprep's for fprep's steps, \
        which run git: their binaries warm, their data cold): the floor \
        of sync (`git fetch` blob:none in the clone + `git diff-tree -r -M100%` + one \
        sparse file with one xattr per added or modified path + `git fetch` of the new \
        blobs of the modified files the replica has materialized, in one request), \
        `git diff-tree -r` in \
        the remote (the floor of changes), `fprep sync --incoming --json` (what the floor \
        does: the remote's change only), `fprep sync --json` in a second replica (both \
        ways: a scan of the tree for local changes first) and `fprep changes \
        --from BASE --json`. Then, warm (nothing dropped, one untimed run first, the median \
        of 11): `fprep changes` against `git diff-tree -r`, the comparison a consumer that \
        polls for changes sees, and the same request answered by one `fprep changes --stdin` \
        process (what a long-lived enumerator pays per request). With --warm no step drops \
        the caches. Targets: `sync --incoming` ≤ 1.3× its floor, `changes` warm \
        (a process per request, and per request in one) ≤ 1.5× `git diff-tree -r`, a cold \
        `changes` ≤ 2×, and the same cost at every size. With several runs the sync and \
        warm rows show the runs' lowest and highest ratio (the machine's noise). Main and the size manifest are put \
        back to the base at the end (and at the start, after a killed run).
        """)

    @Option(help: ArgumentHelp("Tree sizes in files, comma-separated.", valueName: "n,n,…"))
    var sizes: String = "10000,100000"

    // Named by hand: ArgumentParser would spell it --bytes-per100k.
    @Option(name: .customLong("bytes-per-100k"),
            help: ArgumentHelp("Blob bytes per 100,000 files of each tree, e.g. 200M (default: 500M; a smaller figure makes a 10^6-file tree quicker to generate).",
                               valueName: "size"))
    var bytesPer100k: String?

    @Option(help: "Changes in the mutation commit.")
    var changes: Int = 100

    @Option(help: "Seed of the generated trees (as the default mode's --seed; tree sizes are 500M per 100,000 files).")
    var seed: UInt64 = 1

    @Option(help: "Seed of the mutation and of the materialized sample.")
    var mutationSeed: UInt64 = 2

    @Option(help: "Files materialized in each replica before the sync.")
    var materialize: Int = 50

    @Option(help: "Runs per size (each with its own replica and clone); the report shows medians.")
    var runs: Int = 3

    @Option(help: ArgumentHelp("Working folder: remote cache, replicas, clones, logs.", valueName: "dir"))
    var work: String = "/tmp/fprep-bench"

    @Option(help: ArgumentHelp("fprep binary (default: the fprep next to this executable, else fprep on PATH).",
                               valueName: "path"))
    var fprep: String?

    @Option(help: "How clones reach the remote: daemon (git daemon on 127.0.0.1, git:// URL) or file (file:// URL).")
    var transport: Transport = .daemon

    @Flag(help: "Print one JSON object instead of the tables.")
    var json = false

    @Flag(help: "Keep the caches between steps (as root they are dropped before each timed step): every figure is then a warm one, as for a replica in daily use.")
    var warm = false

    @Flag(help: "Run the both-ways sync with `fprep agent` serving its replica (as root): the sync reads the agent's change journal instead of scanning.")
    var agent = false

    @Flag(help: "Regenerate the remotes even when the cached ones match.")
    var regenerate = false

    @Flag(help: "Print each step on stderr as it starts.")
    var verbose = false

    func validate() throws {
        guard let list = parsedSizes(), !list.isEmpty else {
            throw ValidationError("--sizes \(sizes): expected positive file counts separated by commas")
        }
        guard changes >= 1 else { throw ValidationError("--changes must be positive") }
        guard materialize >= 0 else { throw ValidationError("--materialize must not be negative") }
        guard runs > 0 else { throw ValidationError("--runs must be positive") }
        if let bytesPer100k, parseSize(bytesPer100k) == nil {
            throw ValidationError("--bytes-per-100k \(bytesPer100k): expected a byte count with an optional K, M or G suffix")
        }
    }

    /// --sizes as numbers (underscores allowed: 100_000), nil when malformed.
    private func parsedSizes() -> [Int]? {
        var list: [Int] = []
        for part in sizes.split(separator: ",") {
            guard let n = Int(part.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "_", with: "")), n > 0 else { return nil }
            if !list.contains(n) { list.append(n) }
        }
        return list
    }

    func run() throws {
        do {
            try bench()
        } catch let error as BenchError {
            // One line naming what failed; `defer`s have already put the remote back and stopped the daemon.
            FileHandle.standardError.write(Data("fprep-bench: \(error)\n".utf8))
            throw ExitCode.failure
        }
    }

    private func bench() throws {
        signal(SIGPIPE, SIG_IGN)
        let libc = try LibC.load()
        let subprocess = Subprocess(libc: libc)
        let note: (String) -> Void = { FileHandle.standardError.write(Data("fprep-bench: \($0)\n".utf8)) }
        let step: (String) -> Void = { [verbose] text in if verbose { note(text) } }
        let work = absolutePath(self.work)
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let fprepPath = try resolveFprep(fprep)
        let dropCaches = geteuid() == 0 && !warm
        if !dropCaches && !warm { note("not root: caches cannot be dropped, times are warm-cache times") }

        let daemon = transport == .daemon ? try GitDaemon(work: work, subprocess: subprocess) : nil
        defer { daemon?.stop() }
        var results: [SyncSizeResult] = []
        for files in parsedSizes() ?? [] {
            let remoteName = "remote-\(files).git"
            let url = daemon?.url(for: remoteName) ?? "file://\(work)/\(remoteName)"
            results.append(try benchSize(files: files, url: url, work: work, fprep: fprepPath, subprocess: subprocess,
                                         floors: FilesystemFloors(libc: libc), dropCaches: dropCaches, note: note, step: step))
        }
        let report = SyncBenchReport(changes: changes, mutationSeed: mutationSeed, treeSeed: seed,
                                     transport: transport.rawValue, fprep: fprepPath, runs: runs,
                                     cachesDropped: dropCaches, sizes: results, agentServing: agent)
        print(json ? try report.json() : report.table())
    }

    /// Everything for one tree size; the remote's main and manifest are back at the base when it returns or throws.
    private func benchSize(files: Int, url: String, work: String, fprep: String, subprocess: Subprocess,
                           floors: FilesystemFloors, dropCaches: Bool,
                           note: @escaping (String) -> Void, step: (String) -> Void) throws -> SyncSizeResult {
        let perHundredThousand = bytesPer100k.flatMap(parseSize) ?? (500 << 20)
        let totalSize = Int((Double(perHundredThousand) * Double(files) / 100_000).rounded())
        let generator = Generator(work: work, files: files, totalSize: totalSize, seed: seed,
                                  fprep: fprep, subprocess: subprocess)
        let refs = RemoteRefs(remote: generator.remotePath, subprocess: subprocess)
        if try refs.restoreBase() { note("\(generator.remotePath): main and the size manifest put back to the base (an earlier run was interrupted)") }
        let (facts, reused) = try generator.ensureRemote(regenerate: regenerate, log: note)
        if reused { note("reusing cached remote \(generator.remotePath) (commit \(facts.commit))") }
        else { note("generated \(generator.remotePath) in \(secs(facts.generateSeconds)) (commit \(facts.commit))") }
        let base = facts.commit
        try refs.recordBase(base)
        defer {
            do { try refs.restoreBase() } catch { note("could not put \(generator.remotePath) back to \(base): \(error)") }
        }

        let tree = try listTree(remote: generator.remotePath, subprocess: subprocess)
        let plan = try MutationPlan(tree: tree, changes: changes, seed: mutationSeed)
        let reference = "refs/bench/mutation-\(changes)"
        step("write the mutation commit into \(reference)")
        let new = try plan.write(remote: generator.remotePath, base: base, reference: reference, subprocess: subprocess)
        note("mutation \(new) (\(reference)): \(PlannedChanges(plan).summary)")
        var newSizes: [String: Int] = [:]
        for entry in try listTree(remote: generator.remotePath, revision: new, subprocess: subprocess) {
            newSizes[entry.path] = entry.size
        }
        let sample = try plan.materializeSample(tree: tree, count: materialize)
        let listPath = "\(work)/sync-materialize-\(files).txt"
        try Data(sample.map { $0 + "\n" }.joined().utf8).write(to: URL(fileURLWithPath: listPath))
        let status = try RawDiff(subprocess.run(Command(["git", "-C", generator.remotePath, "diff-tree", "-r", "-z",
                                                         SyncCycle.renameOption, base, new])).stdout).counts

        var cycle = SyncCycle(work: work, files: files, url: url, fprep: fprep, remote: generator.remotePath,
                              base: base, new: new, materializeList: listPath, newSizes: newSizes,
                              subprocess: subprocess, floors: floors, dropCaches: dropCaches)
        cycle.agent = agent
        try cycle.clear()
        for run in 1...runs { try cycle.prepare(run, log: step) }
        step("publish \(new) on main and run the post-receive manifest step")
        try refs.publish(base: base, new: new, fprep: fprep)
        var results: [SyncRunResult] = []
        for run in 1...runs {
            note("\(files) files: run \(run)/\(runs)")
            results.append(try cycle.run(run, log: step))
        }
        return SyncSizeResult(files: files, remote: generator.remotePath, remoteReused: reused, url: url, base: base,
                              mutation: new, reference: reference, plan: plan, gitDiffStatus: status,
                              materialized: sample.count, runs: results)
    }
}
