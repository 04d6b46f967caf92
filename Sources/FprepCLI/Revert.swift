import ArgumentParser
import FoundationEssentials
import FprepCore

struct Revert: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revert",
        abstract: "Discard local changes: items go back to the anchor's version.",
        discussion: """
            Each changed item under the paths given goes back to what the anchor has (as a placeholder: its content comes again with 'fprep materialize' or on access), a new item goes, a deleted one comes back, a moved one moves back. Content stored nowhere else (an edit, a new file, bytes written into a placeholder) is listed and nothing changes, unless --force. An item a program has open is left as it is (exit status 2).

            Examples:
              fprep revert notes.txt        # put back the anchor's version
              fprep revert --dry-run src    # list what would be discarded
              fprep revert --force .        # discard every local change
            """
    )

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "Files or folders, relative to the current folder (or to -C DIR).")
    var paths: [String] = []

    @Flag(help: "Discard content that is stored nowhere else.")
    var force = false

    @Flag(help: "Say what would be reverted and discarded; change nothing.")
    var dryRun = false

    @Flag(help: "Print the result as JSON.")
    var json = false

    func validate() throws {
        guard !paths.isEmpty else { throw ValidationError("give the files or folders to revert ('.' for every local change)") }
    }

    func run() throws {
        let opened = try replica.open("revert", exclusive: !dryRun)
        let report: RevertReport
        do {
            report = try opened.revert(paths, relativeTo: replica.baseDirectory, force: force, dryRun: dryRun)
        } catch let refusal as RevertRefusal {
            let shown = refusal.wouldLose.prefix(3).map { "'\(Console.escaped($0))'" }.joined(separator: ", ")
            let more = refusal.wouldLose.count > 3 ? " and \(refusal.wouldLose.count - 3) more" : ""
            throw FprepError("revert would discard content stored nowhere else: \(shown)\(more); nothing was changed (run 'fprep sync' to keep it, or 'fprep revert --force' to discard it)")
        }
        if json { return try JSONOutput.print(report) }
        let verb = dryRun ? "would revert" : "reverted"
        if report.reverted.isEmpty && report.refused.isEmpty {
            print("nothing to revert: no local changes there")
        } else {
            print("\(verb) \(count(report.reverted.count, "item"))")
            for path in report.reverted { print("  \(Console.escaped(path))") }
        }
        for path in report.discarded { print("\(dryRun ? "would discard" : "discarded"): \(Console.escaped(path)) (stored nowhere else)") }
        for path in report.keptAsCopies { print("kept: '\(Console.escaped(path))' (a program wrote meanwhile)") }
        for refused in report.refused { printError("fprep: cannot revert '\(Console.escaped(refused.path))': \(refused.reason)") }
        if !report.refused.isEmpty { throw ExitCode(2) }
    }
}
