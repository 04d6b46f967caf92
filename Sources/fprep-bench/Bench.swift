import ArgumentParser
import Foundation
import Glibc

/// How the replica and the git floor reach the remote.
enum Transport: String, ExpressibleByArgument, CaseIterable {
    case daemon
    case file
}

/// fprep-bench: fprep's clone / materialize / evict beside the git floors,
/// measured in the same run on a generated remote.
@main
struct Bench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fprep-bench",
        abstract: "Time fprep clone/materialize/evict against git floors on a generated remote.",
        discussion: """
        Generates (or reuses) a deterministic bare remote WORK/remote-N.git, made an \
        fprep remote with `fprep init-remote` and its post-receive manifest step, \
        serves it, then per run: `fprep clone`, `fprep materialize` of a seeded sample, \
        `fprep evict` of it, and the floors: `git clone --filter=blob:none --no-checkout` \
        plus N sparse files with one xattr (clone), one `git fetch` of the sample's \
        blob ids plus `git checkout` (materialize), and a process that punches the \
        sample's files to holes (fallocate PUNCH_HOLE) in a tree of N files, the \
        sample with content (evict). Before each timed step the previous clones are \
        removed, `sync` runs and, as root, caches are dropped; then the step's \
        programs run once untimed (`--version`: git's where the step runs git, fprep's \
        too for fprep's steps, which run git; the punch floor's own), so their binaries are warm and their data cold, as for a \
        user who runs them often. The floors run first, \
        then fprep, each phase in a WORK emptied of clones; the replica (or, with \
        --skip-fprep, the git clone) is left in WORK for inspection until the next run.

        This clone/materialize/evict cycle is the default mode. The other mode, \
        `fprep-bench sync [options]`, times `fprep sync` and `fprep changes` after a \
        seeded mutation commit on trees of 10^4 and 10^5 files against git floors; \
        its options are its own (see `fprep-bench sync --help`).
        """)

    /// `sync` as the first argument selects the sync mode; anything else is
    /// this command. (Not an ArgumentParser subcommand: a parent's options are
    /// also parsed after a subcommand's name, so the shared names --runs,
    /// --work… would reach this command instead of the sync mode.)
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.first == SyncBench.mode {
            SyncBench.main(Array(arguments.dropFirst()))
        } else if arguments.first == ScanBench.mode {
            ScanBench.main(Array(arguments.dropFirst()))
        } else if arguments.first == HydrateBench.mode {
            HydrateBench.main(Array(arguments.dropFirst()))
        } else if arguments.first == PunchFloor.mode {
            PunchFloor.main(Array(arguments.dropFirst()))
        } else if arguments.first == PushBench.mode {
            PushBench.main(Array(arguments.dropFirst()))
        } else {
            Bench.main(arguments)
        }
    }

    @Option(help: "Number of files in the generated tree.")
    var files: Int = 100_000

    @Option(help: ArgumentHelp("Total blob bytes, e.g. 500M, 1.5G, 123456 (default: 500M per 100,000 files, proportional).",
                               valueName: "size"))
    var totalSize: String?

    @Option(help: "Seed of the generated tree and of the sample: same arguments, same commit id.")
    var seed: UInt64 = 1

    @Option(help: ArgumentHelp("Working folder: remote cache, clones, logs.", valueName: "dir"))
    var work: String = "/tmp/fprep-bench"

    @Option(help: ArgumentHelp("fprep binary (default: the fprep next to this executable, else fprep on PATH).",
                               valueName: "path"))
    var fprep: String?

    @Option(help: "How clones reach the remote: daemon (git daemon on 127.0.0.1, git:// URL) or file (file:// URL).")
    var transport: Transport = .daemon

    @Option(help: "Number of scattered files to materialize and evict.")
    var sample: Int = 1000

    @Option(help: "Clone/materialize/evict cycles (and floors) to run; the report shows medians.")
    var runs: Int = 1

    @Flag(help: "Print one JSON object instead of the table.")
    var json = false

    @Flag(help: "Run each side's tree-creating steps (the floors' clone and placeholders; fprep's clone, materialize, evict) on a new ext4 filesystem of its own (as root): a disk that just deleted many files makes the next creation of many files several times slower, whichever side comes after.")
    var freshFilesystems = false

    @Flag(help: "Run only generation and the git/filesystem floors (no fprep commands; the remote is a plain bare repo configured like an fprep remote).")
    var skipFprep = false

    @Flag(help: "Regenerate the remote even when the cached one matches.")
    var regenerate = false

    @Flag(help: "Print each step on stderr as it starts.")
    var verbose = false

    func validate() throws {
        guard files > 0 else { throw ValidationError("--files must be positive") }
        guard sample > 0 else { throw ValidationError("--sample must be positive") }
        guard runs > 0 else { throw ValidationError("--runs must be positive") }
        if let totalSize, parseSize(totalSize) == nil {
            throw ValidationError("--total-size \(totalSize): expected a byte count with an optional K, M or G suffix")
        }
    }

    func run() throws {
        do {
            try bench()
        } catch let error as BenchError {
            // One line naming what failed; `defer`s have already stopped the daemon.
            FileHandle.standardError.write(Data("fprep-bench: \(error)\n".utf8))
            throw ExitCode.failure
        }
    }

    private func bench() throws {
        // A child that dies mid-stream must surface as EPIPE, not kill us.
        signal(SIGPIPE, SIG_IGN)
        let libc = try LibC.load()
        let subprocess = Subprocess(libc: libc)
        let note: (String) -> Void = { FileHandle.standardError.write(Data("fprep-bench: \($0)\n".utf8)) }
        let step: (String) -> Void = { [verbose] text in if verbose { note(text) } }
        // Absolute: it becomes git daemon's --base-path and part of file:// URLs.
        let work = absolutePath(self.work)
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let fprepPath = skipFprep ? nil : try resolveFprep(fprep)

        let generator = Generator(work: work, files: files, totalSize: requestedTotalSize(), seed: seed,
                                  fprep: fprepPath, subprocess: subprocess)
        let (facts, reused) = try generator.ensureRemote(regenerate: regenerate, log: note)
        if reused { note("reusing cached remote \(generator.remotePath) (commit \(facts.commit))") }
        else { note("generated \(generator.remotePath) in \(secs(facts.generateSeconds)) (commit \(facts.commit))") }

        let tree = try listTree(remote: generator.remotePath, subprocess: subprocess)
        let chosen = try sampleFiles(tree, count: sample, seed: seed)
        let listPath = "\(work)/sample-paths.txt"
        try Data(chosen.map { $0.path + "\n" }.joined().utf8).write(to: URL(fileURLWithPath: listPath))
        let blobs = Array(chosen.map { $0.oid + "\n" }.joined().utf8)

        let daemon = transport == .daemon ? try GitDaemon(work: work, subprocess: subprocess) : nil
        defer { daemon?.stop() }
        let remoteName = "remote-\(files).git"
        let url = daemon?.url(for: remoteName) ?? "file://\(generator.remotePath)"

        let dropCaches = geteuid() == 0
        if !dropCaches { note("not root: caches cannot be dropped, times are warm-cache times") }
        let cycle = Cycle(work: work, url: url, fprep: fprepPath, tree: tree, sample: chosen,
                          sampleListPath: listPath, sampleBlobs: blobs, subprocess: subprocess,
                          floors: FilesystemFloors(libc: libc), dropCaches: dropCaches,
                          freshFilesystems: freshFilesystems && geteuid() == 0)
        var results: [CycleResult] = []
        for i in 0..<runs {
            if runs > 1 { note("run \(i + 1)/\(runs)") }
            results.append(try cycle.run(log: step))
        }

        let report = Report(generation: facts, remoteReused: reused, remote: generator.remotePath,
                            transport: transport.rawValue, url: url, fprep: fprepPath, sampleFiles: chosen.count,
                            cachesDropped: dropCaches, results: results)
        print(json ? try report.json() : report.table())
    }

    /// --total-size in bytes; by default 500 MiB per 100,000 files.
    private func requestedTotalSize() -> Int {
        if let totalSize, let bytes = parseSize(totalSize) { return bytes }
        return defaultTotalSize(files: files)
    }
}

