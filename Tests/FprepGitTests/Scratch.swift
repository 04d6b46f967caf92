import Foundation

/// A temporary folder removed when the test is done.
final class Scratch {
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "fprep-git-test-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    /// Runs git with fixed dates and identity; returns its standard output.
    @discardableResult
    func git(_ arguments: [String], in directory: String? = nil, input: String? = nil, withErrors: Bool = false,
             environment extra: [String: String] = [:]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["git"] + arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory ?? path)
        var environment = ProcessInfo.processInfo.environment
        environment["GIT_AUTHOR_DATE"] = "@1700000000 +0000"
        environment["GIT_COMMITTER_DATE"] = "@1700000000 +0000"
        environment["GIT_AUTHOR_NAME"] = "Test"
        environment["GIT_AUTHOR_EMAIL"] = "test@example.invalid"
        environment["GIT_COMMITTER_NAME"] = "Test"
        environment["GIT_COMMITTER_EMAIL"] = "test@example.invalid"
        for (key, value) in extra { environment[key] = value }
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = withErrors ? output : FileHandle.nullDevice
        let inputPipe = Pipe()
        process.standardInput = inputPipe
        try process.run()
        if let input { inputPipe.fileHandleForWriting.write(Data(input.utf8)) }
        try inputPipe.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw NSError(domain: "git", code: Int(process.terminationStatus),
                          userInfo: [NSLocalizedDescriptionKey: "git \(arguments.joined(separator: " ")) failed"])
        }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Runs git; returns what it printed on both outputs.
    func gitOutputAndError(_ arguments: [String], in directory: String? = nil) throws -> String {
        try git(arguments, in: directory, withErrors: true)
    }
}
