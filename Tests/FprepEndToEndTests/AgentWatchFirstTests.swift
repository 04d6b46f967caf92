import Foundation
import Testing

// Every placeholder a command makes while the agent serves is watched
// before a program can reach it (`AgentLink`): read at once after the
// command, it reads whole, never zeros. Before, the agent found new
// placeholders only when it noticed the index change, and a read in
// between read zeros.

@Suite("placeholders made while the agent serves are watched first", .serialized)
struct AgentWatchFirstTests {
    @Test("evict, sync (new, changed, back to placeholder), revert, and the disk budget's evictions: read at once, whole")
    func everyMakerAsksFirst() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica"), other = box.at("other")
            _ = try box.clone(remote.path, replica)
            _ = try box.clone(remote.path, other)
            let agent = try box.startAgent(replica)
            // The reads below run in one shell right after each command:
            // no time for the agent to notice the index by itself.
            func readsWhole(_ command: String, _ files: [String: Data], _ what: String) throws {
                let cmp = files.keys.sorted().map { "cat \($0) > ../read-\($0.replacingOccurrences(of: "/", with: "_"))" }.joined(separator: " && ")
                try box.sh("\(Binaries.fprep) \(command) > /dev/null && \(cmp)", cwd: replica)
                for (path, expected) in files {
                    let read = contents(box.at("read-" + path.replacingOccurrences(of: "/", with: "_")))
                    #expect(read == expected, "\(what): \(path) read \(read?.count ?? -1) bytes, \(read == expected ? "" : "not its content (zeros?)"); \(agent.stderrSoFar)")
                }
            }
            // Evict: the file read just before (hydrated), read again at once.
            #expect(contents(replica + "/bin.dat") == remote.files["bin.dat"])
            try readsWhole("evict bin.dat docs/readme.md", ["bin.dat": remote.files["bin.dat"]!], "evict")

            // Sync: new files, a changed file (dataless here), and a
            // materialized file the remote changed whose content this sync
            // does not fetch (it goes back to a placeholder).
            try box.fprepOK(["materialize", "a.txt", "docs/deep/nested.txt"], cwd: other)
            try box.sh("mkdir -p fresh && echo one > fresh/one.txt && echo two > two.txt && echo 'new a' > a.txt && printf 'more' >> docs/deep/nested.txt", cwd: other)
            try box.fprepOK(["sync"], cwd: other)
            try readsWhole("sync", ["fresh/one.txt": Data("one\n".utf8), "two.txt": Data("two\n".utf8), "a.txt": Data("new a\n".utf8),
                                    "docs/deep/nested.txt": remote.files["docs/deep/nested.txt"]! + Data("more".utf8)], "sync")

            // Revert: a changed file back to the anchor's version, dataless.
            try box.sh("echo 'mine' > two.txt", cwd: replica)
            try readsWhole("revert --force two.txt", ["two.txt": Data("two\n".utf8)], "revert")

            // The disk budget, with a command's own evict --to-budget.
            try box.gitOK(["-C", replica, "config", "fprep.budget.content", "1k"])
            try box.sh("touch -a -d '2030-01-01' bin.dat", cwd: replica)
            let evicted = try box.fprep(["evict", "--to-budget", "--json"], cwd: replica)
            let list = (try JSONSerialization.jsonObject(with: evicted.stdoutData) as? [String: Any])?.strings("evicted") ?? []
            #expect(list.contains("bin.dat"), "\(evicted)")
            #expect(contents(replica + "/bin.dat") == remote.files["bin.dat"])
            #expect(stopAgent(agent).status == 0)
        }
    }
}
