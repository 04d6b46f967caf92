import Foundation
import Glibc

/// Times of one clone → materialize → evict cycle, fprep and floors side by side.
struct CycleResult: Codable {
    var fprepClone: Double?
    var fprepMaterialize: Double?
    var fprepEvict: Double?
    /// Floor A: `git clone --filter=blob:none --no-checkout`.
    var gitClone: Double
    /// Floor B: N sparse files with one xattr each.
    var createPlaceholders: Double
    var gitFetchBlobs: Double
    var gitCheckout: Double
    /// The evict floor: a process that punches the sample's files to holes
    /// (fallocate PUNCH_HOLE) in a tree of the same size as the replica's.
    var punchHoles: Double
    var bytesAfterClone: Int64?
    var bytesAfterMaterialize: Int64?
    var bytesAfterEvict: Int64?
    /// fprep's own peak memory per step, KiB (from its trace).
    var clonePeakKiB: Int?
    var materializePeakKiB: Int?
    var evictPeakKiB: Int?
    /// Each fprep step's phases as its trace gave them ("phase seconds").
    var clonePhases: [String]?
    var materializePhases: [String]?
    var evictPhases: [String]?
    /// Step 0 clone, 1 materialize, 2 evict.
    func phases(of step: Int) -> [String]? { [clonePhases, materializePhases, evictPhases][step] }

    var cloneFloor: Double { gitClone + createPlaceholders }
    var materializeFloor: Double { gitFetchBlobs + gitCheckout }
}

/// Runs the measured steps. Every timed step starts from the same state: the
/// previous clones removed, dirty data written back and (as root) the page,
/// dentry and inode caches dropped, so no step inherits another's warm cache.
struct Cycle {
    let work: String
    let url: String
    /// nil with `--skip-fprep`.
    let fprep: String?
    let tree: [TreeEntry]
    let sample: [TreeEntry]
    let sampleListPath: String
    let sampleBlobs: [UInt8]
    let subprocess: Subprocess
    let floors: FilesystemFloors
    let dropCaches: Bool
    /// Each side on a new filesystem (see `FreshFilesystem`).
    var freshFilesystems = false

    private var floorSide: String { freshFilesystems ? "\(work)/fs-floor" : work }
    private var fprepSide: String { freshFilesystems ? "\(work)/fs-fprep" : work }
    var replica: String { "\(fprepSide)/replica" }
    var gitClone: String { "\(floorSide)/gitclone" }
    var floorRoot: String { "\(floorSide)/floor" }

    /// A new filesystem for one side, big enough for the tree twice over.
    private func freshSide(_ path: String) throws -> FreshFilesystem? {
        guard freshFilesystems else { return nil }
        let inodes = tree.count * 2 + 100_000
        return try FreshFilesystem(mountPoint: path, inodes: inodes, bytes: Int64(inodes) * 4096 + (4 << 30), subprocess: subprocess)
    }

