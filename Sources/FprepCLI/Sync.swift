import ArgumentParser
import FoundationEssentials
import Glibc
import FprepCore

struct Sync: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Reconcile the replica with its remote: commit local changes, merge, lay out, push.",
        discussion: """
            First the local changes (found by a stat scan: edits, new files, deletions, moves, bytes written into placeholders) become a commit on top of the anchor. Then it fetches the followed branch (commits and trees only), merges three-way when both sides changed (a text file that merges cleanly is merged; otherwise the remote's version keeps the name and yours is kept beside it as 'NAME (conflict DEVICE DATE).EXT'; edit against delete keeps the edit; rename against edit keeps the edit at the new name), applies the tree diff between the replica's anchor and the remote's: new and changed files appear as placeholders with their new size, mode and date; deleted ones go; renames are moves (a materialized file moves with its content, a renamed folder moves as one); materialized files that changed get their new content in one batched fetch. A file with local changes is never overwritten or deleted: it is kept and reported. Signals are raised for the affected containers and the working set. Finally it pushes, fetching and merging again if someone pushed first. Offline, the local commit is kept (status says it waits) and the next sync completes it; exit status 1. A killed sync is finished by the next fprep command; nothing you wrote is lost.
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Flag(help: ArgumentHelp(
        "Only bring the remote's changes in: no scan of the tree and no new commit, so the cost follows the size of the remote's change.",
        discussion: "Each path the remote changes is still checked: a file you changed there is kept as a conflict copy, never overwritten. Your other changes wait for the next full sync (a commit already waiting to be pushed is pushed)."))
    var incoming = false

    @Flag(help: ArgumentHelp("Say what a sync would do: the local changes it would commit and the remote's changes it would bring in; change nothing.",
                             discussion: "It fetches (commits and trees only) to see the remote's changes; conflicts are worked out by the sync itself."))
    var dryRun = false

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() throws {
        Trace.start()
        if dryRun { return try preview() }
        let opened = try replica.open("sync", exclusive: true)
        let report = try opened.sync(incoming: incoming)
        if json {
            try JSONOutput.print(report)
            if report.waitingToPush != nil { throw ExitCode(1) }
            return
        }
        if !report.localChanges.isEmpty {
            print("committed \(count(report.localChanges.count, "local change"))")
            for change in report.localChanges.prefix(50) {
                print("  \(change.kind.rawValue): \(change.from.map { "\($0) → " } ?? "")\(change.path)")
            }
            if report.localChanges.count > 50 { print("  … and \(report.localChanges.count - 50) more") }
        }
        for conflict in report.conflicts {
            print("conflict: \(conflict.path) (\(conflict.reason)): the remote's version keeps the name, yours is '\(conflict.copy)'")
        }
        if report.gitCommitsTaken > 0 {
            print("took in \(report.gitCommitsTaken) commit\(report.gitCommitsTaken == 1 ? "" : "s") made with git on the branch")
        }
        if let backup = report.gitBackup, !report.gitReadPlaceholders.isEmpty {
            let shown = report.gitReadPlaceholders.prefix(3).map { "'\(Console.escaped($0))'" }.joined(separator: ", ")
            let more = report.gitReadPlaceholders.count > 3 ? " and \(report.gitReadPlaceholders.count - 3) more" : ""
            print("commits made with git read placeholders (\(shown)\(more)): git saw zeros, not their content, so they were not pushed; they are kept at \(backup), the branch is back at the anchor, and the files on disk are synced as they are (run 'fprep materialize' before 'git add' of a dataless file)")
        } else if let backup = report.gitBackup {
            print("the branch was moved with git away from the anchor: it is back at the anchor, the files are synced as they are, and its commits are kept at \(backup)")
        }
        if let backup = report.backup {
            print("the remote's history was rewritten: the replica's previous anchor is kept at \(backup) (see 'git log \(backup)' in the replica)")
        }
        if let pushed = report.pushed { print("pushed \(pushed.prefix(12))") }
        if let sizes = report.sizesNotPublished { print("note: \(sizes)") }
        if let waiting = report.waitingToPush {
            // One line: why the push failed, and what waits.
            let why = report.keptLocal.first { $0.path.isEmpty }.map { "\($0.reason): " } ?? ""
            printError("fprep: \(why)commit \(waiting.prefix(12)) waits to be pushed; run 'fprep sync' again when the remote is reachable")
            throw ExitCode(1)
        }
        if let collected = report.fetchedContentCollected {
            print("gave back \(humanSize(collected.bytesFreed)) of content git fetched by itself into .git (\(count(collected.blobs, "file")); above fprep.gcThreshold)")
        }
        if !report.pinnedMaterialized.isEmpty {
            print("materialized \(count(report.pinnedMaterialized.count, "file")) under pins")
        }
        guard report.from != report.to else {
            print("up to date at \(report.to ?? "(empty remote)")")
            return
        }
        print("synced \(report.from.map { String($0.prefix(12)) } ?? "(empty)") → \(report.to.map { String($0.prefix(12)) } ?? "?"): \(report.added) added, \(report.changed) changed, \(report.deleted) deleted, \(report.moved) moved, \(humanSize(report.bytesFetched)) fetched")
        for kept in report.keptLocal where !kept.path.isEmpty { print("  kept: \(kept.path): \(kept.reason)") }
        for held in report.heldOpen {
            print("  held: \(Console.escaped(held)): a program has its old version open for writing; it waits aside until closed, then goes (or stays as a conflict copy if written)")
        }
        for signal in report.signals { print("  signal \(signal.seq): \(signal.container) (\(signal.reason))") }
    }

    private func preview() throws {
        let preview = try replica.open("sync", exclusive: true).syncPreview()
        if json { return try JSONOutput.print(preview) }
        if preview.localChanges.isEmpty && preview.gitCommitsWaiting == 0 {
            print("no local changes to commit")
        } else if !incoming {
            if !preview.localChanges.isEmpty { print("would commit \(count(preview.localChanges.count, "local change"))") }
            for change in preview.localChanges.prefix(50) {
                print("  \(change.kind.rawValue): \(change.from.map { "\(Console.escaped($0)) → " } ?? "")\(Console.escaped(change.path))")
            }
            if preview.localChanges.count > 50 { print("  … and \(preview.localChanges.count - 50) more") }
            if preview.gitCommitsWaiting > 0 { print("would push \(count(preview.gitCommitsWaiting, "commit")) made with git") }
        }
        if preview.remoteRewritten { print("the remote's history was rewritten: the sync keeps a backup ref of the anchor") }
        if preview.incoming.isEmpty {
            print("nothing new on the remote")
        } else {
            print("would bring in \(count(preview.incoming.count, "remote change"))")
            for change in preview.incoming.prefix(50) {
                print("  \(change.kind): \(change.from.map { "\(Console.escaped($0)) → " } ?? "")\(Console.escaped(change.path))")
            }
            if preview.incoming.count > 50 { print("  … and \(preview.incoming.count - 50) more") }
        }
        print("(dry run: nothing was changed)")
    }
}
