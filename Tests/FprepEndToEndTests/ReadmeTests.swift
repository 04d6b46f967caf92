import Foundation
import Testing

// The README teaches the command line: every command it names exists, and
// every flag it gives a command is in that command's --help.

@Suite("README")
struct ReadmeTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Each fprep command line the README shows: inline code that starts
    /// with `fprep `, and lines of code blocks that run fprep.
    static func commandLines(_ readme: String) -> [String] {
        var lines: [String] = []
        var inBlock = false
        for line in readme.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") { inBlock.toggle(); continue }
            if inBlock {
                var text = line.trimmingCharacters(in: .whitespaces)
                if text.hasPrefix("sudo ") { text = String(text.dropFirst(5)) }
                if text.hasPrefix("fprep ") { lines.append(String(text.split(separator: "#").first ?? "")) }
                continue
            }
            // Inline code spans.
            let parts = line.split(separator: "`", omittingEmptySubsequences: false)
            for (i, part) in parts.enumerated() where i % 2 == 1 && part.hasPrefix("fprep ") {
                lines.append(String(part))
            }
        }
        return lines
    }

    /// The names `fprep [PARENT] --help` lists under SUBCOMMANDS.
    static func subcommands(_ box: Sandbox, of parent: [String]) throws -> Set<String> {
        let help = try box.fprep(parent + ["--help"], cwd: box.path)
        guard let start = help.stdout.range(of: "SUBCOMMANDS:") else { return [] }
        var names = Set<String>()
        for line in help.stdout[start.upperBound...].split(separator: "\n", omittingEmptySubsequences: false).dropFirst() {
            if line.trimmingCharacters(in: .whitespaces).isEmpty { break }
            // A name starts its line after two spaces; wrapped help text is indented further.
            guard line.hasPrefix("  "), !line.hasPrefix("   "), let word = line.split(separator: " ").first else { continue }
            names.insert(String(word))
        }
        return names
    }

    @Test("every command and flag the README names exists (its --help says so)")
    func readmeNamesOnlyWhatExists() throws {
        let readme = try String(contentsOf: Self.packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        try withSandbox { box in
            let top = try Self.subcommands(box, of: [])
            #expect(top.contains("sync") && top.contains("revert"), "\(top)")
            var seen: [String: Set<String>] = [:]
            for line in Self.commandLines(readme) {
                var words = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init).dropFirst()
                // -C DIR before the command, as git takes it.
                while let first = words.first, ["-C", "--replica"].contains(first) { words = words.dropFirst(2) }
                guard let name = words.first, !name.hasPrefix("-") else { continue }
                #expect(top.contains(name), "the README names 'fprep \(name)', which does not exist: \(line)")
                var command = [name]
                words = words.dropFirst()
                if let sub = words.first, try Self.subcommands(box, of: command).contains(sub) {
                    command.append(sub)
                    words = words.dropFirst()
                }
                for word in words {
                    let flag = word.trimmingCharacters(in: CharacterSet(charactersIn: "[]()|\\,.…'\""))
                        .split(separator: "=").first.map(String.init) ?? ""
                    guard flag.range(of: "^--?[a-zA-Z][a-zA-Z-]*$", options: .regularExpression) != nil else { continue }
                    seen[command.joined(separator: " "), default: []].insert(flag)
                }
                seen[command.joined(separator: " "), default: []].formUnion([])
            }
            #expect(seen.count >= 25, "too few commands found in the README: \(seen.keys.sorted())")
            for (command, flags) in seen {
                let help = try box.fprep(command.split(separator: " ").map(String.init) + ["--help"], cwd: box.path)
                #expect(help.status == 0, "fprep \(command) --help: \(help)")
                for flag in flags {
                    let pattern = "(^|[\\s,\\[])" + NSRegularExpression.escapedPattern(for: flag) + "([\\s,=<\\]]|$)"
                    #expect(help.stdout.range(of: pattern, options: .regularExpression) != nil,
                            "the README gives 'fprep \(command)' the flag \(flag), which its --help does not list")
                }
            }
        }
    }

    @Test("every command takes -q/--quiet and -v/--verbose, and -q prints nothing but errors")
    func quietAndVerboseEverywhere() throws {
        try withSandbox { box in
            var commands: [[String]] = []
            for name in try Self.subcommands(box, of: []) {
                let subs = try Self.subcommands(box, of: [name]).subtracting(["help"])
                commands += subs.isEmpty ? [[name]] : subs.map { [name, $0] }
            }
            for command in commands {
                let help = try box.fprep(command + ["--help"], cwd: box.path)
                #expect(help.status == 0, "\(command): \(help)")
                #expect(help.stdout.contains("-q, --quiet") && help.stdout.contains("-v, --verbose"), "\(command): \(help.stdout)")
            }
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            let cloned = try box.fprep(["clone", "-q", remote.path, replica], cwd: box.path)
            #expect(cloned.status == 0 && cloned.stdout.isEmpty && cloned.stderr.isEmpty, "\(cloned)")
            let materialized = try box.fprep(["materialize", "-q", "a.txt"], cwd: replica)
            #expect(materialized.status == 0 && materialized.stdout.isEmpty, "\(materialized)")
            #expect(contents(replica + "/a.txt") == remote.files["a.txt"])
            let json = try box.fprep(["status", "-q", "--json"], cwd: replica)
            #expect(json.stdout.contains("\"anchor\""), "--json output is what was asked for: \(json)")
            let failed = try box.fprep(["materialize", "-q", "no-such"], cwd: replica)
            #expect(failed.status != 0 && !failed.stderr.isEmpty, "errors still show: \(failed)")
        }
    }
}
