import Foundation
import Testing

/// Damaged state and a full disk: the next command finds the damage (not
/// only when a damaged page happens to be read) and says so in one line that
/// names the path and `fprep repair`; repair keeps every edit it cannot
/// prove synced; a full disk is one clear line, leaves no temporaries, and
/// never wedges the replica.
@Suite("damaged state and full disk", .serialized)
struct DamagedStateTests {
    // MARK: - helpers

    /// A replica of a small remote with `d/` materialized.
    static func replica(_ box: Sandbox, nodes: [String: Node], at path: String? = nil) throws -> (Remote, String) {
        let remote = try box.makeRemote(nodes: nodes)
        let replica = path ?? box.at("replica")
        _ = try box.clone(remote.path, replica)
        try box.fprepOK(["materialize", "d"], cwd: replica)
        // Materialize's last records stay in the log, as a sync's do (see
        // `CommitDurability`); the next command's close folds them into
        // the file, which the tests below damage.
        try box.fprepOK(["anchor"], cwd: replica)
        return (remote, replica)
    }

    static func remoteFile(_ box: Sandbox, _ remote: Remote, _ path: String) throws -> String {
        try box.gitOK(["show", "main:" + path], cwd: remote.path)
    }

    /// Overwrites the database's last page with garbage: the root of the
    /// newest table, which `anchor` never reads.
    static func overwriteLastPage(_ database: String) throws {
        let size = (try FileManager.default.attributesOfItem(atPath: database)[.size] as? NSNumber)?.intValue ?? 0
        let page = pageSize(database)
        guard let handle = FileHandle(forWritingAtPath: database) else { throw HarnessError("open \(database)") }
        try handle.seek(toOffset: UInt64(size - page))
        try handle.write(contentsOf: Data(repeating: 0xA5, count: page))
        try handle.close()
    }

    /// The state database's page size, from its header.
    static func pageSize(_ database: String) -> Int {
        guard let header = contents(database), header.count >= 100 else { return 4096 }
        let raw = Int(header[16]) << 8 | Int(header[17])
        return raw == 1 ? 65536 : raw
    }

    static func run(_ argv: [String]) throws -> RunResult {
        try Shell.run(argv)
    }

    /// What a full disk leaves behind that it must not: temporary files in
    /// the tree, fetch quarantines in `.fprep`, half-written packs in `.git`.
    static func leftovers(_ replica: String) -> [String] {
        let state = (try? FileManager.default.contentsOfDirectory(atPath: replica + "/.fprep")) ?? []
        let packs = (try? FileManager.default.contentsOfDirectory(atPath: replica + "/.git/objects/pack")) ?? []
        return temporaryFiles(replica) + state.filter { $0.hasPrefix("fetch-") }.map { ".fprep/" + $0 }
            + packs.filter { $0.hasPrefix("tmp_") }.map { ".git/objects/pack/" + $0 }
    }

    /// A 64 MiB ext4 file system (no reserved blocks: fprep runs as root
    /// here, and root may write into them) mounted at `box.at(name)` for
    /// `body`, unmounted whatever happens. `blockSize`: a page's size, as
    /// on large disks, or 1 KiB, as mkfs.ext4 makes for one under 512 MB
    /// (where SQLite's wal-index file gets holes; see CFprepSQLite).
    /// `journal`: as mkfs.ext4 makes it (blocks a command frees are taken
    /// again only once the journal commits), else none.
    static func withSmallDisk<T>(_ box: Sandbox, _ name: String = "small", blockSize: Int = 4096, journal: Bool = false,
                                 _ body: (String) throws -> T) throws -> T {
        let image = box.at(name + ".img"), mountPoint = box.at(name)
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        let features = journal ? [] : ["-O", "^has_journal"]
        for argv in [["/usr/bin/truncate", "-s", "64M", image], ["/sbin/mkfs.ext4", "-q", "-F", "-b", String(blockSize), "-m", "0"] + features + [image]] {
            let result = try run(argv)
            guard result.status == 0 else { throw HarnessError("cannot make the small file system: \(result)") }
        }
        let mounted = try run(["/bin/mount", "-o", "loop", image, mountPoint])
        guard mounted.status == 0 else {
            throw HarnessError("cannot mount a loop file system (the disk-full tests need root and loop devices): \(mounted)")
        }
        defer {
            if (try? run(["/bin/umount", mountPoint]))?.status != 0 { _ = try? run(["/bin/umount", "-l", mountPoint]) }
        }
        return try body(mountPoint)
    }

