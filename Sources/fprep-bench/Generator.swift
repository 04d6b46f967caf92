import Foundation
import Glibc

/// Facts about a generated remote; also the cache marker's content.
struct GenerationFacts: Codable {
    var files: Int
    var totalSizeRequested: Int
    var seed: UInt64
    /// Whether `fprep init-remote` and the post-receive manifest step ran
    /// (false for a `--skip-fprep` remote, which a full run must regenerate).
    var fprepRemote: Bool
    var commit: String
    var folders: Int
    var maxFolderDepth: Int
    var blobBytes: Int
    var packBytes: Int
    var executables: Int
    var symlinks: Int
    var binaries: Int
    var emptyFiles: Int
    var importSeconds: Double
    var repackSeconds: Double
    var hookSeconds: Double
    var generateSeconds: Double
}

/// Builds (or reuses) the bench remote `WORK/remote-N.git`.
///
/// Order matters: `fprep init-remote` creates the bare repo and installs its
/// hooks first, the tree is streamed into `git fast-import`, and then the
/// post-receive hook is run by hand exactly as git would run it after a push,
/// because fast-import itself never triggers hooks.
struct Generator {
    static let epoch = 1_700_000_000
    static let ident = "Fprep Bench <bench@example.invalid>"

    let work: String
    let files: Int
    let totalSize: Int
    let seed: UInt64
    /// nil with `--skip-fprep`: a plain bare repo configured like an fprep remote.
    let fprep: String?
    let subprocess: Subprocess

    var remotePath: String { "\(work)/remote-\(files).git" }
    var markerPath: String { "\(work)/remote-\(files).json" }

    /// Returns the remote's facts and whether they came from the cache.
    func ensureRemote(regenerate: Bool, log: (String) -> Void) throws -> (GenerationFacts, Bool) {
        if !regenerate, let cached = reusable(log: log) { return (cached, true) }
        return (try generate(), false)
    }