/// The default blob bytes of a generated tree: 500 MiB per 100,000 files.
func defaultTotalSize(files: Int) -> Int {
    Int((Double(500 << 20) * Double(files) / 100_000).rounded())
}

/// `path` made absolute against the current folder, with `.`/`..` resolved.
func absolutePath(_ path: String) -> String {
    ((path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path) as NSString).standardizingPath
}

/// The fprep to benchmark: `explicit` (--fprep), else the one built beside us, else PATH.
func resolveFprep(_ explicit: String?) throws -> String {
    if let fprep = explicit {
        guard access(fprep, X_OK) == 0 else { throw BenchError.message("--fprep \(fprep) is not an executable file") }
        return fprep.hasPrefix("/") ? fprep : FileManager.default.currentDirectoryPath + "/" + fprep
    }
    if let own = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
        let sibling = (own as NSString).deletingLastPathComponent + "/fprep"
        if access(sibling, X_OK) == 0 { return sibling }
    }
    for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
        let candidate = "\(dir)/fprep"
        if access(candidate, X_OK) == 0 { return candidate }
    }
    throw BenchError.message("no fprep binary: not beside this executable, not on PATH; pass --fprep PATH or --skip-fprep")
}

/// "500M" → 524288000; K/M/G are binary multiples, decimals allowed ("1.5G").
func parseSize(_ text: String) -> Int? {
    var s = text.trimmingCharacters(in: .whitespaces).uppercased()
    var multiplier = 1.0
    for (suffix, m) in [("K", 1024.0), ("M", 1024.0 * 1024), ("G", 1024.0 * 1024 * 1024)] where s.hasSuffix(suffix) {
        multiplier = m
        s.removeLast()
    }
    guard let value = Double(s), value >= 0, value.isFinite else { return nil }
    return Int(value * multiplier)
}
