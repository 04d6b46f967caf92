import ArgumentParser
import Foundation
import Glibc

/// `fprep-bench scan`: the local-change scan and the sync of local changes.
/// On a replica of the cached 10^5-file remote and on a full git checkout of
/// it, the same seeded changes are made (modified materialized files, new
/// files, deletions, moves); then `fprep status` is timed against `git
/// status` (warm and cold caches), and `fprep sync` of those changes against
/// `git add -A; git commit; git push` in the checkout, both pushing to
/// throwaway mirrors of the remote.
struct ScanBench: ParsableCommand {
    static let mode = "scan"

    static let configuration = CommandConfiguration(
        commandName: "fprep-bench scan",
        abstract: "Time fprep's local-change scan against git status, and a sync of local changes.",
        discussion: "Needs the cached remote of the default mode (run fprep-bench once with the same --files first).")

    @Option(help: "Files in the cached remote (WORK/remote-N.git).")
    var files: Int = 100_000

    @Option(help: "Local changes to make.")
    var changes: Int = 100

    @Option(help: "Seed of the changes.")
    var seed: UInt64 = 3

    @Option(help: "Timed repetitions (median).")
    var runs: Int = 3

    @Option(help: ArgumentHelp("Working folder (as the default mode's).", valueName: "dir"))
    var work: String = "/tmp/fprep-bench"

    @Option(help: ArgumentHelp("The fprep binary (default: next to fprep-bench).", valueName: "path"))
    var fprep: String?

    @Flag(help: "Also run `fprep agent` on the replica (as root) and time status and sync reading its change journal, with the agent's idle CPU and memory.")
    var agent = false

    @Flag(help: "Print one JSON object instead of the table.")
    var json = false

    func run() throws {
        do {
            try bench()
        } catch let error as BenchError {
            FileHandle.standardError.write(Data("fprep-bench: \(error)\n".utf8))
            throw ExitCode.failure
        }
    }

