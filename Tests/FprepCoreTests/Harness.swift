import Foundation
import FprepGit
@testable import FprepCore

/// A remote, a clone of it, and a plain git work tree to change the remote
/// with, all in a temporary folder removed after the test. Commits get fixed
/// dates, advanced one minute per commit (git's test_tick idea).
final class SyncHarness {
    let folder: String
    let remote: String
    let replicaRoot: String
    let work: String
    private var tick: Int64 = 1_700_000_000

    init(files: [String: String]) throws {
        folder = NSTemporaryDirectory() + "fprep-core-test-" + UUID().uuidString
        remote = folder + "/remote.git"
        replicaRoot = folder + "/replica"
        work = folder + "/work"
        let source = folder + "/source"
        try write(files, under: source)
        try CommitDates.$fixed.withValue(tick) {
            _ = try Remote.create(at: remote, domain: "test", branch: "main", fprepBinary: "/nonexistent/fprep")
            _ = try TreeImporter.importFolder(source, into: remote, message: "initial")
        }
        _ = try Cloner.clone(url: remote, into: replicaRoot, branch: nil, progress: SilentProgress(), showGitProgress: false)
        try git(["clone", "-q", remote, work], in: folder)
    }

    deinit { try? FileManager.default.removeItem(atPath: folder) }

    func write(_ files: [String: String], under base: String) throws {
        for (path, content) in files {
            let url = URL(fileURLWithPath: base + "/" + path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(content.utf8).write(to: url)
        }
    }

    /// Opens the replica for one operation; the lock goes with the object.
    func replica() throws -> Replica {
        try Replica.open(containing: replicaRoot, access: Replica.Access(command: "test", exclusive: true))
    }

    /// Runs `change` in the work tree, commits everything and pushes it to
    /// the remote, then extends the size manifest as the hook would.
    @discardableResult
    func push(_ message: String = "change", force: Bool = false, _ change: (String) throws -> Void) throws -> String {
        try change(work)
        tick += 60
        try git(["add", "-A"], in: work)
        try git(["commit", "-q", "-m", message], in: work)
        let old = try git(["rev-parse", "origin/main"], in: work)
        try git(["push", "-q"] + (force ? ["--force"] : []) + ["origin", "HEAD:main"], in: work)
        let new = try git(["rev-parse", "HEAD"], in: work)
        try PostReceive.run(gitDirectory: remote, updates: PostReceive.parse("\(old) \(new) refs/heads/main\n"))
        return new
    }

    @discardableResult
    func git(_ arguments: [String], in directory: String, input: String? = nil) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["git", "-c", "user.name=Test", "-c", "user.email=test@example.invalid"] + arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        var environment = ProcessInfo.processInfo.environment
        environment["GIT_AUTHOR_DATE"] = "@\(tick) +0000"
        environment["GIT_COMMITTER_DATE"] = "@\(tick) +0000"
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        let inputPipe = Pipe()
        process.standardInput = inputPipe
        try process.run()
        if let input { inputPipe.fileHandleForWriting.write(Data(input.utf8)) }
        try inputPipe.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw FprepError("git \(arguments.joined(separator: " ")) failed with \(process.terminationStatus)")
        }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func read(_ path: String) throws -> String {
        try String(contentsOfFile: replicaRoot + "/" + path, encoding: .utf8)
    }

    func stat(_ path: String) -> FileStat? {
        (try? FolderHandle(root: replicaRoot))?.stat(RepoPath(path))
    }

    /// Signals raised by one sync, as container identifiers.
    static func containers(_ report: SyncReport) -> Set<String> {
        Set(report.signals.map(\.container))
    }
}
