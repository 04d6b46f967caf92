import Foundation
import Glibc

/// An invariant a run broke, at which step.
public struct Failure: Error, Sendable, CustomStringConvertible {
    /// Index into the case's actions, or nil for the setup or the final check.
    public let step: Int?
    /// A short stable name (`lost-bytes`, `trees-differ`, `unclean-error`…): a shrink keeps it.
    public let invariant: String
    public let detail: String
    public var description: String { "\(invariant): \(detail)" }

    /// What a shrink must keep: the invariant, and for a command's failure
    /// its message without names and numbers (so a shrink does not slide
    /// from one bug to another that breaks the same invariant).
    public var signature: String {
        guard ["final-sync-fails", "unclean-error", "hang", "crash", "trees-differ", "clone-fails"].contains(invariant) else { return invariant }
        var out = "", quoted = false
        for ch in detail.replacingOccurrences(of: "dev1", with: "dev").replacingOccurrences(of: "dev2", with: "dev") {
            if ch == "'" { quoted.toggle(); continue }
            if quoted || ch.isNumber || ch.isHexDigit && ch.isLowercase { continue }
            out.append(ch)
        }
        return invariant + ": " + out
    }
}

/// The sandbox of one case: a bare remote, a plain clone that commits and
/// pushes for the remote, two replicas, and what the model knows of every
/// write (tokens written, tokens an actor deliberately removed).
final class World {
    let box: String
    let fprep: String
    let launcher: Launcher
    let timeout: Double
    let names: Names
    var online = true
    /// Tokens written: token → where (for reports).
    private(set) var written: [String: String] = [:]
    /// Tokens an actor removed on purpose: it deleted or truncated a file whose content it had.
    private(set) var dropped: Set<String> = []
    /// Names into which a replica wrote without materializing: their conflict copies may hold zeros.
    private(set) var writtenIntoPlaceholder: Set<Bytes> = []
    /// Names an actor gave a file that held a placeholder's zeros (renamed
    /// or linked there): those bytes are the written file's own, at any name.
    private(set) var zeroHolders: Set<Bytes> = []
    /// Tokens written into placeholders: a conflict copy holding one keeps
    /// the written file as it was (its holes read as NULs), under whatever
    /// name the copy got (an edit follows a rename; a long name is shortened).
    private(set) var placeholderTokens: Set<String> = []
    /// Replicas a kill left mid-command: temporary files may remain until their next command.
    private var interrupted: Set<Actor> = []
    /// fprep commands of the current step, to check.
    private var results: [ProcessResult] = []
    private var outsideCount = 0
    /// Files outside the replicas hard-linked into one: fprep must never change them; path → bytes.
    private var outside: [String: Bytes] = [:]
    /// What ran, a line each (the last lines go with a failure's report).
    private(set) var transcript: [String] = []
    /// Whether the first device runs `fprep agent` (see `RunOptions.agent`).
    let withAgent: Bool
    let agentSyncs: Bool
    private var agent: Spawned?

    func note(_ line: String) { transcript.append(line) }

    var remotePath: String { box + (online ? "/remote.git" : "/remote.away") }
    var work: String { box + "/work" }
    func root(_ actor: Actor) -> String { box + "/" + actor.rawValue }

