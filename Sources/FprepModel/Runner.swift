import Foundation
import Glibc

/// How to run cases.
public struct RunOptions: Sendable {
    public var fprep: String
    /// Seconds any one fprep command may take before it counts as a hang.
    public var timeout: Double
    /// Keep the sandbox (its path is in the outcome).
    public var keep: Bool
    /// Seconds to wait after each step (0: none); with more than 1, no two
    /// steps share a second of the clock, which fprep's stat checks compare.
    public var pace: Double
    /// Run `fprep agent` on the first device throughout: it hydrates what
    /// the actions read and syncs by itself between and during them.
    public var agent: Bool
    /// With `agent`: whether it also syncs by itself (else it only hydrates).
    public var agentSyncs = true

    public init(fprep: String, timeout: Double = 30, keep: Bool = false, pace: Double = 0, agent: Bool = false) {
        self.fprep = fprep
        self.timeout = timeout
        self.keep = keep
        self.pace = pace
        self.agent = agent
    }
}

/// What one run of a case did.
public struct Outcome: Sendable {
    public let failure: Failure?
    public let seconds: Double
    /// The sandbox, when kept.
    public let sandbox: String?
    /// The actions and fprep commands that ran, a line each.
    public var transcript: [String] = []
    public var passed: Bool { failure == nil }
}

/// Runs cases against the real binary and shrinks failing ones.
public enum ModelRunner {
    /// Runs `testCase` in a fresh sandbox: setup, each step then its checks, the final check.
    public static func run(_ testCase: Case, options: RunOptions) -> Outcome {
        let started = monotonicSeconds()
        let world: World
        do {
            world = try World(fprep: options.fprep, timeout: options.timeout, names: Names(longNames: testCase.longNames), agent: options.agent,
                          agentSyncs: options.agentSyncs)
        } catch {
            return Outcome(failure: Failure(step: nil, invariant: "model-error", detail: "\(error)"), seconds: 0, sandbox: nil)
        }
        defer { if !options.keep { world.remove() } }
        var failure: Failure?
        var step: Int?
        do {
            try world.setUp(testCase.actions)
            for (index, action) in testCase.actions.enumerated() where !action.setup {
                step = index
                world.note("\(index): \(action.line)")
                try world.apply(action, index: index)
                try world.checkCommands(step: index)
                try world.checkReplicas(step: index)
                if options.pace > 0 { usleep(useconds_t(options.pace * 1_000_000)) }
            }
            step = nil
            world.note("final: sync twice")
            try world.finish()
        } catch let broken as Failure {
            failure = broken
        } catch {
            failure = Failure(step: step, invariant: "model-error", detail: "\(error)")
        }
        return Outcome(failure: failure, seconds: monotonicSeconds() - started, sandbox: options.keep ? world.box : nil,
                       transcript: world.transcript)
    }

    /// Deletes actions while the case still fails the same way (`Failure.signature`)
    /// (one pass from the end, then again while a pass removed something),
    /// within `budget` seconds. Timing-dependent kinds (kills, concurrent
    /// writers) may not fail every time: a removal counts only if the
    /// smaller case fails.
    public static func shrink(_ testCase: Case, failure: Failure, options: RunOptions, budget: Double,
                              progress: (String) -> Void = { _ in }) -> (Case, Failure) {
        let deadline = monotonicSeconds() + budget
        var best = testCase, bestFailure = failure
        var changed = true
        while changed && monotonicSeconds() < deadline {
            changed = false
            var index = best.actions.count - 1
            while index >= 0 && monotonicSeconds() < deadline {
                var smaller = best
                smaller.actions.remove(at: index)
                let outcome = run(smaller, options: options)
                if let f = outcome.failure, f.signature == failure.signature {
                    best = smaller
                    bestFailure = f
                    changed = true
                    progress("  shrunk to \(best.actions.count) actions")
                }
                index -= 1
            }
        }
        return (best, bestFailure)
    }

    /// The report of a failure: seed, step, invariant, and the replayable case.
    public static func report(_ testCase: Case, _ failure: Failure) -> String {
        let at = failure.step.map { "step \($0) (\(testCase.actions[$0].line))" } ?? "the final check"
        return testCase.text(comment: ["failed at \(at)", "\(failure.invariant): \(failure.detail)"])
    }
}
