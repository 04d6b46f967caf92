import CFprepSys
import Glibc

extension LocalChangeSet {
    /// Takes out of the commit every new or changed file that a program
    /// still has open for writing (the kernel refuses a read lease on it),
    /// and returns them, each with why: the file stays changed on disk and
    /// in the index's eyes, so the sync after its writer closes it takes it
    /// in. Only whole content the scan would read is left out: a move, a
    /// mode change and bytes written into a placeholder are committed as
    /// always (leaving out one half of a move would push a deletion).
    mutating func deferFilesOpenForWriting(root: String) -> [Skipped] {
        let candidates = written.filter { !$0.placeholder }
        guard !candidates.isEmpty else { return [] }
        let rootFD = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard rootFD >= 0 else { return [] }
        defer { close(rootFD) }
        let moved = Set(changes.filter { $0.kind == .moved }.map(\.path))
        var open: Set<[UInt8]> = []
        for write in candidates where !moved.contains(write.path.description) {
            let path = write.path.bytes.map { CChar(bitPattern: $0) } + [0]
            if fprep_open_for_writing_elsewhere(rootFD, path) == 1 { open.insert(write.path.bytes) }
        }
        guard !open.isEmpty else { return [] }
        written.removeAll { open.contains($0.path.bytes) }
        let shown = Set(open.map { RepoPath(bytes: $0).description })
        changes.removeAll { ($0.kind == .modified || $0.kind == .added) && shown.contains($0.path) }
        return shown.sorted().map { Skipped(path: $0, reason: "a program still has it open for writing; it syncs once closed") }
    }
}