    private func bench() throws {
        signal(SIGPIPE, SIG_IGN)
        let subprocess = Subprocess(libc: try LibC.load())
        let work = absolutePath(self.work)
        let fprep = try resolveFprep(self.fprep)
        let remote = "\(work)/remote-\(files).git"
        guard FileManager.default.fileExists(atPath: remote) else {
            throw BenchError.message("no cached remote \(remote): run 'fprep-bench --files \(files)' first")
        }
        let dropCaches = geteuid() == 0
        let note: (String) -> Void = { FileHandle.standardError.write(Data("fprep-bench scan: \($0)\n".utf8)) }
        @discardableResult
        func git(_ args: [String], _ dir: String?) throws -> ProcessOutput {
            try subprocess.run(Command(["git"] + args, environment: ["GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@b",
                                                                     "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "b@b"],
                                       directory: dir))
        }
        // Throwaway mirrors (objects shared with the cached remote) take the pushes.
        let fprepRemote = "\(work)/scan-remote-fprep.git", gitRemote = "\(work)/scan-remote-git.git"
        let replica = "\(work)/scan-replica", checkout = "\(work)/scan-checkout"
        try subprocess.run(Command(["rm", "-rf", fprepRemote, gitRemote, replica]))
        for mirror in [fprepRemote, gitRemote] {
            try git(["clone", "-q", "--mirror", "--shared", remote, mirror], nil)
            for (key, value) in [("uploadpack.allowFilter", "true"), ("uploadpack.allowAnySHA1InWant", "true"), ("fprep.domain", "bench")] {
                try git(["--git-dir=\(mirror)", "config", key, value], nil)
            }
        }
        note("cloning a replica and a full checkout (untimed)")
        try subprocess.run(Command([fprep, "clone", "file://\(fprepRemote)", replica]))
        if !FileManager.default.fileExists(atPath: checkout) {
            try git(["clone", "-q", remote, checkout], nil)
        }
        try git(["remote", "set-url", "origin", gitRemote], checkout)
        // The fresh mirror's main, not the commit an earlier run pushed.
        try git(["fetch", "-q", "--prune", "origin", "+refs/heads/*:refs/remotes/origin/*"], checkout)
        try git(["reset", "-q", "--hard", "origin/main"], checkout)
        try git(["clean", "-qfdx"], checkout)
        try git(["status", "--porcelain"], checkout)  // refresh the index once

        // The same seeded changes in both trees.
        let listing = try git(["ls-files", "-s"], checkout).stdoutText.split(separator: "\n").compactMap { line -> String? in
            let parts = line.split(separator: "\t", maxSplits: 1)
            return parts.count == 2 && parts[0].hasPrefix("100644") ? String(parts[1]) : nil
        }
        var rng = SeededRandom(seed: seed)
        var picked = Set<String>()
        while picked.count < min(changes, listing.count) { picked.insert(listing[Int(rng.next() % UInt64(listing.count))]) }
        let chosen = picked.sorted()
        let modified = Array(chosen.prefix(changes * 4 / 10))
        let deleted = Array(chosen.dropFirst(modified.count).prefix(changes * 2 / 10))
        let moved = Array(chosen.dropFirst(modified.count + deleted.count).prefix(changes / 10))
        let added = (0..<(changes - modified.count - deleted.count - moved.count)).map { "bench-new/n\($0).txt" }
        try subprocess.run(Command([fprep, "materialize", "-C", replica] + modified))
        // The agent starts before the changes: its journal holds them.
        var served: Process?
        if agent {
            served = try startAgent(fprep: fprep, replica: replica, syncs: false)
            note("agent serving; a first status leaves the journal record")
            try subprocess.run(Command([fprep, "status", "-C", replica, "--json"]))
        }
        defer { served?.terminate(); served?.waitUntilExit() }
        for root in [replica, checkout] {
            for path in modified { try Data("edited by the scan benchmark\n".utf8).write(to: URL(fileURLWithPath: root + "/" + path)) }
            for path in deleted { try FileManager.default.removeItem(atPath: root + "/" + path) }
            for path in moved { try FileManager.default.moveItem(atPath: root + "/" + path, toPath: root + "/" + path + ".moved") }
            try FileManager.default.createDirectory(atPath: root + "/bench-new", withIntermediateDirectories: true)
            for path in added { try Data("new \(path)\n".utf8).write(to: URL(fileURLWithPath: root + "/" + path)) }
        }

        func timed(_ command: Command, cold: Bool) throws -> Double {
            settle(dropCaches: cold && dropCaches)
            return try subprocess.run(command).seconds
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        var scanWarm: [Double] = [], scanCold: [Double] = [], statusWarm: [Double] = [], statusCold: [Double] = []
        // The scan of every item, whether or not an agent serves; then, with
        // one, status as it runs by default (through the change journal).
        let scan = Command([fprep, "status", "-C", replica, "--json", "--full-scan"])
        let journaled = Command([fprep, "status", "-C", replica, "--json"])
        let status = Command(["git", "status", "--porcelain"], directory: checkout)
        note("timing the scan")
        for _ in 0..<max(1, runs) {
            scanCold.append(try timed(scan, cold: true))
            scanWarm.append(try timed(scan, cold: false))
            statusCold.append(try timed(status, cold: true))
            statusWarm.append(try timed(status, cold: false))
        }
        let found = try subprocess.run(scan).stdoutText.components(separatedBy: "\"kind\"").count - 1
        var journal: [String: Any] = [:]
        if let served {
            note("timing status through the change journal")
            var warm: [Double] = [], cold: [Double] = []
            for _ in 0..<max(1, runs) {
                cold.append(try timed(journaled, cold: true))
                warm.append(try timed(journaled, cold: false))
            }
            let report = try JSONSerialization.jsonObject(with: Data(try subprocess.run(journaled).stdoutText.utf8)) as? [String: Any]
            let used = report?["scan"] as? String == "journal"
            let foundByJournal = (report?["changes"] as? [Any])?.count ?? -1
            // The agent and its worker at rest: CPU over 10 s, and memory.
            let pids = [served.processIdentifier] + childProcesses(of: served.processIdentifier)
            let before = pids.map(cpuTicks).reduce(0, +)
            sleep(10)
            let idle = Double(pids.map(cpuTicks).reduce(0, +) - before) / Double(sysconf(Int32(_SC_CLK_TCK))) / 10
            journal = ["statusWarm": median(warm), "statusCold": median(cold), "usedJournal": used, "changesFound": foundByJournal,
                       "ratioWarm": median(warm) / median(statusWarm), "idleCPU": idle,
                       "rssBytes": pids.map(residentBytes).reduce(0, +)]
        }
        note("timing the syncs")
        let sync = try timed(Command([fprep, "sync", "-C", replica, "--json"]), cold: true)
        settle(dropCaches: dropCaches)
        let started = Date()
        try git(["add", "-A"], checkout)
        try git(["commit", "-q", "-m", "bench"], checkout)
        try git(["push", "-q", "origin", "HEAD:main"], checkout)
        let gitSync = Date().timeIntervalSince(started)

        let figures: [String: Double] = [
            "fprepStatusWarm": median(scanWarm), "gitStatusWarm": median(statusWarm),
            "fprepStatusCold": median(scanCold), "gitStatusCold": median(statusCold),
            "fprepSync": sync, "gitAddCommitPush": gitSync,
        ]
        if json {
            var object: [String: Any] = ["files": files, "changes": changes, "changesFound": found, "cachesDropped": dropCaches,
                                         "seconds": figures, "scanRatioWarm": median(scanWarm) / median(statusWarm),
                                         "scanRatioCold": median(scanCold) / median(statusCold)]
            if !journal.isEmpty { object["journal"] = journal }
            print(String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys]), as: UTF8.self))
        } else {
            func f(_ x: Double) -> String { String(format: "%.3f s", x) }
            print("""
                scan of \(files) files with \(changes) local changes (\(found) reported)
                  fprep status   warm \(f(median(scanWarm)))   cold \(f(median(scanCold)))
                  git status     warm \(f(median(statusWarm)))   cold \(f(median(statusCold)))   (full checkout)
                  ratio          warm \(String(format: "%.2f", median(scanWarm) / median(statusWarm)))×     cold \(String(format: "%.2f", median(scanCold) / median(statusCold)))×   (target ≤ 1×)
                sync of those changes
                  fprep sync     \(f(sync))
                  git add -A; commit; push   \(f(gitSync))
                """)
            if let warm = journal["statusWarm"] as? Double, let cold = journal["statusCold"] as? Double,
               let idle = journal["idleCPU"] as? Double, let rss = journal["rssBytes"] as? Int {
                print("""
                    with fprep agent serving (change journal\(journal["usedJournal"] as? Bool == true ? "" : " NOT USED"); \(journal["changesFound"] as? Int ?? -1) changes reported)
                      fprep status   warm \(f(warm))   cold \(f(cold))   ratio to git status warm \(String(format: "%.3f", warm / median(statusWarm)))×   (target ≤ 0.1×)
                      agent at rest  CPU \(String(format: "%.4f", idle)) of a core, RSS \(rss / 1_048_576) MiB (agent and worker)
                    """)
            }
        }
    }
}

