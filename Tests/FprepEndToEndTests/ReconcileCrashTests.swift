import Foundation
import FprepTestSupport
import Testing

/// `fprep sync` with local changes killed at each step: after the local
/// commit, during the fetch, during the merge's content fetch, during the
/// layout, during the push. The next command completes or rolls back, the
/// replica and the remote hold every byte the user wrote, and a second sync
/// converges.
@Suite("reconcile crash safety", .serialized)
struct ReconcileCrashTests {
    /// A git wrapper that, for the first git command whose arguments contain
    /// `trigger`, touches `marker` and sleeps, so a test can kill fprep at
    /// exactly that step.
    static func wrapper(in box: Sandbox, trigger: String) throws -> (path: String, marker: String) {
        let path = box.at("git-wrapper-" + String(trigger.filter { $0.isLetter }))
        let marker = path + ".reached"
        try writeExecutable("""
            #!/bin/sh
            case "$*" in *"\(trigger)"*)
              if [ ! -e "\(marker)" ]; then touch "\(marker)"; sleep 30; fi ;;
            esac
            exec \(Binaries.git) "$@"
            """, to: path)
        return (path, marker)
    }

    @Test("kill -9 of a reconciling sync at each step: nothing written is lost, a second sync converges")
    func killReconcile() throws {
        try withSandbox { box in
            var nodes = manyFiles(folders: 6, perFolder: 30, size: 100)
            nodes["both.txt"] = .text("1\n2\n3\n4\n5\n6\n")
            let remote = try box.makeRemote(nodes: nodes)
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])

            // Each case: a fresh replica with local edits, the remote changed meanwhile.
            let steps: [(String, String?)] = [("fetch", " fetch "), ("merge content fetch", "--stdin"), ("push", " push "),
                                              ("layout (timed)", nil), ("early (timed)", nil)]
            for (i, (step, trigger)) in steps.enumerated() {
                let replica = box.at("r\(i)")
                _ = try box.clone(remote.path, replica)
                try box.fprepOK(["materialize", "both.txt", "d00"], cwd: replica)
                // Local edits: a change that merges, a new file, a deletion, a move, an edit of a materialized file.
                try Data("1 local\n2\n3\n4\n5\n6\n".utf8).write(to: URL(fileURLWithPath: replica + "/both.txt"))
                try Data("new here \(i)\n".utf8).write(to: URL(fileURLWithPath: replica + "/new-\(i).txt"))
                let deleted = String(format: "d01/f%03d.bin", i), moved = String(format: "d02/f%03d.bin", i)
                let editedFile = String(format: "d00/f%03d.bin", 10 + i)
                try FileManager.default.removeItem(atPath: replica + "/" + deleted)
                try FileManager.default.moveItem(atPath: replica + "/" + moved, toPath: replica + "/d02/moved-\(i).bin")
                try Data("edited \(editedFile) \(i)\n".utf8).write(to: URL(fileURLWithPath: replica + "/" + editedFile))
                // The remote moves on: another device's edit of both.txt and a new file.
                let content = try String(contentsOfFile: work + "/both.txt", encoding: .utf8)
                let lines = content.split(separator: "\n", omittingEmptySubsequences: false)
                var edited = lines.map(String.init)
                edited[5] = "6 remote \(i)"
                try Data(edited.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: work + "/both.txt"))
                try Data("remote \(i)\n".utf8).write(to: URL(fileURLWithPath: work + "/remote-\(i).txt"))
                try box.gitOK(["add", "-A"], cwd: work)
                try box.gitOK(["commit", "-q", "-m", "remote \(i)"], cwd: work)
                try box.gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)
                try box.gitOK(["pull", "-q", "--rebase=false", "origin", "main"], cwd: work)

                var env: [String: String] = [:]
                var marker: String?
                if let trigger {
                    let (path, reached) = try Self.wrapper(in: box, trigger: trigger)
                    env["FPREP_GIT"] = path
                    marker = reached
                }
                let process = try box.spawnFprep(["sync"], cwd: replica, env: env)
                if let marker {
                    // A sync that ends before the step is a failure too: say how it ended.
                    let reached = waitUntil { FileManager.default.fileExists(atPath: marker) || !process.isRunning }
                        && FileManager.default.fileExists(atPath: marker)
                    #expect(reached, "\(step): the sync never reached its \(step): \(process.isRunning ? "still running" : "it ended"); stdout: \(process.stdoutSoFar) stderr: \(process.stderrSoFar)")
                } else {
                    sleepSeconds(step.hasPrefix("early") ? 0.05 : 0.35)
                }
                // fprep and whatever git command it was waiting on.
                let children = Shell.childProcesses(of: process.pid)
                _ = process.kill9()
                for child in children { kill(child, SIGKILL); for grandchild in Shell.childProcesses(of: child) { kill(grandchild, SIGKILL) } }
                let what = "sync killed during \(step)"

                // The next command recovers; then sync twice converges.
                let status = try box.fprep(["status", "--json", "--no-wait"], cwd: replica, timeout: 60)
                #expect(status.status == 0, "\(what): status after the crash: \(status)")
                try box.fprepOK(["sync"], cwd: replica)
                let again = try box.fprepJSON(["sync"], cwd: replica)
                #expect(again.objects("localChanges").isEmpty && again.string("pushed") == nil, "\(what): a second sync must have nothing to do: \(again)")
                let final = try box.fprepJSON(["status"], cwd: replica)
                #expect(final.objects("changes").isEmpty && final.string("waitingToPush") == nil, "\(what): \(final)")

                // Every byte written, on both sides.
                let head = try box.gitOK(["rev-parse", "main"], cwd: remote.path).trimmingCharacters(in: .whitespacesAndNewlines)
                #expect(final.string("anchor") == head, "\(what): the replica's anchor is the remote's main")
                func remoteFile(_ path: String) throws -> String {
                    try box.git(["show", "main:" + path], cwd: remote.path).stdout
                }
                #expect(try remoteFile("both.txt") == "1 local\n2\n3\n4\n5\n6 remote \(i)\n", "\(what): merged")
                #expect(try remoteFile("new-\(i).txt") == "new here \(i)\n")
                #expect(try remoteFile(editedFile) == "edited \(editedFile) \(i)\n")
                #expect(try remoteFile("remote-\(i).txt") == "remote \(i)\n")
                #expect(try box.git(["cat-file", "-e", "main:" + deleted], cwd: remote.path).status != 0, "\(what): the deletion")
                #expect(try box.git(["cat-file", "-e", "main:d02/moved-\(i).bin"], cwd: remote.path).status == 0, "\(what): the move")
                #expect(contents(replica + "/both.txt") == Data("1 local\n2\n3\n4\n5\n6 remote \(i)\n".utf8), "\(what): on disk")
                #expect(contents(replica + "/new-\(i).txt") == Data("new here \(i)\n".utf8))
                #expect(temporaryFiles(replica).isEmpty, "\(what): temporary files left")
                try box.gitOK(["pull", "-q", "--rebase=false", "origin", "main"], cwd: work)
            }
        }
    }
}
