import Foundation
import FprepModel
import Testing

// The randomized model test in CI: stored regression cases, then a fixed
// list of seeds. Longer runs: `.build/debug/fprep-model --seeds 200` (see
// the README, "Randomized model test").

/// Kinds CI leaves out: those whose outcome depends on timing (a kill after
/// a delay, a concurrent writer), so that a CI run is the same on every
/// machine. `crash` (FPREP_CRASH_AT, a kill at a numbered durable step) stays
/// in; the timing kinds run in the long runs (`fprep-model --seeds N`), and a
/// shrunk failure of theirs is stored in Cases/ (with `pending` until fixed).
let ciKindsWaiting: Set<Kind> = [.kill, .concurrent]

/// The kinds CI runs: one constant.
let ciKinds: Set<Kind> = Set(Kind.allCases).subtracting(ciKindsWaiting)

/// Whether CI's paths may use the 224-byte name (long-name-conflict-copy: conflict copies of it pass 255 bytes).
let ciLongNames = true

/// The seeds CI runs: a fixed budget (about a minute on 2 cores).
let ciSeeds: [UInt64] = Array(1...24)

/// Actions per CI case (after the setup).
let ciSteps = 16

/// The seeds CI runs again with `fprep agent` serving the first device
/// (issue 11.6): it hydrates what the actions read and syncs by itself
/// between and during them, so these cases also check the agent's own
/// syncs and the change journal against the model (about 3 s each).
let ciAgentSeeds: [UInt64] = Array(1...8)

/// The one open failure of the agent's cases: a placeholder of a blob the
/// remote changed stays at 0 bytes although its size is known by the end
/// (the size is shown wrong; no byte is lost or committed).
let agentKnownIssue = "placeholder differs from the remote's (0 bytes naming"

/// Seconds an fprep command may take in CI before it counts as a hang:
/// generous, because CI runs the suites in parallel on two cores; a real
/// hang still shows, it only takes longer to.
let ciTimeout: Double = 90

/// The `fprep` built with this test bundle: FPREP_BINARY, FPREP_E2E_BINARY, or next to the test executable.
let fprepBinary: String = {
    if let e2e = ProcessInfo.processInfo.environment["FPREP_E2E_BINARY"], !e2e.isEmpty { return e2e }
    do { return try Binaries.fprep() } catch { fatalError("\(error)") }
}()

/// Stored regression cases (Cases/*.txt, the format a failure prints; a
/// `pending REASON` line marks a case whose bug is not fixed yet).
func storedCases() -> [(name: String, testCase: Case)] {
    let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Cases").path
    let files = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).filter { $0.hasSuffix(".txt") }.sorted()
    return files.compactMap { name in
        guard let text = try? String(contentsOfFile: folder + "/" + name, encoding: .utf8),
              let parsed = try? Case(text: text) else { return nil }
        return (name, parsed)
    }
}

/// Kinds whose outcome depends on timing: a case with them may pass on one run and fail on the next.
let timingKinds: Set<Kind> = [.kill, .concurrent]

@Suite("randomized model", .serialized)
struct ModelTests {
    @Test("stored regression cases", arguments: storedCases().map(\.name))
    func stored(name: String) throws {
        let testCase = try #require(storedCases().first { $0.name == name }?.testCase)
        let run = {
            let outcome = ModelRunner.run(testCase, options: RunOptions(fprep: fprepBinary, timeout: ciTimeout))
            if let failure = outcome.failure {
                Issue.record("\(name) fails:\n\(ModelRunner.report(testCase, failure))")
            }
        }
        if let pending = testCase.pending {
            // A crash point falls where the durable steps fall: a change
            // elsewhere may move it, so such a case may pass meanwhile.
            let timing = testCase.actions.contains { timingKinds.contains($0.kind) || $0.kind == .crash }
            withKnownIssue("pending: \(pending)", isIntermittent: timing) { run() }
        } else {
            run()
        }
    }

    @Test("fixed seeds", arguments: ciSeeds)
    func seed(_ seed: UInt64) throws {
        let testCase = Case.generate(seed: seed, steps: ciSteps, kinds: ciKinds, longNames: ciLongNames)
        let outcome = ModelRunner.run(testCase, options: RunOptions(fprep: fprepBinary, timeout: ciTimeout))
        if let failure = outcome.failure {
            let without = Kind.allCases.filter { !ciKinds.contains($0) }.map(\.rawValue).joined(separator: ",")
            Issue.record("""
                seed \(seed) fails (replay: fprep-model --seed \(seed) --steps \(ciSteps)\
                \(without.isEmpty ? "" : " --without \(without)")\(ciLongNames ? "" : " --no-long-names") --verbose):
                \(ModelRunner.report(testCase, failure))
                """)
        }
    }

    @Test("fixed seeds, with the agent hydrating and syncing on the first device", arguments: ciAgentSeeds)
    func seedWithTheAgent(_ seed: UInt64) throws {
        let testCase = Case.generate(seed: seed, steps: ciSteps, kinds: ciKinds, longNames: ciLongNames)
        let outcome = ModelRunner.run(testCase, options: RunOptions(fprep: fprepBinary, timeout: ciTimeout, agent: true))
        if let failure = outcome.failure {
            let without = Kind.allCases.filter { !ciKinds.contains($0) }.map(\.rawValue).joined(separator: ",")
            let report = ModelRunner.report(testCase, failure)
            let record = {
                _ = Issue.record("""
                    seed \(seed) with the agent fails (replay: fprep-model --agent --seed \(seed) --steps \(ciSteps)\
                    \(without.isEmpty ? "" : " --without \(without)")\(ciLongNames ? "" : " --no-long-names") --verbose):
                    \(report)
                    """)
            }
            if report.contains(agentKnownIssue) {
                // Seen only under load (seed 4 twice in CI runs, seeds 11030
                // and 2003 in long runs; never in replays). A cause found on
                // 11-28: the remote's hook gave up on the size manifest's ref
                // while a device's push held its lock, so the blob's size was
                // never listed (fixed; the final check now also fails on any
                // line in the hook's log). Kept as known until long runs show
                // it gone: every other failure is reported as one.
                withKnownIssue("a placeholder left at 0 bytes for a blob whose size is known (with the agent syncing)", isIntermittent: true) { record() }
            } else {
                record()
            }
        }
    }

    @Test("a case prints and parses back the same; a seed always makes the same case")
    func caseText() throws {
        let testCase = Case.generate(seed: 42, steps: 30, kinds: Set(Kind.allCases), longNames: false)
        let parsed = try Case(text: testCase.text(comment: ["a comment"]))
        #expect(parsed.seed == 42)
        #expect(parsed.actions == testCase.actions)
        #expect(parsed.longNames == false)
        #expect(Case.generate(seed: 42, steps: 30, kinds: Set(Kind.allCases), longNames: false).actions == testCase.actions)
    }
}
