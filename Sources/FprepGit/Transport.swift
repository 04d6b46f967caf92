import Dispatch
import FoundationEssentials
import Glibc
import Synchronization

/// The network side of a partial clone, done with the `git` command.
public enum Transport {
    /// The refs of fprep's own that every fetch brings along (size manifest,
    /// remote info), mapped under `refs/remotes/origin-fprep/`.
    public static let fprepRefspec = "+refs/fprep/*:refs/remotes/origin-fprep/*"

    /// Clones `url` without blobs and without a checkout: commits and trees
    /// only. The git directory is `gitDirectory`; `scratchWorkTree` is an
    /// empty folder git needs for the clone and that the caller removes.
    /// With `refsFetchedBeside`, fprep's refs are left to `fetchFprepRefs`
    /// and `adoptFprepRefs`, which the caller runs beside this. `stop`
    /// ends the clone early (see `GitCommand.Stop`).
    public static func blobless(clone url: String, gitDirectory: String, scratchWorkTree: String,
                                branch: String?, showProgress: Bool, refsFetchedBeside: Bool = false,
                                stop: GitCommand.Stop? = nil) throws {
        // One branch: a broken branch the replica does not follow (a tree
        // missing on the remote) never fails its clone.
        var arguments = ["clone", "--filter=blob:none", "--no-checkout", "--no-tags", "--single-branch",
                         "--separate-git-dir=\(gitDirectory)",
                         "-c", "gc.auto=0", "-c", "maintenance.auto=false",
                         "-c", "remote.origin.fetch=\(fprepRefspec)"]
        arguments.append(showProgress ? "--progress" : "--quiet")
        if let branch { arguments += ["--branch", branch] }
        arguments += ["--", transportURL(url), scratchWorkTree]
        try GitCommand.run(arguments, showProgress: showProgress, stop: stop)
        // A single-branch clone fetches no other refspec: fprep's refs (the
        // size manifest, the remote's info) come in a fetch of their own.
        if refsFetchedBeside { return }
        try fetchFprepRefs(gitDirectory: gitDirectory)
    }

    /// Fetches fprep's refs from the clone's remote into the clone at `gitDirectory`.
    public static func fetchFprepRefs(gitDirectory: String) throws {
        try GitCommand.run(["--git-dir=\(gitDirectory)"] + fprepRefsFetch)
    }

    /// The fetch of fprep's refs from `origin`, after git's `--git-dir` and
    /// any `-c` of the caller's.
    private static let fprepRefsFetch = ["-c", "gc.auto=0", "-c", "maintenance.auto=false",
                                         "fetch", "--quiet", "--no-tags", "--recurse-submodules=no", "--filter=blob:none", "origin", fprepRefspec]

    /// Whether fprep's refs may be fetched beside a clone of `url` (see
    /// `fetchFprepRefs`): not where two fetches could ask for a password
    /// or passphrase at once. git itself asks for nothing (fprep runs it
    /// with GIT_TERMINAL_PROMPT=0), but a program named by GIT_ASKPASS or
    /// SSH_ASKPASS would show two questions, and ssh asks on the terminal
    /// itself. The URL classified is the one git uses, after its
    /// `url.<base>.insteadOf` rewriting (https in, ssh out, say).
    public static func fetchesRefsBeside(_ url: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        if environment["GIT_ASKPASS"] != nil || environment["SSH_ASKPASS"] != nil { return false }
        let inherited = ProcessInfo.processInfo.environment
        let extra = environment.filter { inherited[$0.key] != $0.value }
        guard let used = try? GitCommand.run(["ls-remote", "--get-url", "--", transportURL(url)], environment: extra) else { return false }
        let rewritten = String(decoding: used, as: UTF8.self).split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        return neverAsksOnTerminal(rewritten.isEmpty ? url : rewritten)
    }

