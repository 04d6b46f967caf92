import FoundationEssentials
import Glibc
import FprepGit

/// How a command tells the agent serving its replica to watch placeholders
/// before programs can reach them. A placeholder the agent does not watch
/// reads as zeros; the agent finds new ones when the index changes, so
/// without this a file evicted, or laid out by a sync, read at once after,
/// read zeros. Every command that makes a placeholder while an agent
/// serves asks first: for a new file, before it is renamed into place;
/// for a file turned back into a placeholder, before its blocks go (an
/// access then waits for the agent, which fills the file once the command
/// lets the replica go).
///
/// The request goes to `.fprep/agent.sock`, which the agent's worker
/// listens on as the replica's owner (only the owner, and root, can
/// connect), and on to the agent. In the worker itself, `inProcess` stands
/// for the socket.
public final class AgentLink: @unchecked Sendable {
    /// The socket's name in `.fprep`.
    public static let socketName = "agent.sock"

    /// Set in the agent's worker: its own commands (syncs, the disk budget)
    /// ask the agent directly.
    nonisolated(unsafe) public static var inProcess: (@Sendable ([WatchedPlaceholder]) -> Bool)?

    private let fd: Int32

    private init(fd: Int32) { self.fd = fd }
    deinit { close(fd) }

    /// What a command that makes placeholders has to do: nothing (no agent
    /// serves), or ask the agent.
    enum Need {
        case noAgent
        case ask((_ files: [WatchedPlaceholder]) -> Bool)
    }

    /// Whether an agent serves the replica at `root`, and how to reach it.
    /// An agent that serves but cannot be reached (one older than the
    /// socket) answers every request with false.
    static func need(replicaRoot root: String) -> Need {
        if let direct = inProcess { return .ask(direct) }
        guard InPlaceHydration.servingAgent(replicaRoot: root) != nil else { return .noAgent }
        guard let link = connect(stateFolder: root + "/" + Replica.stateFolderName) else {
            return .ask { _ in false }
        }
        return .ask { link.watch($0) }
    }

    private static func connect(stateFolder: String) -> AgentLink? {
        let folder = open(stateFolder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard folder >= 0 else { return nil }
        defer { close(folder) }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        let connected = withSocketAddress(folder: folder) { address, length in Glibc.connect(fd, address, length) }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        return AgentLink(fd: fd)
    }

    /// The socket's address, reached through the open `.fprep` folder: a
    /// socket's path may be at most 107 bytes, a replica's path longer.
    public static func withSocketAddress(folder: Int32, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array("/proc/self/fd/\(folder)/\(socketName)".utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, byte) in bytes.enumerated() where i < raw.count - 1 { raw[i] = byte }
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// One request: `watch N`, then a line per file (blob id, hex of the
    /// path's bytes, and of where it is now when not there yet); the answer
    /// `ok` or `no`.
    private func watch(_ files: [WatchedPlaceholder]) -> Bool {
        guard !files.isEmpty else { return true }
        var text = "watch \(files.count)\n"
        for file in files {
            text += file.blob.hex + " " + Self.hex(file.path.bytes) + (file.markAt.map { " " + Self.hex($0.bytes) } ?? "") + "\n"
        }
        guard Self.sendAll(Array(text.utf8), to: fd) else { return false }
        var reader = LineReader(fd: fd)
        return reader.line() == "ok"
    }

    /// Set in the agent's worker: what its own syncs ask the journal.
    nonisolated(unsafe) public static var inProcessJournal: (@Sendable (JournalToken?) -> JournalAnswer?)?

    /// What the change journal of the agent serving the replica at `root`
    /// says changed since `point`; nil when no agent serves it, or its
    /// worker keeps no journal (the caller scans, and keeps no record).
    static func journalChanges(replicaRoot root: String, since point: JournalToken?) -> JournalAnswer? {
        if let direct = inProcessJournal { return direct(point) }
        guard InPlaceHydration.servingAgent(replicaRoot: root) != nil,
              let link = connect(stateFolder: root + "/" + Replica.stateFolderName) else { return nil }
        return link.changes(since: point)
    }

    /// One request: `changes EPOCH N` (`changes - 0` for no point); the
    /// answer `full EPOCH N`, `since EPOCH N COUNT` and a line per path (hex
    /// of its bytes), or `none`.
    private func changes(since point: JournalToken?) -> JournalAnswer? {
        guard Self.sendAll(Array("changes \(point?.epoch ?? "-") \(point?.sequence ?? 0)\n".utf8), to: fd) else { return nil }
        var reader = LineReader(fd: fd)
        guard let header = reader.line() else { return nil }
        let parts = header.split(separator: " ")
        guard parts.count >= 3, let sequence = UInt64(parts[2]) else { return nil }
        let now = JournalToken(epoch: String(parts[1]), sequence: sequence)
        switch parts[0] {
        case "full" where parts.count == 3:
            return .full(now)
        case "since" where parts.count == 4:
            guard let count = Int(parts[3]), count >= 0 else { return nil }
            var paths: [[UInt8]] = []
            paths.reserveCapacity(count)
            for _ in 0..<count {
                guard let line = reader.line(), let path = Self.unhex(Substring(line)) else { return nil }
                paths.append(path)
            }
            return .since(now, paths)
        default:
            return nil
        }
    }

    /// Writes all of `bytes` to the socket `fd`; false when it closed.
    public static func sendAll(_ bytes: [UInt8], to fd: Int32) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            sent += n
        }
        return true
    }

