import Foundation
import Glibc

/// Starts `fprep agent -C replica` (as root) and waits until it serves the
/// replica (its pid in `.fprep/agent.pid`).
///
/// `syncs`: whether the agent syncs by itself (its default). A bench that
/// times fprep's own commands with the agent only journaling turns it off,
/// or the agent's catch-up sync would take in (or push) the very changes
/// the command is timed on.
/// The change journal is kept either way: these benches time status and
/// sync reading it.
/// The agent's log goes to `agentLogPath(replica)`, so a step that fails
/// while it serves (an access it failed with EIO, say) can be explained.
func startAgent(fprep: String, replica: String, syncs: Bool) throws -> Process {
    for (name, value) in [("fprep.agent.sync", syncs), ("fprep.agent.journal", true)] {
        let setting = Process()
        setting.executableURL = URL(fileURLWithPath: "/usr/bin/git")
        setting.arguments = ["-C", replica, "config", name, value ? "true" : "false"]
        try setting.run()
        setting.waitUntilExit()
        guard setting.terminationStatus == 0 else {
            throw BenchError.message("git config \(name) in \(replica) failed (exit \(setting.terminationStatus))")
        }
    }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: fprep)
    process.arguments = ["agent", "-C", replica]
    process.standardOutput = FileHandle.nullDevice
    let log = agentLogPath(replica)
    guard FileManager.default.createFile(atPath: log, contents: nil), let logFile = FileHandle(forWritingAtPath: log) else {
        throw BenchError.message("cannot create the agent's log '\(log)'")
    }
    process.standardError = logFile
    try process.run()
    try? logFile.close()
    let pidFile = replica + "/.fprep/agent.pid"
    let deadline = Date().addingTimeInterval(600)
    while (try? String(contentsOfFile: pidFile, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) != "\(process.processIdentifier)" {
        guard process.isRunning, Date() < deadline else {
            process.terminate()
            throw BenchError.message("fprep agent did not start on \(replica) (it needs root and fanotify pre-content events)")
        }
        usleep(20_000)
    }
    return process
}

/// Where `startAgent` keeps the log of the agent serving `replica`: beside
/// the replica (the next agent started there writes it anew).
func agentLogPath(_ replica: String) -> String { replica + ".agent.log" }

/// The processes whose parent is `pid` (from /proc).
func childProcesses(of pid: Int32) -> [Int32] {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    return entries.compactMap { Int32($0) }.filter { child in
        guard let text = try? String(contentsOfFile: "/proc/\(child)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return false }
        let fields = text[text.index(after: close)...].split(separator: " ")
        return fields.count > 2 && Int32(fields[1]) == pid
    }
}

/// User and system CPU ticks a process used.
func cpuTicks(_ pid: Int32) -> Int {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = text.lastIndex(of: ")") else { return 0 }
    let fields = text[text.index(after: close)...].split(separator: " ")
    guard fields.count > 13 else { return 0 }
    return (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)
}

/// A process's resident memory.
func residentBytes(_ pid: Int32) -> Int {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
    for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
    }
    return 0
}
