import Glibc

/// The programs a replica refuses hydration (`fprep.agent.refuse =
/// updatedb, baloo_file`): indexers and backup tools that would read every
/// file. A process is refused when its name (`/proc/PID/comm`) or its
/// executable's file name is listed; it gets EIO, never the content.
struct RefusedPrograms: Sendable {
    private let names: Set<[UInt8]>
    /// The setting as written (what the worker passes to the agent).
    let setting: String

    /// `setting`: names separated by commas or spaces.
    init(_ setting: String) {
        self.setting = setting
        names = Set(Array(setting.utf8).split { $0 == 0x2C || $0 == 0x20 || $0 == 0x09 }.map(Array.init))
    }

    var isEmpty: Bool { names.isEmpty }

    /// How the log names process `pid` when it is refused (`updatedb (pid 812)`); nil when it is not.
    func refusal(of pid: Int32) -> String? {
        guard !names.isEmpty, pid > 0 else { return nil }
        let command = Self.read("/proc/\(pid)/comm").filter { $0 != 0x0A }
        let executable = Self.link("/proc/\(pid)/exe")
        let base = Array(executable.split(separator: 0x2F).last ?? [])
        guard names.contains(command) || names.contains(base) else { return nil }
        let shown = command.isEmpty ? base : command
        return "\(String(decoding: shown, as: UTF8.self)) (pid \(pid))"
    }

    private static func read(_ path: String) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        return count > 0 ? Array(buffer[0..<count]) : []
    }

    private static func link(_ path: String) -> [UInt8] {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink(path, &buffer, buffer.count)
        return count > 0 ? buffer[0..<count].map { UInt8(bitPattern: $0) } : []
    }
}