    init(fprep: String, timeout: Double, names: Names, agent: Bool = false, agentSyncs: Bool = true) throws {
        self.names = names
        withAgent = agent
        self.agentSyncs = agentSyncs
        umask(0o022)
        var template = Array((NSTemporaryDirectory() + "fprep-model-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw ModelError("mkdtemp failed") }
        box = URL(fileURLWithPath: String(cString: made)).resolvingSymlinksInPath().path
        self.fprep = fprep
        self.timeout = timeout
        for folder in ["/.home", "/.io", "/outside", "/src"] { mkdir(box + folder, 0o755) }
        let date = "@1700000000"
        launcher = Launcher(ioFolder: box + "/.io", environment: [
            "HOME": box + "/.home", "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C",
            "GIT_AUTHOR_NAME": "Model", "GIT_AUTHOR_EMAIL": "model@example.com",
            "GIT_COMMITTER_NAME": "Model", "GIT_COMMITTER_EMAIL": "model@example.com",
            "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date,
            "PATH": (fprep as NSString).deletingLastPathComponent + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
        ])
    }

    func remove() {
        if let agent, agent.isRunning { _ = agent.kill9() }
        _ = try? launcher.run(["/bin/chmod", "-R", "u+rwX", box], timeout: 30)
        removeTree(box)
    }

    // MARK: - Running commands

    /// Runs git; a failure is the model's own (setup), not fprep's.
    @discardableResult
    func git(_ args: [String], cwd: String? = nil, extraEnv: [String: String] = [:]) throws -> Data {
        let r = try launcher.run([Binaries.git] + args, cwd: cwd, timeout: 60, extraEnv: extraEnv)
        guard r.status == 0 else { throw ModelError("git failed: \(r.summary)") }
        return r.stdout
    }

    /// Runs fprep in a replica; its result is checked after the step.
    @discardableResult
    func fprepRun(_ actor: Actor, _ args: [String]) throws -> ProcessResult {
        let r = try launcher.run([fprep] + args, cwd: root(actor), timeout: timeout)
        note("  \(actor.rawValue): \(r.summary)")
        results.append(r)
        interrupted.remove(actor)
        return r
    }

    /// Every fprep command of the step exited cleanly: a known status, one
    /// `fprep: ` line on failure, no crash trace, no hang.
    func checkCommands(step: Int?) throws {
        defer { results = [] }
        for r in results {
            func fail(_ invariant: String, _ why: String) -> Failure {
                Failure(step: step, invariant: invariant, detail: "\(why): \(r.summary)")
            }
            let all = r.stderrText + r.stdoutText
            let crashWords = ["Fatal error", "Stack dump", "Current stack trace", "💣", "Program crashed",
                              "Segmentation fault", "backtrace", "Thread 0"]
            if r.timedOut { throw fail("hang", "no end within \(Int(timeout)) s") }
            if crashWords.contains(where: { all.contains($0) }) { throw fail("crash", "a crash trace") }
            if r.killedBySignal != nil { throw fail("crash", "killed by signal \(r.killedBySignal!)") }
            guard [0, 1, 2, 64, 65, 75].contains(r.status) else { throw fail("unclean-error", "exit status \(r.status)") }
            // A command that waited for the lock says so first (the agent
            // syncing, say): a note, not part of its error.
            let lines = r.stderrText.split(separator: "\n").map(String.init)
                .filter { !$0.isEmpty && !($0.hasPrefix("fprep: waiting for ") && $0.hasSuffix("to finish with this replica…")) }
            if r.status != 0 {
                guard let first = lines.first, first.hasPrefix("fprep: ") else {
                    throw fail("unclean-error", "a failure without an 'fprep: ' line")
                }
                if r.status == 1 && lines.count != 1 { throw fail("unclean-error", "more than one error line") }
            }
            if let odd = lines.first(where: { !$0.hasPrefix("fprep") && !$0.hasPrefix(" ") }) {
                throw fail("unclean-error", "stderr line not from fprep ('\(odd.prefix(120))')")
            }
        }
    }

    // MARK: - Setup

    /// Ignore rules every case starts with: items of these names never
    /// sync unless the remote has them; actors leave the file itself alone.
    static let ignoreFile = Array(".gitignore".utf8)
    static let ignoredSuffix = Array(".tmp".utf8)

    /// Whether the rules leave a path out: its name, or a folder's above it, ends in `.tmp`.
    static func isIgnoredName(_ path: Bytes) -> Bool {
        path.split(separator: 0x2F).contains { name in
            name.count > ignoredSuffix.count && Array(name.suffix(ignoredSuffix.count)) == ignoredSuffix
        }
    }

    /// The remote (one file and the ignore rules), the plain clone, the setup actions, the two replicas.
    func setUp(_ actions: [Action]) throws {
        try writeFile(box + "/src/a", Array("@remote#s\n".utf8), append: false)
        try writeFile(box + "/src/.gitignore", Array("*.tmp\n".utf8), append: false)
        written["remote#s"] = "setup 'a'"
        for args in [["init-remote", box + "/remote.git"], ["import-tree", box + "/src", "--into", box + "/remote.git", "-m", "start"]] {
            let r = try launcher.run([fprep] + args, cwd: box, timeout: timeout)
            guard r.status == 0 else { throw ModelError("setup failed: \(r.summary)") }
        }
        try git(["clone", "-q", remotePath, work])
        for (index, action) in actions.enumerated() where action.setup { try apply(action, index: index) }
        for device in [Actor.dev1, .dev2] {
            let r = try launcher.run([fprep, "clone", remotePath, root(device)], cwd: box, timeout: timeout)
            results.append(r)
            guard r.status == 0 else { throw Failure(step: nil, invariant: "clone-fails", detail: r.summary) }
        }
        // The second device keeps a split index (git's `core.splitIndex`,
        // what fprep writes unasked from 8,192 entries): every action and
        // crash point meets both kinds of index.
        try git(["-C", root(.dev2), "config", "core.splitIndex", "true"])
        try checkCommands(step: nil)
        if withAgent { try startAgent() }
    }

    /// `fprep agent -C dev1`, syncing 100 ms after changes settle and
    /// polling the remote every second; waits until it serves.
    private func startAgent() throws {
        let replica = root(.dev1)
        try git(["-C", replica, "config", "fprep.agent.sync", agentSyncs ? "true" : "false"])
        try git(["-C", replica, "config", "fprep.agent.syncDelay", "100"])
        // The journal also when the agent only hydrates (not its default):
        // status and sync read it, and that is what the model checks.
        try git(["-C", replica, "config", "fprep.agent.journal", "true"])
        try git(["-C", replica, "config", "fprep.agent.pollSeconds", "1"])
        let started = try launcher.spawn([fprep, "agent", "-C", replica], cwd: replica)
        agent = started
        let deadline = monotonicSeconds() + timeout
        while monotonicSeconds() < deadline {
            if let data = FileManager.default.contents(atPath: replica + "/.fprep/agent.pid"),
               Int32(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) == started.pid { return }
            if !started.isRunning { break }
            usleep(10_000)
        }
        let result = started.isRunning ? started.kill9() : started.wait(timeout: 1)
        throw ModelError("the agent did not start (it needs root and fanotify pre-content events): \(result.summary)")
    }

    /// Stops the agent (SIGTERM) before the final syncs: it must end by
    /// itself, within the command timeout, whatever it was doing.
    private func stopAgent() throws {
        guard let agent else { return }
        self.agent = nil
        kill(agent.pid, SIGTERM)
        let result = agent.wait(timeout: timeout)
        let log = String(decoding: result.stderr, as: UTF8.self)
        // Whole in the sandbox (kept with --keep), its end in the transcript.
        _ = try? writeFile(box + "/agent.log", Array(result.stderr), append: false)
        note("  agent log: " + log.split(separator: "\n").suffix(12).joined(separator: " | "))
        if result.timedOut || result.status != 0 {
            throw Failure(step: nil, invariant: "agent-stops-badly", detail: result.summary)
        }
    }

    // MARK: - Tokens

    private func token(_ actor: Actor, _ index: Int, _ sub: Int? = nil) -> String {
        "\(actor.rawValue)#\(index)" + (sub.map { ".\($0)" } ?? "")
    }

    /// An actor's write of `token` into the replica file at `path`. Under
    /// the agent, a write into a placeholder whose content cannot be had
    /// (the remote away) fails with EIO, as it should: then nothing was
    /// written, and the token is not required. False when it failed so.
    @discardableResult
    private func actorWrite(_ r: String, _ path: Bytes, _ token: String, _ actor: Actor, _ index: Int, append: Bool) throws -> Bool {
        do {
            try writeFile(join(r, path), record(token, actor, index, path), append: append)
            return true
        } catch let error as ModelError where withAgent && error.description.contains("Input/output error") {
            written.removeValue(forKey: token)
            placeholderTokens.remove(token)
            note("  the agent failed the write with EIO (its content could not be had): nothing written")
            return false
        } catch let error as ModelError where withAgent && actor == .dev1
                    && ["Is a directory", "Not a directory", "No such file or directory"].contains(where: error.description.contains) {
            // The agent's own sync took in the remote's change of this item
            // (a file made a folder, moved, deleted) between the pick and the
            // open, as it may for any program: the write never happened.
            written.removeValue(forKey: token)
            placeholderTokens.remove(token)
            note("  the agent's sync changed the item before the write (\(error.description)): nothing written")
            return false
        }
    }

    private func record(_ token: String, _ actor: Actor, _ index: Int, _ path: Bytes) -> Bytes {
        written[token] = "\(actor.rawValue) step \(index) at \(show(path))"
        return Array("@\(token)\n".utf8)
    }

    /// What `actor` knows to be in the file at `path`: its bytes, and for a
    /// placeholder the blob it stands for.
    private func knownTokens(_ path: String, isReplica: Bool) -> Set<String> {
        var result = tokens(in: readFile(path) ?? [])
        if isReplica, isDataless(path), let blob = xattr(path, "user.fprep.blob"), blob.count == 20 {
            result.formUnion(tokens(in: blobBytes(hex(blob))))
        }
        return result
    }

    /// A blob's bytes from the remote (or, not pushed yet, from a replica's own objects).
    func blobBytes(_ id: String) -> Bytes {
        if let r = try? launcher.run([Binaries.git, "--git-dir=" + remotePath, "cat-file", "blob", id], timeout: 30), r.status == 0 {
            return Array(r.stdout)
        }
        for device in [Actor.dev1, .dev2] {
            if let r = try? launcher.run([Binaries.git, "--git-dir=" + root(device) + "/.git", "cat-file", "blob", id],
                                         timeout: 30, extraEnv: ["GIT_NO_LAZY_FETCH": "1"]), r.status == 0 {
                return Array(r.stdout)
            }
        }
        return []
    }

    /// `actor` removes what is at `path` on purpose: the tokens it knew there are no longer required.
    private func removeKnowingly(_ path: String, isReplica: Bool) {
        // Only what was looked at is removed: with the agent syncing, a
        // file read here may be a folder by the time it is removed (a sync
        // laid one out in its place), and what is in that folder is dropped
        // knowingly too, as a user's `rm -r` would.
        for _ in 0..<8 {
            guard let e = entry(path) else { return }
            if e == .directory {
                chmod(path, 0o755)
                for name in listFolder(path) { removeKnowingly(path + "/" + text(name), isReplica: isReplica) }
                if rmdir(path) == 0 || errno == ENOENT { return }
            } else {
                if e.isFile { dropped.formUnion(knownTokens(path, isReplica: isReplica)) }
                if unlink(path) == 0 || errno == ENOENT { return }
            }
        }
        removeTree(path)
    }

    /// Makes the folders above `relative` exist (replacing files in the way);
    /// when `clear`, also removes what is at `relative` itself.
    private func prepare(_ root: String, _ relative: Bytes, isReplica: Bool, clear: Bool) {
        let parts = relative.split(separator: 0x2F).map(Array.init)
        var prefix: Bytes = []
        for part in parts.dropLast() {
            prefix = joinRel(prefix, part)
            let full = join(root, prefix)
            if let e = entry(full), e != .directory { removeKnowingly(full, isReplica: isReplica) }
            if entry(full) == nil { mkdir(full, 0o755) }
        }
        if clear { removeKnowingly(join(root, relative), isReplica: isReplica) }
    }

    // MARK: - Picking targets

    /// Entries of a tree (files, folders, symlinks, others), sorted.
    private func pick(_ root: String, _ x: UInt32, where accept: (Bytes, Entry) -> Bool) -> Bytes? {
        // Actors leave fprep's own temporaries alone (a hidden `.NAME.fprep-TOKEN`
        // a killed command left, which the next command settles).
        // The ignore rules stay as they are (and the picks of stored cases
        // stay what they were before the file came).
        let candidates = walk(root).filter { $0.path != Self.ignoreFile && !isFprepTemporary($0.path) && accept($0.path, $0.entry) }
        guard !candidates.isEmpty else { return nil }
        return candidates[Int(x % UInt32(candidates.count))].path
    }

    private func isFprepTemporary(_ path: Bytes) -> Bool {
        guard let name = path.split(separator: 0x2F).last, name.first == 0x2E else { return false }
        return text(Array(name)).contains(".fprep-")
    }

    private func isPrefix(_ a: Bytes, of b: Bytes) -> Bool {
        a == b || (b.count > a.count && Array(b[0..<a.count]) == a && b[a.count] == 0x2F)
    }

    // MARK: - Actions

    /// Applies one action. Failures of fprep's contract surface in the checks after it.
    func apply(_ action: Action, index: Int) throws {
        switch action.actor {
        case .remote: try applyRemote(action, index: index)
        case .world:
            if online { rename(box + "/remote.git", box + "/remote.away") } else { rename(box + "/remote.away", box + "/remote.git") }
            online.toggle()
        case .dev1, .dev2: try applyReplica(action, index: index)
        }
    }

    /// A push the remote refuses (another device pushed meanwhile: a
    /// killed fprep's git, or the agent syncing by itself) makes the action
    /// be done again on top of what is there now.
    private func applyRemote(_ action: Action, index: Int) throws {
        // A push can also meet the ref's lock held by a killed fprep's git
        // that outlives it: many attempts, each a fetch and a commit again.
        for attempt in 1...50 {
            if try applyRemoteOnce(action, index: index) { return }
            note("  remote: push refused (attempt \(attempt)); doing the action again on the remote's new tip")
        }
        throw ModelError("the remote refused the push of step \(index) 50 times")
    }

    /// Does the action in the plain clone and pushes it; false when the push was refused.
    private func applyRemoteOnce(_ action: Action, index: Int) throws -> Bool {
        try git(["fetch", "-q", remotePath, "main"], cwd: work)
        try git(["reset", "-q", "--hard", "FETCH_HEAD"], cwd: work)
        try git(["clean", "-q", "-fdx"], cwd: work)
        let r = work
        let tok = token(.remote, index)
        switch action.kind {
        case .remoteAdd, .remoteEdit:
            var path = names.path(action.a)
            if action.kind == .remoteEdit, let existing = pick(r, action.a, where: { $1.isFile }) { path = existing }
            prepare(r, path, isReplica: false, clear: entry(join(r, path))?.isFile == false)
            try writeFile(join(r, path), record(tok, .remote, index, path), append: true)
        case .remoteDelete:
            if let path = pick(r, action.a, where: { _, _ in true }) { removeKnowingly(join(r, path), isReplica: false) }
        case .remoteRename:
            if let from = pick(r, action.a, where: { _, _ in true }) {
                let to = names.path(action.b)
                // A replica's write into the placeholder of `from` follows the
                // rename, and so does a file holding such a write's zeros (a
                // conflict copy the remote's owner renamed).
                let zeros = entry(join(r, from))?.isFile == true && readFile(join(r, from))?.contains(0) == true
                move(r, from, to, isReplica: false)
                let fromName = from.split(separator: 0x2F).last.map(Array.init) ?? from
                if writtenIntoPlaceholder.contains(fromName) {
                    writtenIntoPlaceholder.insert(to.split(separator: 0x2F).last.map(Array.init) ?? to)
                }
                if zeros { noteHoldsZeros(r, to) }
            }
        case .remoteChmod:
            if let path = pick(r, action.a, where: { $1.isFile }), case .file(_, let x, _)? = entry(join(r, path)) {
                chmod(join(r, path), x ? 0o644 : 0o755)
            }
        case .remoteFileToDir:
            let path = pick(r, action.a, where: { $1.isFile }) ?? names.path(action.a)
            let inside = joinRel(path, names.name(action.b))
            prepare(r, inside, isReplica: false, clear: true)
            try writeFile(join(r, inside), record(tok, .remote, index, inside), append: false)
        case .remoteDirToFile:
            let path = pick(r, action.a, where: { $1 == .directory }) ?? names.path(action.a)
            prepare(r, path, isReplica: false, clear: true)
            try writeFile(join(r, path), record(tok, .remote, index, path), append: false)
        case .remoteSymlink:
            let path = names.path(action.a)
            prepare(r, path, isReplica: false, clear: true)
            symlink(text(names.name(action.b)), join(r, path))
        default:
            throw ModelError("\(action.kind.rawValue) is not a remote action")
        }
        try git(["add", "-A", "--force"], cwd: work)
        guard (try? git(["diff", "--cached", "--quiet"], cwd: work)) == nil else { return true }
        try git(["commit", "-q", "-m", "remote \(index)"], cwd: work)
        return (try? git(["push", "-q", remotePath, "HEAD:main"], cwd: work)) != nil
    }

    /// Moves `from` to `to` in a tree (what is at `to` is replaced), unless one is inside the other.
    private func move(_ root: String, _ from: Bytes, _ to: Bytes, isReplica: Bool) {
        guard !isPrefix(from, of: to), !isPrefix(to, of: from) else { return }
        prepare(root, to, isReplica: isReplica, clear: true)
        guard entry(join(root, from)) != nil else { return }
        rename(join(root, from), join(root, to))
    }

    private func applyReplica(_ action: Action, index: Int) throws {
        let writes = [.write, .append, .appendPlaceholder, .truncate, .concurrent].contains(action.kind)
        func replicaInodes() -> Set<UInt64> {
            Set(walk(root(action.actor)).compactMap { item -> UInt64? in
                if case .file(_, _, let inode) = item.entry { return inode }
                return nil
            })
        }
        // A concurrent writer writes while fprep works: the file it writes
        // may leave the replica meanwhile (fprep keeps its bytes in a copy),
        // so the inodes it may have written are the ones there before too.
        let before = writes ? replicaInodes() : []
        try applyReplicaAction(action, index: index)
        // What the actor wrote through a hard link changes the outside file on purpose.
        if writes {
            let inodes = before.union(replicaInodes())
            for path in outside.keys {
                if case .file(_, _, let inode)? = entry(path), inodes.contains(inode) { outside[path] = readFile(path) ?? [] }
            }
        }
    }

    private func applyReplicaAction(_ action: Action, index: Int) throws {
        let device = action.actor
        let r = root(device)
        let tok = token(device, index)
        let isFile: (Bytes, Entry) -> Bool = { $1.isFile }
        let any: (Bytes, Entry) -> Bool = { _, _ in true }
        switch action.kind {
        case .materialize, .evict:
            let path = pick(r, action.a, where: any).map(text) ?? "."
            try fprepRun(device, [action.kind.rawValue, action.b % 4 == 0 ? "." : path])
        case .write:
            let path = names.path(action.a)
            prepare(r, path, isReplica: true, clear: true)
            try actorWrite(r, path, tok, device, index, append: false)
        case .append:
            // Read-modify-write of a file the replica has: materialize first.
            guard let path = pick(r, action.a, where: { p, e in e.isFile && !isDataless(join(r, p)) })
                    ?? pick(r, action.a, where: isFile) else { break }
            if isDataless(join(r, path)) { try fprepRun(device, ["materialize", text(path)]) }
            if !isDataless(join(r, path)), entry(join(r, path))?.isFile == true {
                try actorWrite(r, path, tok, device, index, append: true)
            }
        case .appendPlaceholder:
            guard let path = pick(r, action.a, where: { p, e in e.isFile && isDataless(join(r, p)) })
                    ?? pick(r, action.a, where: isFile) else { break }
            if isDataless(join(r, path)) {
                noteWrittenIntoPlaceholder(r, path)
                placeholderTokens.insert(tok)
            }
            try actorWrite(r, path, tok, device, index, append: true)
        case .truncate:
            guard let path = pick(r, action.a, where: isFile) else { break }
            let known = knownTokens(join(r, path), isReplica: true).subtracting(dropped)
            dropped.formUnion(known)
            if try !actorWrite(r, path, tok, device, index, append: false) { dropped.subtract(known) }
        case .chmod:
            if let path = pick(r, action.a, where: isFile), case .file(_, let x, _)? = entry(join(r, path)) {
                chmod(join(r, path), x ? 0o644 : 0o755)
            }
        case .rename:
            if let from = pick(r, action.a, where: any) {
                let to = names.path(action.b)
                // A file holding a placeholder's zeros keeps them under its new name.
                let zeros = entry(join(r, from))?.isFile == true && readFile(join(r, from))?.contains(0) == true
                move(r, from, to, isReplica: true)
                if zeros, entry(join(r, to))?.isFile == true { noteHoldsZeros(r, to) }
            }
        case .delete:
            if let path = pick(r, action.a, where: any) { removeKnowingly(join(r, path), isReplica: true) }
        case .mkdir, .fileToDir:
            let folder = action.kind == .fileToDir ? (pick(r, action.a, where: isFile) ?? names.path(action.a)) : names.path(action.a)
            let inside = joinRel(folder, names.name(action.b))
            prepare(r, inside, isReplica: true, clear: true)
            if action.c % 2 == 0 { try writeFile(join(r, inside), record(tok, device, index, inside), append: false) }
            else { mkdir(join(r, inside), 0o755) }
        case .dirToFile:
            let path = pick(r, action.a, where: { $1 == .directory }) ?? names.path(action.a)
            prepare(r, path, isReplica: true, clear: true)
            try writeFile(join(r, path), record(tok, device, index, path), append: false)
        case .symlink:
            let path = names.path(action.a)
            prepare(r, path, isReplica: true, clear: true)
            symlink((action.c % 2 == 0 ? "" : "../") + text(names.name(action.b)), join(r, path))
        case .hardlink:
            guard let from = pick(r, action.a, where: isFile) else { break }
            let to = names.path(action.b)
            guard !isPrefix(from, of: to), !isPrefix(to, of: from) else { break }
            prepare(r, to, isReplica: true, clear: true)
            link(join(r, from), join(r, to))
            // A link of a file holding a placeholder's zeros (written into as
            // one, or a conflict copy of such a write) holds them under its
            // new name too.
            if readFile(join(r, from))?.contains(0) == true { noteHoldsZeros(r, to) }
        case .hardlinkOutside:
            outsideCount += 1
            let outside = box + "/outside/\(outsideCount)"
            let path = names.path(action.a)
            try writeFile(outside, record(tok, device, index, path), append: false)
            prepare(r, path, isReplica: true, clear: true)
            link(outside, join(r, path))
            self.outside[outside] = readFile(outside) ?? []
        case .ignoredWrite:
            let path = names.path(action.a) + Self.ignoredSuffix
            prepare(r, path, isReplica: true, clear: true)
            try actorWrite(r, path, tok, device, index, append: false)
        case .renameIgnored:
            if let from = pick(r, action.a, where: { p, e in e.isFile && !Self.isIgnoredName(p) }) {
                let to = from + Self.ignoredSuffix
                let zeros = readFile(join(r, from))?.contains(0) == true
                move(r, from, to, isReplica: true)
                if zeros, entry(join(r, to))?.isFile == true { noteHoldsZeros(r, to) }
            }
        case .pin:
            if let path = pick(r, action.a, where: { _, e in e == .directory || e.isFile }) {
                try fprepRun(device, [action.c % 3 == 0 ? "unpin" : "pin", text(path)])
            }
        case .fifo:
            let path = names.path(action.a)
            prepare(r, path, isReplica: true, clear: true)
            mkfifo(join(r, path), 0o644)
        case .concurrent:
            try concurrentWriter(action, device: device, index: index)
        case .sync:
            try fprepRun(device, ["sync"])
        case .syncIncoming:
            try fprepRun(device, ["sync", "--incoming"])
        case .kill:
            let args = [["sync"], ["materialize", "."], ["evict", "."]][Int(action.b % 3)]
            let process = try launcher.spawn([fprep] + args, cwd: r)
            let deadline = monotonicSeconds() + Double(action.c % 150) / 1000
            while process.isRunning && monotonicSeconds() < deadline { usleep(500) }
            if process.isRunning {
                _ = process.kill9()
                note("  \(device.rawValue): fprep \(args.joined(separator: " ")) killed")
                interrupted.insert(device)
            } else {
                results.append(process.wait(timeout: timeout))
                interrupted.remove(device)
            }
        case .crash:
            // FPREP_CRASH_AT=N: the binary kills itself at its Nth durable step (CrashPoint).
            let args = [["sync"], ["materialize", "."], ["evict", "."], ["sync", "--incoming"]][Int(action.b % 4)]
            let n = 1 + Int(action.c % 12)
            let r = try launcher.run([fprep] + args, cwd: r, timeout: timeout, extraEnv: ["FPREP_CRASH_AT": "\(n)"])
            if r.killedBySignal == SIGKILL && !r.timedOut {
                note("  \(device.rawValue): fprep \(args.joined(separator: " ")) crashed at durable step \(n)")
                interrupted.insert(device)
            } else {
                note("  \(device.rawValue): \(r.summary) (FPREP_CRASH_AT=\(n) not reached)")
                results.append(r)
                interrupted.remove(device)
            }
        default:
            throw ModelError("\(action.kind.rawValue) is not a replica action")
        }
    }

    /// Notes a write into the placeholder at `path`: its name, and the
    /// name of every other link to the same file in the replica (a hard
    /// link of a placeholder is the same placeholder: a write into one is a
    /// write into both, and fprep keeps each as written).
    private func noteWrittenIntoPlaceholder(_ r: String, _ path: Bytes) {
        writtenIntoPlaceholder.insert(path.split(separator: 0x2F).last.map(Array.init) ?? path)
        var target = stat()
        guard lstat(join(r, path), &target) == 0, target.st_nlink > 1 else { return }
        var stack = [""]
        while let folder = stack.popLast() {
            let full = folder.isEmpty ? r : r + "/" + folder
            for name in (try? FileManager.default.contentsOfDirectory(atPath: full)) ?? [] {
                if folder.isEmpty && (name == ".git" || name == ".fprep") { continue }
                let relative = folder.isEmpty ? name : folder + "/" + name
                var info = stat()
                guard lstat(r + "/" + relative, &info) == 0 else { continue }
                if info.st_mode & S_IFMT == S_IFDIR { stack.append(relative); continue }
                if info.st_ino == target.st_ino && info.st_dev == target.st_dev { writtenIntoPlaceholder.insert(Array(name.utf8)) }
            }
        }
    }

    /// Notes that the file now at `path` holds a placeholder's zeros under
    /// that name (renamed or linked there by an actor): the name itself, and
    /// its conflict copies, may hold them.
    private func noteHoldsZeros(_ r: String, _ path: Bytes) {
        let name = path.split(separator: 0x2F).last.map(Array.init) ?? path
        zeroHolders.insert(name)
        noteWrittenIntoPlaceholder(r, path)
    }

    /// A program appending tokens to a file while fprep syncs, materializes or evicts it.
    private func concurrentWriter(_ action: Action, device: Actor, index: Int) throws {
        let r = root(device)
        let path = pick(r, action.a, where: { $1.isFile }) ?? names.path(action.a)
        if entry(join(r, path)) == nil {
            prepare(r, path, isReplica: true, clear: true)
            try writeFile(join(r, path), record(token(device, index), device, index, path), append: false)
        }
        guard entry(join(r, path))?.isFile == true else { return }
        // An evict may win the race with the writer: its appends then land in a placeholder.
        let intoPlaceholder = isDataless(join(r, path)) || action.b % 3 == 2
        if intoPlaceholder { noteWrittenIntoPlaceholder(r, path) }
        let count = 20
        // Each append opens the path anew: one that fails (fprep replaced a
        // folder on the way with a symlink, or the agent failed the access)
        // wrote nothing, so only the appends the writer reports count.
        let script = "i=1; while [ $i -le \(count) ]; do printf '@\(device.rawValue)#\(index).%d\\n' $i >> \"$1\" 2>/dev/null && echo $i; i=$((i+1)); done; exit 0"
        let writer = try launcher.spawn(["/bin/sh", "-c", script, "sh", join(r, path)], cwd: r)
        let args = [["sync"], ["materialize", text(path)], ["evict", text(path)]][Int(action.b % 3)]
        try fprepRun(device, args)
        let w = writer.wait(timeout: timeout)
        if w.timedOut || w.status != 0 { throw ModelError("the concurrent writer failed: \(w.summary)") }
        let appended = String(decoding: w.stdout, as: UTF8.self).split(separator: "\n").compactMap { Int($0) }
        for k in appended {
            _ = record(token(device, index, k), device, index, path)
            if intoPlaceholder { placeholderTokens.insert(token(device, index, k)) }
        }
        if appended.count < count { note("  the writer's appends that failed: \(count - appended.count)") }
    }

    // MARK: - Checks after every step

    /// The state database passes `pragma integrity_check` and no temporary file remains.
    func checkReplicas(step: Int?) throws {
        for (path, bytes) in outside.sorted(by: { $0.key < $1.key }) where readFile(path) != bytes {
            throw Failure(step: step, invariant: "outside-file-changed",
                          detail: "\(shortArg(path)), hard-linked into a replica, changed without a write by its user")
        }
        for device in [Actor.dev1, .dev2] {
            let r = root(device)
            let db = r + "/.fprep/state.db"
            if entry(db) != nil {
                let verdict = integrityCheck(db)
                if verdict != "ok" {
                    throw Failure(step: step, invariant: "database-corrupt", detail: "\(device.rawValue): \(verdict)")
                }
            }
            // While the agent works in it, its temporaries come and go; once it
            // has stopped (the final check), they are held to the rule.
            if interrupted.contains(device) || (device == .dev1 && agent != nil) { continue }
            var leftovers = walk(r).map(\.path).filter { path in
                let name = path.split(separator: 0x2F).last.map(Array.init) ?? path
                return name.first == 0x2E && text(name).contains(".fprep-")
            }.map(show)
            leftovers += listFolder(r + "/.fprep").filter { text($0).hasPrefix("fetch-") }.map { ".fprep/" + text($0) }
            if !leftovers.isEmpty {
                throw Failure(step: step, invariant: "temporary-files", detail: "\(device.rawValue): \(leftovers.joined(separator: ", "))")
            }
        }
    }

    // MARK: - The final check

    /// Remote back, every writer done: both replicas sync twice; then both
    /// trees equal the remote's, every required token is in it, and no file
    /// of it holds a zero nobody wrote.
    func finish() throws {
        try stopAgent()
        if !online { rename(box + "/remote.away", box + "/remote.git"); online = true }
        for _ in 0..<2 {
            for device in [Actor.dev1, .dev2] {
                let r = try fprepRun(device, ["sync"])
                try checkCommands(step: nil)
                if r.status != 0 { throw Failure(step: nil, invariant: "final-sync-fails", detail: "\(device.rawValue): \(r.summary)") }
            }
        }
        try checkReplicas(step: nil)
        let remote = try remoteTree()
        // Lost bytes first: they matter most, and a tree that differs often follows from them.
        var present: Set<String> = []
        for (_, item) in remote where item.mode != "120000" { present.formUnion(tokens(in: item.bytes)) }
        // What stays on a device by the ignore rules is kept, not lost.
        for device in [Actor.dev1, .dev2] {
            for (path, e) in walk(root(device)) where e.isFile && Self.isIgnoredName(path) && remote[path] == nil {
                present.formUnion(tokens(in: readFile(join(root(device), path)) ?? []))
            }
        }
        let lost = written.keys.filter { !dropped.contains($0) && !present.contains($0) }.sorted()
        if !lost.isEmpty {
            throw Failure(step: nil, invariant: "lost-bytes",
                          detail: "\(lost.count) written token(s) in no file of the remote: " + lost.prefix(6).map { "\($0) (\(written[$0]!))" }.joined(separator: "; "))
        }
        for (path, item) in remote.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) where item.mode.hasPrefix("100") && item.bytes.contains(0) {
            let name = path.split(separator: 0x2F).last.map(Array.init) ?? path
            let isConflictCopy = text(name).contains(" (conflict ")
            let exempt = zeroHolders.contains(name)
                || (isConflictCopy && !tokens(in: item.bytes).isDisjoint(with: placeholderTokens))
                || writtenIntoPlaceholder.contains { written in
                let t = text(written)
                let stem = t.lastIndex(of: ".").map { $0 == t.startIndex ? t : String(t[..<$0]) } ?? t
                return text(name).hasPrefix(stem + " (conflict")
            }
            if !exempt {
                throw Failure(step: nil, invariant: "zeros-committed", detail: "\(show(path)) in the remote holds NUL bytes nobody wrote")
            }
        }
        // A hook that failed left some push's sizes out of the manifest (a
        // device then shows the file at 0 bytes): said here by name, not
        // found later as a placeholder of the wrong size. The push signals'
        // outbox is not modelled (a hook running while the world takes the
        // remote away cannot reach it), so its lines do not count.
        let hookLines = text(readFile(remotePath + "/fprep-hook.log") ?? []).split(separator: "\n").filter { !$0.contains("outbox") }
        if !hookLines.isEmpty {
            throw Failure(step: nil, invariant: "hook-error", detail: "the remote's hook logged: " + hookLines.joined(separator: " | ").prefix(600))
        }
        for device in [Actor.dev1, .dev2] { try compare(device, with: remote) }
        for device in [Actor.dev1, .dev2] { try checkPins(device) }
    }

    /// Every file of the remote under a pin of the device is materialized.
    private func checkPins(_ device: Actor) throws {
        let r = try fprepRun(device, ["pin", "--json"])
        try checkCommands(step: nil)
        guard r.status == 0, let object = try? JSONSerialization.jsonObject(with: r.stdout) as? [String: Any],
              let pins = object["pins"] as? [String] else {
            throw Failure(step: nil, invariant: "final-sync-fails", detail: "\(device.rawValue): fprep pin --json: \(r.summary)")
        }
        let pinned = pins.map { $0 == "." ? Bytes() : Array($0.utf8) }
        for (path, e) in walk(root(device)) where e.isFile && isDataless(join(root(device), path)) {
            if let pin = pinned.first(where: { $0.isEmpty || isPrefix($0, of: path) }) {
                throw Failure(step: nil, invariant: "pin-dataless",
                              detail: "\(device.rawValue): \(show(path)) is dataless under the pin '\(show(pin))'")
            }
        }
    }

    struct Item { let mode: String; let id: String; let bytes: Bytes }

    /// The remote branch's tree: path → mode, id and (blobs) bytes.
    func remoteTree() throws -> [Bytes: Item] {
        let out = Array(try git(["--git-dir=" + remotePath, "ls-tree", "-r", "-z", "main"]))
        var result: [Bytes: Item] = [:]
        for record in out.split(separator: 0) {
            guard let tab = record.firstIndex(of: 0x09) else { continue }
            let meta = text(Array(record[record.startIndex..<tab])).split(separator: " ")
            let path = Array(record[(tab + 1)...])
            guard meta.count == 3 else { continue }
            let id = String(meta[2])
            let bytes = meta[1] == "blob" ? Array(try git(["--git-dir=" + remotePath, "cat-file", "blob", id])) : []
            result[path] = Item(mode: String(meta[0]), id: id, bytes: bytes)
        }
        return result
    }

    /// A replica's files and symlinks equal the remote's (FIFOs, which fprep skips, left out on both sides).
    private func compare(_ device: Actor, with remote: [Bytes: Item]) throws {
        let r = root(device)
        let local = walk(r)
        let skipped = Set(local.filter { $0.entry == .other }.map(\.path))
        var seen: Set<Bytes> = []
        func fail(_ why: String) -> Failure {
            Failure(step: nil, invariant: "trees-differ", detail: "\(device.rawValue): \(why)")
        }
        for (path, e) in local {
            switch e {
            case .directory, .other: continue
            case .symlink:
                guard let item = remote[path] else { throw fail("\(show(path)) is a symlink here, absent in the remote") }
                seen.insert(path)
                let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: join(r, path))).map { Array($0.utf8) }
                guard item.mode == "120000", target == item.bytes else { throw fail("\(show(path)): a symlink here, mode \(item.mode) in the remote") }
            case .file(let size, let executable, _):
                if remote[path] == nil, Self.isIgnoredName(path) { continue }  // left out by the rules
                guard let item = remote[path] else { throw fail("\(show(path)) is a file here, absent in the remote") }
                seen.insert(path)
                guard item.mode.hasPrefix("100") else { throw fail("\(show(path)): a file here, mode \(item.mode) in the remote") }
                if (item.mode == "100755") != executable { throw fail("\(show(path)): mode \(executable ? "755" : "644") here, \(item.mode) in the remote") }
                let full = join(r, path)
                let marked = isDataless(full)
                let names = xattr(full, "user.fprep.blob").map(hex)
                if marked && size == Int64(item.bytes.count) && names == item.id { continue }
                if readFile(full) != item.bytes {
                    throw fail("\(show(path)): \(marked ? "placeholder" : "content") differs from the remote's"
                               + (marked ? " (\(size) bytes naming \(names?.prefix(8) ?? "-"); remote \(item.bytes.count) bytes \(item.id.prefix(8)))" : ""))
                }
                if marked {
                    throw Failure(step: nil, invariant: "placeholder-mark",
                                  detail: "\(device.rawValue): \(show(path)) holds the remote's content but is marked a placeholder of another blob")
                }
            }
        }
        let missing = remote.keys.filter { !seen.contains($0) && !skipped.contains($0) }
        if let first = missing.sorted(by: { $0.lexicographicallyPrecedes($1) }).first {
            throw fail("\(show(first)) (\(remote[first]!.mode)) is in the remote, not here (\(missing.count) missing)")
        }
    }
}
