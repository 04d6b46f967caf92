import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore

struct Evict: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "evict",
        abstract: "Turn materialized files back into placeholders and free their space.",
        discussion: """
            Frees each file's data blocks in place; the file keeps its name, size and date. A folder means every file below it. A file with local changes (or pinned, or open in a program, or hard-linked) is never evicted: it is listed with the reason, the others are evicted, and the exit status is 2.

            --to-budget evicts the least recently used files until the replica is within its disk budget: at most 'git config fprep.budget.content SIZE' of materialized content and at least 'git config fprep.budget.minFree SIZE' free on its disk (SIZE as 500m, 20g or 10% of the disk). Files pinned, changed here, open, hard-linked, not pushed yet, or of ignore rules are never chosen. 'fprep agent' keeps the budget by itself.

            Examples: fprep evict src      git config fprep.budget.content 2g && fprep evict --to-budget --dry-run
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "Files or folders, relative to the current folder (or to -C DIR).")
    var paths: [String] = []

    @Option(help: ArgumentHelp("Read more paths from FILE, one a line ('-' for standard input).", valueName: "FILE"))
    var pathsFrom: String?

    @Flag(help: "Evict least recently used files until within the disk budget (fprep.budget.content, fprep.budget.minFree); no paths.")
    var toBudget = false

    @Flag(help: "Say what would be evicted and the space it would free; change nothing.")
    var dryRun = false

    @Flag(help: "Print the result as JSON.")
    var json = false

    func validate() throws {
        if toBudget, !paths.isEmpty || pathsFrom != nil { throw ValidationError("--to-budget takes no paths: it chooses the files itself") }
        if !toBudget, paths.isEmpty, pathsFrom == nil { throw ValidationError("name files or folders to evict (or --to-budget)") }
    }

    func run() throws {
        if toBudget { return try runToBudget() }
        let all = try collectPaths(paths, from: pathsFrom)
        let opened = try replica.open("evict", exclusive: !dryRun)
        let result = try opened.evict(all, relativeTo: replica.baseDirectory, dryRun: dryRun)
        if json {
            try JSONOutput.print(result)
        } else if dryRun {
            print("would evict \(count(result.evicted.count, "file")) (\(humanSize(result.bytesFreed)) freed); \(result.alreadyDataless) already dataless")
            for path in result.evicted { print("  \(Console.escaped(path))") }
        } else {
            print("evicted \(count(result.evicted.count, "file")) (\(humanSize(result.bytesFreed)) freed); \(result.alreadyDataless) already dataless")
            for refused in result.refused {
                printError("fprep: cannot evict '\(refused.path)': \(refused.reason)")
            }
        }
        if !result.refused.isEmpty { throw ExitCode(2) }
    }

    private func runToBudget() throws {
        let opened = try replica.open("evict", exclusive: !dryRun)
        let budget = try DiskBudget.load(opened)
        guard budget.isSet else {
            throw FprepError(.usage, "no disk budget is set for this replica; set one with 'git config \(DiskBudget.contentKey) 2g' or 'git config \(DiskBudget.minFreeKey) 10%'")
        }
        let report = try opened.enforceBudget(budget, dryRun: dryRun)
        if json { return try JSONOutput.print(report) }
        print(BudgetText.summary(report))
        if report.overBy == 0 { return }
        print("\(dryRun ? "would evict" : "evicted") \(count(report.evicted.count, "file")) (\(humanSize(report.bytesFreed)) freed), least recently used first")
        for path in report.evicted.prefix(50) { print("  \(Console.escaped(path))") }
        if report.evicted.count > 50 { print("  … and \(report.evicted.count - 50) more") }
        for kept in report.kept { printError("fprep: kept '\(kept.path)': \(kept.reason)") }
        if report.bytesFreed < report.overBy {
            printError("fprep: still \(humanSize(report.overBy - report.bytesFreed)) over the budget: every other materialized file is pinned, changed, open, hard-linked or not pushed yet")
            throw ExitCode(2)
        }
    }
}

/// How a budget reads, in one line.
enum BudgetText {
    static func summary(_ report: BudgetReport) -> String {
        var parts: [String] = []
        if let limit = report.contentLimit { parts.append("content \(humanSize(report.contentBytes)) of \(humanSize(limit))") }
        if let floor = report.freeFloor { parts.append("free \(humanSize(report.freeBytes)) (floor \(humanSize(floor)))") }
        let verdict = report.overBy > 0 ? "over by \(humanSize(report.overBy))" : "within budget"
        return "budget: " + parts.joined(separator: ", ") + ": " + verdict
    }
}
