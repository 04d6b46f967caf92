import Foundation

/// The refs of the cached remote that the sync mode moves and puts back.
///
/// The base commit and the size manifest's tip at that commit are recorded
/// under `refs/bench/` the first time; publishing the mutation moves main and
/// extends the manifest, and `restoreBase()` puts both back, so the cached
/// remote stays what the default mode (and the next sync run) expects, even
/// after a run that was killed half-way.
struct RemoteRefs {
    static let main = "refs/heads/main"
    static let base = "refs/bench/base"
    static let baseSizes = "refs/bench/base-sizes"
    static let sizes = "refs/fprep/sizes"

    let remote: String
    let subprocess: Subprocess

    /// The commit a ref points at, or nil when it does not exist.
    func resolve(_ ref: String) throws -> String? {
        let output = try? subprocess.run(Command(["git", "-C", remote, "rev-parse", "--verify", "-q", ref + "^{commit}"]))
        let id = output?.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        return id.isEmpty ? nil : id
    }

    /// Puts main and the size manifest back to the recorded base, if one is
    /// recorded and they moved. Returns whether anything moved.
    @discardableResult
    func restoreBase() throws -> Bool {
        guard FileManager.default.fileExists(atPath: remote), let base = try resolve(RemoteRefs.base) else { return false }
        var moved = false
        if try resolve(RemoteRefs.main) != base {
            try update(RemoteRefs.main, to: base)
            moved = true
        }
        if let sizes = try resolve(RemoteRefs.baseSizes), try resolve(RemoteRefs.sizes) != sizes {
            try update(RemoteRefs.sizes, to: sizes)
            moved = true
        }
        return moved
    }

    /// Records `commit` (main's current commit) and the manifest's current tip as the base.
    func recordBase(_ commit: String) throws {
        guard try resolve(RemoteRefs.main) == commit else {
            throw BenchError.message("\(remote): main is not at the base commit \(commit)")
        }
        guard try resolve(RemoteRefs.base) != commit else { return }
        try update(RemoteRefs.base, to: commit)
        if let sizes = try resolve(RemoteRefs.sizes) { try update(RemoteRefs.baseSizes, to: sizes) }
    }

    /// What a push of `new` onto main does: the branch moves (`git update-ref`,
    /// which runs no hook) and the size manifest step runs with the input git
    /// would give the post-receive hook. Checks that the manifest grew.
    func publish(base: String, new: String, fprep: String) throws {
        let before = try resolve(RemoteRefs.sizes)
        try subprocess.run(Command(["git", "-C", remote, "update-ref", RemoteRefs.main, new, base]))
        let line = "\(base) \(new) \(RemoteRefs.main)\n"
        try subprocess.run(Command([fprep, "hook", "post-receive"], environment: ["GIT_DIR": remote],
                                   directory: remote, input: .bytes(Array(line.utf8))))
        guard try resolve(RemoteRefs.sizes) != before else {
            let log = (try? String(contentsOfFile: "\(remote)/fprep-hook.log", encoding: .utf8)) ?? ""
            throw BenchError.message("fprep hook post-receive left \(RemoteRefs.sizes) unchanged after \(base) → \(new)"
                + (log.isEmpty ? "" : " — fprep-hook.log: \(BenchError.tail(of: Array(log.utf8)))"))
        }
    }

    private func update(_ ref: String, to commit: String) throws {
        try subprocess.run(Command(["git", "-C", remote, "update-ref", ref, commit]))
    }
}
