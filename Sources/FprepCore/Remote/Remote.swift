import FoundationEssentials
import Glibc
import FprepGit

/// A bare repository set up as an fprep remote.
public enum Remote {
    /// What `init-remote` did.
    public struct Setup: Sendable, Encodable {
        public let path: String
        public let domain: String
        public let branch: String
        /// false when the folder already was an fprep remote and only its
        /// hooks were installed again.
        public let created: Bool
        public let hooks: [String]
    }

    /// Creates a bare repository at `path` ready for partial clone, records
    /// its domain, and installs fprep's hooks. An existing fprep remote is
    /// left as it is (its hooks are refreshed); any other non-empty folder
    /// is refused.
    public static func create(at rawPath: String, domain requestedDomain: String?, branch: String,
                              fprepBinary: String) throws -> Setup {
        let path = absolute(rawPath)
        guard isValidBranchName(branch) else {
            throw FprepError(.usage, "'\(branch)' is not a valid branch name")
        }
        if let domain = requestedDomain, !RemoteInfo.isValidDomain(domain) {
            throw FprepError(.usage, "'\(domain)' is not a valid domain identifier (use 1-128 letters, digits, '.', '_' or '-')")
        }
        var isDirectory = false
        let exists = FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
        if exists && !isDirectory {
            throw FprepError(.usage, "'\(rawPath)' exists and is not a folder")
        }
        if exists, let contents = try? FileManager.default.contentsOfDirectory(atPath: path), !contents.isEmpty {
            guard let repository = try? Repository(openingAt: path), repository.isBare,
                  let domain = try? repository.config().string("fprep.domain") else {
                throw FprepError(.usage, "'\(rawPath)' is not empty and is not an fprep remote (choose an empty or new folder)")
            }
            if let requestedDomain, requestedDomain != domain {
                throw FprepError(.usage, "'\(rawPath)' is already the fprep remote of domain '\(domain)', not '\(requestedDomain)'")
            }
            let hooks = try installHooks(gitDirectory: path, fprepBinary: fprepBinary)
            // Remotes made before fprep kept a commit-graph get one here.
            SizeManifest.updateCommitGraph(of: path)
            let existingBranch = ((try? repository.config().string("fprep.branch")) ?? nil) ?? branch
            return Setup(path: path, domain: domain, branch: existingBranch, created: false, hooks: hooks)
        }
        let domain = requestedDomain ?? RemoteInfo.defaultDomain(forFolder: path)
        do {
            let repository = try Repository(creatingBareAt: path, initialBranch: branch)
            let config = try repository.config()
            try config.set("uploadpack.allowFilter", "true")
            try config.set("uploadpack.allowAnySHA1InWant", "true")
            try config.set("fprep.domain", domain)
            try config.set("fprep.branch", branch)
            try RemoteInfo(domain: domain, branch: branch).write(repository, time: CommitDates.now().committer)
            let hooks = try installHooks(gitDirectory: path, fprepBinary: fprepBinary)
            return Setup(path: path, domain: domain, branch: branch, created: true, hooks: hooks)
        } catch {
            // Never leave a half-made remote behind.
            if !exists { try? FileManager.default.removeItem(atPath: path) }
            throw FprepError.git("cannot create the remote at '\(rawPath)'", error)
        }
    }

    /// Writes fprep's hooks into `gitDirectory/hooks` and records which
    /// `fprep` binary they run. Returns the hook names.
    @discardableResult
    public static func installHooks(gitDirectory: String, fprepBinary: String) throws -> [String] {
        let hooksDirectory = gitDirectory + "/hooks"
        try FileManager.default.createDirectory(atPath: hooksDirectory, withIntermediateDirectories: true)
        for (name, script) in HookScripts.all {
            let target = hooksDirectory + "/" + name
            let temporary = target + ".fprep-new"
            try Data(script.utf8).write(to: URL(fileURLWithPath: temporary))
            guard chmod(temporary, 0o755) == 0 else { throw SystemError("chmod", temporary) }
            guard rename(temporary, target) == 0 else { throw SystemError("rename", target) }
        }
        let repository = try Repository(openingAt: gitDirectory)
        try repository.config().set("fprep.binary", fprepBinary)
        return HookScripts.all.keys.sorted()
    }

    /// A branch name fprep accepts: what `git check-ref-format --branch`
    /// would, in the plain forms people use.
    static func isValidBranchName(_ name: String) -> Bool {
        guard !name.isEmpty, !name.hasPrefix("-"), !name.hasPrefix("/"), !name.hasSuffix("/"),
              !name.hasSuffix(".lock"), !name.hasSuffix("."), !name.contains(".."), !name.contains("//"),
              !name.contains("@{") else { return false }
        return name.unicodeScalars.allSatisfy { scalar in
            scalar.value > 0x20 && scalar.value != 0x7F && !"~^:?*[\\".unicodeScalars.contains(scalar)
        }
    }

    public static func absolute(_ path: String) -> String { absolutePath(path) }
}

/// Commit dates, from `GIT_AUTHOR_DATE` / `GIT_COMMITTER_DATE` when set (as
/// `@SECONDS` or `SECONDS [+ZONE]`), so scripts and tests get stable ids.
enum CommitDates {
    /// A date for every commit made in this task, for tests: a test sets it
    /// here rather than in the environment, which every test running at the
    /// same time in the process (and every child it spawns) would share.
    @TaskLocal static var fixed: Int64?

    static func now() -> (author: Int64, committer: Int64) {
        if let fixed { return (fixed, fixed) }
        let environment = ProcessInfo.processInfo.environment
        let current = Int64(Date().timeIntervalSince1970)
        let author = environment["GIT_AUTHOR_DATE"].flatMap(parse) ?? current
        let committer = environment["GIT_COMMITTER_DATE"].flatMap(parse) ?? author
        return (author, committer)
    }

    static func parse(_ text: String) -> Int64? {
        var trimmed = text.trimmed
        if trimmed.hasPrefix("@") { trimmed.removeFirst() }
        return Int64(trimmed.split(separator: " ").first ?? "")
    }
}
