import Foundation
import Testing
@testable import FprepGit

@Suite struct RepositoryTests {
    @Test func openingAMissingRepositoryCarriesLibgit2sMessage() throws {
        let scratch = try Scratch()
        do {
            _ = try Repository(openingAt: scratch.path + "/nowhere")
            Issue.record("opening a missing repository succeeded")
        } catch GitError.notFound {
            // expected: matchable by code
        }
        do {
            _ = try Repository(openingAt: scratch.path + "/nowhere")
        } catch let error as GitError {
            #expect(error.function == "git_repository_open_ext")
            #expect(error.message.contains("nowhere"))
        }
    }

    @Test func objectIDRoundTripsAndRejectsBadHex() throws {
        let hex = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
        let id = try #require(ObjectID(hex: hex))
        #expect(id.hex == hex)
        #expect(id == ObjectID.emptyTree)
        #expect(ObjectID(bytes: id.bytes) == id)
        #expect(ObjectID(hex: "xyz") == nil)
        #expect(ObjectID(hex: String(repeating: "g", count: 40)) == nil)
        #expect(ObjectID.zero.isZero)
    }

    /// Ids order and compare as their bytes do (their hex text's order),
    /// whichever byte differs: the first, one inside, the last.
    @Test func objectIDsOrderByTheirBytes() throws {
        var generator = SystemRandomNumberGenerator()
        var ids = (0..<400).map { _ in ObjectID(bytes: (0..<20).map { _ in UInt8.random(in: 0...255, using: &generator) })! }
        let base = ids[0].bytes
        for position in [0, 7, 8, 15, 16, 19] {
            for delta in [-1, 1] where Int(base[position]) + delta >= 0 && Int(base[position]) + delta <= 255 {
                var bytes = base
                bytes[position] = UInt8(Int(base[position]) + delta)
                ids.append(try #require(ObjectID(bytes: bytes)))
            }
        }
        for a in ids.prefix(50) {
            for b in ids {
                #expect((a < b) == (a.hex < b.hex), "\(a) < \(b)")
                #expect((a == b) == (a.hex == b.hex))
            }
        }
        #expect(ids.sorted().map(\.hex) == ids.map(\.hex).sorted())
    }

    /// The quick check of bytes from the object database agrees with git's
    /// own hashing on sizes around SHA-1's 64-byte blocks and the empty
    /// blob, and a changed byte, a byte more or a byte less fails it.
    @Test func blobCheckAgreesWithGitsHash() throws {
        let scratch = try Scratch()
        let repository = try Repository(creatingBareAt: scratch.path + "/r.git", initialBranch: "main")
        for size in [0, 1, 55, 56, 63, 64, 65, 119, 4096, 100_003] {
            let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ size) }
            let id = try bytes.withUnsafeBytes { try repository.writeBlob($0) }
            #expect(try bytes.withUnsafeBytes { try ObjectDatabase.blobID(of: $0) } == id)
            let read = try repository.blob(id).withContent { Array($0) }
            #expect(read.withUnsafeBytes { ObjectDatabase.isBlob($0, id: id) }, "size \(size)")
            if size > 0 {
                var changed = bytes
                changed[size / 2] ^= 1
                #expect(!changed.withUnsafeBytes { ObjectDatabase.isBlob($0, id: id) }, "size \(size), a byte changed")
                #expect(!bytes.dropLast().withUnsafeBytes { ObjectDatabase.isBlob($0, id: id) }, "size \(size), a byte less")
            }
            #expect(!(bytes + [0]).withUnsafeBytes { ObjectDatabase.isBlob($0, id: id) }, "size \(size), a byte more")
        }
        let emptyBlob = try #require(ObjectID(hex: "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"))
        #expect([UInt8]().withUnsafeBytes { ObjectDatabase.isBlob($0, id: emptyBlob) })
    }

    @Test func treeBuilderWritesWhatGitReads() throws {
        let scratch = try Scratch()
        let repository = try Repository(creatingBareAt: scratch.path + "/r.git", initialBranch: "main")
        let blob = try Array("hello\n".utf8).withUnsafeBytes { try repository.writeBlob($0) }
        let builder = try repository.treeBuilder()
        try builder.insert(name: Array("a.txt".utf8), id: blob, mode: .blob)
        try builder.insert(name: Array("run".utf8), id: blob, mode: .executable)
        let tree = try builder.write()
        let listing = try scratch.git(["--git-dir=r.git", "ls-tree", tree.hex])
        #expect(listing == "100644 blob \(blob.hex)\ta.txt\n100755 blob \(blob.hex)\trun")
        let entries = try repository.tree(tree).entries
        #expect(entries.map { String(decoding: $0.name, as: UTF8.self) } == ["a.txt", "run"])
        #expect(entries.map(\.mode) == [.blob, .executable])
        #expect(try repository.blob(blob).withContent { Array($0) } == Array("hello\n".utf8))
        #expect(try repository.objectDatabase().size(of: blob) == 6)
    }

    @Test func treeDiffReportsLeafChangesOnly() throws {
        let scratch = try Scratch()
        let repository = try Repository(creatingBareAt: scratch.path + "/r.git", initialBranch: "main")
        func blob(_ text: String) throws -> ObjectID { try Array(text.utf8).withUnsafeBytes { try repository.writeBlob($0) } }
        func tree(_ entries: [(String, ObjectID, FileMode)]) throws -> ObjectID {
            let builder = try repository.treeBuilder()
            for (name, id, mode) in entries { try builder.insert(name: Array(name.utf8), id: id, mode: mode) }
            return try builder.write()
        }
        let same = try tree([("keep.txt", blob("keep"), .blob)])
        let oldSub = try tree([("x", blob("1"), .blob), ("gone", blob("2"), .blob)])
        let newSub = try tree([("x", blob("1 changed"), .blob), ("new", blob("3"), .blob)])
        let old = try tree([("same", same, .tree), ("sub", oldSub, .tree), ("f", blob("f"), .blob)])
        let new = try tree([("same", same, .tree), ("sub", newSub, .tree), ("f", blob("f"), .executable)])
        let deltas = try TreeDiff(repository).deltas(from: old, to: new)
        let summary = deltas.map { delta -> String in
            let kind = delta.old == nil ? "A" : delta.new == nil ? "D" : "M"
            return kind + " " + String(decoding: delta.path, as: UTF8.self)
        }
        #expect(summary == ["M f", "D sub/gone", "A sub/new", "M sub/x"])
        #expect(try TreeDiff(repository).deltas(from: old, to: old).isEmpty)
        #expect(try TreeDiff(repository).deltas(from: nil, to: same).count == 1)
    }

    @Test func indexKeepsSkipWorktreeForBlobsTheCloneLacks() throws {
        let scratch = try Scratch()
        try scratch.git(["init", "-q", "-b", "main", "work"])
        let repository = try Repository(openingAt: scratch.path + "/work")
        let missing = try #require(ObjectID(hex: "ce013625030ba8dba906f756967f9e9ca394464a"))
        let index = try repository.index()
        try index.add(IndexEntry(path: Array("a/b.txt".utf8), id: missing, mode: 0o100644, skipWorktree: true))
        try index.write()
        let listing = try scratch.git(["ls-files", "-s", "-v"], in: scratch.path + "/work")
        #expect(listing == "S 100644 \(missing.hex) 0\ta/b.txt")
        let reread = try repository.index()
        let entry = try #require(reread.entry(path: Array("a/b.txt".utf8)))
        #expect(entry.skipWorktree)
        #expect(reread.firstPosition(withPrefix: Array("a/".utf8)) == 0)
        #expect(reread.firstPosition(withPrefix: Array("z/".utf8)) == nil)
    }

    @Test func anIndexStreamWritesWhatIndexWritesAndRefusesDisorder() throws {
        let scratch = try Scratch()
        let work = scratch.path + "/work"
        try scratch.git(["init", "-q", "-b", "main", "work"])
        let repository = try Repository(openingAt: work)
        let id = try Array("x\n".utf8).withUnsafeBytes { try repository.writeBlob($0) }
        let paths = ["a.txt", "a/b", "a/c/d", "b", "z/" + String(repeating: "y", count: 70)]
        let entries = paths.enumerated().map { i, path in
            IndexEntry(path: Array(path.utf8), id: id, mode: i == 3 ? 0o120000 : 0o100644,
                       stat: StatData(ctime: (0, 0), mtime: (1_700_000_000 + Int64(i), 0), device: 0, inode: Int64(i),
                                      uid: 0, gid: 0, size: Int64(i * 1000)),
                       skipWorktree: i != 3)
        }
        // The same entries through an Index: the two files are byte for byte one.
        let index = try repository.index()
        for entry in entries.reversed() { try index.add(entry) }
        try index.write()
        let written = try Data(contentsOf: URL(fileURLWithPath: work + "/.git/index"))
        try FileManager.default.removeItem(atPath: work + "/.git/index")
        let stream = try IndexStream(path: work + "/.git/index", count: entries.count)
        for entry in entries { try stream.append(entry) }
        try stream.finish()
        #expect(try Data(contentsOf: URL(fileURLWithPath: work + "/.git/index")) == written)
        _ = try scratch.git(["ls-files", "-s"], in: work)   // git reads it (and checks its checksum)
        #expect(try repository.index().count == entries.count)

        // Out of order, or fewer than announced: nothing replaces the index.
        let disordered = try IndexStream(path: work + "/.git/index", count: 2)
        try disordered.append(entries[1])
        #expect(throws: GitError.self) { try disordered.append(entries[0]) }
        let short = try IndexStream(path: work + "/.git/index", count: 3)
        try short.append(entries[0])
        #expect(throws: GitError.self) { try short.finish() }
        #expect(try Data(contentsOf: URL(fileURLWithPath: work + "/.git/index")) == written)
        #expect(!FileManager.default.fileExists(atPath: work + "/.git/index.lock"))
    }

    /// Making files dataless or materialized changes entries in place; the
    /// file must then be exactly the one a whole write would make (entries,
    /// version, checksum), and what cannot be done in place is written whole.
    @Test func anIndexIsWrittenInPlaceExactlyAsAWholeWriteWouldWriteIt() throws {
        let scratch = try Scratch()
        let work = scratch.path + "/work"
        try scratch.git(["init", "-q", "-b", "main", "work"])
        let repository = try Repository(openingAt: work)
        let id = try Array("x\n".utf8).withUnsafeBytes { try repository.writeBlob($0) }
        let indexPath = work + "/.git/index"
        func entry(_ i: Int, skip: Bool, size: Int64 = 10) -> IndexEntry {
            // Path lengths 1 to 16: every padding a header of 62 or 64 bytes can need.
            IndexEntry(path: Array(("d\(i % 5)/" + String(repeating: "n", count: i % 16 + 1) + "\(i)").utf8), id: id, mode: 0o100644,
                       stat: StatData(ctime: (1_700_000_000, Int64(i)), mtime: (1_700_000_000, 0), device: 1, inode: Int64(i),
                                      uid: 0, gid: 0, size: size),
                       skipWorktree: skip)
        }
        let entries = (0..<64).map { entry($0, skip: true) }
        let stream = try IndexStream(path: indexPath, count: entries.count)
        for e in entries.sorted(by: { $0.path.lexicographicallyPrecedes($1.path) }) { try stream.append(e) }
        try stream.finish()
        func inode() -> UInt64 { var info = stat(); stat(indexPath, &info); return UInt64(info.st_ino) }
        func bytes() throws -> Data { try Data(contentsOf: URL(fileURLWithPath: indexPath)) }

        // Materialize 10 (one of them twice, as settle and a later edit would), through one Index.
        let edited = [3, 7, 8, 9, 10, 11, 12, 13, 14, 40].map { entry($0, skip: false, size: 11) }
        let before = inode()
        let index = try repository.index()
        for e in edited { try index.add(e) }
        _ = index.count   // edits merged into the order before the write
        try index.add(entry(40, skip: false, size: 12))
        try index.write()
        #expect(inode() == before, "written in place")
        let inPlace = try bytes()
        #expect(index.checksum == Array(inPlace.suffix(20)))
        #expect(EntryOffsets.describes(indexPath: indexPath), "the offsets table names the new checksum")

        // The same edits, written whole from the first file: byte for byte one.
        try FileManager.default.removeItem(atPath: indexPath)
        let again = try IndexStream(path: indexPath, count: entries.count)
        for e in entries.sorted(by: { $0.path.lexicographicallyPrecedes($1.path) }) { try again.append(e) }
        try again.finish()
        let whole = try repository.index()
        try whole.clear()   // every entry an edit: no write in place
        for e in entries + edited + [entry(40, skip: false, size: 12)] { try whole.add(e) }
        try whole.write()
        #expect(try bytes() == inPlace)
        _ = try scratch.git(["fsck", "--no-dangling"], in: work)   // git checks the checksum
        let listing = try scratch.git(["ls-files", "-v"], in: work).split(separator: "\n")
        #expect(listing.filter { $0.hasPrefix("H ") }.count == 10 && listing.filter { $0.hasPrefix("S ") }.count == 54)

        // An entry added: written whole (a new file), still one git reads.
        let third = try repository.index()
        try third.add(entry(100, skip: true))
        let wholeBefore = inode()
        try third.write()
        #expect(inode() != wholeBefore)
        _ = try scratch.git(["fsck", "--no-dangling"], in: work)
        // That Index reads from the file it wrote from then on (the old
        // one's mapping let go): a later edit that keeps each entry's size
        // goes in place, and every entry reads as written.
        try third.add(entry(9, skip: true))
        let afterWhole = inode()
        try third.write()
        #expect(inode() == afterWhole, "in place after the same Index wrote the file whole")
        #expect(third.count == 65 && third.entry(path: entry(100, skip: true).path) != nil)
        #expect(third.entry(path: entry(9, skip: true).path)?.skipWorktree == true)
        #expect(try repository.index().entry(path: entry(9, skip: true).path)?.stat.fileSize == 10)
        _ = try scratch.git(["fsck", "--no-dangling"], in: work)

        // git rewrites the index without the extended flags of materialized
        // entries: the next write is whole and puts them back, the one
        // after is in place again.
        try scratch.git(["update-index", "--index-version", "2"], in: work)
        #expect(!EntryOffsets.describes(indexPath: indexPath))
        let afterGit = try repository.index()
        try afterGit.add(entry(3, skip: true))
        try afterGit.write()
        let normalized = try repository.index()
        try normalized.add(entry(7, skip: true))
        let normalizedBefore = inode()
        try normalized.write()
        #expect(inode() == normalizedBefore, "in place once fprep wrote the file whole")
        _ = try scratch.git(["fsck", "--no-dangling"], in: work)
        #expect(try repository.index().entry(path: entry(7, skip: true).path)?.skipWorktree == true)

        // Another writer's lock: nothing is written, the file is unchanged.
        let locked = try bytes()
        let blocked = try repository.index()
        try blocked.add(entry(8, skip: true))
        _ = FileManager.default.createFile(atPath: indexPath + ".lock", contents: nil)
        #expect(throws: GitError.self) { try blocked.write() }
        #expect(try bytes() == locked)
        try FileManager.default.removeItem(atPath: indexPath + ".lock")
    }

    @Test func indexFilesGitWritesAreReadAndWhatFprepWritesGitVerifies() throws {
        let scratch = try Scratch()
        let work = scratch.path + "/work"
        try scratch.git(["init", "-q", "-b", "main", "work"])
        var names: [String] = []
        for i in 0..<300 {
            let name = "dir\(i % 7)/sub\(i % 3)/file-\(i)-" + String(repeating: "x", count: i % 40) + ".txt"
            names.append(name)
            try FileManager.default.createDirectory(atPath: work + "/" + (name as NSString).deletingLastPathComponent,
                                                    withIntermediateDirectories: true)
            try Data("content \(i)\n".utf8).write(to: URL(fileURLWithPath: work + "/" + name))
        }
        try scratch.git(["add", "-A"], in: work)
        try scratch.git(["commit", "-q", "-m", "files"], in: work)
        let expected = try scratch.git(["ls-files", "-s"], in: work)
        let repository = try Repository(openingAt: work)

        // Version 4 (paths compressed against the one before), with the cache tree git adds.
        for version in ["2", "3", "4"] {
            try scratch.git(["update-index", "--index-version", version], in: work)
            let index = try repository.index()
            #expect(index.count == 300)
            let listed = (0..<index.count).compactMap { index.entry(at: $0) }
                .map { "\(String(format: "%o", $0.mode)) \($0.id.hex) 0\t\(String(decoding: $0.path, as: UTF8.self))" }
                .joined(separator: "\n")
            #expect(listed == expected, "version \(version)")
            #expect(index.find(Array(names[150].utf8)) != nil)
        }

        // Edits, written back: git agrees on every entry and on the checksum.
        let index = try repository.index()
        let kept = try #require(index.entry(path: Array(names[0].utf8)))
        try index.remove(path: Array(names[1].utf8))
        try index.add(IndexEntry(path: Array("dir0/new.txt".utf8), id: kept.id, mode: 0o100644, skipWorktree: true))
        try index.add(IndexEntry(path: Array("zzz/last".utf8), id: kept.id, mode: 0o100755, skipWorktree: false))
        try index.write()
        let after = try scratch.git(["ls-files", "-s", "-v"], in: work)
        #expect(after.split(separator: "\n").count == 301)
        #expect(after.contains("S 100644 \(kept.id.hex) 0\tdir0/new.txt"))
        #expect(after.contains("H 100755 \(kept.id.hex) 0\tzzz/last"))
        #expect(!after.contains(names[1]))
        _ = try scratch.git(["fsck", "--no-dangling"], in: work)  // verifies the index checksum
        #expect(try repository.index().count == 301)

        // fprep keeps its entry offsets beside the index (git never sees an
        // extension it does not know): read through them, the same entries
        // as git lists; a table that does not fit the file, or that names
        // another index (git wrote it since), is not trusted.
        let indexPath = work + "/.git/index"
        let tablePath = work + "/.git/fprep-index-offsets"
        func checksum() throws -> Data { try Data(contentsOf: URL(fileURLWithPath: indexPath)).suffix(20) }
        func tableChecksum() throws -> Data { try Data(contentsOf: URL(fileURLWithPath: tablePath)).dropFirst(8).prefix(20) }
        #expect(try tableChecksum() == checksum())
        let gitStatus = try scratch.gitOutputAndError(["status", "--porcelain"], in: work)
        #expect(!gitStatus.contains("extension"), "git complains about the index: \(gitStatus)")
        func listing(_ index: Index) -> String {
            (0..<index.count).compactMap { index.entry(at: $0) }
                .map { "\(String(format: "%o", $0.mode)) \($0.id.hex) 0\t\(String(decoding: $0.path, as: UTF8.self))" }
                .joined(separator: "\n")
        }
        let gitListing = try scratch.git(["ls-files", "-s"], in: work)
        #expect(listing(try repository.index()) == gitListing)
        try repository.index().write()   // read through the offsets, written again
        #expect(try tableChecksum() == checksum())
        #expect(try scratch.git(["ls-files", "-s"], in: work) == gitListing)
        _ = try scratch.git(["fsck", "--no-dangling"], in: work)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: tablePath))
        bytes[32 + 4 * 150 + 3] ^= 0x01   // entry 150 now starts mid-entry
        try bytes.write(to: URL(fileURLWithPath: tablePath))
        #expect(listing(try repository.index()) == gitListing, "a table that does not fit is not used")
        try repository.index().write()
        try scratch.git(["update-index", "--index-version", "4"], in: work)   // git writes the file
        #expect(try tableChecksum() != checksum())
        #expect(listing(try repository.index()) == gitListing)

        // A split index git wrote in version 4 (its shared file too) is read.
        try scratch.git(["update-index", "--split-index"], in: work)
        #expect(listing(try repository.index()) == gitListing)
    }

    @Test func gitCommandErrorsSayWhy() throws {
        do {
            try GitCommand.run(["ls-remote", "/definitely/not/here"])
            Issue.record("ls-remote of a missing path succeeded")
        } catch let error as GitCommandError {
            #expect(error.reason.contains("/definitely/not/here"))
            #expect(error.status != 0)
        }
    }

    /// A git command stopped from another thread ends at once with its
    /// error, whether it was stopped before it started or while it waited
    /// on a server that never answers.
    @Test func aStoppedGitCommandEndsAtOnce() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(listener >= 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) == 0 && getsockname(listener, $0, &length) == 0 }
        }
        #expect(bound && listen(listener, 4) == 0)
        let url = "git://127.0.0.1:\(UInt16(bigEndian: address.sin_port))/silent.git"

        for early in [true, false] {
            let stop = GitCommand.Stop()
            if early { stop.request() }
            var ends: [Int32] = [-1, -1]
            #expect(pipe(&ends) == 0)
            let finished = ends
            let watched = DispatchSemaphore(value: 0)
            // Stops git once it is connected (it then waits for an answer
            // that never comes). A git that ignores its stop is ended by the
            // connection's close (a connection when stopped early, or a
            // minute without an end), with a status that fails the test.
            let watchdog = Thread {
                var connection: Int32 = -1
                while true {
                    var fds = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0),
                               pollfd(fd: finished[0], events: Int16(POLLIN), revents: 0)]
                    if poll(&fds, 2, 60_000) <= 0 || fds[1].revents != 0 { break }
                    let accepted = accept(listener, nil, nil)
                    if early || connection >= 0 {
                        close(accepted)
                        continue
                    }
                    connection = accepted
                    stop.request()
                }
                if connection >= 0 { close(connection) }
                watched.signal()
            }
            watchdog.start()
            do {
                try GitCommand.run(["ls-remote", url], stop: stop)
                Issue.record("ls-remote of a server that never answers succeeded")
            } catch let error as GitCommandError {
                #expect(error.status == 128 + SIGTERM, "ended by its stop: \(error)")
            }
            #expect(write(finished[1], "x", 1) == 1)
            watched.wait()
            close(finished[0])
            close(finished[1])
        }
    }

    @Test func localPathsTravelAsFileURLs() {
        #expect(Transport.transportURL("/srv/r.git") == "file:///srv/r.git")
        #expect(Transport.transportURL("git://127.0.0.1/r.git") == "git://127.0.0.1/r.git")
        #expect(Transport.transportURL("host:r.git") == "host:r.git")
    }

    /// fprep's refs are fetched beside a clone unless two fetches could ask
    /// at once: over ssh (which asks on the terminal) as git will use the
    /// URL after its rewriting, or with an askpass program set.
    @Test func fprepRefsAreFetchedBesideTheCloneUnlessTwoFetchesCouldAsk() {
        for beside in ["/srv/r.git", "r.git", "./a:b", "file:///srv/r.git", "git://127.0.0.1/r.git", "https://example.com/r.git"] {
            #expect(Transport.neverAsksOnTerminal(beside), "\(beside)")
        }
        for after in ["host:r.git", "user@host:r.git", "ssh://host/r.git", "git+ssh://host/r.git", "SSH://host/r",
                      "ext::ssh -i key host %S r", "host:dir://x", "host:r://"] {
            #expect(!Transport.neverAsksOnTerminal(after), "\(after)")
        }
        var plain = ProcessInfo.processInfo.environment
        plain["GIT_ASKPASS"] = nil
        plain["SSH_ASKPASS"] = nil
        let https = "https://example.invalid/o/r.git"
        #expect(Transport.fetchesRefsBeside(https, environment: plain))
        var askpass = plain
        askpass["SSH_ASKPASS"] = "/usr/bin/true"
        #expect(!Transport.fetchesRefsBeside(https, environment: askpass))
        // https given, ssh used: git rewrites it (`url.<base>.insteadOf`).
        var rewritten = plain
        rewritten["GIT_CONFIG_COUNT"] = "1"
        rewritten["GIT_CONFIG_KEY_0"] = "url.git@example.invalid:.insteadOf"
        rewritten["GIT_CONFIG_VALUE_0"] = "https://example.invalid/"
        #expect(!Transport.fetchesRefsBeside(https, environment: rewritten))
    }

    /// A clone with fprep's refs fetched beside it ends as one fetched after
    /// it: the same refs, every object of theirs readable in the clone
    /// without a lazy fetch, nothing left in the side repository's packs.
    @Test func fprepRefsFetchedBesideAreAdoptedByTheClone() throws {
        let scratch = try Scratch()
        let work = scratch.path + "/work", remote = scratch.path + "/remote.git"
        try scratch.git(["init", "-q", "-b", "main", work])
        try Data("a\n".utf8).write(to: URL(fileURLWithPath: work + "/a.txt"))
        try scratch.git(["add", "."], in: work)
        try scratch.git(["commit", "-q", "-m", "a"], in: work)
        try scratch.git(["clone", "-q", "--bare", work, remote])
        try scratch.git(["config", "uploadpack.allowFilter", "true"], in: remote)
        // Two refs of fprep's, their commits on trees of their own (a few objects: fetched loose by default).
        for (name, text) in [("sizes", "s"), ("info", "i")] {
            let blob = try scratch.git(["hash-object", "-w", "--stdin"], in: remote, input: text)
            let tree = try scratch.git(["mktree"], in: remote, input: "100644 blob \(blob)\t\(name)\n")
            let commit = try scratch.git(["commit-tree", tree, "-m", name], in: remote)
            try scratch.git(["update-ref", "refs/fprep/" + name, commit], in: remote)
        }
        let clone = scratch.path + "/clone.git", side = scratch.path + "/side.git"
        try Transport.fetchFprepRefs(url: remote, into: side)
        try Transport.blobless(clone: remote, gitDirectory: clone, scratchWorkTree: scratch.path + "/scratch",
                               branch: nil, showProgress: false, refsFetchedBeside: true)
        try Transport.adoptFprepRefs(from: side, into: clone)
        let refs = try scratch.git(["--git-dir=" + clone, "for-each-ref", "--format=%(refname) %(objectname)", "refs/remotes/origin-fprep/"])
        let expected = try scratch.git(["for-each-ref", "--format=%(refname) %(objectname)", "refs/fprep/"], in: remote)
            .replacingOccurrences(of: "refs/fprep/", with: "refs/remotes/origin-fprep/")
        #expect(refs == expected && refs.split(separator: "\n").count == 2, "\(refs)")
        for name in ["sizes", "info"] {
            _ = try scratch.git(["--git-dir=" + clone, "cat-file", "-e", "refs/remotes/origin-fprep/\(name)^{tree}"],
                                environment: ["GIT_NO_LAZY_FETCH": "1"])
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: side + "/objects/pack").isEmpty)
    }

    /// Many blobs are asked for in two requests at once (each writes a pack
    /// of its own); all arrive, and a request that fails fails the fetch
    /// even when the other one succeeded.
    @Test func manyObjectsAreFetchedInTwoRequestsAndEitherFailingFailsTheFetch() throws {
        let scratch = try Scratch()
        let work = scratch.path + "/work", remote = scratch.path + "/remote.git", clone = scratch.path + "/clone.git"
        try scratch.git(["init", "-q", "-b", "main", work])
        let count = Transport.fetchedInTwoFrom + 44
        for i in 0..<count {
            try Data("file \(i)\n".utf8).write(to: URL(fileURLWithPath: work + "/f\(i).txt"))
        }
        try scratch.git(["add", "."], in: work)
        try scratch.git(["commit", "-q", "-m", "files"], in: work)
        try scratch.git(["clone", "-q", "--bare", work, remote])
        try scratch.git(["config", "uploadpack.allowFilter", "true"], in: remote)
        try scratch.git(["config", "uploadpack.allowAnySHA1InWant", "true"], in: remote)
        try scratch.git(["clone", "-q", "--bare", "--filter=blob:none", "file://" + remote, clone])
        let ids = try scratch.git(["ls-tree", "-r", "--object-only", "HEAD"], in: remote)
            .split(separator: "\n").map { try #require(ObjectID(hex: String($0))) }
        #expect(ids.count == count)

        let quarantine = scratch.path + "/quarantine"
        let packs = try Transport.fetchObjects(ids, gitDirectory: clone, quarantine: quarantine)
        #expect(packs.filter { $0.hasSuffix(".pack") }.count == 2, "\(packs)")
        let listed = ids.map(\.hex).joined(separator: "\n") + "\n"
        let found = try scratch.git(["--git-dir=" + clone, "cat-file", "--batch-check"], input: listed,
                                    environment: ["GIT_ALTERNATE_OBJECT_DIRECTORIES": quarantine, "GIT_NO_LAZY_FETCH": "1"])
        #expect(found.split(separator: "\n").filter { $0.contains(" blob ") }.count == count, "\(found)")

        // One id the remote lacks, among many: its request fails, and so does the fetch.
        let absent = try #require(ObjectID(hex: String(repeating: "5", count: 40)))
        #expect(throws: GitCommandError.self) {
            try Transport.fetchObjects(ids + [absent], gitDirectory: clone, quarantine: scratch.path + "/quarantine-2")
        }
    }

    /// Named objects are asked for with a tree filter (the remote's bitmaps
    /// cannot answer it, so it does not load them): a remote that refuses
    /// `blob:none` still sends them. A remote that refuses tree filters gets
    /// git's own filter instead, and the replica keeps that it did; neither
    /// changes the clone's own filter.
    @Test func namedObjectsAreAskedWithATreeFilterAndGitsOwnWhereItIsRefused() throws {
        let scratch = try Scratch()
        let work = scratch.path + "/work", remote = scratch.path + "/remote.git"
        try scratch.git(["init", "-q", "-b", "main", work])
        for i in 0..<6 { try Data("file \(i)\n".utf8).write(to: URL(fileURLWithPath: work + "/f\(i).txt")) }
        try scratch.git(["add", "."], in: work)
        try scratch.git(["commit", "-q", "-m", "files"], in: work)
        try scratch.git(["clone", "-q", "--bare", work, remote])
        try scratch.git(["config", "uploadpack.allowFilter", "true"], in: remote)
        try scratch.git(["config", "uploadpack.allowAnySHA1InWant", "true"], in: remote)
        let ids = try scratch.git(["ls-tree", "-r", "--object-only", "HEAD"], in: remote)
            .split(separator: "\n").map { try #require(ObjectID(hex: String($0))) }

        func arrived(_ clone: String) throws -> Int {
            let listed = try scratch.git(["--git-dir=" + clone, "rev-list", "--objects", "--missing=print", "HEAD"])
            return ids.count - listed.split(separator: "\n").filter { $0.hasPrefix("?") }.count
        }
        func config(_ clone: String, _ key: String) throws -> String {
            (try? scratch.git(["config", "--file", clone + "/config", key]))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        }

        // The clone first, then a remote that sends named objects only to a tree filter.
        let clone = scratch.path + "/clone.git"
        try scratch.git(["clone", "-q", "--bare", "--filter=blob:none", "file://" + remote, clone])
        try scratch.git(["config", "uploadpackfilter.allow", "false"], in: remote)
        try scratch.git(["config", "uploadpackfilter.tree.allow", "true"], in: remote)
        try Transport.fetchObjects(Array(ids.prefix(3)), gitDirectory: clone)
        #expect(try arrived(clone) == 3)
        #expect(try config(clone, Transport.namedObjectsFilterKey) == "")
        #expect(try config(clone, "remote.origin.partialclonefilter") == "blob:none")

        // A remote that refuses tree filters: git's own filter, kept for later fetches.
        try scratch.git(["config", "uploadpackfilter.allow", "true"], in: remote)
        try scratch.git(["config", "uploadpackfilter.tree.allow", "false"], in: remote)
        try Transport.fetchObjects(Array(ids.dropFirst(3).prefix(2)), gitDirectory: clone)
        #expect(try arrived(clone) == 5)
        #expect(try config(clone, Transport.namedObjectsFilterKey) == "blob:none")
        #expect(Transport.namedObjectsFilter(gitDirectory: clone) == "blob:none")
        // Asked with it alone from then on: a remote that now sends named
        // objects only to a tree filter sends none.
        try scratch.git(["config", "uploadpackfilter.allow", "false"], in: remote)
        try scratch.git(["config", "uploadpackfilter.tree.allow", "true"], in: remote)
        #expect(throws: GitCommandError.self) { try Transport.fetchObjects([ids[5]], gitDirectory: clone) }
        #expect(try arrived(clone) == 5)
        // Until the setting goes.
        try scratch.git(["config", "--file", clone + "/config", "--unset", Transport.namedObjectsFilterKey])
        try Transport.fetchObjects([ids[5]], gitDirectory: clone)
        #expect(try arrived(clone) == 6)
        #expect(try config(clone, "remote.origin.partialclonefilter") == "blob:none")
    }
}
