import Glibc

/// Whether process `pid` (or a process it started) listens on
/// 127.0.0.1:`port`: the listening socket's inode, from /proc/net/tcp, is one
/// of that process's descriptors.
///
/// Tests pick a free port, close it, and hand the number to a server they
/// start. Between the two another test's socket can take the port; a check
/// that finds *something* listening there would then send the test's
/// requests to the wrong server (seen on a loaded machine: the APNs client
/// met a server that "does not speak HTTP/2", then nothing). Waiting for
/// the server's own socket tells the two apart, and a server that could not
/// bind is started again on another port.
public func isListening(port: UInt16, by pid: pid_t) -> Bool {
    guard let inode = listeningInode(port: port) else { return false }
    let target = "socket:[\(inode)]"
    var pending = [pid]
    var seen: Set<pid_t> = []
    while let next = pending.popLast() {
        guard seen.insert(next).inserted else { continue }
        if descriptors(of: next).contains(target) { return true }
        pending += children(of: next)
    }
    return false
}

/// The inode of the socket listening on 127.0.0.1:`port`, if any.
func listeningInode(port: UInt16) -> String? {
    let table = String(decoding: readWholeFile("/proc/net/tcp"), as: UTF8.self)
    let local = "0100007F:" + hex4(port)
    for line in table.split(separator: "\n") {
        let fields = line.split(separator: " ")
        guard fields.count > 9, fields[1] == local, fields[3] == "0A" else { continue }
        return String(fields[9])
    }
    return nil
}

private func hex4(_ value: UInt16) -> String {
    let digits = Array("0123456789ABCDEF")
    return String((0..<4).reversed().map { digits[Int(value >> ($0 * 4)) & 0xF] })
}

/// What each open descriptor of `pid` points at (readlink of /proc/PID/fd/N).
private func descriptors(of pid: pid_t) -> [String] {
    names(in: "/proc/\(pid)/fd").compactMap { name in
        var buffer = [CChar](repeating: 0, count: 256)
        let count = readlink("/proc/\(pid)/fd/\(name)", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// The processes whose parent is `pid` (from /proc/PID/task/*/children).
private func children(of pid: pid_t) -> [pid_t] {
    names(in: "/proc/\(pid)/task").flatMap { task in
        String(decoding: readWholeFile("/proc/\(pid)/task/\(task)/children"), as: UTF8.self)
            .split(whereSeparator: { $0 == " " || $0 == "\n" }).compactMap { pid_t(String($0)) }
    }
}

/// The names in a folder, without "." and "..".
private func names(in folder: String) -> [String] {
    guard let directory = opendir(folder) else { return [] }
    defer { closedir(directory) }
    var result: [String] = []
    while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if name != "." && name != ".." { result.append(name) }
    }
    return result
}

/// A file read to its end with read(2). /proc files report size 0 and give
/// a page per read: `String(contentsOfFile:)` stops after the first page,
/// which holds only ~26 sockets of /proc/net/tcp.
public func readWholeFile(_ path: String) -> [UInt8] {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return [] }
    defer { close(fd) }
    var result: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else { break }
        result += buffer[0..<count]
    }
    return result
}
