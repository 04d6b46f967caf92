import Foundation
import Testing
import FprepGit
@testable import FprepCore

@Suite struct RecordedChangesTests {
    private func id(_ byte: UInt8) -> ObjectID { ObjectID(bytes: [UInt8](repeating: byte, count: 20))! }

    private func described(_ set: ChangeSet) -> [String] {
        func entry(_ e: TreeEntry) -> String { "\(e.name)|\(e.id.hex)|\(e.mode)" }
        return set.updated.map { "u \($0.path.bytes) \(entry($0.new)) \($0.old.map(entry) ?? "-")" }
            + set.deleted.map { "d \($0.path.bytes) \(entry($0.old))" }
            + set.moved.map { "m \($0.from.bytes) \($0.to.bytes) \(entry($0.entry)) \($0.isFolder)" }
            + set.addedFolders.map { "a \($0.path.bytes) \($0.id.hex)" }
            + set.deletedFolders.map { "x \($0.path.bytes) \($0.id.hex)" }
    }

    @Test("a recorded change set reads back as it was, any bytes in its names; a record cut or changed anywhere reads as none")
    func roundTrip() throws {
        var set = ChangeSet()
        let odd: [UInt8] = [0x66, 0xFF, 0x0A, 0x2F, 0x67]  // not UTF-8, a newline, a slash
        set.updated = [.init(path: RepoPath("a.txt"), new: TreeEntry(name: Array("a.txt".utf8), id: id(1), mode: .blob),
                             old: TreeEntry(name: Array("a.txt".utf8), id: id(2), mode: .executable)),
                       .init(path: RepoPath(bytes: odd), new: TreeEntry(name: [0x67], id: id(3), mode: .symlink), old: nil)]
        set.deleted = [(RepoPath("gone"), TreeEntry(name: Array("gone".utf8), id: id(4), mode: .submodule))]
        set.moved = [.init(from: RepoPath("d"), to: RepoPath("e/d"), entry: TreeEntry(name: [0x64], id: id(5), mode: .tree), isFolder: true),
                     .init(from: RepoPath("x"), to: RepoPath("y"), entry: TreeEntry(name: [0x79], id: id(6), mode: .blob), isFolder: false)]
        set.addedFolders = [(RepoPath("new"), id(7))]
        set.deletedFolders = [(RepoPath("old"), id(8))]
        let bytes = RecordedChanges.encode(set)
        let back = try #require(RecordedChanges.decode(bytes))
        #expect(described(back) == described(set))
        #expect(RecordedChanges.decode(RecordedChanges.encode(ChangeSet())).map(described) == [])
        for cut in [0, 1, 16, bytes.count / 2, bytes.count - 1] {
            #expect(RecordedChanges.decode(Array(bytes.prefix(cut))) == nil, "cut at \(cut)")
        }
        for position in stride(from: 0, to: bytes.count, by: 7) {
            var changed = bytes
            changed[position] ^= 0x01
            #expect(RecordedChanges.decode(changed) == nil, "byte \(position) changed")
        }
    }

    @Test("records are named by their two trees, and only the newest are kept")
    func newestKept() throws {
        let state = NSTemporaryDirectory() + "recorded-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: state) }
        var set = ChangeSet()
        set.addedFolders = [(RepoPath("f"), id(9))]
        let pairs = (1...(RecordedChanges.kept + 4)).map { (id(UInt8($0)), id(UInt8(100 + $0))) }
        for (old, new) in pairs {
            RecordedChanges.write(set, state, from: old, to: new)
            // Distinct times even where the clock is coarse.
            let path = RecordedChanges.folder(state) + "/" + old.hex + "-" + new.hex
            let time = Date(timeIntervalSince1970: 1_000_000 + Double(new.bytes[0]))
            try FileManager.default.setAttributes([.modificationDate: time], ofItemAtPath: path)
        }
        RecordedChanges.write(set, state, from: nil, to: id(250))
        let names = try FileManager.default.contentsOfDirectory(atPath: RecordedChanges.folder(state))
        #expect(names.count == RecordedChanges.kept)
        #expect(RecordedChanges.read(state, from: nil, to: id(250)) != nil, "the newest is kept")
        #expect(RecordedChanges.read(state, from: pairs[0].0, to: pairs[0].1) == nil, "the oldest went")
        #expect(RecordedChanges.read(state, from: pairs[0].1, to: pairs[0].0) == nil, "a pair is read one way only")
        let last = try #require(pairs.last)
        #expect(RecordedChanges.read(state, from: last.0, to: last.1).map(described) == described(set))
    }

    @Test("a record is never written through a symlink put in place of its folder, and a FIFO in place of a record is no record (no wait)")
    func plantedNames() throws {
        let state = NSTemporaryDirectory() + "recorded-\(UUID().uuidString)"
        let elsewhere = state + "-elsewhere"
        for folder in [state, elsewhere] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        defer { for folder in [state, elsewhere] { try? FileManager.default.removeItem(atPath: folder) } }
        var set = ChangeSet()
        set.addedFolders = [(RepoPath("f"), id(9))]
        try FileManager.default.createSymbolicLink(atPath: RecordedChanges.folder(state), withDestinationPath: elsewhere)
        RecordedChanges.write(set, state, from: id(1), to: id(2))
        #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere).isEmpty, "nothing written through the link")
        #expect(RecordedChanges.read(state, from: id(1), to: id(2)) == nil)

        try FileManager.default.removeItem(atPath: RecordedChanges.folder(state))
        try FileManager.default.createDirectory(atPath: RecordedChanges.folder(state), withIntermediateDirectories: true)
        let fifo = RecordedChanges.folder(state) + "/" + id(3).hex + "-" + id(4).hex
        #expect(mkfifo(fifo, 0o644) == 0)
        #expect(RecordedChanges.read(state, from: id(3), to: id(4)) == nil)
        RecordedChanges.write(set, state, from: id(3), to: id(4))
        #expect(RecordedChanges.read(state, from: id(3), to: id(4)) == nil, "a name taken by something else is left alone")
    }
}

