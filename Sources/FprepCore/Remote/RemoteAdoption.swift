import FoundationEssentials
import Glibc
import FprepGit

/// What `install-hooks` did to an existing bare repository.
public struct RemoteAdoption: Sendable, Encodable {
    public let path: String
    public let domain: String
    public let branch: String
    public let hooks: [String]
    /// The branches whose blobs the size manifest lists now.
    public let branches: [String]
    /// How many blobs were added to the size manifest (0 when it existed).
    public let blobsListed: Int
}

extension Remote {
    /// Makes an existing bare repository an fprep remote: allows partial
    /// clone, records the domain (default: the folder's name) and the
    /// branch devices follow (HEAD's), writes the remote info, builds the
    /// size manifest for the existing branches when there is none yet (as
    /// the hook would have, push by push), and installs the hooks. Running
    /// it again only refreshes the hooks and settings.
    public static func adopt(at rawPath: String, domain requestedDomain: String?,
                             fprepBinary: String) throws -> RemoteAdoption {
        let path = absolute(rawPath)
        if let domain = requestedDomain, !RemoteInfo.isValidDomain(domain) {
            throw FprepError(.usage, "'\(domain)' is not a valid domain identifier (use 1-128 letters, digits, '.', '_' or '-')")
        }
        guard let repository = try? Repository(openingAt: path), repository.isBare else {
            throw FprepError(.usage, "'\(rawPath)' is not a bare git repository (use 'fprep init-remote' to make a new remote)")
        }
        do {
            let config = try repository.config()
            let recordedDomain = try config.string("fprep.domain")
            if let recordedDomain, let requestedDomain, recordedDomain != requestedDomain {
                throw FprepError(.usage, "'\(rawPath)' is already the fprep remote of domain '\(recordedDomain)', not '\(requestedDomain)'")
            }
            let domain = recordedDomain ?? requestedDomain ?? RemoteInfo.defaultDomain(forFolder: path)
            let head = try repository.symbolicTarget("HEAD")
            let branch = try config.string("fprep.branch")
                ?? head.flatMap { $0.hasPrefix("refs/heads/") ? String($0.dropFirst(11)) : nil } ?? "main"
            try config.set("uploadpack.allowFilter", "true")
            try config.set("uploadpack.allowAnySHA1InWant", "true")
            try config.set("fprep.domain", domain)
            try config.set("fprep.branch", branch)
            let info = RemoteInfo(domain: domain, branch: branch)
            if try RemoteInfo.read(repository, reference: RemoteInfo.reference) != info {
                try info.write(repository, time: CommitDates.now().committer)
            }
            let branches = try branchTips(path)
            var listed = 0
            if try repository.referenceTarget(SizeManifest.reference) == nil {
                // The followed branch in full, the others by their difference
                // from it: a blob most branches share is listed once.
                let ordered = branches.sorted { ($0.name == branch ? 0 : 1, $0.name) < ($1.name == branch ? 0 : 1, $1.name) }
                var base: ObjectID?
                for tip in ordered {
                    let commit = try repository.commit(tip.id)
                    listed += try SizeManifest.extend(repository, from: base, to: commit.treeID, time: commit.time)
                    if base == nil { base = commit.treeID }
                }
            }
            SizeManifest.updateCommitGraph(of: path)
            let hooks = try installHooks(gitDirectory: path, fprepBinary: fprepBinary)
            return RemoteAdoption(path: path, domain: domain, branch: branch, hooks: hooks,
                                  branches: branches.map(\.name), blobsListed: listed)
        } catch {
            throw FprepError.git("cannot make '\(rawPath)' an fprep remote", error)
        }
    }

    /// The repository's branches and their commits (`git for-each-ref`).
    private static func branchTips(_ path: String) throws -> [(name: String, id: ObjectID)] {
        let output = try GitCommand.run(["for-each-ref", "--format=%(objectname) %(refname)", "refs/heads"], in: path)
        return String(decoding: output, as: UTF8.self).split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, let id = ObjectID(hex: String(parts[0])), parts[1].hasPrefix("refs/heads/") else { return nil }
            return (String(parts[1].dropFirst(11)), id)
        }
    }
}
