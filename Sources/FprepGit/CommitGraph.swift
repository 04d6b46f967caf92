/// git's commit-graph file: parents, trees and dates of commits in a table,
/// so a history walk reads no commit object.
///
/// The size manifest is a chain of commits whose messages are large. When a
/// device fetches, the remote's `pack-objects` walks the manifest commits
/// the device says it has, and without a commit-graph it reads and inflates
/// every one of them: the whole manifest, on every fetch of every device
/// (0.03–0.06 s at 10^5 files). With a graph that walk costs nothing. The
/// device's own negotiation walks its copy of the chain the same way.
public enum CommitGraph {
    /// Adds the commits reachable from any ref that the repository's graph
    /// lacks, as a new layer of a split graph (git merges small layers as
    /// they pile up). Costs the new commits only once a graph exists; the
    /// first run covers the whole history.
    public static func update(gitDirectory: String) throws {
        try GitCommand.run(["--git-dir=\(gitDirectory)", "commit-graph", "write", "--reachable", "--split", "--no-progress"])
    }
}
