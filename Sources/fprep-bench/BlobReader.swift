/// Reads blobs of the (full) remote in one `git cat-file --batch` call.
///
/// The output is `<oid> blob <size>\n<content>\n` per requested id; the
/// sizes in the headers delimit the contents, so binary blobs parse too.
func readBlobs(_ oids: [String], remote: String, subprocess: Subprocess) throws -> [String: [UInt8]] {
    guard !oids.isEmpty else { return [:] }
    let input = Array(oids.map { $0 + "\n" }.joined().utf8)
    let output = try subprocess.run(Command(["git", "-C", remote, "cat-file", "--batch"], input: .bytes(input))).stdout
    var blobs: [String: [UInt8]] = [:]
    var at = 0
    while at < output.count {
        guard let newline = output[at...].firstIndex(of: 0x0A) else { break }
        let header = String(decoding: output[at..<newline], as: UTF8.self).split(separator: " ")
        guard header.count == 3, header[1] == "blob", let size = Int(header[2]),
              newline + 1 + size <= output.count else {
            throw BenchError.message("git cat-file --batch in \(remote): unexpected header '\(header.joined(separator: " "))'")
        }
        blobs[String(header[0])] = Array(output[(newline + 1)..<(newline + 1 + size)])
        at = newline + 1 + size + 1
    }
    guard blobs.count == Set(oids).count else {
        throw BenchError.message("git cat-file --batch in \(remote) returned \(blobs.count) of \(Set(oids).count) blobs")
    }
    return blobs
}
