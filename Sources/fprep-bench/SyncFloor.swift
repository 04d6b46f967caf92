import Glibc

/// `git diff-tree -r -z` output between two commits: how many entries of
/// each status, and the added or modified files with their new blob ids
/// (what the sync floor lays out as placeholders).
struct RawDiff {
    /// A path the floor writes and the blob id its xattr records.
    struct Item {
        var path: String
        var oid: String
    }

    /// Status letter (A, M, D, R, C, T) → entries.
    var counts: [String: Int] = [:]
    var written: [Item] = []

    /// Records are `:<old mode> <new mode> <old id> <new id> <status>` NUL
    /// `<path>` NUL, with two paths (old, new) for R and C.
    init(_ output: [UInt8]) throws {
        let fields = output.split(separator: 0, omittingEmptySubsequences: false)
        var i = 0
        while i < fields.count {
            let meta = fields[i]
            if meta.isEmpty { i += 1; continue }
            guard meta.first == UInt8(ascii: ":") else {
                throw BenchError.message("git diff-tree -z: unexpected record '\(String(decoding: meta, as: UTF8.self))'")
            }
            let parts = String(decoding: meta.dropFirst(), as: UTF8.self).split(separator: " ")
            guard parts.count == 5, let letter = parts[4].first else {
                throw BenchError.message("git diff-tree -z: unexpected record '\(String(decoding: meta, as: UTF8.self))'")
            }
            let status = String(letter)
            let paths = status == "R" || status == "C" ? 2 : 1
            guard i + paths < fields.count else { throw BenchError.message("git diff-tree -z: truncated output") }
            counts[status, default: 0] += 1
            if status == "A" || status == "M" {
                written.append(Item(path: String(decoding: fields[i + paths], as: UTF8.self), oid: String(parts[3])))
            }
            i += 1 + paths
        }
    }
}

extension FilesystemFloors {
    /// Lays out `items` under `root` as empty sparse files of their size (from
    /// `sizes`, 0 when unknown) with one xattr each, creating missing parent
    /// folders first (mkdir -p, an existing folder is fine), and returns the
    /// seconds taken. The folder list and C strings are made before the clock starts.
    func writePlaceholders(root: String, items: [RawDiff.Item], sizes: [String: Int]) throws -> Double {
        var folders = Set<Substring>()
        for item in items {
            var dir = Layout.split(item.path).0
            while !dir.isEmpty, folders.insert(dir).inserted {
                dir = Layout.split(String(dir)).0
            }
        }
        // Byte order puts every folder after its parent.
        let folderPaths = CStrings(folders.map(String.init).sorted())
        let filePaths = CStrings(items.map(\.path))
        let lengths = items.map { off_t(sizes[$0.path] ?? 0) }
        let values = items.map { Array($0.oid.utf8) }
        let rootFD = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard rootFD >= 0 else { throw BenchError.message("open \(root): \(errnoText())") }
        defer { close(rootFD) }

        let start = monotonicSeconds()
        for i in 0..<folderPaths.count where mkdirat(rootFD, folderPaths[i], 0o755) != 0 && errno != EEXIST {
            throw BenchError.message("mkdir \(root)/\(String(cString: folderPaths[i])): \(errnoText())")
        }
        for i in 0..<filePaths.count {
            let fd = openat(rootFD, filePaths[i], O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw BenchError.message("create \(root)/\(items[i].path): \(errnoText())") }
            let ok = ftruncate(fd, lengths[i]) == 0
                && values[i].withUnsafeBytes { libc.fsetxattr(fd, "user.x", $0.baseAddress, $0.count, 0) } == 0
            let failure = ok ? 0 : errno
            close(fd)
            guard ok else { throw BenchError.message("placeholder \(root)/\(items[i].path): \(errnoText(failure))") }
        }
        return monotonicSeconds() - start
    }
}
