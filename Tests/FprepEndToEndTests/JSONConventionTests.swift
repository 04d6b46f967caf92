import Foundation
import Testing

// One convention for machine output (README, "Machine output"): a one-shot
// answer is one JSON object, keys camelCase, dates ISO 8601, and with
// --json an error is a JSON object on stderr with the exit status.

@Suite("JSON conventions")
struct JSONConventionTests {
    /// Keys that break the convention anywhere in `value`, with their path.
    static func badKeys(_ value: Any, at path: String = "") -> [String] {
        if let object = value as? [String: Any] {
            return object.flatMap { key, child -> [String] in
                let ok = key.range(of: "^[a-z][a-zA-Z0-9]*$", options: .regularExpression) != nil
                return (ok ? [] : ["\(path).\(key)"]) + badKeys(child, at: "\(path).\(key)")
            }
        }
        if let array = value as? [Any] { return array.enumerated().flatMap { badKeys($1, at: "\(path)[\($0)]") } }
        return []
    }

    /// Dates that are not ISO 8601 UTC, and times given as numbers.
    static func badDates(_ value: Any, key: String = "", at path: String = "") -> [String] {
        if let object = value as? [String: Any] {
            return object.flatMap { badDates($1, key: $0, at: "\(path).\($0)") }
        }
        if let array = value as? [Any] { return array.enumerated().flatMap { badDates($1, key: key, at: "\(path)[\($0)]") } }
        if let text = value as? String, text.range(of: "^[0-9]{4}-[0-9]{2}-[0-9]{2}", options: .regularExpression) != nil,
           text.range(of: "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?Z$", options: .regularExpression) == nil {
            return ["\(path) = \(text)"]
        }
        let lowered = key.lowercased()
        if value is NSNumber, !(value is Bool), lowered.hasSuffix("date") || lowered.hasSuffix("time") || lowered == "deleted" {
            return ["\(path) is a number"]
        }
        return []
    }

    @Test("every one-shot --json answer is one object with camelCase keys and ISO dates; errors are JSON on stderr")
    func oneConvention() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.sh("rm empty.txt", cwd: replica)
            try box.fprepOK(["sync"], cwd: replica)
            let anchor = try box.fprepJSON(["anchor"], cwd: replica).string("anchor") ?? ""
            let commands: [[String]] = [
                ["status"], ["ls"], ["ls", "docs"], ["anchor"], ["materialize", "a.txt"], ["open", "a.txt"],
                ["tag", "a.txt", "red"], ["untag", "a.txt", "red"], ["favorite", "a.txt"], ["unfavorite", "a.txt"],
                ["working-set"], ["trash"], ["versions", "a.txt"], ["evict", "a.txt"], ["revert", "a.txt"],
                ["changes", "--from", anchor], ["sync"], ["repair"],
            ]
            for command in commands {
                let result = try box.fprep(command + ["--json"], cwd: replica)
                #expect(result.status == 0, "\(command): \(result)")
                let parsed = try? JSONSerialization.jsonObject(with: result.stdoutData)
                guard let object = parsed as? [String: Any] else {
                    Issue.record("\(command): not one JSON object: \(result.stdout)")
                    continue
                }
                #expect(Self.badKeys(object).isEmpty, "\(command): keys \(Self.badKeys(object))")
                #expect(Self.badDates(object).isEmpty, "\(command): dates \(Self.badDates(object))")
            }
            for failing in [["ls", "no-such", "--json"], ["versions", "no-such", "--json"], ["restore", "--version", "zz", "a.txt", "--json"],
                            ["sync", "--bogus", "--json"]] {
                let result = try box.fprep(failing, cwd: replica)
                #expect(result.status != 0 && result.stdout.isEmpty, "\(failing): \(result)")
                let lines = result.stderr.split(separator: "\n")
                let object = lines.count == 1 ? (try? JSONSerialization.jsonObject(with: Data(lines[0].utf8))) as? [String: Any] : nil
                #expect(object?["error"] is String, "\(failing): \(result.stderr)")
                #expect((object?["status"] as? Int).map { Int32($0) } == result.status, "\(failing): \(result.stderr)")
            }
        }
    }
}
