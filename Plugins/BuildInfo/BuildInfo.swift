import Foundation
import PackagePlugin

/// Gives FprepCLI the commit it is built from (`fprep --version`): runs
/// fprep-build-info, which reads the checkout's HEAD, whenever HEAD or the
/// ref it names changes.
@main
struct BuildInfo: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let root = context.package.directoryURL
        let output = context.pluginWorkDirectoryURL.appendingPathComponent("BuildInfo.swift")
        return [.buildCommand(
            displayName: "Reading the commit fprep is built from",
            executable: try context.tool(named: "fprep-build-info").url,
            arguments: [root.path, output.path],
            inputFiles: Self.gitInputs(root),
            outputFiles: [output]
        )]
    }

    /// The files whose change means another commit: HEAD, the loose ref it
    /// names, and packed-refs (of a worktree's own and common git directories).
    static func gitInputs(_ root: URL) -> [URL] {
        let dotGit = root.appendingPathComponent(".git")
        var git = dotGit
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dotGit.path, isDirectory: &isDirectory) else { return [] }
        if !isDirectory.boolValue,
           let text = try? String(contentsOf: dotGit, encoding: .utf8), text.hasPrefix("gitdir: ") {
            let path = text.dropFirst(8).trimmingCharacters(in: .whitespacesAndNewlines)
            git = path.hasPrefix("/") ? URL(fileURLWithPath: path) : root.appendingPathComponent(path)
        }
        var common = git
        if let text = try? String(contentsOf: git.appendingPathComponent("commondir"), encoding: .utf8) {
            let path = text.trimmingCharacters(in: .whitespacesAndNewlines)
            common = path.hasPrefix("/") ? URL(fileURLWithPath: path) : git.appendingPathComponent(path)
        }
        var inputs = [git.appendingPathComponent("HEAD"), common.appendingPathComponent("packed-refs")]
        if let head = try? String(contentsOf: git.appendingPathComponent("HEAD"), encoding: .utf8), head.hasPrefix("ref: ") {
            inputs.append(common.appendingPathComponent(head.dropFirst(5).trimmingCharacters(in: .whitespacesAndNewlines)))
        }
        return inputs.filter { FileManager.default.fileExists(atPath: $0.path) }
    }
}
