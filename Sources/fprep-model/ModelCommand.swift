import ArgumentParser
import Foundation
import FprepModel

/// Lines show as they come when the output is a pipe (CI logs).
func flushOutput() { _ = FileHandle.standardOutput; fflush(nil) }

/// fprep-model: the randomized model test, for runs longer than CI's.
@main
struct ModelCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fprep-model",
        abstract: "Run seeded random cases (remote commits, actions on two replicas, syncs, kills) against the real fprep.",
        discussion: """
        Each seed generates a case: a few remote commits, two replicas cloned with `fprep clone`, then \
        actions (remote commits; writes, appends into placeholders, renames, type changes, links, FIFOs, \
        concurrent writers on the replicas; syncs; kill -9; offline periods). After each step: every fprep \
        command ended cleanly, the state database passes integrity_check, no temporary file remains. At the \
        end, both replicas sync twice, and then both trees equal the remote's, every byte written is in the \
        remote (or was deliberately removed by an actor that had it), and no remote file holds zeros nobody \
        wrote. A failing case is shrunk by deleting actions and printed as a replayable case.

        The fprep binary: FPREP_BINARY, else the one next to this program.
        Kinds: \(Kind.allCases.map(\.rawValue).joined(separator: ", ")).
        """)

    @Option(help: "How many seeds to run.") var seeds = 20
    @Option(help: "The first seed.") var first: UInt64 = 1
    @Option(help: "Run only this seed.") var seed: UInt64?
    @Option(help: "Actions per case (after the setup).") var steps = 20
    @Option(help: "Use only these kinds (comma-separated).") var kinds: String?
    @Option(help: "Leave out these kinds (comma-separated).") var without: String?
    @Option(help: "Run one case from a file (the format a failure prints).") var replay: String?
    @Option(help: "Seconds an fprep command may take before it counts as a hang.") var timeout: Double = 30
    @Option(help: "Seconds to spend shrinking each failure (0: do not shrink).") var shrinkSeconds: Double = 120
    @Option(help: "Write each failing (shrunk) case to this folder as seed-N.txt.") var save: String?
    @Option(help: "Seconds to wait after each step (over 1: no two steps in one second of the clock).") var pace: Double = 0
    @Flag(help: "Keep each case's sandbox and print its path.") var keep = false
    @Flag(help: "Leave the long (224-byte) name out of the name pool.") var noLongNames = false
    @Flag(help: "Print what ran (actions and fprep commands) for a failing case.") var verbose = false
    @Flag(help: "Run 'fprep agent' on the first device throughout (as root): it hydrates on access and syncs by itself.") var agent = false
    @Flag(help: "With --agent: the agent only hydrates (fprep.agent.sync false).") var agentNoSync = false

    func parseKinds(_ list: String) throws -> Set<Kind> {
        Set(try list.split(separator: ",").map { name in
            guard let kind = Kind(rawValue: name.trimmingCharacters(in: .whitespaces)) else {
                throw ValidationError("unknown kind '\(name)'; kinds: \(Kind.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return kind
        })
    }

    func run() throws {
        var allowed = try kinds.map(parseKinds) ?? Set(Kind.allCases)
        allowed.subtract(try without.map(parseKinds) ?? [])
        var options = RunOptions(fprep: try Binaries.fprep(), timeout: timeout, keep: keep, pace: pace, agent: agent)
        options.agentSyncs = !agentNoSync
        var cases: [Case] = []
        if let replay {
            cases = [try Case(text: String(contentsOfFile: replay, encoding: .utf8))]
        } else if let seed {
            cases = [Case.generate(seed: seed, steps: steps, kinds: allowed, longNames: !noLongNames)]
        } else {
            cases = (first..<(first + UInt64(seeds))).map { Case.generate(seed: $0, steps: steps, kinds: allowed, longNames: !noLongNames) }
        }
        var failed = 0
        for testCase in cases {
            let outcome = ModelRunner.run(testCase, options: options)
            let kept = outcome.sandbox.map { " [sandbox \($0)]" } ?? ""
            guard let failure = outcome.failure else {
                print("seed \(testCase.seed): ok (\(testCase.actions.count) actions, \(String(format: "%.1f", outcome.seconds)) s)\(kept)")
                flushOutput()
                continue
            }
            failed += 1
            print("seed \(testCase.seed): FAIL \(failure.invariant) at \(failure.step.map { "step \($0)" } ?? "the end")\(kept): \(failure.detail)")
            flushOutput()
            if verbose { print(outcome.transcript.map { "    | " + $0 }.joined(separator: "\n")) }
            var shown = testCase, shownFailure = failure
            if shrinkSeconds > 0 && replay == nil {
                (shown, shownFailure) = ModelRunner.shrink(testCase, failure: failure, options: options, budget: shrinkSeconds)
            }
            let report = ModelRunner.report(shown, shownFailure)
            print(report.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n"))
            if let save {
                try? FileManager.default.createDirectory(atPath: save, withIntermediateDirectories: true)
                try report.write(toFile: save + "/seed-\(testCase.seed).txt", atomically: true, encoding: .utf8)
            }
            flushOutput()
        }
        print("\(cases.count - failed) of \(cases.count) cases passed")
        if failed > 0 { throw ExitCode(1) }
    }
}
