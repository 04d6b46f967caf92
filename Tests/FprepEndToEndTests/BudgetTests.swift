import Foundation
import Testing

// The disk budget: above it, the least recently used files that may go
// are evicted; pinned, changed, unpushed, open and ignore-rule files never.

@Suite("disk budget")
struct BudgetTests {
    private func state(_ box: Sandbox, _ replica: String, _ path: String) -> String? {
        let parent = (path as NSString).deletingLastPathComponent
        let items = (try? box.fprepJSON(["ls", parent.isEmpty ? "." : parent], cwd: replica).objects("items")) ?? []
        return items.first { $0.string("identifier") == path }?.string("state")
    }

    @Test("evict --to-budget evicts least recently used first, never pinned or changed files; status shows the budget; bad settings are one line")
    func evictToBudget() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "."], cwd: replica)
            try box.fprepOK(["pin", "docs/deep/tool"], cwd: replica)
            try box.sh("""
                echo 'changed here' >> run.sh
                touch -a -d '2031-01-01' bin.dat
                touch -a -d '2030-03-01' docs/readme.md
                touch -a -d '2030-02-01' docs/deep/nested.txt
                touch -a -d '2030-01-01' a.txt
                """, cwd: replica)
            let none = try box.fprep(["evict", "--to-budget"], cwd: replica)
            #expect(none.status == 64 && none.stderr.hasPrefix("fprep: no disk budget is set"), "\(none)")

            try box.gitOK(["-C", replica, "config", "fprep.budget.content", "1k"])
            let status = try box.fprepJSON(["status"], cwd: replica)
            let budget = status["budget"] as? [String: Any] ?? [:]
            let content = Int64(budget.int("contentBytes") ?? 0)
            #expect(content > 10_000 && budget.int("contentLimit") == 1024 && (budget.int("overBy") ?? 0) > 0, "\(budget)")

            // Just over: one file goes, the least recently used.
            try box.gitOK(["-C", replica, "config", "fprep.budget.content", String(content - 1)])
            let one = try box.fprepJSON(["evict", "--to-budget"], cwd: replica)
            #expect(one.strings("evicted") == ["a.txt"], "\(one)")
            #expect(state(box, replica, "a.txt") == "dataless" && state(box, replica, "docs/readme.md") == "materialized")

            // Far over: every file that may go goes, oldest first; the rest stays.
            try box.gitOK(["-C", replica, "config", "fprep.budget.content", "1k"])
            let dry = try box.fprep(["evict", "--to-budget", "--dry-run", "--json"], cwd: replica)
            let planned = (try JSONSerialization.jsonObject(with: dry.stdoutData) as? [String: Any])?.strings("evicted") ?? []
            #expect(planned == ["docs/deep/nested.txt", "docs/readme.md", "bin.dat"], "\(dry)")
            #expect(state(box, replica, "bin.dat") == "materialized", "a dry run changes nothing")
            let far = try box.fprep(["evict", "--to-budget"], cwd: replica)
            #expect(far.status == 2 && far.stderr.contains("still") && far.stderr.contains("over the budget"), "\(far)")
            for path in planned { #expect(state(box, replica, path) == "dataless", "\(path)") }
            #expect(state(box, replica, "docs/deep/tool") == "materialized", "pinned")
            #expect(state(box, replica, "run.sh") == "modified", "changed here")
            #expect(String(decoding: contents(replica + "/run.sh") ?? Data(), as: UTF8.self).hasSuffix("changed here\n"))

            try box.gitOK(["-C", replica, "config", "fprep.budget.content", "12 apples"])
            let bad = try box.fprep(["evict", "--to-budget"], cwd: replica)
            #expect(bad.status == 64 && bad.stderr.hasPrefix("fprep: the setting fprep.budget.content is '12 apples'")
                    && bad.stderr.split(separator: "\n").count == 1, "\(bad)")
            let stillWorks = try box.fprepJSON(["status"], cwd: replica)
            #expect(stillWorks.string("budgetProblem")?.contains("12 apples") == true, "\(stillWorks)")
        }
    }

    @Test("a file whose change is committed but not pushed yet stays on the device until the push")
    func unpushedStays() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "a.txt", "bin.dat"], cwd: replica)
            try box.sh("echo 'only here until pushed' > a.txt", cwd: replica)
            let away = box.at("remote.away")
            try FileManager.default.moveItem(atPath: remote.path, toPath: away)
            #expect(try box.fprep(["sync"], cwd: replica).status == 1)
            try box.gitOK(["-C", replica, "config", "fprep.budget.minFree", "100%"])
            let report = try box.fprep(["evict", "--to-budget", "--json"], cwd: replica)
            let evicted = (try JSONSerialization.jsonObject(with: report.stdoutData) as? [String: Any])?.strings("evicted") ?? []
            #expect(evicted == ["bin.dat"], "\(report)")
            #expect(contents(replica + "/a.txt") == Data("only here until pushed\n".utf8))
            try FileManager.default.moveItem(atPath: away, toPath: remote.path)
            try box.fprepOK(["sync"], cwd: replica)
            let after = try box.fprep(["evict", "--to-budget", "--json"], cwd: replica)
            #expect(((try JSONSerialization.jsonObject(with: after.stdoutData) as? [String: Any])?.strings("evicted") ?? []) == ["a.txt"], "\(after)")
        }
    }

    @Test("with the agent running, content read past the budget is evicted by itself, least recently used first, and reads again whole")
    func agentKeepsTheBudget() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let agent = try box.startAgent(replica)
            // Read through the agent: each read hydrates (4 KiB blocks each,
            // bin.dat 12 KiB, docs/deep/tool 4): 28 KiB, over a budget of 16 KiB.
            for path in ["a.txt", "docs/readme.md", "docs/deep/nested.txt"] {
                _ = contents(replica + "/" + path)
            }
            _ = try box.sh("touch -a -d '2030-01-01' a.txt docs/readme.md docs/deep/nested.txt", cwd: replica)
            #expect(contents(replica + "/bin.dat") == remote.files["bin.dat"])
            // The budget from now on, once the order of use is set (a check
            // may come between the reads above); the next hydration is checked.
            try box.gitOK(["-C", replica, "config", "fprep.budget.content", "16k"])
            #expect(contents(replica + "/docs/deep/tool") == remote.files["docs/deep/tool"])
            #expect(waitUntil { agent.stderrSoFar.contains("to stay within the disk budget") }, "\(agent.stderrSoFar)")
            #expect(waitUntil { state(box, replica, "bin.dat") == "dataless" }, "the least recently used goes: \(agent.stderrSoFar)")
            let budget = try box.fprepJSON(["status"], cwd: replica)["budget"] as? [String: Any] ?? [:]
            #expect(budget.int("overBy") == 0, "\(budget)")
            // Read again, it comes back whole.
            #expect(contents(replica + "/bin.dat") == remote.files["bin.dat"])
            #expect(stopAgent(agent).status == 0)
        }
    }
}
