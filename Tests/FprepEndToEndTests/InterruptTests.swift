import Foundation
import Glibc
import Testing

// Ctrl-C (SIGINT) or SIGTERM in the middle of long work: one line, exit
// 128 + the signal, nothing half-done reported done, and the next command
// finishes or undoes the rest.

@Suite("interrupts")
struct InterruptTests {
    @Test("SIGINT during a materialize's fetch: one line, exit 130; status is clean and materialize then succeeds", arguments: [SIGINT, SIGTERM])
    func interruptedMaterialize(signal: Int32) throws {
        try withSandbox { box in
            let big = pseudoRandomBytes(48 << 20, seed: 9)
            let remote = try box.makeRemote(nodes: ["big.bin": .file(big), "small.txt": .text("small\n")])
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let running = try box.spawnFprep(["materialize", "big.bin", "small.txt"], cwd: replica)
            // Once its fetch is under way (its quarantine exists), interrupt it.
            let fetching = waitUntil {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: replica + "/.fprep")) ?? []
                return names.contains { $0.hasPrefix("fetch-") } || !running.isRunning
            }
            #expect(fetching)
            running.signal(signal)
            let result = running.wait(timeout: 30)
            if result.status == 0 {
                // It finished first on a fast machine: nothing to check but the content.
                #expect(contents(replica + "/big.bin") == big)
                return
            }
            expectStoppedAsCtrlCShould(result, signal)
            // The next command settles what the journal left: no quarantine,
            // the file a placeholder or whole, never part of it.
            let status = try box.fprepJSON(["status"], cwd: replica)
            #expect(status.objects("changes").isEmpty, "\(status)")
            let names = (try? FileManager.default.contentsOfDirectory(atPath: replica + "/.fprep")) ?? []
            #expect(!names.contains { $0.hasPrefix("fetch-") }, "a quarantine was left: \(names)")
            let onDisk = contents(replica + "/big.bin") ?? Data()
            #expect(onDisk == big || xattrString(replica + "/big.bin", "user.fprep.state") == "dataless")
            try box.fprepOK(["materialize", "big.bin", "small.txt"], cwd: replica)
            #expect(contents(replica + "/big.bin") == big)
            #expect(contents(replica + "/small.txt") == Data("small\n".utf8))
        }
    }

    /// Ctrl-C on a terminal reaches fprep and its git children at once.
    /// Sent once the placeholders are being made (the longest phase), or
    /// earlier if the clone is that quick; any moment must do.
    @Test("Ctrl-C during a clone's layout: one line, exit 130; the same clone command then finishes it", arguments: [SIGINT, SIGTERM])
    func interruptedClone(signal: Int32) throws {
        try withSandbox { box in
            let remote = try box.makeRemote(nodes: manyFiles(folders: 40, perFolder: 100, size: 0))
            let replica = box.at("replica")
            let running = try box.spawnFprep(["clone", remote.path, replica], newProcessGroup: true)
            let layingOut = waitUntil {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? []
                return names.contains { $0.hasPrefix("d") } || !running.isRunning
            }
            #expect(layingOut)
            running.signalGroup(signal)
            let result = running.wait(timeout: 60)
            if result.status != 0 {
                expectStoppedAsCtrlCShould(result, signal)
                try box.fprepOK(["clone", remote.path, replica])
            }
            let status = try box.fprepJSON(["status"], cwd: replica)
            #expect(status.int("items") == 4000 && status.int("dataless") == 4000, "\(status)")
            #expect(status.objects("changes").isEmpty)
            #expect(walk(replica, skipping: [".git", ".fprep"]).count == 4000 + 40)
            try expectGitClean(box, replica)
        }
    }

    /// A sync interrupted while it lays out a large incoming change (or
    /// fetches the new content of a materialized file): nothing is lost, the
    /// replica is one anchor's tree exactly, and the next sync finishes.
    @Test("Ctrl-C during a sync: one line, exit 130; the replica is one anchor's tree, the next sync finishes", arguments: [SIGINT, SIGTERM])
    func interruptedSync(signal: Int32) throws {
        try withSandbox { box in
            var nodes = manyFiles(folders: 4, perFolder: 10, size: 0)
            nodes["big.bin"] = .file(pseudoRandomBytes(8 << 20, seed: 4))
            let remote = try box.makeRemote(nodes: nodes)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "big.bin", "d00"], cwd: replica)

            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            for i in 0..<3000 {
                let path = work + "/new\(i % 30)/n\(i).txt"
                try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                try Data("new \(i)\n".utf8).write(to: URL(fileURLWithPath: path))
            }
            let bigger = pseudoRandomBytes(16 << 20, seed: 5)
            try bigger.write(to: URL(fileURLWithPath: work + "/big.bin"))
            try box.gitOK(["add", "-A"], cwd: work)
            try box.gitOK(["commit", "-q", "-m", "a large change"], cwd: work)
            try box.gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)
            let old = remote.commit, new = try box.gitOK(["rev-parse", "HEAD"], cwd: work)

            let running = try box.spawnFprep(["sync", "--incoming"], cwd: replica, newProcessGroup: true)
            let underWay = waitUntil {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: replica)) ?? []
                let state = (try? FileManager.default.contentsOfDirectory(atPath: replica + "/.fprep")) ?? []
                return names.contains { $0.hasPrefix("new") } || state.contains { $0.hasPrefix("fetch-") } || !running.isRunning
            }
            #expect(underWay)
            running.signalGroup(signal)
            let result = running.wait(timeout: 60)
            if result.status != 0 {
                expectStoppedAsCtrlCShould(result, signal)
                _ = try SyncCrashTests.expectExactly(box, replica, anchors: [old, new], what: "a sync interrupted")
            }
            try box.fprepOK(["sync"], cwd: replica)
            let anchor = try SyncCrashTests.expectExactly(box, replica, anchors: [new], what: "an interrupted sync, then synced")
            #expect(anchor == new)
            #expect(contents(replica + "/big.bin") == bigger, "the materialized file gets its new content")
            #expect(contents(replica + "/d00/f000.bin") == nodes["d00/f000.bin"].flatMap { if case .file(let data, _) = $0 { data } else { nil } },
                    "materialized content stays")
        }
    }
}

/// A command stopped by Ctrl-C (or SIGTERM): the shell's status for the
/// signal, and one line that says what was kept.
private func expectStoppedAsCtrlCShould(_ result: RunResult, _ signal: Int32,
                                        sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(result.status == 128 + signal, "\(result)", sourceLocation: sourceLocation)
    #expect(result.stderrLines.count == 1 && result.stderr.contains("interrupted"), "\(result)", sourceLocation: sourceLocation)
}
