import FoundationEssentials
import Glibc
import FprepCore
import FprepGit

/// The local bare mirror of a hosted remote: its branches and fprep's refs
/// (the size manifest, the remote's info), fetched with every blob, so that
/// it can tell the pushed files' sizes and the containers a push touched.
/// Its `origin` is the host; fetches and pushes go through the git command
/// (the credentials are git's: a credential helper, an ssh key).
struct MirrorRepository: Sendable {
    let url: String
    /// The mirror's git directory (absolute).
    let gitDirectory: String

    /// What a fetch brings: the host's branches, pruned as the host prunes
    /// them, and fprep's refs. Not `git clone --mirror`'s `refs/*`: a
    /// GitHub repository's `refs/pull/*` would come along.
    static let refspecs = ["+refs/heads/*:refs/heads/*", "+refs/fprep/*:refs/fprep/*"]
    /// git's housekeeping stays out of the service's passes.
    private static let quiet = ["-c", "gc.auto=0", "-c", "maintenance.auto=false"]

    /// Opens the mirror at `path`, made (`git init --bare`, `origin` = `url`)
    /// when missing, and fetches the host once: a URL that cannot be fetched
    /// fails here, before the service starts. Records the domain the host's
    /// replicas have (`fprep.domain`), which the service serves.
    static func open(url: String, path: String) throws -> MirrorRepository {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        let created = !FileManager.default.fileExists(atPath: absolute)
        if created {
            do {
                try GitCommand.run(["init", "--quiet", "--bare", absolute])
            } catch let error as GitCommandError {
                throw FprepError("cannot make the mirror '\(path)': \(error.reason)")
            }
        }
        do {
            guard let repository = try? Repository(openingAt: absolute), repository.isBare else {
                throw FprepError(.usage, "'\(path)' is not a bare git repository; give --remote a new folder for the mirror of '\(url)'")
            }
            let mirror = MirrorRepository(url: url, gitDirectory: repository.gitDirectory.hasSuffix("/")
                                          ? String(repository.gitDirectory.dropLast()) : repository.gitDirectory)
            try mirror.setOrigin(in: repository, path: path)
            do {
                try mirror.fetch()
            } catch let error as GitCommandError {
                throw FprepError("cannot fetch '\(url)' into the mirror '\(path)': \(error.reason) (check the URL, and that git has credentials for it)")
            }
            let domain = try RemoteInfo.domain(of: url, in: repository, reference: RemoteInfo.reference)
            try repository.config().set("fprep.domain", domain)
            return mirror
        } catch {
            if created { try? FileManager.default.removeItem(atPath: absolute) }
            throw error
        }
    }

    /// Points `origin` at the host; a mirror of another URL is refused (its
    /// outbox and state belong to that remote's devices).
    private func setOrigin(in repository: Repository, path: String) throws {
        let config = try repository.config()
        if let existing = try config.string("remote.origin.url"), !existing.isEmpty {
            guard existing == url else {
                throw FprepError(.usage, "'\(path)' mirrors '\(existing)', not '\(url)'; give --remote another folder")
            }
            // `git clone --mirror` sets it, and git then refuses a push of
            // one ref ("--mirror can't be combined with refspecs"): the
            // manifest's push would never go.
            if try config.string("remote.origin.mirror") != nil { try config.set("remote.origin.mirror", "false") }
            return
        }
        try config.set("remote.origin.url", url)
    }

    /// Fetches the host's branches and fprep's refs into the mirror.
    func fetch() throws {
        try GitCommand.run(["--git-dir=\(gitDirectory)"] + Self.quiet
                           + ["fetch", "--quiet", "--prune", "--no-tags", "--recurse-submodules=no", "origin"] + Self.refspecs)
    }

    /// Fetches the host's size manifest alone (its tip moved under a push).
    func fetchManifest() throws {
        try GitCommand.run(["--git-dir=\(gitDirectory)"] + Self.quiet
                           + ["fetch", "--quiet", "--no-tags", "--recurse-submodules=no", "origin",
                              "+\(SizeManifest.reference):\(SizeManifest.reference)"])
    }

    /// The mirror's branches and their tips, by full ref name.
    func branchTips() throws -> [String: ObjectID] {
        let listing = try GitCommand.run(["--git-dir=\(gitDirectory)", "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/"])
        var tips: [String: ObjectID] = [:]
        for line in String(decoding: listing, as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, let id = ObjectID(hex: String(parts[0])) else { continue }
            tips[String(parts[1])] = id
        }
        return tips
    }
}
