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

    @Test("the record's format version names what ChangeSet.between gives: a fixed change of every kind diffs to the digest pinned for that version")
    func formatVersionPinsTheDiff() throws {
        let h = try SyncHarness(files: [
            "a/keep.txt": "kept\n", "a/edit.txt": "before\n", "a/gone.txt": "gone\n", "a/move.txt": "moved across folders\n",
            "b/run.sh": "echo run\n", "b/link": "target\n", "c/one.txt": "one\n", "c/two.txt": "two\n",
        ])
        let old = try h.git(["rev-parse", "HEAD^{tree}"], in: h.work)
        try h.push { work in
            try Data("after\n".utf8).write(to: URL(fileURLWithPath: work + "/a/edit.txt"))
            try FileManager.default.removeItem(atPath: work + "/a/gone.txt")
            try FileManager.default.createDirectory(atPath: work + "/d", withIntermediateDirectories: true)
            try FileManager.default.moveItem(atPath: work + "/a/move.txt", toPath: work + "/d/moved.txt")
            try FileManager.default.moveItem(atPath: work + "/c", toPath: work + "/e")
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: work + "/b/run.sh")
            try FileManager.default.removeItem(atPath: work + "/b/link")
            try FileManager.default.createSymbolicLink(atPath: work + "/b/link", withDestinationPath: "../a/keep.txt")
            try h.write(["f/new.txt": "new\n"], under: work)
        }
        let new = try h.git(["rev-parse", "HEAD^{tree}"], in: h.work)
        let set = try ChangeSet.between(try Repository(openingAt: h.remote), from: ObjectID(hex: old), to: ObjectID(hex: new))
        let text = Array(described(set).joined(separator: "\n").utf8)
        let digest = try text.withUnsafeBytes { try ObjectDatabase.blobID(of: $0) }.hex
        // A record holds an answer of `ChangeSet.between`: when that answer
        // changes, records written before must not be read as the new one.
        // Raise `RecordedChanges.formatVersion` and pin the new digest here.
        let pinned = [1: "8771763ded897f01ae30dbaeb73d51af39ed386b"]
        #expect(pinned[RecordedChanges.formatVersion] == digest,
                "ChangeSet.between gives another answer than format \(RecordedChanges.formatVersion) was written for (digest \(digest)): raise RecordedChanges.formatVersion and pin the digest. \(described(set))")
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