    /// The marker's facts when they describe this exact remote, else nil.
    private func reusable(log: (String) -> Void) -> GenerationFacts? {
        guard let data = FileManager.default.contents(atPath: markerPath),
              let facts = try? JSONDecoder().decode(GenerationFacts.self, from: data) else { return nil }
        guard facts.files == files, facts.totalSizeRequested == totalSize, facts.seed == seed else {
            log("cached remote \(remotePath) was made with other arguments; regenerating")
            return nil
        }
        if fprep != nil && !facts.fprepRemote {
            log("cached remote \(remotePath) was made with --skip-fprep; regenerating as an fprep remote")
            return nil
        }
        let head = try? subprocess.run(Command(["git", "-C", remotePath, "rev-parse", "--verify", "-q", "refs/heads/main"]))
        guard head?.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines) == facts.commit else {
            log("cached remote \(remotePath) does not match its marker; regenerating")
            return nil
        }
        return facts
    }

    private func generate() throws -> GenerationFacts {
        let started = monotonicSeconds()
        unlink(markerPath)
        try subprocess.run(Command(["rm", "-rf", remotePath]))
        if let fprep {
            try subprocess.run(Command([fprep, "init-remote", remotePath, "--domain", "bench"]))
        } else {
            try subprocess.run(Command(["git", "init", "-q", "--bare", "-b", "main", remotePath]))
            for (key, value) in [("uploadpack.allowFilter", "true"), ("uploadpack.allowAnySHA1InWant", "true")] {
                try subprocess.run(Command(["git", "-C", remotePath, "config", key, value]))
            }
        }

        let layout = try Layout(files: files, totalSize: totalSize, seed: seed)
        let blobBytes = try streamIntoFastImport(layout)
        let imported = monotonicSeconds()
        // Clones must find main whatever HEAD init-remote chose.
        try subprocess.run(Command(["git", "-C", remotePath, "symbolic-ref", "HEAD", "refs/heads/main"]))
        // A served repo is repacked with bitmaps; fast-import's pack is not.
        try subprocess.run(Command(["git", "-C", remotePath, "repack", "-a", "-d", "-b", "-q"]))
        try subprocess.run(Command(["git", "-C", remotePath, "pack-refs", "--all"]))
        try subprocess.run(Command(["git", "-C", remotePath, "commit-graph", "write", "--reachable"]))
        let repacked = monotonicSeconds()
        let commit = try subprocess.run(Command(["git", "-C", remotePath, "rev-parse", "--verify", "refs/heads/main"]))
            .stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        if let fprep {
            // Exactly what the installed post-receive hook gets after a push of main.
            let line = "0000000000000000000000000000000000000000 \(commit) refs/heads/main\n"
            try subprocess.run(Command([fprep, "hook", "post-receive"], environment: ["GIT_DIR": remotePath],
                                       directory: remotePath, input: .bytes(Array(line.utf8))))
        }
        let finished = monotonicSeconds()

        let facts = GenerationFacts(
            files: files, totalSizeRequested: totalSize, seed: seed, fprepRemote: fprep != nil,
            commit: commit, folders: layout.folders.count - 1, maxFolderDepth: layout.maxFolderDepth,
            blobBytes: blobBytes, packBytes: packBytes(),
            executables: layout.files.filter { $0.mode == .executable }.count,
            symlinks: layout.files.filter { $0.mode == .symlink }.count,
            binaries: layout.files.filter(\.binary).count,
            emptyFiles: layout.files.filter { $0.size == 0 }.count,
            importSeconds: imported - started, repackSeconds: repacked - imported,
            hookSeconds: finished - repacked, generateSeconds: finished - started)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        // Written last: a marker only ever describes a complete remote.
        try encoder.encode(facts).write(to: URL(fileURLWithPath: markerPath))
        return facts
    }

    /// Writes one root commit holding every file; returns the blob bytes written.
    private func streamIntoFastImport(_ layout: Layout) throws -> Int {
        let child = try StreamingChild(Command(["git", "-C", remotePath, "fast-import", "--quiet", "--done"]),
                                       subprocess: subprocess)
        let message = "fprep-bench: \(files) files, seed \(seed)\n"
        try child.write("commit refs/heads/main\n")
        try child.write("author \(Generator.ident) \(Generator.epoch) +0000\n")
        try child.write("committer \(Generator.ident) \(Generator.epoch) +0000\n")
        try child.write("data \(message.utf8.count)\n\(message)\n")

        // Content has its own stream so that tweaking the layout code does not
        // change every blob, and vice versa.
        var rng = SeededRandom(seed: seed ^ 0xC0_11_7E_47)
        let content = Content(seed: seed)
        let largest = layout.files.map(\.size).max() ?? 0
        let scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: largest + content.maxToken + 1)
        defer { scratch.deallocate() }
        let progress = Progress(total: layout.files.count, label: "generating \(remotePath)")
        var bytes = 0
        for (i, file) in layout.files.enumerated() {
            // Generated names never contain spaces, quotes or newlines, so paths go unquoted.
            try child.write("M \(file.mode.rawValue) inline \(file.path)\ndata \(file.size)\n")
            if let target = file.linkTarget {
                try child.write(target)
            } else {
                if file.binary {
                    Content.binary(&rng, count: file.size, into: scratch)
                } else {
                    content.text(&rng, count: file.size, into: scratch)
                }
                try child.write(UnsafeBufferPointer(start: scratch, count: file.size))
            }
            try child.write("\n")
            bytes += file.size
            progress.update(done: i + 1, bytes: bytes)
        }
        try child.write("done\n")
        try child.finish()
        progress.end()
        return bytes
    }

    private func packBytes() -> Int {
        let dir = "\(remotePath)/objects/pack"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
        return names.filter { $0.hasSuffix(".pack") }.reduce(0) { sum, name in
            let attributes = try? FileManager.default.attributesOfItem(atPath: "\(dir)/\(name)")
            return sum + ((attributes?[.size] as? Int) ?? 0)
        }
    }
}

/// A progress line on stderr while a large tree is generated: rewritten in
/// place on a terminal, a line per quarter otherwise (logs stay short).
final class Progress {
    private let total: Int
    private let label: String
    private let enabled: Bool
    private let tty = isatty(2) != 0
    private var lastShown = -1

    init(total: Int, label: String, minimumTotal: Int = 20_000) {
        self.total = total
        self.label = label
        self.enabled = total >= minimumTotal
    }

    func update(done: Int, bytes: Int) {
        guard enabled else { return }
        let step = tty ? max(1, total / 200) : max(1, total / 4)
        guard done / step != lastShown || done == total else { return }
        lastShown = done / step
        let line = "\(label): \(done * 100 / total)% (\(done)/\(total) files, \(bytes >> 20) MiB)"
        FileHandle.standardError.write(Data(((tty ? "\r" : "") + line + (tty ? "" : "\n")).utf8))
    }

    func end() {
        if enabled && tty { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}
