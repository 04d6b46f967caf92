import FoundationEssentials
import Glibc
import FprepGit

/// The work of the server's post-receive hook: for each updated branch,
/// list the blobs the push brought in the size manifest.
public enum PostReceive {
    /// One line of hook input: `<old> <new> <ref>`.
    public struct Update: Sendable {
        public let old: ObjectID
        public let new: ObjectID
        public let reference: String

        public init(old: ObjectID, new: ObjectID, reference: String) {
            self.old = old
            self.new = new
            self.reference = reference
        }
    }

    /// Parses git's hook input; malformed lines are skipped.
    public static func parse(_ input: String) -> [Update] {
        input.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ", maxSplits: 2)
            guard parts.count == 3, let old = ObjectID(hex: String(parts[0])),
                  let new = ObjectID(hex: String(parts[1])) else { return nil }
            return Update(old: old, new: new, reference: String(parts[2]))
        }
    }

    /// Extends the size manifest for each updated branch. Returns the number
    /// of blobs listed.
    @discardableResult
    public static func run(gitDirectory: String, updates: [Update]) throws -> Int {
        let repository = try Repository(openingAt: gitDirectory)
        var listed = 0
        for update in updates where update.reference.hasPrefix("refs/heads/") && !update.new.isZero {
            let newCommit = try repository.commit(update.new)
            let oldTree = update.old.isZero ? nil : try? repository.commit(update.old).treeID
            listed += try SizeManifest.extend(repository, from: oldTree, to: newCommit.treeID, time: newCommit.time)
        }
        // The hook logs a failure; the push has landed either way.
        if listed > 0 { try CommitGraph.update(gitDirectory: gitDirectory) }
        return listed
    }
}