    /// Lines from a socket, read a buffer at a time (both ends use it).
    public struct LineReader {
        let fd: Int32
        var pending: [UInt8] = []

        public init(fd: Int32) { self.fd = fd }

        /// Where the next line starts in `pending`.
        var start = 0

        public mutating func line() -> String? {
            while true {
                if let end = pending[start...].firstIndex(of: 0x0A) {
                    let text = String(decoding: pending[start..<end], as: UTF8.self)
                    start = end + 1
                    if start == pending.count { pending.removeAll(keepingCapacity: true); start = 0 }
                    return text
                }
                if start > 0 { pending.removeFirst(start); start = 0 }
                var chunk = [UInt8](repeating: 0, count: 65536)
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { return nil }
                pending += chunk[0..<n]
            }
        }
    }

    /// The answer line(s) for the worker's side of a `changes` request.
    public static func encode(_ answer: JournalAnswer?) -> [UInt8] {
        switch answer {
        case nil:
            return Array("none\n".utf8)
        case .full(let now)?:
            return Array("full \(now.epoch) \(now.sequence)\n".utf8)
        case .since(let now, let paths)?:
            var text = "since \(now.epoch) \(now.sequence) \(paths.count)\n"
            for path in paths { text += hex(path) + "\n" }
            return Array(text.utf8)
        }
    }

    /// Parses a `changes` request's point (for the worker's side).
    public static func parsePoint(epoch: Substring, sequence: Substring) -> JournalToken?? {
        guard let number = UInt64(sequence) else { return nil }
        if epoch == "-" { return .some(nil) }
        return .some(JournalToken(epoch: String(epoch), sequence: number))
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes { out.append(digits[Int(byte >> 4)]); out.append(digits[Int(byte & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses one request line (for the worker's side); nil when it does not parse.
    public static func parseLine(_ line: Substring) -> WatchedPlaceholder? {
        let parts = line.split(separator: " ")
        guard parts.count == 2 || parts.count == 3, let blob = ObjectID(hex: String(parts[0])),
              let path = unhex(parts[1]) else { return nil }
        var file = WatchedPlaceholder(path: RepoPath(bytes: path), blob: blob)
        if parts.count == 3 {
            guard let now = unhex(parts[2]) else { return nil }
            file.markAt = RepoPath(bytes: now)
        }
        return file
    }

    static func unhex(_ text: Substring) -> [UInt8]? {
        text.isEmpty ? nil : Hex.decode(text)
    }
}

extension Replica {
    /// Has the agent serving the replica (if one does) watch `files`, made
    /// under their temporary names and not yet renamed into place (see
    /// `AgentLink`). An agent that does not answer leaves them to its next
    /// listing, as before there was a link: a sync is not held up by it.
    func letAgentWatch(_ files: [WatchedPlaceholder]) {
        guard !files.isEmpty, case .ask(let watch) = agentWatch else { return }
        _ = watch(files)
    }
}
