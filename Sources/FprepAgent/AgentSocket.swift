import CFprepSys
import Dispatch
import FprepCore
import Glibc

/// The worker's end of `AgentLink`: listens on `.fprep/agent.sock` as the
/// replica's owner (mode 0600: the owner's commands, and root's, connect)
/// and passes each request to watch placeholders on to the agent, which
/// answers once it watches them; and asks the change journal what
/// changed since a point (see `ChangeJournal`).
final class AgentSocket: @unchecked Sendable {
    private let listener: Int32
    private let path: String
    /// Passes a request on, with the process id of the command that asked.
    private let watch: @Sendable ([WatchedPlaceholder], pid_t) -> Bool
    /// Answers what changed since a point (the change journal).
    private let journal: @Sendable (JournalToken?) -> JournalAnswer?
    private var thread: BlockingThread?

    init(replicaRoot root: String, journal: @escaping @Sendable (JournalToken?) -> JournalAnswer?,
         watch: @escaping @Sendable ([WatchedPlaceholder], pid_t) -> Bool) throws {
        self.watch = watch
        self.journal = journal
        let stateFolder = root + "/.fprep"
        path = stateFolder + "/" + AgentLink.socketName
        let folder = open(stateFolder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard folder >= 0 else { throw FprepError("cannot listen in '\(stateFolder)': \(String(cString: strerror(errno)))") }
        defer { close(folder) }
        // A socket a killed worker left is not in use: this worker holds the agent's lock.
        unlinkat(folder, AgentLink.socketName, 0)
        listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard listener >= 0 else { throw FprepError("cannot make the agent's socket: \(String(cString: strerror(errno)))") }
        let old = umask(0o077)
        let bound = AgentLink.withSocketAddress(folder: folder) { address, length in bind(listener, address, length) }
        umask(old)
        guard bound == 0, listen(listener, 16) == 0 else {
            let why = String(cString: strerror(errno))
            close(listener)
            throw FprepError("cannot listen on '\(path)': \(why)")
        }
        thread = try BlockingThread { [self] in acceptLoop() }
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        thread?.join()
        thread = nil
        close(listener)
        unlink(path)
    }

    private func acceptLoop() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                return
            }
            _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
            // A command's connection lasts as long as it runs, mostly waiting.
            BlockingThread.start { [self] in serve(connection) }
        }
    }

    /// Requests until the command closes its end (see `AgentLink.watch`).
    private func serve(_ connection: Int32) {
        defer { close(connection) }
        // Who asks, as the kernel says.
        let peer = fprep_peer_pid(connection)
        guard peer > 0 else { return }
        var reader = AgentLink.LineReader(fd: connection)
        func line() -> Substring? { reader.line().map { Substring($0) } }
        while let header = line() {
            let parts = header.split(separator: " ")
            if parts.count == 3, parts[0] == "changes" {
                guard let point = AgentLink.parsePoint(epoch: parts[1], sequence: parts[2]) else { return }
                guard AgentLink.sendAll(AgentLink.encode(journal(point)), to: connection) else { return }
                continue
            }
            guard parts.count == 2, parts[0] == "watch", let count = Int(parts[1]), count >= 0, count <= 10_000_000 else { return }
            var files: [WatchedPlaceholder] = []
            for _ in 0..<count {
                guard let text = line(), let file = AgentLink.parseLine(text) else { return }
                files.append(file)
            }
            guard AgentLink.sendAll(Array((watch(files, pid_t(peer)) ? "ok\n" : "no\n").utf8), to: connection) else { return }
        }
    }
}
