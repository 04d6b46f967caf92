import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the replica's remote, anchor, item counts, sizes and local changes.",
        discussion: """
            Counts come from a stat scan of every item (content is read only for materialized files whose stat changed). Logical size is what the files hold at the anchor; bytes on disk is what the replica takes, its tree, .git and .fprep together.

            While 'fprep agent' serves the replica, it journals what programs change in it, and status looks only at what changed since the last scan ("scan: journal"; the folder count and the tree's share of bytes on disk are then the last full scan's). A gap in the journal (an agent restart, an event overflow), another index, changed ignore-rule files or an hour since the last full scan mean one full scan. --full-scan looks at everything anyway.

            Untracked files and folders that git's ignore rules match (.gitignore files in the tree, .git/info/exclude, core.excludesFile) are left out of the changes and never synced; --ignored lists them. A file the remote has stays synced whatever the rules say, and so does a dataless file moved to an ignored name (its content is only on the remote).
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Flag(help: "Also list the untracked items the ignore rules leave out (a folder once, with a trailing /).")
    var ignored = false

    @Flag(help: "Look at every item, even where the agent's change journal could say what changed.")
    var fullScan = false

    @Flag(help: "Print the report as JSON.")
    var json = false

    func run() throws {
        let opened = try replica.open("status", exclusive: false)
        let report = try opened.status(listingIgnored: ignored, fullScan: fullScan)
        if json { return try JSONOutput.print(report) }
        print("replica:      \(report.root)")
        print("domain:       \(report.domain)")
        print("remote:       \(report.remote) (branch \(report.branch))")
        print("anchor:       \(report.anchor ?? "(empty remote)")")
        print("items:        \(report.items) (\(report.dataless) dataless, \(report.materialized) materialized, \(report.modified) modified, \(report.deleted) deleted), \(count(report.folders, "folder"))")
        print("logical size: \(humanSize(report.logicalSize))\(report.sizeUnknown > 0 ? ", and \(count(report.sizeUnknown, "file")) of unknown size" : "")")
        if report.sizeUnknown > 0 { print("sizes:        size unknown for \(count(report.sizeUnknown, "file")): \(UnknownSizes.hint(report.sizeUnknown))") }
        print("on disk:      \(humanSize(report.bytesOnDisk)) (.git: \(humanSize(report.gitBytes)); 'fprep gc' gives back content git fetched by itself)")
        if report.scan == "journal" {
            print("scan:         the agent's change journal (what changed since the last full scan; --full-scan looks at everything)")
        }
        if let unfinished = opened.unfinished {
            print("unfinished:   an interrupted operation waits to be finished (\(unfinished)); the changes below may be its own")
        }
        if let agent = report.agent {
            print("agent:        pid \(agent) fetches placeholders' content on first access")
        } else {
            print("agent:        none (placeholders get content with 'fprep materialize', or on access under 'fprep agent')")
        }
        if let git = report.git {
            if git.commitsAhead > 0, !git.readPlaceholders.isEmpty {
                let shown = git.readPlaceholders.prefix(3).map { "'\(Console.escaped($0))'" }.joined(separator: ", ")
                print("git:          \(git.commitsAhead) commit\(git.commitsAhead == 1 ? "" : "s") made with git on '\(report.branch)' took placeholders (\(shown)) as content; 'fprep sync' will not push \(git.commitsAhead == 1 ? "it" : "them") (kept under a backup ref; run 'fprep materialize' before 'git add' of a dataless file)")
            } else if git.commitsAhead > 0 {
                print("git:          \(git.commitsAhead) commit\(git.commitsAhead == 1 ? "" : "s") made with git on '\(report.branch)'; 'fprep sync' pushes \(git.commitsAhead == 1 ? "it" : "them")")
            }
            if let elsewhere = git.elsewhere {
                print("git:          \(Console.escaped(elsewhere)); 'fprep sync' puts the branch back at the anchor (keeping a backup ref) and syncs the files as they are")
            }
        }
        if let waiting = report.waitingToPush {
            let why = report.waitingBecause.map { "; the last sync \($0)" } ?? ""
            print("waiting:      local commit \(waiting.prefix(12)) is not pushed yet\(why) (run 'fprep sync' again once the remote takes it)")
        }
        if let problem = report.budgetProblem { print("budget:       \(problem)") }
        if let budget = report.budget {
            print("\(BudgetText.summary(budget))\(budget.overBy > 0 ? " ('fprep evict --to-budget' frees it; the agent does by itself)" : "")")
        }
        if !report.heldOpen.isEmpty {
            let shown = report.heldOpen.prefix(5).map { Console.escaped($0) }.joined(separator: ", ")
            print("held aside:   \(shown)\(report.heldOpen.count > 5 ? " and \(report.heldOpen.count - 5) more" : "") (old versions a sync replaced while a program had them open for writing: the first sync after the program closes one removes it, or keeps it as a conflict copy if the program wrote into it)")
        }
        if !report.pins.isEmpty {
            print("pinned:       \(report.pins.map { Console.escaped($0) }.joined(separator: ", ")) (kept on this device)")
        }
        for file in report.ignoreFilesNotRead {
            print("ignore rules: '\(Console.escaped(file))' is dataless, so its rules are not applied yet ('fprep sync' or 'fprep materialize' brings it)")
        }
        for item in report.notSynced {
            print("not synced:   \(Console.escaped(item.path)): \(item.reason)")
        }
        for change in report.changes {
            print("  \(change.kind.rawValue): \(change.from.map { "\($0) → " } ?? "")\(change.path)")
        }
        if let ignored = report.ignored {
            print(ignored.isEmpty ? "ignored:      none" : "ignored:")
            for path in ignored { print("  \(Console.escaped(path))") }
        }
    }
}
