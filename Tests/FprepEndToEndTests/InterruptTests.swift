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
            #expect(result.status == 128 + signal, "\(result)")
            #expect(result.stderrLines.count == 1 && result.stderr.contains("interrupted"), "\(result)")
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
}
