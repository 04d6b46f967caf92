import FoundationEssentials
import Glibc
import FprepGit

/// What an fprep remote says about itself on `refs/fprep/info`: a commit
/// with the empty tree whose message holds `key: value` lines (domain,
/// branch). A commit, so that a `blob:none` clone brings it along.
public struct RemoteInfo: Sendable, Equatable {
    public static let reference = "refs/fprep/info"
    public static let trackingReference = "refs/remotes/origin-fprep/info"

    public var domain: String
    public var branch: String

    public init(domain: String, branch: String) {
        self.domain = domain
        self.branch = branch
    }

    var message: String {
        "fprep remote\n\ndomain: \(domain)\nbranch: \(branch)\nformat: 1\n"
    }

    /// What a replica cloned from `url` takes for its domain, reading
    /// `repository` (which fetched the remote's `refs/fprep/info` to
    /// `reference`): the remote's own info, else the default for the folder
    /// a clone of `url` makes. A mirror of a hosted remote serves that domain.
    public static func domain(of url: String, in repository: Repository, reference: String) throws -> String {
        try read(repository, reference: reference)?.domain ?? defaultDomain(forFolder: Cloner.defaultDirectory(for: url))
    }

    /// Reads the info commit at `reference`; nil when there is none.
    static func read(_ repository: Repository, reference: String) throws -> RemoteInfo? {
        guard let id = try repository.referenceTarget(reference) else { return nil }
        var fields: [String: String] = [:]
        for line in try repository.commit(id).message.split(separator: "\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[String(line[..<colon])] = line[line.index(after: colon)...].trimmed
        }
        guard let domain = fields["domain"], let branch = fields["branch"] else { return nil }
        return RemoteInfo(domain: domain, branch: branch)
    }

    /// Writes the info commit and points `refs/fprep/info` at it.
    func write(_ repository: Repository, time: Int64) throws {
        let signature = Signature(name: "fprep", email: "fprep@localhost", time: time)
        let old = try repository.referenceTarget(Self.reference)
        let commit = try repository.writeCommit(tree: ObjectID.emptyTree, parents: old.map { [$0] } ?? [],
                                                message: message, author: signature, committer: signature)
        try repository.updateReference(Self.reference, to: commit, expecting: old, message: "fprep: remote info")
    }

    /// A domain identifier is 1–128 characters of letters, digits, '.', '_' and '-'.
    public static func isValidDomain(_ domain: String) -> Bool {
        !domain.isEmpty && domain.utf8.count <= 128 && domain.utf8.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || byte == 0x2E || byte == 0x5F || byte == 0x2D
        }
    }

    /// The default domain for a remote folder: its name without `.git`, with
    /// characters a domain may not hold turned into '-'.
    public static func defaultDomain(forFolder path: String) -> String {
        var name = URL(fileURLWithPath: path).lastPathComponent
        if name.hasSuffix(".git") { name.removeLast(4) }
        let cleaned = String(name.map { character -> Character in
            isValidDomain(String(character)) ? character : "-"
        })
        return cleaned.isEmpty ? "fprep" : String(cleaned.prefix(128))
    }
}