    /// Floors first, then fprep, each phase starting with WORK emptied of
    /// clones. On this disk a tree created while another large tree sits beside
    /// it was measurably slower with cold caches (10^4 placeholders: ~2 s instead
    /// of ~0.2 s, with several times more disk reads — ext4 placement near the
    /// parent folder is the likely cause), so each side gets the same starting
    /// state. fprep goes last so its replica stays in WORK for inspection.
    func run(log: (String) -> Void) throws -> CycleResult {
        try remove([replica, gitClone, floorRoot])
        let floorFilesystem = try freshSide(floorSide)
        defer { floorFilesystem?.remove() }

        log("git clone --filter=blob:none --no-checkout")
        let clone = try timed(Command(["git", "-c", "gc.auto=0", "clone", "-q", "--filter=blob:none",
                                       "--no-checkout", url, gitClone]), warm: [Self.warmGit])
        log("create \(tree.count) placeholders")
        quiesce()
        let create = try floors.createPlaceholders(root: floorRoot, entries: tree)
        // The evict floor works where fprep's evict does: among as many
        // files (cold lookups in folders as large), on files with content.
        log("punch \(sample.count) files back to holes")
        try floors.fill(root: floorRoot, entries: sample)
        let punch = try timed(Command([PunchFloor.executable, PunchFloor.mode, floorRoot, sampleListPath]),
                              warm: [[PunchFloor.executable, PunchFloor.mode]])
        try remove([floorRoot])

        log("git fetch of \(sample.count) blobs + checkout")
        // One request for every wanted blob, then a checkout that must not lazily
        // fetch anything more (GIT_NO_LAZY_FETCH, honoured by git ≥ 2.44).
        let fetch = try timed(Command(["git", "-C", gitClone, "-c", "gc.auto=0", "-c", "fetch.negotiationAlgorithm=noop",
                                       "fetch", "-q", "origin", "--no-tags", "--no-write-fetch-head",
                                       "--recurse-submodules=no", "--filter=blob:none", "--stdin"],
                                      input: .bytes(sampleBlobs)), warm: [Self.warmGit])
        let checkout = try subprocess.run(Command(["git", "-C", gitClone, "-c", "gc.auto=0", "checkout", "HEAD",
                                                   "--pathspec-from-file=\(sampleListPath)"],
                                                  environment: ["GIT_NO_LAZY_FETCH": "1"])).seconds

        var fprepClone: Double?, fprepMaterialize: Double?, fprepEvict: Double?
        var afterClone: Int64?, afterMaterialize: Int64?, afterEvict: Int64?
        var peaks: [Int?] = [nil, nil, nil]
        var phases: [[String]?] = [nil, nil, nil]
        if let fprep {
            // -C comes after the subcommand: fprep's -C is a per-command option
            // (`fprep -C DIR materialize` is rejected as an unknown option).
            try remove([gitClone])
            floorFilesystem?.remove()
            let fprepFilesystem = try freshSide(fprepSide)
            defer { fprepFilesystem?.remove() }
            // Each fprep step writes its phases and its own peak memory to a trace file.
            let traceFile = "\(work)/fprep-trace.txt"
            func traced(_ step: Int, _ argv: [String]) throws -> Double {
                unlink(traceFile)
                let seconds = try timed(Command(argv, environment: ["FPREP_TRACE": traceFile]), warm: [[fprep, "--version"], Self.warmGit])
                let lines = ((try? String(contentsOfFile: traceFile, encoding: .utf8)) ?? "").split(separator: "\n")
                peaks[step] = lines.last { $0.hasPrefix("trace: peak memory ") }
                    .flatMap { Int($0.dropFirst("trace: peak memory ".count).split(separator: " ").first ?? "") }
                phases[step] = lines.filter { !$0.hasPrefix("trace: peak") }.map {
                    $0.dropFirst("trace: ".count).split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
                }
                return seconds
            }
            log("fprep clone")
            fprepClone = try traced(0, [fprep, "clone", url, replica])
            afterClone = try diskUsage(replica)
            log("fprep materialize")
            fprepMaterialize = try traced(1, [fprep, "materialize", "-C", replica, "--paths-from", sampleListPath])
            afterMaterialize = try diskUsage(replica)
            log("fprep evict")
            fprepEvict = try traced(2, [fprep, "evict", "-C", replica, "--paths-from", sampleListPath])
            afterEvict = try diskUsage(replica)
        }

        return CycleResult(fprepClone: fprepClone, fprepMaterialize: fprepMaterialize, fprepEvict: fprepEvict,
                           gitClone: clone, createPlaceholders: create, gitFetchBlobs: fetch, gitCheckout: checkout,
                           punchHoles: punch, bytesAfterClone: afterClone, bytesAfterMaterialize: afterMaterialize,
                           bytesAfterEvict: afterEvict, clonePeakKiB: peaks[0], materializePeakKiB: peaks[1],
                           evictPeakKiB: peaks[2], clonePhases: phases[0], materializePhases: phases[1], evictPhases: phases[2])
    }

    /// Deletes trees; every timed step after it syncs and drops caches first,
    /// because creating many files right after deleting many is 10–15× slower
    /// on this disk until caches are dropped.
    private func remove(_ dirs: [String]) throws {
        try subprocess.run(Command(["rm", "-rf"] + dirs))
    }

    /// Seconds a command takes from a quiet, cold start: cold data, and
    /// the binaries of the programs it runs (`warm`, each run first) as a
    /// user who runs them often has them: git's for every step that runs
    /// git (fprep's steps do, beside fprep's own). Dropped with the rest, a 150 MB
    /// static binary reads 64 MB at its start (8 MB of read-ahead per fault
    /// on this disk): 0.1 s that says nothing about the work.
    private func timed(_ command: Command, warm: [[String]]) throws -> Double {
        quiesce()
        for program in warm { _ = try? subprocess.run(Command(program)) }
        return try subprocess.run(command).seconds
    }

    /// git's binary, warmed before every timed step that runs git: the floors, and
    /// so does fprep (a step that left it cold paid its reads from disk
    /// behind the step's own, 10–17 ms at the start of a cold `sync`).
    static let warmGit = ["git", "--version"]

    /// sync, then (as root) drop the page, dentry and inode caches.
    private func quiesce() {
        settle(dropCaches: dropCaches)
    }
}

/// sync, then, when `dropCaches` (root), drop the page, dentry and inode
/// caches: what every timed step of both modes starts from.
func settle(dropCaches: Bool) {
    sync()
    guard dropCaches else { return }
    let fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC)
    guard fd >= 0 else { return }
    _ = write(fd, "3", 1)
    close(fd)
}