    /// Fills the file system of `folder` up to `leaving` bytes free.
    static func fill(_ folder: String, leaving: Int64, name: String = "filler") throws -> String {
        var info = statvfs()
        guard statvfs(folder, &info) == 0 else { throw HarnessError("statvfs \(folder)") }
        let free = Int64(info.f_bavail) * Int64(info.f_frsize)
        let filler = folder + "/" + name
        if leaving == 0 {
            // Every last block: written until the disk says it is full.
            _ = try run(["/bin/sh", "-c", "cat /dev/zero > '\(filler)'"])
            return filler
        }
        guard free - leaving >= 4096 else {
            try Data().write(to: URL(fileURLWithPath: filler))
            return filler
        }
        let result = try run(["/usr/bin/fallocate", "-l", String(free - leaving), filler])
        guard result.status == 0 else { throw HarnessError("fallocate: \(result)") }
        return filler
    }

    /// Text that compresses well: the fetch of it fits where its files do not.
    static func compressible(_ seed: String, _ size: Int) -> Data {
        var data = Data()
        var line = 0
        while data.count < size {
            data.append(contentsOf: Array("\(seed) line \(line % 50)\n".utf8))
            line += 1
        }
        return data.prefix(size)
    }

    // MARK: - damaged state

    @Test("a WAL deleted after a killed sync is found by the next command; repair keeps the edit and the next sync pushes it",
          arguments: [["-wal"], ["-wal", "-shm"]])
    func missingWALAfterKilledSync(deleted: [String]) throws {
        try withSandbox { box in
            let (remote, replica) = try Self.replica(box, nodes: ["d/a.txt": .text("a\n"), "d/b.txt": .text("b\n"), "c.txt": .text("c\n")])
            try Data("the user's edit\n".utf8).write(to: URL(fileURLWithPath: replica + "/d/a.txt"))
            // Killed while it waits on the push: the local commit is made
            // and recorded (in the WAL), nothing is pushed. (Not on the
            // fetch: it starts with the sync, beside the local commit.)
            let (wrapper, marker) = try ReconcileCrashTests.wrapper(in: box, trigger: " push ")
            let process = try box.spawnFprep(["sync"], cwd: replica, env: ["FPREP_GIT": wrapper])
            #expect(waitUntil { FileManager.default.fileExists(atPath: marker) }, "the sync never reached its push")
            let children = Shell.childProcesses(of: process.pid)
            _ = process.kill9()
            for child in children { kill(child, SIGKILL) }
            for suffix in deleted {
                let file = replica + "/.fprep/state.db" + suffix
                #expect(FileManager.default.fileExists(atPath: file))
                try FileManager.default.removeItem(atPath: file)
            }
            // The remote moves on meanwhile, and the user edits another file.
            try box.pushToRemote(remote, ["c.txt": Data("c from elsewhere\n".utf8)], message: "elsewhere")
            try Data("edited after the crash\n".utf8).write(to: URL(fileURLWithPath: replica + "/d/b.txt"))

            for command in [["status"], ["sync"], ["anchor"], ["ls"]] {
                expectOneLineError(try box.fprep(command, cwd: replica),
                                   mentioning: ["state.db", "fprep repair " + replica, "write-ahead log", "damaged"])
            }
            let repaired = try box.fprepJSON(["repair"], cwd: replica)
            #expect(repaired.string("unpushed") != nil, "repair must record the local commit as unpushed: \(repaired)")
            let status = try box.fprepJSON(["status"], cwd: replica)
            #expect(status.objects("changes").map { $0.string("path") } == ["d/b.txt"], "the edit made after the crash is a local change: \(status)")
            #expect(status.string("waitingToPush") != nil)

            try box.fprepOK(["sync"], cwd: replica)
            #expect(try Self.remoteFile(box, remote, "d/a.txt") == "the user's edit")
            #expect(try Self.remoteFile(box, remote, "d/b.txt") == "edited after the crash")
            #expect(try Self.remoteFile(box, remote, "c.txt") == "c from elsewhere")
            let final = try box.fprepJSON(["status"], cwd: replica)
            #expect(final.objects("changes").isEmpty && final.string("waitingToPush") == nil, "\(final)")
        }
    }