    /// Whether a fetch from `url` (as git uses it) cannot ask on the
    /// terminal: not ssh (`ssh://`, `git+ssh://`, scp-like `host:path`),
    /// not a remote helper's `x::address`.
    static func neverAsksOnTerminal(_ url: String) -> Bool {
        if url.contains("::") { return false }
        if let separator = url.firstRange(of: "://") {
            let scheme = url[..<separator.lowerBound]
            // git reads a scheme only of these characters; otherwise the
            // address is scp-like (`host:dir://x`).
            if !scheme.isEmpty, scheme.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+-.".contains($0)) }) {
                return !scheme.lowercased().contains("ssh")
            }
        }
        if let colon = url.firstIndex(of: ":"), !url[..<colon].contains("/") { return false }  // host:path (ssh)
        return true
    }

    /// Fetches fprep's refs from `url` as a clone's second fetch does (see
    /// `blobless`), into a new repository at `side` of their own, so it can
    /// run while the clone does: at 10^6 files the fetch after the clone
    /// took 0.76–1.0 s beside the clone's 1.3 s. Every object comes in a
    /// pack (none loose), which `adoptFprepRefs` moves into the clone.
    public static func fetchFprepRefs(url: String, into side: String) throws {
        _ = try Repository(creatingBareAt: side, initialBranch: "main")
        try GitCommand.run(["--git-dir=\(side)", "-c", "fetch.unpackLimit=1", "-c", "remote.origin.url=\(transportURL(url))",
                            "-c", "remote.origin.promisor=true", "-c", "remote.origin.partialclonefilter=blob:none"] + fprepRefsFetch)
    }

    /// Moves what `fetchFprepRefs` brought into `side` into the clone at
    /// `gitDirectory`: its packs (each index last, so no reader finds an
    /// index without its pack), any loose object, then its refs.
    public static func adoptFprepRefs(from side: String, into gitDirectory: String) throws {
        func move(_ from: String, _ to: String) throws {
            guard rename(from, to) == 0 else {
                throw GitCommandError(arguments: ["rename", from, to], status: -1,
                                      standardError: "fatal: cannot move \(from) into the clone: \(String(cString: strerror(errno)))")
            }
        }
        let packs = side + "/objects/pack/"
        // A folder that cannot be read fails the clone: its refs would name objects it lacks.
        let names = try FileManager.default.contentsOfDirectory(atPath: packs).sorted { a, b in
            (a.hasSuffix(".idx") ? 1 : 0, a) < (b.hasSuffix(".idx") ? 1 : 0, b)
        }
        for name in names where name.hasPrefix("pack-") { try move(packs + name, gitDirectory + "/objects/pack/" + name) }
        for folder in try FileManager.default.contentsOfDirectory(atPath: side + "/objects")
        where folder.count == 2 && folder.allSatisfy(\.isHexDigit) {
            try FileManager.default.createDirectory(atPath: gitDirectory + "/objects/" + folder, withIntermediateDirectories: true)
            for name in try FileManager.default.contentsOfDirectory(atPath: side + "/objects/" + folder) {
                try move(side + "/objects/" + folder + "/" + name, gitDirectory + "/objects/" + folder + "/" + name)
            }
        }
        // With libgit2, not `git for-each-ref` and `git update-ref`: two
        // processes cost every clone 10–14 ms.
        let clone = try Repository(openingAt: gitDirectory)
        for (name, target) in try Repository(openingAt: side).references(under: "refs/remotes/origin-fprep/") {
            try clone.setReference(name, to: target, message: "fetch: fprep's refs, beside the clone")
        }
    }

    /// Whether the remote at `url` serves filtered fetches (partial clone),
    /// from the capabilities it advertises to `git ls-remote`, which fetches
    /// nothing: protocol v2's `fetch=… filter`, or v0's `filter` after the
    /// first ref. A server without it (`uploadpack.allowFilter` off) makes
    /// git ignore `--filter` and send every blob. nil when the remote could
    /// not be asked or its advertisement said neither way (the clone then
    /// goes on and says what failed). `traceFile` is a scratch file for
    /// git's packet trace, removed here.
    public static func allowsFilter(url: String, traceFile: String) -> Bool? {
        defer { unlink(traceFile) }
        guard (try? GitCommand.run(["ls-remote", "--heads", "--", transportURL(url)],
                                   environment: ["GIT_TRACE_PACKET": traceFile])) != nil,
              let trace = FileManager.default.contents(atPath: traceFile) else { return nil }
        return advertisesFilter(String(decoding: trace, as: UTF8.self))
    }

    /// Reads a packet trace's capability advertisement (see `allowsFilter`).
    static func advertisesFilter(_ trace: String) -> Bool? {
        var advertised: Bool?
        for line in trace.split(separator: "\n") {
            let capabilities: Substring
            if let at = line.firstRange(of: "fetch=") {
                capabilities = line[at.upperBound...]          // protocol v2
            } else if let at = line.firstRange(of: "\\0") {
                capabilities = line[at.upperBound...]          // v0: after the first ref's NUL, shown as \0
            } else {
                continue
            }
            if capabilities.split(separator: " ").contains("filter") { return true }
            advertised = false
        }
        return advertised
    }

    /// The followed branch is not on the remote (any more).
    public struct BranchNotFound: Error, Sendable {
        public let branch: String
    }

    /// Fetches the followed branch and fprep's refs from `origin`: commits
    /// and trees only, and nothing of other branches, whatever refspecs the
    /// replica's config names (clones of older versions name every branch),
    /// so a broken branch the replica does not follow never fails its sync.
    /// fprep's refs the remote deleted are pruned.
    public static func fetchTrees(gitDirectory: String, branch: String) throws {
        do {
            try GitCommand.run(["--git-dir=\(gitDirectory)", "-c", "gc.auto=0", "-c", "maintenance.auto=false",
                                "fetch", "--quiet", "--no-tags", "--prune", "--recurse-submodules=no", "--filter=blob:none", "origin",
                                "+refs/heads/\(branch):refs/remotes/origin/\(branch)", fprepRefspec])
        } catch let error as GitCommandError where error.standardError.contains("couldn't find remote ref refs/heads/") {
            throw BranchNotFound(branch: branch)
        }
    }

    /// The remote's tip of `branch` (`git ls-remote`: no objects move), or
    /// nil when the remote has no such branch.
    public static func remoteTip(gitDirectory: String, branch: String) throws -> ObjectID? {
        let listing = try GitCommand.run(["--git-dir=\(gitDirectory)", "ls-remote", "origin", "refs/heads/\(branch)"])
        for line in String(decoding: listing, as: UTF8.self).split(separator: "\n") {
            let fields = line.split(separator: "\t")
            if fields.count == 2, fields[1] == "refs/heads/\(branch)" { return ObjectID(hex: String(fields[0])) }
        }
        return nil
    }

    /// The names of the remote's branches (`git ls-remote --heads`).
    public static func branches(gitDirectory: String) throws -> [String] {
        let listing = try GitCommand.run(["--git-dir=\(gitDirectory)", "ls-remote", "--heads", "origin"])
        return String(decoding: listing, as: UTF8.self).split(separator: "\n").compactMap { line in
            line.split(separator: "\t").last.map { String($0.dropFirst("refs/heads/".count)) }
        }
    }

    /// How a push ended when it did not succeed.
    public enum PushRefusal: Error, Sendable {
        /// The remote moved on since the last fetch (someone pushed first).
        case rejected(String)
        /// The remote could not be reached, or failed otherwise.
        case failed(GitCommandError)
    }

    /// A ref pushed beside the branch, with a lease on its old value
    /// (`--force-with-lease=REF:OLD`): it lands only where the remote still
    /// has `expected` (nil: no such ref yet), so no one's update is lost.
    public struct LeasedUpdate: Sendable {
        public let reference: String
        public let target: ObjectID
        public let expected: ObjectID?

        public init(reference: String, target: ObjectID, expected: ObjectID?) {
            self.reference = reference
            self.target = target
            self.expected = expected
        }

        var arguments: [String] {
            ["--force-with-lease=\(reference):\(expected?.hex ?? "")", "\(target.hex):\(reference)"]
        }
    }

    /// How a leased update pushed beside the branch ended.
    public enum LeaseOutcome: Sendable, Equatable {
        /// None was asked for.
        case none
        case landed
        /// The remote refused it (its ref moved, or it takes no such ref);
        /// the branch was pushed all the same.
        case refused(String)
    }

    /// Pushes `commit` to `refs/heads/BRANCH` of `origin` (fast-forward
    /// only). `--no-thin`: a thin pack would use the remote's blobs as delta
    /// bases, and a partial clone does not hold them. `pack.useSparse=false`:
    /// the sparse walk marks the remote's objects as present only along
    /// paths the new commit still has, so a placeholder moved out of a
    /// folder that went with it looked like a blob to send, one this clone
    /// never fetched (the push then died, or fetched the content of a move).
    static let pushOptions = ["-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "pack.useSparse=false",
                              "push", "--no-thin"]
    ///
    /// `update` goes in the same push (`--atomic` where the remote takes
    /// it): a refusal of it alone never fails the branch's push, which is
    /// then pushed by itself, and the outcome says so.
    ///
    /// A commit may name blobs this partial clone never fetched (a
    /// placeholder moved, or kept beside a file the remote changed since):
    /// those git would send are fetched first, in one request; a blob git
    /// still asks its promisor for while packing (a lazy fetch, which fprep
    /// forbids) is fetched the same way and the push tried again.
    @discardableResult
    public static func push(_ commit: ObjectID, branch: String, gitDirectory: String,
                            alongside update: LeasedUpdate? = nil) throws -> LeaseOutcome {
        var fetched = Set<ObjectID>()
        do {
            let missing = try missingObjects(reachableFrom: commit, gitDirectory: gitDirectory)
            if !missing.isEmpty { try fetchObjects(missing, gitDirectory: gitDirectory) }
            fetched.formUnion(missing)
        } catch let error as GitCommandError {
            throw PushRefusal.failed(error)
        }
        var atomic = update != nil
        while true {
            do {
                CrashPoint.reach()
                try GitCommand.run(["--git-dir=\(gitDirectory)"] + pushOptions + (atomic ? ["--atomic"] : []) + ["origin", "\(commit.hex):refs/heads/\(branch)"]
                                   + (update?.arguments ?? []))
                return update == nil ? .none : .landed
            } catch let error as GitCommandError {
                let text = error.standardError
                if let update {
                    if atomic, text.contains("does not support --atomic") {
                        atomic = false
                        continue
                    }
                    let refusals = refusedReferences(in: text)
                    if let reason = refusals[update.reference] {
                        // Someone pushed the branch first: the caller fetches
                        // and merges. Refused for any other reason (the
                        // atomic push failed for the update's sake, a hook
                        // that declined the whole push), the branch goes
                        // alone now and meets its own fate; else it landed.
                        let branchReason = refusals[branch] ?? refusals["refs/heads/" + branch]
                        if let branchReason, ["fetch first", "non-fast-forward", "stale info"].contains(branchReason) {
                            throw PushRefusal.rejected(error.reason)
                        }
                        if branchReason != nil { try push(commit, branch: branch, gitDirectory: gitDirectory) }
                        return .refused(reason)
                    }
                }
                if text.contains("[rejected]") || text.contains("fetch first") || text.contains("non-fast-forward") {
                    throw PushRefusal.rejected(error.reason)
                }
                let wanted = Set(promisorMisses(in: text)).subtracting(fetched)
                guard !wanted.isEmpty else { throw PushRefusal.failed(error) }
                do {
                    try fetchObjects(Array(wanted), gitDirectory: gitDirectory)
                } catch let fetchError as GitCommandError {
                    throw PushRefusal.failed(fetchError)
                }
                fetched.formUnion(wanted)
            }
        }
    }

    /// Pushes `update` alone; nil when it landed, else why the remote
    /// refused it (its ref moved on: "stale info"). Other failures throw.
    public static func push(_ update: LeasedUpdate, gitDirectory: String) throws -> String? {
        do {
            try GitCommand.run(["--git-dir=\(gitDirectory)"] + pushOptions + ["origin"] + update.arguments)
            return nil
        } catch let error as GitCommandError {
            guard let reason = refusedReferences(in: error.standardError)[update.reference] else { throw error }
            return reason
        }
    }

    /// Fetches fprep's refs alone (the size manifest, the remote's info).
    public static func fetchFprepReferences(gitDirectory: String) throws {
        try GitCommand.run(["--git-dir=\(gitDirectory)", "-c", "gc.auto=0", "-c", "maintenance.auto=false",
                            "fetch", "--quiet", "--no-tags", "--recurse-submodules=no", "--filter=blob:none", "origin", fprepRefspec])
    }

    /// The refs a push's report says were refused, with why: its lines
    /// ` ! [rejected]        SRC -> DST (REASON)` (or `[remote rejected]`).
    static func refusedReferences(in text: String) -> [String: String] {
        var result: [String: String] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix(" ! ") {
            let words = line.split(separator: " ")
            guard let arrow = words.firstIndex(of: "->"), arrow + 1 < words.count else { continue }
            let destination = words[arrow + 1]
            let rest = line[destination.endIndex...]
            var reason = ""
            if let open = rest.firstIndex(of: "("), let close = rest.lastIndex(of: ")"), open < close {
                reason = String(rest[rest.index(after: open)..<close])
            }
            result[String(destination)] = reason
        }
        return result
    }

    /// The objects git said it could not lazily fetch ("could not fetch ID
    /// from promisor remote").
    static func promisorMisses(in text: String) -> [ObjectID] {
        text.split(separator: "\n").compactMap { line in
            let words = line.split(separator: " ")
            guard let at = words.indices.first(where: { $0 >= 2 && words[$0 - 2] == "could" && words[$0 - 1] == "not" && words[$0] == "fetch" }),
                  at + 1 < words.count else { return nil }
            return ObjectID(hex: String(words[at + 1]))
        }
    }

    /// The objects reachable from `commit` and from no remote-tracking ref
    /// that this partial clone does not have (`git rev-list --missing=print`):
    /// what a push of `commit` would need and could not read.
    static func missingObjects(reachableFrom commit: ObjectID, gitDirectory: String) throws -> [ObjectID] {
        let output = try GitCommand.run(["--git-dir=\(gitDirectory)", "rev-list", "--objects", "--missing=print",
                                         commit.hex, "--not", "--remotes=origin"])
        return String(decoding: output, as: UTF8.self).split(separator: "\n").compactMap { line in
            line.first == "?" ? ObjectID(hex: String(line.dropFirst())) : nil
        }
    }

    /// The URL handed to git: a plain local path becomes `file://`, because
    /// git's local clone copies every object and ignores `--filter`.
    public static func transportURL(_ url: String) -> String {
        if url.contains("://") { return url }
        if let colon = url.firstIndex(of: ":"), !url[..<colon].contains("/") { return url }  // host:path (ssh)
        let absolute = url.hasPrefix("/") ? url : FileManager.default.currentDirectoryPath + "/" + url
        return "file://" + URL(fileURLWithPath: absolute).standardizedFileURL.path
    }

    /// From this many objects on, `fetchObjects` asks in two requests at
    /// once; below it, the second request's start costs more than it saves.
    static let fetchedInTwoFrom = 256

    /// The filter `fetchObjects` asks with. The named objects come whatever
    /// it says (a filter leaves out only what the remote would find by
    /// walking from them, and a blob leads nowhere); what it changes is the
    /// remote's work. Its reachability bitmaps can answer `blob:none`, so
    /// it loads them first (git's `pack-objects`: 27 ms of its CPU with
    /// the bitmap cached, 49 ms cold, for 20 blobs of a 10^6-file tree),
    /// where a tree depth above 0 is one they cannot answer, and it packs
    /// the named objects at once (0.2 ms).
    static let treeFilter = "tree:1"

    /// What a remote that refuses tree filters gets instead: git's own
    /// filter for a lazy fetch.
    static let blobFilter = "blob:none"

    /// Set in a replica's git config once its remote refused `treeFilter`:
    /// its later fetches ask with this filter.
    public static let namedObjectsFilterKey = "fprep.namedObjectsFilter"

    /// The filter a replica's fetch of named objects asks with.
    static func namedObjectsFilter(gitDirectory: String) -> String {
        guard let chosen = try? Config(file: gitDirectory + "/config").string(namedObjectsFilterKey), !chosen.isEmpty else {
            return treeFilter
        }
        return chosen
    }

    /// Fetches the named objects (blob ids) from `origin` in one request
    /// (two at once for many), the way git's own promisor fetch does, but
    /// batched: one round trip for all of them. With `quarantine` (an
    /// objects folder), the pack goes there instead of into the repository,
    /// so content needed once never stays in the object store, even when
    /// fprep is killed mid-fetch. Returns the pack files the fetch added.
    @discardableResult
    public static func fetchObjects(_ ids: [ObjectID], gitDirectory: String, quarantine: String? = nil) throws -> [String] {
        guard !ids.isEmpty else { return [] }
        let objects = quarantine ?? gitDirectory + "/objects"
        let packDirectory = objects + "/pack"
        try FileManager.default.createDirectory(atPath: packDirectory, withIntermediateDirectories: true)
        let before = Set((try? FileManager.default.contentsOfDirectory(atPath: packDirectory)) ?? [])
        let environment = quarantine.map { ["GIT_OBJECT_DIRECTORY": $0, "GIT_ALTERNATE_OBJECT_DIRECTORIES": gitDirectory + "/objects"] } ?? [:]
        let filter = namedObjectsFilter(gitDirectory: gitDirectory)
        do {
            try fetchObjects(ids, gitDirectory: gitDirectory, filter: filter, environment: environment)
        } catch is GitCommandError where filter != blobFilter {
            // Asked again as git itself would ask: a remote may refuse tree
            // filters (a git server with `uploadpackfilter.tree.allow` off or
            // `uploadpackfilter.tree.maxDepth` 0, a host that allows only
            // some filters), and says so in words of its own. When that
            // request gets through, the refusal is kept, so the replica's
            // later fetches ask once (`git config --unset` it to try again).
            try fetchObjects(ids, gitDirectory: gitDirectory, filter: blobFilter, environment: environment)
            try? Config(file: gitDirectory + "/config").set(namedObjectsFilterKey, blobFilter)
        }
        let after = (try? FileManager.default.contentsOfDirectory(atPath: packDirectory)) ?? []
        return after.filter { !before.contains($0) }.sorted().map { packDirectory + "/" + $0 }
    }

    /// One fetch of `ids` with `filter`: in one request, or two at once.
    private static func fetchObjects(_ ids: [ObjectID], gitDirectory: String, filter: String,
                                     environment: [String: String]) throws {
        // The filter as the remote's configured one, not `--filter`: git
        // may keep an explicit one as the clone's filter for its later
        // fetches (`remote.origin.partialclonefilter`; older versions
        // overwrite the one set).
        let arguments = ["--git-dir=\(gitDirectory)",
                         "-c", "fetch.negotiationAlgorithm=noop", "-c", "gc.auto=0",
                         "-c", "maintenance.auto=false", "-c", "remote.origin.partialclonefilter=\(filter)",
                         "fetch", "--quiet", "origin", "--no-tags", "--no-write-fetch-head",
                         "--recurse-submodules=no", "--stdin"]
        @Sendable func request(_ ids: [ObjectID]) throws {
            var input = Data()
            for id in ids { input.append(contentsOf: Array((id.hex + "\n").utf8)) }
            try GitCommand.run(arguments, environment: environment, input: input)
        }
        if ids.count < fetchedInTwoFrom {
            try request(ids)
        } else {
            // Two requests at once, each for every other id: the remote packs
            // one half while this side indexes the other, and their waits on
            // a cold disk overlap (1,000 scattered blobs of a 10^5 tree over
            // git://, two cores: 287 ms in one request, 225 ms in two, 240–345
            // ms in three or four). Each writes a pack of its own; a failure
            // of either is the fetch's.
            let halves = [0, 1].map { half in ids.enumerated().filter { $0.offset % 2 == half }.map(\.element) }
            let second = Mutex<Result<Void, any Error>?>(nil)
            let done = DispatchGroup()
            DispatchQueue.global().async(group: done) {
                let outcome = Result { try request(halves[1]) }
                second.withLock { $0 = outcome }
            }
            let first = Result { try request(halves[0]) }
            done.wait()
            try first.get()
            try second.withLock { $0 }?.get()
        }
    }
}

