import Foundation
import Glibc
import Testing

// --dry-run says what a command would do and changes nothing: not the
// files, not the index, not the anchor, not the remote.

@Suite("dry runs")
struct DryRunTests {
    /// What a dry run must leave as it was.
    static func state(_ box: Sandbox, _ replica: String, _ remote: String) throws -> [String] {
        let files = snapshot(replica, skipping: [".fprep", ".git"]).map { "\($0.key) \($0.value)" }.sorted()
        let index = try box.gitOK(["ls-files", "-s", "-v"], cwd: replica)
        let anchor = try box.fprepJSON(["anchor"], cwd: replica).string("anchor") ?? ""
        return files + [index, anchor, try box.gitOK(["rev-parse", "main"], cwd: remote)]
    }

    @Test("sync --dry-run lists the local changes and the remote's, and changes nothing")
    func syncDryRun() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica"), full = box.at("full")
            _ = try box.clone(remote.path, replica)
            try box.gitOK(["clone", "-q", remote.path, full])
            try box.sh("echo remote > r.txt && git add r.txt && git mv run.sh tools.sh && git commit -qm r && git push -q origin main", cwd: full)
            try box.sh("echo mine > mine.txt && rm bin.dat", cwd: replica)
            let before = try Self.state(box, replica, remote.path)
            let preview = try box.fprepJSON(["sync", "--dry-run"], cwd: replica)
            let local = preview.objects("localChanges").map { "\($0.string("kind") ?? "") \($0.string("path") ?? "")" }
            #expect(Set(local) == ["added mine.txt", "deleted bin.dat"], "\(preview)")
            let incoming = preview.objects("incoming").map { "\($0.string("kind") ?? "") \($0.string("path") ?? "")" }
            #expect(Set(incoming) == ["added r.txt", "moved tools.sh"], "\(preview)")
            #expect(try Self.state(box, replica, remote.path) == before, "a dry run changed something")
            let human = try box.fprepOK(["sync", "--dry-run"], cwd: replica)
            #expect(human.stdout.contains("would commit 2 local changes") && human.stdout.contains("would bring in 2 remote changes"),
                    "\(human.stdout)")
            // The real sync does what the dry run said.
            try box.fprepOK(["sync"], cwd: replica)
            let tree = try box.remoteTree(remote.path)
            #expect(tree["mine.txt"] != nil && tree["bin.dat"] == nil && tree["r.txt"] != nil && tree["tools.sh"] != nil, "\(tree)")
        }
    }

    @Test("evict --dry-run lists what would go and the space freed; a hard-linked file is refused; nothing changes")
    func evictDryRun() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "bin.dat", "a.txt", "docs"], cwd: replica)
            #expect(link(replica + "/a.txt", box.at("outside.txt")) == 0)
            let before = try Self.state(box, replica, remote.path)
            let result = try box.fprep(["evict", "--dry-run", "--json", "bin.dat", "a.txt"], cwd: replica)
            let report = try JSONSerialization.jsonObject(with: result.stdoutData) as? [String: Any] ?? [:]
            #expect(report.strings("evicted") == ["bin.dat"], "\(report)")
            #expect(report.objects("refused").map { $0.string("path") } == ["a.txt"], "\(report)")
            #expect((report.int("bytesFreed") ?? 0) >= 10_000, "\(report)")
            #expect(try Self.state(box, replica, remote.path) == before, "a dry run changed something")
            #expect(xattrString(replica + "/bin.dat", "user.fprep.state") == nil, "bin.dat is still materialized")
        }
    }
}
