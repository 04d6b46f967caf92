// fprep-build-info ROOT OUTPUT: writes OUTPUT, a Swift file that names the
// commit the package at ROOT is built from (read from its git directory,
// without running git: the plugin that runs this must not depend on a git
// command or on the network), or nil when ROOT is not a git checkout.
import Foundation

/// The git directory of a checkout: `.git` itself, or the one a worktree's
/// `.git` file names. Returns it and the common directory (refs live there).
func gitDirectories(_ root: URL) -> (git: URL, common: URL)? {
    let dotGit = root.appendingPathComponent(".git")
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: dotGit.path, isDirectory: &isDirectory) else { return nil }
    var git = dotGit
    if !isDirectory.boolValue {
        guard let text = try? String(contentsOf: dotGit, encoding: .utf8), text.hasPrefix("gitdir: ") else { return nil }
        let path = text.dropFirst(8).trimmingCharacters(in: .whitespacesAndNewlines)
        git = path.hasPrefix("/") ? URL(fileURLWithPath: path) : root.appendingPathComponent(path)
    }
    var common = git
    if let text = try? String(contentsOf: git.appendingPathComponent("commondir"), encoding: .utf8) {
        let path = text.trimmingCharacters(in: .whitespacesAndNewlines)
        common = path.hasPrefix("/") ? URL(fileURLWithPath: path) : git.appendingPathComponent(path)
    }
    return (git, common)
}

/// The commit HEAD names: a detached id, or its branch's from a loose ref or packed-refs.
func headCommit(_ root: URL) -> String? {
    guard let (git, common) = gitDirectories(root),
          let head = try? String(contentsOf: git.appendingPathComponent("HEAD"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines) else { return nil }
    guard head.hasPrefix("ref: ") else { return head.count == 40 ? head : nil }
    let ref = String(head.dropFirst(5))
    if let loose = try? String(contentsOf: common.appendingPathComponent(ref), encoding: .utf8) {
        let id = loose.trimmingCharacters(in: .whitespacesAndNewlines)
        if id.count == 40 { return id }
    }
    let packed = (try? String(contentsOf: common.appendingPathComponent("packed-refs"), encoding: .utf8)) ?? ""
    for line in packed.split(separator: "\n") where line.hasSuffix(" " + ref) {
        let id = String(line.prefix(40))
        if id.count == 40 { return id }
    }
    return nil
}

let arguments = CommandLine.arguments
guard arguments.count == 3 else {
    FileHandle.standardError.write(Data("usage: fprep-build-info ROOT OUTPUT\n".utf8))
    exit(64)
}
let commit = headCommit(URL(fileURLWithPath: arguments[1]))
let source = """
    // Written by the BuildInfo plugin (Sources/fprep-build-info): do not edit.
    /// The commit this binary was built from; nil outside a git checkout.
    let buildCommit: String? = \(commit.map { "\"\($0)\"" } ?? "nil")

    """
let output = URL(fileURLWithPath: arguments[2])
// Rewritten only when it changes, so an unchanged commit rebuilds nothing.
if (try? String(contentsOf: output, encoding: .utf8)) != source {
    do {
        try source.write(to: output, atomically: true, encoding: .utf8)
    } catch {
        FileHandle.standardError.write(Data("fprep-build-info: cannot write \(output.path): \(error)\n".utf8))
        exit(1)
    }
}