    /// Another SQLite program that opens the database (the sqlite3 shell,
    /// say) folds the log into the file and deletes the log and its index
    /// when it closes: nothing is lost. (After a sync the log still holds
    /// its last record, which does not wait for the disk; see
    /// `CommitDurability`.) Python's sqlite3 module is that program here.
    @Test("a log and index removed after a clean exit (another SQLite program closed the database) are no damage")
    func logClosedByAnotherProgram() throws {
        try withSandbox { box in
            let (remote, replica) = try Self.replica(box, nodes: ["d/a.txt": .text("a\n")])
            try Data("edit\n".utf8).write(to: URL(fileURLWithPath: replica + "/d/a.txt"))
            try box.fprepOK(["sync"], cwd: replica)
            let state = replica + "/.fprep/state.db"
            let reader = try Shell.run(["/usr/bin/python3", "-c",
                                        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT count(*) FROM meta').fetchall(); c.close()",
                                        state])
            #expect(reader.status == 0, "\(reader)")
            #expect(!exists(state + "-wal") && !exists(state + "-shm"), "the other program left the log: the test shows nothing")
            try box.fprepOK(["status"], cwd: replica)
            #expect(try box.fprepOK(["anchor"], cwd: replica).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
                    == box.gitOK(["rev-parse", "main"], cwd: remote.path))
            try box.fprepOK(["sync"], cwd: replica)
        }
    }

    @Test("a truncated state database is found by the next command, even one that reads only the first pages")
    func truncatedDatabase() throws {
        try withSandbox { box in
            let (_, replica) = try Self.replica(box, nodes: ["d/a.txt": .text("a\n")])
            let database = replica + "/.fprep/state.db"
            let size = (try FileManager.default.attributesOfItem(atPath: database)[.size] as? NSNumber)?.intValue ?? 0
            let page = Self.pageSize(database)
            // The last page goes: the root of the newest table, which `anchor` never reads.
            #expect(truncate(database, off_t(size - page)) == 0)
            for command in [["anchor"], ["status"], ["materialize", "d"]] {
                expectOneLineError(try box.fprep(command, cwd: replica), mentioning: [database, "truncated", "fprep repair " + replica])
            }
            let repaired = try box.fprepJSON(["repair"], cwd: replica)
            #expect(repaired.string("movedAside") != nil)
            #expect(try box.fprepJSON(["status"], cwd: replica).int("materialized") == 1)
        }
    }

    @Test("a page overwritten with garbage is found by a command that never reads it")
    func garbagePage() throws {
        try withSandbox { box in
            let (_, replica) = try Self.replica(box, nodes: ["d/a.txt": .text("a\n")])
            let database = replica + "/.fprep/state.db"
            try box.fprepOK(["anchor"], cwd: replica)  // the file as it is now was checked once
            try Self.overwriteLastPage(database)
            expectOneLineError(try box.fprep(["anchor"], cwd: replica), mentioning: [database, "damaged", "fprep repair"])
            expectOneLineError(try box.fprep(["changes", "--from", "0000000000000000000000000000000000000000"], cwd: replica),
                               mentioning: [database, "fprep repair"])
            try box.fprepOK(["repair"], cwd: replica)
            try box.fprepOK(["anchor"], cwd: replica)
        }
    }

    @Test("a command that wrote the state database leaves it as checked (the next command scans no page); a page overwritten after is still found")
    func ownWritesNeedNoScan() throws {
        try withSandbox { box in
            let (_, replica) = try Self.replica(box, nodes: ["d/a.txt": .text("a\n"), "d/b.txt": .text("b\n")])
            let database = replica + "/.fprep/state.db"
            func stampNow() -> String {
                var info = stat()
                guard stat(database, &info) == 0 else { return "missing" }
                return "\(info.st_ino) \(info.st_size) \(info.st_ctim.tv_sec) \(info.st_ctim.tv_nsec)\n"
            }
            func recorded() -> String { (try? String(contentsOfFile: database + "-checked", encoding: .utf8)) ?? "none" }
            try box.fprepOK(["anchor"], cwd: replica)
            func expectLeftChecked(_ command: [String]) throws {
                let before = stampNow()
                try box.fprepOK(command, cwd: replica)
                #expect(stampNow() != before, "\(command) wrote the database")
                #expect(recorded() == stampNow(), "\(command): \(recorded()) against \(stampNow())")
            }
            try expectLeftChecked(["evict", "d/a.txt"])
            // Materialize leaves its last records in the log, for the next
            // command's close to fold in (`CommitDurability.whenWrittenOut`).
            try box.fprepOK(["materialize", "d/a.txt"], cwd: replica)
            try box.fprepOK(["anchor"], cwd: replica)
            try expectLeftChecked(["pin", "d"])
            try expectLeftChecked(["unpin", "d"])
            // Another program touches the file while a writing command
            // closes it: that command's close leaves it to be scanned.
            let gate = box.at("close-gate")
            #expect(FileManager.default.createFile(atPath: gate, contents: nil))
            let pin = try box.spawnFprep(["pin", "d"], cwd: replica, env: ["FPREP_TEST_BEFORE_CLOSE_GATE": gate])
            #expect(waitUntil { exists(gate + ".waiting") }, "the pin waits before its close: \(pin.stderrSoFar)")
            #expect(chmod(database, 0o640) == 0 && chmod(database, 0o644) == 0)
            let touched = stampNow()
            unlink(gate)
            #expect(pin.wait(timeout: patienceSeconds).status == 0)
            #expect(recorded() != touched && recorded() != stampNow(), "not recorded as checked: \(recorded())")

            try Self.overwriteLastPage(database)
            expectOneLineError(try box.fprep(["anchor"], cwd: replica), mentioning: [database, "damaged", "fprep repair"])
        }
    }

    @Test("a state folder that cannot be written: one line naming it, no SQLite message")
    func readOnlyState() throws {
        try withSandbox { box in
            let (_, replica) = try Self.replica(box, nodes: ["d/a.txt": .text("a\n")])
            try Data("edit\n".utf8).write(to: URL(fileURLWithPath: replica + "/d/a.txt"))
            // As root, mode bits do not stop a write: the immutable flag does.
            for target in [replica + "/.fprep/state.db", replica + "/.fprep"] {
                let set = try Self.run(["/usr/bin/chattr", "+i", target])
                guard set.status == 0 else { throw HarnessError("chattr: \(set)") }
                defer { _ = try? Self.run(["/usr/bin/chattr", "-i", target]) }
                for command in [["sync"], ["status"], ["materialize", "d"], ["repair"]] {
                    let result = try box.fprep(command, cwd: replica)
                    expectOneLineError(result, mentioning: [replica + "/.fprep", "cannot write"])
                    #expect(!result.stderr.contains("readonly database") && !result.stderr.contains("CocoaError"), "\(result)")
                }
            }
            try box.fprepOK(["sync"], cwd: replica)
        }
    }

    @Test("two repairs at once: one rebuilds, the other finds the fresh database sound and keeps it")
    func twoRepairs() throws {
        try withSandbox { box in
            let (_, replica) = try Self.replica(box, nodes: ["d/a.txt": .text("a\n")])
            let database = replica + "/.fprep/state.db"
            #expect(truncate(database, 1000) == 0)
            // Both start while the lock is held, so they meet at it.
            let mark = box.at("holding")
            try Data().write(to: URL(fileURLWithPath: mark))
            let holder = try box.spawn(["/usr/bin/flock", "-x", replica + "/.fprep/lock", "/bin/sh", "-c",
                                        "while [ -e '\(mark)' ]; do sleep 0.02; done"])
            let lock = replica + "/.fprep/lock"
            #expect(waitUntil { Self.lockEntries(lock).count == 1 })
            let first = try box.spawnFprep(["repair"], cwd: replica)
            let second = try box.spawnFprep(["repair"], cwd: replica)
            #expect(waitUntil { Self.lockEntries(lock).count == 3 }, "both repairs wait for the lock: \(Self.lockEntries(lock))")
            try FileManager.default.removeItem(atPath: mark)
            _ = holder.wait(timeout: 60)
            let results = [first.wait(timeout: 60), second.wait(timeout: 60)]
            for result in results { #expect(result.status == 0, "\(result)") }
            let aside = try FileManager.default.contentsOfDirectory(atPath: replica + "/.fprep").filter { $0.hasPrefix("state.db.broken-") && !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") }
            #expect(aside.count == 1, "only the damaged database is moved aside: \(aside)")
            try box.fprepOK(["status"], cwd: replica)
            try box.fprepOK(["sync"], cwd: replica)
        }
    }

    /// The flock entries of /proc/locks (held and waited for) on `file`.
    static func lockEntries(_ file: String) -> [String] {
        guard let inode = lstatInfo(file)?.inode else { return [] }
        let text = (try? String(contentsOfFile: "/proc/locks", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init).filter { line in
            line.contains("FLOCK") && line.split(separator: " ").contains { $0.hasSuffix(":\(inode)") }
        }
    }

    // MARK: - full disk

    @Test("disk full during materialize: one line, nothing left behind, status works, and it succeeds once there is space")
    func diskFullMaterialize() throws {
        try withSandbox { box in
            try Self.withSmallDisk(box) { disk in
                var nodes: [String: Node] = ["d/small.txt": .text("small\n")]
                for i in 0..<3 { nodes["big/f\(i).txt"] = .file(Self.compressible("big \(i)", 400_000)) }
                let (_, replica) = try Self.replica(box, nodes: nodes, at: disk + "/replica")
                let filler = try Self.fill(disk, leaving: 300_000)
                let full = try box.fprep(["materialize", "big"], cwd: replica)
                expectOneLineError(full, mentioning: ["disk is full", replica])
                #expect(!full.stderr.contains("reach"), "\(full)")
                #expect(Self.leftovers(replica).isEmpty, "left behind: \(Self.leftovers(replica))")
                let status = try box.fprepJSON(["status"], cwd: replica)
                #expect(status.int("dataless") == 3 && status.objects("changes").isEmpty, "\(status)")
                try FileManager.default.removeItem(atPath: filler)
                try box.fprepOK(["materialize", "big"], cwd: replica)
                #expect(contents(replica + "/big/f1.txt") == Self.compressible("big 1", 400_000))
            }
        }
    }

    @Test("disk full while a sync writes: one line; status and evict still work; after freeing space the sync completes with the edit",
          arguments: [4096, 1024])
    func diskFullSyncApply(blockSize: Int) throws {
        try withSandbox { box in
            try Self.withSmallDisk(box, blockSize: blockSize) { disk in
                var nodes: [String: Node] = ["d/notes.txt": .text("notes\n")]
                for i in 0..<3 {
                    nodes["d/f\(i).txt"] = .file(Self.compressible("old \(i)", 300_000))
                    nodes["e/e\(i).txt"] = .file(Self.compressible("e \(i)", 300_000))
                }
                let (remote, replica) = try Self.replica(box, nodes: nodes, at: disk + "/replica")
                try box.fprepOK(["materialize", "e"], cwd: replica)
                try Data("my notes\n".utf8).write(to: URL(fileURLWithPath: replica + "/d/notes.txt"))
                var changed: [String: Data] = [:]
                for i in 0..<3 { changed["d/f\(i).txt"] = Self.compressible("new \(i)", 400_000) }
                try box.pushToRemote(remote, changed, message: "bigger")
                let filler = try Self.fill(disk, leaving: 350_000)

                let full = try box.fprep(["sync"], cwd: replica)
                expectOneLineError(full, mentioning: ["disk is full", replica, "evict"])
                #expect(Self.leftovers(replica).isEmpty, "left behind: \(Self.leftovers(replica))")
                // And then not a byte free (something else filled the disk).
                let rest = try Self.fill(disk, leaving: 0, name: "filler-rest")
                // Not wedged: what reads and what frees space still run.
                for command in [["status"], ["ls"], ["anchor"]] {
                    let result = try box.fprep(command, cwd: replica)
                    #expect(result.status == 0, "\(command) with a sync waiting for space: \(result)")
                }
                let status = try box.fprepJSON(["status"], cwd: replica)
                #expect((status.string("unfinished") ?? "").contains("disk is full"), "status says why a sync waits: \(status)")
                let evicted = try box.fprepJSON(["evict", "e"], cwd: replica)
                #expect(evicted.strings("evicted").count == 3, "\(evicted)")
                for file in [filler, rest] { try FileManager.default.removeItem(atPath: file) }
                try box.fprepOK(["sync"], cwd: replica)
                #expect(try Self.remoteFile(box, remote, "d/notes.txt") == "my notes")
                for (path, data) in changed { #expect(contents(replica + "/" + path) == data, "\(path)") }
                let final = try box.fprepJSON(["status"], cwd: replica)
                #expect(final.objects("changes").isEmpty && final.string("unfinished") == nil, "\(final)")
                #expect(Self.leftovers(replica).isEmpty)
            }
        }
    }

    /// Each command's first connection truncates SQLite's wal-index file
    /// and extends it again a byte per page: with 1 KiB blocks the file
    /// then has holes, and a store into one on a full disk was a SIGBUS in
    /// every command (the evict that would free space among them).
    @Test("a full disk with 1 KiB blocks: no command crashes (sync says the disk is full, evict frees space), then the sync pushes the edit")
    func diskFullWithSmallBlocks() throws {
        try withSandbox { box in
            try Self.withSmallDisk(box, blockSize: 1024, journal: true) { disk in
                var nodes: [String: Node] = ["d/notes.txt": .text("notes\n")]
                for i in 0..<20 { nodes["e/e\(i).bin"] = .file(Data((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ i) })) }
                let (remote, replica) = try Self.replica(box, nodes: nodes, at: disk + "/replica")
                try box.fprepOK(["materialize", "e"], cwd: replica)
                try Data("my notes\n".utf8).write(to: URL(fileURLWithPath: replica + "/d/notes.txt"))
                // No hole in the wal-index file after a command's first
                // connection made it again: no store through its mapping
                // can need a block the disk does not have.
                try box.fprepOK(["status"], cwd: replica)
                let shm = lstatInfo(replica + "/.fprep/state.db-shm")
                #expect(shm.map { $0.blocks * 512 >= $0.size && $0.size > 0 } == true, "holes in the wal-index file: \(String(describing: shm))")
                let filler = try Self.fill(disk, leaving: 0)
                try box.fprepOK(["status"], cwd: replica)
                // It may find the few blocks the status freed, or none.
                let full = try box.fprep(["sync"], cwd: replica)
                #expect(!looksLikeCrash(full.stderr) && full.status != 135, "\(full)")
                if full.status != 0 { expectOneLineError(full, mentioning: ["disk is full", replica]) }
                let evicted = try box.fprep(["evict", "e"], cwd: replica)
                #expect(!looksLikeCrash(evicted.stderr) && evicted.status == 0, "\(evicted)")
                try FileManager.default.removeItem(atPath: filler)
                try box.fprepOK(["sync"], cwd: replica)
                #expect(try Self.remoteFile(box, remote, "d/notes.txt") == "my notes")
            }
        }
    }

    @Test("disk full during the fetch of a sync: says the disk is full, not that the remote is unreachable; fetched packs removed")
    func diskFullFetch() throws {
        try withSandbox { box in
            try Self.withSmallDisk(box) { disk in
                let (remote, replica) = try Self.replica(box, nodes: ["d/a.txt": .text("a\n")], at: disk + "/replica")
                // Trees of many new files do not compress away.
                var added: [String: Data] = [:]
                for i in 0..<3000 { added["n\(i % 30)/\(UUID().uuidString)-\(i).txt"] = Data("\(i)\n".utf8) }
                try box.pushToRemote(remote, added, message: "many")
                let filler = try Self.fill(disk, leaving: 60_000)
                let full = try box.fprep(["sync"], cwd: replica)
                expectOneLineError(full, mentioning: ["disk is full"])
                #expect(!full.stderr.contains("reach"), "\(full)")
                #expect(Self.leftovers(replica).isEmpty, "left behind: \(Self.leftovers(replica))")
                try box.fprepOK(["status"], cwd: replica)
                try FileManager.default.removeItem(atPath: filler)
                try Data("local\n".utf8).write(to: URL(fileURLWithPath: replica + "/d/a.txt"))
                try box.fprepOK(["sync"], cwd: replica)
                #expect(try Self.remoteFile(box, remote, "d/a.txt") == "local")
                #expect(try box.fprepJSON(["status"], cwd: replica).int("items") == 3001)
            }
        }
    }

    @Test("disk full during a clone: one line that says so, nothing left of the clone; it succeeds once there is space")
    func diskFullClone() throws {
        try withSandbox { box in
            try Self.withSmallDisk(box) { disk in
                var nodes: [String: Node] = [:]
                for i in 0..<3000 { nodes["n\(i % 30)/\(UUID().uuidString)-\(i).txt"] = .text("\(i)\n") }
                let remote = try box.makeRemote(nodes: nodes)
                let filler = try Self.fill(disk, leaving: 60_000)
                let replica = disk + "/replica"
                let full = try box.fprep(["clone", remote.path, replica])
                expectOneLineError(full, mentioning: ["disk is full at '\(disk)'"])
                #expect(!full.stderr.contains("reach") && !full.stderr.contains("check the URL"), "\(full)")
                #expect(!FileManager.default.fileExists(atPath: replica), "the failed clone's folder is removed")
                try FileManager.default.removeItem(atPath: filler)
                _ = try box.clone(remote.path, replica)
                #expect(try box.fprepJSON(["status"], cwd: replica).int("items") == 3000)
            }
        }
    }

    @Test("disk full while a conflict is laid out: both versions survive once there is space")
    func diskFullConflict() throws {
        try withSandbox { box in
            try Self.withSmallDisk(box) { disk in
                let (remote, replica) = try Self.replica(box, nodes: ["d/doc.bin": .file(Self.compressible("base", 200_000))],
                                                         at: disk + "/replica")
                let mine = Self.compressible("mine", 500_000), theirs = Self.compressible("theirs", 500_000)
                try mine.write(to: URL(fileURLWithPath: replica + "/d/doc.bin"))
                try box.pushToRemote(remote, ["d/doc.bin": theirs], message: "theirs")
                // Room for the fetch and the merge, not for the conflict copy's content.
                let filler = try Self.fill(disk, leaving: 400_000)
                expectOneLineError(try box.fprep(["sync"], cwd: replica), mentioning: ["disk is full"])
                #expect(Self.leftovers(replica).isEmpty, "left behind: \(Self.leftovers(replica))")
                try box.fprepOK(["status"], cwd: replica)
                try FileManager.default.removeItem(atPath: filler)
                try box.fprepOK(["sync"], cwd: replica)
                #expect(contents(replica + "/d/doc.bin") == theirs)
                let files = try box.gitOK(["ls-tree", "-r", "--name-only", "main"], cwd: remote.path).split(separator: "\n").map(String.init)
                #expect(files.count == 2, "the conflict copy reached the remote: \(files)")
                for file in files {
                    let remoteContent = try box.git(["show", "main:" + file], cwd: remote.path).stdoutData
                    #expect(remoteContent == (file == "d/doc.bin" ? theirs : mine), "\(file) on the remote")
                    #expect(FileManager.default.fileExists(atPath: replica + "/" + file), "\(file) in the replica")
                }
            }
        }
    }
}
