import Foundation
import Testing

// Golden files hold each machine-readable format: the keys, their nesting and
// the values that do not depend on the machine or the moment. Ids, dates,
// paths under the sandbox and on-disk byte counts are replaced by
// placeholders before comparing. FPREP_UPDATE_GOLDEN=1 writes the files anew
// (review the diff before committing it).

@Suite("golden JSON")
struct GoldenTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Golden")
    /// Values that depend on the file system or the moment.
    static let volatileKeys: Set<String> = ["bytesOnDisk", "gitBytes", "bytesLeft", "bytesFreed", "pid", "device", "lastUsed"]

    static func normalized(_ value: Any, sandbox: String, key: String = "") -> Any {
        if let object = value as? [String: Any] {
            return Dictionary(uniqueKeysWithValues: object.map { ($0, volatileKeys.contains($0) ? "<n>" : normalized($1, sandbox: sandbox, key: $0)) })
        }
        if let array = value as? [Any] { return array.map { normalized($0, sandbox: sandbox, key: key) } }
        if var text = value as? String {
            text = text.replacingOccurrences(of: sandbox, with: "<sandbox>")
            text = text.replacingOccurrences(of: "[0-9a-f]{40}", with: "<id>", options: .regularExpression)
            text = text.replacingOccurrences(of: "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}(\\.[0-9]+)?Z", with: "<date>", options: .regularExpression)
            text = text.replacingOccurrences(of: "\\(conflict [^ ]+ ", with: "(conflict <device> ", options: .regularExpression)
            return text
        }
        return value
    }

    static func check(_ name: String, _ output: Data, sandbox: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let parsed = try JSONSerialization.jsonObject(with: output)
        let text = String(decoding: try JSONSerialization.data(withJSONObject: normalized(parsed, sandbox: sandbox),
                                                               options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]),
                          as: UTF8.self) + "\n"
        let file = folder.appendingPathComponent(name + ".json")
        if ProcessInfo.processInfo.environment["FPREP_UPDATE_GOLDEN"] == "1" {
            try text.write(to: file, atomically: true, encoding: .utf8)
            return
        }
        let expected = try? String(contentsOf: file, encoding: .utf8)
        #expect(expected == text, "\(name): the format changed (FPREP_UPDATE_GOLDEN=1 writes it anew):\n\(text)", sourceLocation: sourceLocation)
    }

    @Test("each --json format is as its golden file says")
    func formats() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            let clone = try box.fprepOK(["clone", remote.path, replica, "--json"])
            try Self.check("clone", clone.stdoutData, sandbox: box.path)
            let anchor = try box.fprepJSON(["anchor"], cwd: replica).string("anchor") ?? ""
            for (name, args) in [("ls", ["ls"]), ("ls-docs", ["ls", "docs"]), ("materialize", ["materialize", "a.txt", "docs/readme.md"]),
                                 ("evict", ["evict", "docs/readme.md"]), ("anchor", ["anchor"]), ("working-set", ["working-set"]),
                                 ("tag", ["tag", "a.txt", "red"]), ("versions", ["versions", "a.txt"])] {
                try Self.check(name, try box.fprepOK(args + ["--json"], cwd: replica).stdoutData, sandbox: box.path)
            }
            try box.sh("echo edited > a.txt && rm bin.dat && echo new > new.txt", cwd: replica)
            try Self.check("status", try box.fprepOK(["status", "--json"], cwd: replica).stdoutData, sandbox: box.path)
            try Self.check("sync-dry-run", try box.fprepOK(["sync", "--dry-run", "--json"], cwd: replica).stdoutData, sandbox: box.path)
            try Self.check("revert-dry-run", try box.fprepOK(["revert", "--dry-run", "--force", ".", "--json"], cwd: replica).stdoutData,
                           sandbox: box.path)
            try Self.check("sync", try box.fprepOK(["sync", "--json"], cwd: replica).stdoutData, sandbox: box.path)
            try Self.check("changes", try box.fprepOK(["changes", "--from", anchor, "--json"], cwd: replica).stdoutData, sandbox: box.path)
            try Self.check("trash", try box.fprepOK(["trash", "--json"], cwd: replica).stdoutData, sandbox: box.path)
            try Self.check("gc-dry-run", try box.fprepOK(["gc", "--dry-run", "--json"], cwd: replica).stdoutData, sandbox: box.path)
            let failed = try box.fprep(["ls", "no-such", "--json"], cwd: replica)
            try Self.check("error", Data(failed.stderr.utf8), sandbox: box.path)
        }
    }
}
