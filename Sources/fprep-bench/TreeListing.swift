import Foundation

/// One blob of the remote's tree, as `git ls-tree -r -l` reports it.
struct TreeEntry {
    var mode: String
    var oid: String
    var size: Int
    var path: String

    /// Regular or executable file (what materialize/evict act on; symlinks are not sampled).
    var isRegularFile: Bool { mode == "100644" || mode == "100755" }
}

/// Reads the full tree of the remote's main branch (or of `revision`). The remote
/// is bare and has every blob, so `-l` costs nothing there (in a blob:none clone
/// it would fetch them all).
func listTree(remote: String, revision: String = "refs/heads/main", subprocess: Subprocess) throws -> [TreeEntry] {
    let output = try subprocess.run(Command(["git", "-C", remote, "ls-tree", "-r", "-l", "-z", "--full-tree", revision]))
    var entries: [TreeEntry] = []
    // Record: "<mode> SP <type> SP <oid> SP+ <size> TAB <path> NUL".
    for record in output.stdout.split(separator: 0) {
        guard let tab = record.firstIndex(of: 0x09) else { continue }
        let meta = String(decoding: record[record.startIndex..<tab], as: UTF8.self).split(separator: " ")
        let path = String(decoding: record[(tab + 1)...], as: UTF8.self)
        guard meta.count == 4, meta[1] == "blob", let size = Int(meta[3]) else { continue }
        entries.append(TreeEntry(mode: String(meta[0]), oid: String(meta[2]), size: size, path: path))
    }
    guard !entries.isEmpty else { throw BenchError.message("git ls-tree of \(remote) listed no blobs") }
    return entries
}

/// `count` scattered regular files chosen with a seeded partial shuffle,
/// returned in path order (the order a user's list would likely have).
func sampleFiles(_ entries: [TreeEntry], count: Int, seed: UInt64) throws -> [TreeEntry] {
    var pool = entries.filter(\.isRegularFile)
    guard count <= pool.count else {
        throw BenchError.message("--sample \(count) exceeds the \(pool.count) regular files of the tree")
    }
    // A stream of its own, so the sample does not depend on how the tree was drawn.
    var rng = SeededRandom(seed: seed ^ 0x5A_4D_91_E3)
    for k in 0..<count {
        pool.swapAt(k, k + rng.below(pool.count - k))
    }
    return pool[0..<count].sorted { $0.path < $1.path }
}
