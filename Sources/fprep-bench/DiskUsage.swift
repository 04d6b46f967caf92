import Glibc

/// Bytes allocated under `path` (like `du -sk` × 1024): the sum of st_blocks × 512
/// over the tree, hidden folders (.git, .fprep) included, symlinks not followed,
/// hard-linked inodes counted once.
func diskUsage(_ path: String) throws -> Int64 {
    var seen = Set<[Int64]>()
    var st = stat()
    guard lstat(path, &st) == 0 else { throw BenchError.message("stat \(path): \(errnoText())") }
    var total = Int64(st.st_blocks) * 512
    if (st.st_mode & S_IFMT) == S_IFDIR {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw BenchError.message("open \(path): \(errnoText())") }
        total += try usage(ofDirectory: fd, path: path, seen: &seen)
    }
    return total
}

/// Sums the entries of the open directory `fd` (which it closes), recursing into subfolders.
private func usage(ofDirectory fd: Int32, path: String, seen: inout Set<[Int64]>) throws -> Int64 {
    guard let dir = fdopendir(fd) else {
        close(fd)
        throw BenchError.message("opendir \(path): \(errnoText())")
    }
    defer { closedir(dir) }
    var total: Int64 = 0
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
            String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
        }
        if name == "." || name == ".." { continue }
        var st = stat()
        guard fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else {
            throw BenchError.message("stat \(path)/\(name): \(errnoText())")
        }
        if st.st_nlink > 1 && (st.st_mode & S_IFMT) != S_IFDIR {
            guard seen.insert([Int64(st.st_dev), Int64(st.st_ino)]).inserted else { continue }
        }
        total += Int64(st.st_blocks) * 512
        if (st.st_mode & S_IFMT) == S_IFDIR {
            let child = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard child >= 0 else { throw BenchError.message("open \(path)/\(name): \(errnoText())") }
            total += try usage(ofDirectory: child, path: "\(path)/\(name)", seen: &seen)
        }
    }
    return total
}
