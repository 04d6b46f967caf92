import Foundation
import FprepServer
import Testing

@Suite("sleeping in tasks")
struct SleepTests {
    @Test("a cancelled task's sleep says so at once, and a polling loop around it ends")
    func cancelledSleepEndsTheLoop() async {
        let started = ContinuousClock.now
        let loop = Task {
            var rounds = 0
            while await sleepUnlessCancelled(for: .seconds(30)) { rounds += 1 }
            return rounds
        }
        loop.cancel()
        #expect(await loop.value == 0)
        #expect(ContinuousClock.now - started < .seconds(30), "the sleep ended on the cancellation, not at its time")
        #expect(await sleepUnlessCancelled(until: .now + .milliseconds(1)), "an uncancelled sleep sleeps")
    }

    /// The class of bug this guards: `try? await Task.sleep` swallows the
    /// cancellation and returns at once, so a loop around it that does not
    /// check spins (a test handler's did, on both of CI's threads, until its
    /// time ran out). Every such sleep goes through `sleepUnlessCancelled`.
    @Test("no sleep in the package swallows its cancellation (try? before Task.sleep)")
    func noSleepSwallowsCancellation() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let swallowing = "try? await " + "Task.sleep"
        var found: [String] = []
        for folder in ["Sources", "Tests"] {
            let base = root.appendingPathComponent(folder)
            guard let files = FileManager.default.enumerator(atPath: base.path) else { continue }
            for case let file as String in files where file.hasSuffix(".swift") {
                let text = try String(contentsOf: base.appendingPathComponent(file), encoding: .utf8)
                for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
                where line.contains(swallowing) && !line.trimmingCharacters(in: .whitespaces).hasPrefix("//") {
                    found.append("\(folder)/\(file):\(number + 1)")
                }
            }
        }
        #expect(found.isEmpty, "use sleepUnlessCancelled and stop on false: \(found)")
    }
}
