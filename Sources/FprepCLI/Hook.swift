import ArgumentParser
import Foundation
import FprepCore

struct Hook: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a server-side hook (called by the hooks 'init-remote' installs).",
        discussion: """
            post-receive reads git's '<old> <new> <ref>' lines on standard input and extends the size
            manifest for each updated branch. It never fails a push: errors go to fprep-hook.log in
            the repository and to standard error, and the exit status is 0.
            """,
        subcommands: [PostReceiveHook.self]
    )
}

struct PostReceiveHook: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "post-receive",
                                                    abstract: "Extend the size manifest for pushed branches.")

    @Option(name: .customLong("git-dir"), help: "The repository (default: $GIT_DIR, else the current folder).")
    var gitDirectory: String?

    func run() throws {
        let directory = gitDirectory ?? ProcessInfo.processInfo.environment["GIT_DIR"] ?? "."
        let input = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
        do {
            try PostReceive.run(gitDirectory: directory, updates: PostReceive.parse(input))
        } catch {
            let line = "\(ISO8601DateFormatter().string(from: Date())) post-receive: \(error)\n"
            FileHandle.standardError.write(Data("fprep hook: \(error)\n".utf8))
            if let log = FileHandle(forWritingAtPath: directory + "/fprep-hook.log") ?? {
                _ = FileManager.default.createFile(atPath: directory + "/fprep-hook.log", contents: nil)
                return FileHandle(forWritingAtPath: directory + "/fprep-hook.log")
            }() {
                log.seekToEndOfFile()
                log.write(Data(line.utf8))
                try? log.close()
            }
        }
    }
}
