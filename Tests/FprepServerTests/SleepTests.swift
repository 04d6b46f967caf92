import Foundation
import FprepServer
import Testing

@Suite("sleeping in tasks")
struct SleepTests {
    @Test("a cancelled task's sleep says so at once, and a polling loop around it ends")
    func cancelledSleepEndsTheLoop() async {
        // Cancelled before it sleeps: an hour's sleep that ignored the
        // cancellation would show as this test not ending (the watchdog's
        // stacks), one that swallowed it as rounds counted. No clock is
        // read: on a loaded machine a task may wait minutes for a thread.
        let loop = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            var rounds = 0
            while await sleepUnlessCancelled(for: .seconds(3600)), rounds < 1000 { rounds += 1 }
            return rounds
        }
        #expect(await loop.value == 0)
        let until = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await sleepUnlessCancelled(until: .now + .seconds(3600))
        }
        #expect(await until.value == false)
        #expect(await sleepUnlessCancelled(for: .milliseconds(1)), "an uncancelled sleep sleeps and says so")
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
