import Dispatch
import FoundationEssentials
import Glibc
import FprepGit

/// `fprep clone`: a blobless, checkout-less clone, then every item laid out
/// as a placeholder (folders, sparse files with real size and date,
/// symlinks), and a git index in which every dataless file has the
/// skip-worktree bit, so `git status` and `git log` work in the replica.
public enum Cloner {
    public struct Result: Sendable, Encodable {
        public let root: String
        public let url: String
        public let domain: String
        public let branch: String
        public let anchor: String?
        public let files: Int
        public let folders: Int
        public let symlinks: Int
        /// Submodules are shown as empty folders: fprep does not replicate them.
        public let unsupportedSubmodules: [String]
        /// Files whose size the remote did not say (a remote without fprep's
        /// hook, reached over the network); their placeholders are empty.
        public let unknownSizes: Int
        public let logicalSize: Int64
        /// Set when the command found this clone begun or done before:
        /// `finished` (a killed clone's layout completed now) or `existing`
        /// (the folder already was a replica of this remote; nothing changed).
        public var resumed: String? = nil

        /// What a clone of `plan`'s tree holds.
        init(root: String, url: String, domain: String, branch: String, anchor: String?, plan: LayoutPlan) {
            self.root = root
            self.url = url
            self.domain = domain
            self.branch = branch
            self.anchor = anchor
            files = plan.files
            folders = plan.folders - plan.submodules.count
            symlinks = plan.symlinks
            unsupportedSubmodules = plan.submodules.map(\.description)
            unknownSizes = plan.unknownSizes
            logicalSize = plan.logicalSize
        }
    }

    /// `full` clones a remote that does not allow partial clone all the
    /// same, bringing every blob; without it such a remote is refused
    /// before anything is fetched.
    public static func clone(url given: String, into directory: String?, branch: String?, full: Bool = false,
                             progress: any ProgressReporter, showGitProgress: Bool) throws -> Result {
        Trace.start()
        guard !given.isEmpty else { throw FprepError(.usage, "the remote URL is empty") }
        // A relative path would mean nothing from another folder: keep it absolute.
        let url = given.contains("://") ? given : (localPath(of: given) ?? given)
        if let branch, !Remote.isValidBranchName(branch) {
            throw FprepError(.usage, "'\(branch)' is not a valid branch name")
        }
        let root = Remote.absolute(directory ?? defaultDirectory(for: url))
        if let resumed = try resumeLayout(root, url: url, progress: progress) { return resumed }
        let created = try prepareDestination(root, url: url)
        do {
            return try cloneInto(root: root, url: url, branch: branch, full: full, progress: progress, showGitProgress: showGitProgress)
        } catch {
            progress.finish()
            removeClone(root: root, created: created)
            // Said after the clean-up, of a folder that is still there.
            if let full = FprepError.storage(error, root: nil), full.isDiskFull {
                throw FprepError.diskFull(at: created ? parentFolder(of: root) : root, detail: full.detail)
            }
            throw error
        }
    }

    /// The folder name `git clone` would choose: the URL's last part without `.git`.
    static func defaultDirectory(for url: String) -> String {
        var name = url
        while name.hasSuffix("/") { name.removeLast() }
        name = String(name.split(separator: "/").last ?? "replica")
        if let colon = name.lastIndex(of: ":") { name = String(name[name.index(after: colon)...]) }
        if name.hasSuffix(".git") { name.removeLast(4) }
        return name.isEmpty ? "replica" : name
    }

    /// Finishes a clone of `url` into `root` that was killed while laying
    /// out its tree (its fetch is done), or reports a finished one of the
    /// same URL (killed before it could say so); nil when there is neither.
    private static func resumeLayout(_ root: String, url: String, progress: any ProgressReporter) throws -> Result? {
        let statePath = root + "/" + Replica.stateFolderName + "/state.db"
        guard FileManager.default.fileExists(atPath: statePath), let store = try? StateStore(path: statePath),
              let phase = try? store.meta("phase"), ["layout", "ready"].contains(phase),
              (try? store.meta("remote_url")) == url else { return nil }
        let replica = try Replica.open(containing: root, access: Replica.Access(command: "clone", exclusive: true, progress: progress))
        let plan = try replica.currentPlan()
        progress.finish()
        var result = Result(root: root, url: url, domain: replica.domain, branch: replica.branch,
                            anchor: replica.anchor?.hex, plan: plan)
        result.resumed = phase == "layout" ? "finished" : "existing"
        return result
    }

    /// Checks that `root` is a new or empty folder, or an unfinished clone of
    /// the same URL (which is then started over). Returns whether fprep
    /// creates the folder.
    private static func prepareDestination(_ root: String, url: String) throws -> Bool {
        var isDirectory = false
        guard FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory) else {
            do {
                try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
            } catch {
                throw FprepError.storage(error, root: parentFolder(of: root))
                    ?? FprepError("cannot create '\(root)': \(StorageFailure.reason(error))")
            }
            return true
        }
        guard isDirectory else { throw FprepError(.usage, "'\(root)' exists and is not a folder") }
        let contents = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        if contents.isEmpty { return false }
        let statePath = root + "/" + Replica.stateFolderName + "/state.db"
        // A clone of the same URL killed before its layout began: nothing of
        // the user's can be in the folder yet (it holds only fprep's and
        // git's folders), so it starts over.
        if contents.contains(Replica.stateFolderName), Set(contents).isSubset(of: [Replica.stateFolderName, ".git"]) {
            let store = FileManager.default.fileExists(atPath: statePath) ? try? StateStore(path: statePath) : nil
            let phase = store.flatMap { try? $0.meta("phase") }
            let storedURL = store.flatMap { try? $0.meta("remote_url") }
            if phase == nil || phase == "fetching", storedURL == nil || storedURL == url {
                removeClone(root: root, created: false)
                return false
            }
        }
        throw FprepError(.usage, "'\(root)' is not empty (clone into a new or empty folder)")
    }

    /// Removes what a failed clone wrote.
    private static func removeClone(root: String, created: Bool) {
        if created {
            try? FileManager.default.removeItem(atPath: root)
            return
        }
        for name in (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [] {
            try? FileManager.default.removeItem(atPath: root + "/" + name)
        }
    }

    private static func cloneInto(root: String, url: String, branch requestedBranch: String?, full: Bool,
                                  progress: any ProgressReporter, showGitProgress: Bool) throws -> Result {
        let stateFolder = root + "/" + Replica.stateFolderName
        try FileManager.default.createDirectory(atPath: stateFolder, withIntermediateDirectories: true)
        let store = try StateStore(path: stateFolder + "/state.db")
        try store.transaction {
            try store.setMeta("phase", "fetching")
            try store.setMeta("remote_url", url)
        }

        Trace.mark("prepare")
        // 1. Commits and trees, no blobs, no checkout. git works in folders
        //    of this run's own, moved into place when it is done: the git of
        //    a killed run may still be writing (or, failing, removing) its
        //    folders, never these.
        let token = ContentOperations.newToken()
        // git ignores --filter where the server does not allow it and brings
        // every blob: the server is asked beside the clone (asked first, its
        // answer cost every clone 40 ms on git://), and a clone it would fill
        // is stopped as soon as it says so, unless told --full. Asked first
        // still where two connections could ask for a password at once.
        let beside = Transport.fetchesRefsBeside(url)
        let unfiltered = GitCommand.Stop()
        let askFilter = { @Sendable in
            if Transport.allowsFilter(url: url, traceFile: stateFolder + "/clone-capabilities-" + token) == false { unfiltered.request() }
        }
        let filterCheck = full || !beside ? nil : BackgroundWork(askFilter)
        // Its trace file is in the clone's folder, which a failure removes.
        defer { try? filterCheck?.wait() }
        func refuseUnfiltered() throws {
            try? filterCheck?.wait()
            guard unfiltered.isRequested else { return }
            throw FprepError("the remote '\(url)' does not allow partial clone (its uploadpack.allowFilter is off), so a clone would bring the content of every file; "
                             + "run 'fprep install-hooks' on it (or 'git config uploadpack.allowFilter true' there), or clone with --full to fetch everything")
        }
        if !full, !beside {
            askFilter()
            try refuseUnfiltered()
        }
        let scratch = stateFolder + "/clone-scratch-" + token
        let fetched = stateFolder + "/clone-" + token + ".git"
        // fprep's refs (the size manifest) come in a fetch of their own,
        // beside the clone's where the transport allows (see `Transport.fetchFprepRefs`).
        let side = stateFolder + "/clone-" + token + "-fprep-refs.git"
        // What a failed fetch from the remote says (a full disk is the disk's fault).
        func fetchFailure(_ error: GitCommandError) -> FprepError {
            FprepError.storage(error, root: root)
                ?? FprepError("cannot clone '\(url)': \(error.reason) (check the URL and that the remote is up)", detail: error.standardError)
        }
        let early = EarlyManifest()
        let refsBeside = beside ? BackgroundWork {
            try Transport.fetchFprepRefs(url: url, into: side)
            // Read while the clone goes on (its fetch is the longer one):
            // the size table of 10^6 blobs took 1.0 s after it.
            let fetchedRefs = try Repository(openingAt: side)
            if let tip = try fetchedRefs.referenceTarget(SizeManifest.trackingReference) {
                early.read = (tip, BlobSizeTable(try SizeManifest.entries(fetchedRefs, from: tip, stoppingAt: nil)))
            }
        } : nil
        func removeFetched() {
            try? FileManager.default.removeItem(atPath: scratch)
            try? FileManager.default.removeItem(atPath: fetched)
            try? FileManager.default.removeItem(atPath: side)
        }
        do {
            do {
                try Transport.blobless(clone: url, gitDirectory: fetched, scratchWorkTree: scratch, branch: requestedBranch,
                                       showProgress: showGitProgress, refsFetchedBeside: refsBeside != nil, stop: unfiltered)
            } catch {
                try? refsBeside?.wait()  // its git is done with its folder before the folder goes
                throw error
            }
            if let refsBeside {
                try refsBeside.wait()
                try Transport.adoptFprepRefs(from: side, into: fetched)
            }
        } catch {
            removeFetched()
            try refuseUnfiltered()
            if let error = error as? GitCommandError { throw fetchFailure(error) }
            throw error
        }
        // A small remote's clone may end before the server's answer (or
        // the answer came first, where two connections could ask at once).
        do {
            try refuseUnfiltered()
        } catch {
            removeFetched()
            throw error
        }
        try? FileManager.default.removeItem(atPath: root + "/.git")
        guard rename(fetched, root + "/.git") == 0 else {
            throw FprepError("cannot move the fetched repository into '\(root)/.git': \(String(cString: strerror(errno)))")
        }
        Trace.mark("git clone")
        // This run's scratch folder, and whatever earlier killed runs left.
        for name in (try? FileManager.default.contentsOfDirectory(atPath: stateFolder)) ?? [] where name.hasPrefix("clone-") {
            try? FileManager.default.removeItem(atPath: stateFolder + "/" + name)
        }
        let repository = try Repository(openingAt: root)
        try configureReplicaRepository(repository, gitDirectory: root + "/.git")
        Trace.mark("configure")

        // 2. Which branch and commit; what the remote says of itself.
        var branch = requestedBranch
        if branch == nil, let head = try repository.symbolicTarget("HEAD"), head.hasPrefix("refs/heads/") {
            branch = String(head.dropFirst("refs/heads/".count))
        }
        let followed = branch ?? "main"
        let anchor = try repository.referenceTarget("refs/remotes/origin/" + followed)
        if anchor == nil {
            // An empty remote gives an empty replica; a HEAD that names a
            // missing branch of a remote that has others is a mistake to say.
            // The clone fetched one branch: ask the remote for the others.
            let branches = (try? Transport.branches(gitDirectory: root + "/.git")) ?? []
            if !branches.isEmpty {
                throw FprepError(.usage, "the remote has no branch '\(followed)' (it has: \(branches.joined(separator: ", "))); pass --branch")
            }
        }
        let info = try RemoteInfo.read(repository, reference: RemoteInfo.trackingReference)
        let domain = info?.domain ?? RemoteInfo.defaultDomain(forFolder: defaultDirectory(for: url))

        // 3. Sizes and dates: the manifest, then the object headers of the
        //    remote (a local folder) or of the clone (--full).
        func sizeTable(_ tip: ObjectID?) throws -> BlobSizeTable {
            guard let tip else { return BlobSizeTable() }
            if let read = early.read, read.tip == tip { return read.table }
            return BlobSizeTable(try SizeManifest.entries(repository, from: tip, stoppingAt: nil))
        }
        var manifestTip = try repository.referenceTarget(SizeManifest.trackingReference)
        var table = try sizeTable(manifestTip)
        Trace.mark("read manifest")
        var plan = LayoutPlan()
        var found: [(ObjectID, BlobInfo)] = []
        if let anchor {
            let commit = try repository.commit(anchor)
            let fallback = try SizeFallback(url: url, repository: repository, time: commit.time)
            func scan() throws -> LayoutPlan {
                let listed = table
                return try LayoutPlan.scan(repository, tree: commit.treeID, defaultTime: commit.time) { id in
                    try listed[id] ?? fallback.size(of: id)
                }
            }
            plan = try scan()
            // Fetched beside the clone, fprep's refs are the remote's at the
            // clone's start: a push that landed meanwhile may have its tip
            // here and its sizes not yet listed (its hook lists them after
            // the branch moved). They are fetched again, after the clone as
            // without the side fetch, and the tree counted again if they moved.
            if plan.unknownSizes > 0, refsBeside != nil {
                do {
                    try Transport.fetchFprepRefs(gitDirectory: root + "/.git")
                } catch let error as GitCommandError {
                    throw fetchFailure(error)
                }
                let tip = try repository.referenceTarget(SizeManifest.trackingReference)
                if tip != manifestTip {
                    manifestTip = tip
                    table = try sizeTable(tip)
                    plan = try scan()
                }
            }
            found = fallback.found
            Trace.mark("scan tree")
        }
        try store.transaction {
            try store.setMeta("branch", followed)
            try store.setMeta("domain", domain)
            try store.setMeta("anchor", anchor?.hex ?? "")
            try store.setMeta(Replica.remoteTipKey, anchor?.hex ?? "")
            try store.setMeta("cloned_at", String(Int64(Date().timeIntervalSince1970)))
            if plan.unknownSizes > 0 { try store.setMeta(UnknownSizes.pendingKey, "1") }
            try store.setMeta("phase", "layout")
        }
        // The sizes go into the store while the placeholders are made: the
        // two do not depend on each other, and the layout is kernel-bound.
        let (recordedTable, recordedTip) = (table, manifestTip)
        let recorder = BackgroundWork {
            try store.transaction {
                try store.recordBlobInfo(recordedTable.entries)
                try store.recordBlobInfo(found)
                if let recordedTip { try store.setMeta("manifest_tip", recordedTip.hex) }
            }
            // The replica's own walk of the manifest chain when it fetches
            // (see CommitGraph); a failure only costs that speed.
            try? CommitGraph.update(gitDirectory: root + "/.git")
        }

        // 4. Lay out the tree (the same step that recovery repeats).
        let replica = try Replica.open(containing: root, access: Replica.Access(command: "clone", exclusive: true, progress: progress),
                                       layoutPlan: plan, beforeReady: { try recorder.wait() })
        // Files of ignore rules arrive with their content: every scan reads them.
        replica.materializeRuleFiles(plan.ruleFiles)
        progress.finish()
        return Result(root: root, url: url, domain: domain, branch: followed, anchor: anchor?.hex, plan: plan)
    }

    /// Settings every replica's git directory gets: no automatic gc (lazy
    /// fetches would trigger it), fprep's folder ignored, no lazy fetch by
    /// accident from fprep's own commands (they run with GIT_NO_LAZY_FETCH).
    static func configureReplicaRepository(_ repository: Repository, gitDirectory: String) throws {
        let config = try repository.config()
        try config.set("gc.auto", "0")
        try config.set("maintenance.auto", "false")
        try config.set("fetch.writeCommitGraph", "false")
        let exclude = gitDirectory + "/info/exclude"
        try FileManager.default.createDirectory(atPath: gitDirectory + "/info", withIntermediateDirectories: true)
        let existing = (try? String(contentsOfFile: exclude, encoding: .utf8)) ?? ""
        if !existing.contains("/.fprep/") {
            try (existing + (existing.isEmpty || existing.hasSuffix("\n") ? "" : "\n") + "/.fprep/\n")
                .write(toFile: exclude, atomically: true, encoding: .utf8)
        }
    }

    /// The folder a local URL names (a path or `file://`), else nil.
    static func localPath(of url: String) -> String? {
        if url.hasPrefix("file://") { return String(url.dropFirst("file://".count)) }
        if url.contains("://") { return nil }
        // scp-like "host:path" is remote; a path with a colon before any '/' is that form.
        if let colon = url.firstIndex(of: ":"), !url[..<colon].contains("/") { return nil }
        return Remote.absolute(url)
    }

    /// Lays out the anchor's tree into `replica`: clone's last step and what
    /// recovery repeats after a clone was killed mid-layout. It starts from
    /// an empty tree (nothing of the user's can be there yet: the clone never
    /// finished) so it is safe to run any number of times. `plan` is the
    /// clone's own scan; recovery scans again with sizes from the store.
    static func finishLayout(_ replica: Replica, plan given: LayoutPlan?, beforeReady: () throws -> Void) throws {
        for name in try replica.rootFolder.entryNames() where name != Array(".git".utf8) && name != Array(Replica.stateFolderName.utf8) {
            try? FileManager.default.removeItem(atPath: replica.root + "/" + String(decoding: name, as: UTF8.self))
        }
        if let anchor = replica.anchor {
            let plan = try given ?? replica.recoveredPlan()
            guard let walk = plan.walk else { throw FprepError("the layout of '\(replica.root)' has no tree to walk; run the command again") }
            // Symlink targets are the only blobs a clone holds: fetch them in
            // one request while the placeholders are made.
            let odb = try replica.repository.objectDatabase()
            let symlinkIDs = Array(plan.symlinkIDs)
            let missing = odb.missing(among: symlinkIDs)
            let gitDirectory = replica.gitDirectory
            let fetch = BackgroundWork { try Transport.fetchObjects(missing, gitDirectory: gitDirectory) }
            // The index is written as the tree is walked, never held whole;
            // it replaces the one on disk only once every entry is in.
            let split = SplitIndexPolicy(setting: replica.repository.splitIndexSetting()).splits(entries: plan.entryCount)
            let index = try IndexStream(path: replica.repository.gitDirectory + "index", count: plan.entryCount, split: split)
            try PlaceholderLayout(root: replica.rootFolder, progress: replica.progress).layOut(walk, plan: plan, index: index) {
                do {
                    try fetch.wait()
                } catch let error as GitCommandError {
                    throw FprepError.remoteUnreachable(replica.remoteURL, error, root: replica.root)
                }
                try odb.refresh()
                var targets: [ObjectID: [UInt8]] = [:]
                for id in symlinkIDs { targets[id] = try replica.repository.blob(id).withContent { Array($0) } }
                return targets
            }
            // A layout with no symlinks never waited for the (empty) fetch.
            try? fetch.wait()
            Trace.mark("placeholders")
            // Nobody else has had the replica yet: every placeholder is ours.
            try PlaceholderCheck.record(PlaceholderCheck.now(), in: replica.store)
            try index.finish()
            Trace.mark("index")
            try replica.repository.setReference("refs/heads/" + replica.branch, to: anchor, message: "fprep: clone")
            try replica.store.setMeta("logical_size", String(plan.logicalSize))
        } else {
            let index = try replica.repository.index()
            try index.clear()
            try index.write()
        }
        try replica.repository.setSymbolicReference("HEAD", to: "refs/heads/" + replica.branch)
        try beforeReady()
        try replica.store.setMeta("phase", "ready")
        replica.store.checkpoint()
        Trace.mark("finish")
    }
}

extension Replica {
    /// The plan of a layout that a killed clone left unfinished: the sizes
    /// the clone was still storing are read again first.
    func recoveredPlan() throws -> LayoutPlan {
        try ingestManifest()
        guard let anchor else { return LayoutPlan() }
        let time = try repository.commit(anchor).time
        let fallback = try SizeFallback(url: remoteURL, repository: repository, time: time)
        let plan = try currentPlan(fallback: fallback)
        let found = fallback.found
        if !found.isEmpty { try store.transaction { try store.recordBlobInfo(found) } }
        return plan
    }

    /// The layout plan of the anchor's tree, with sizes from the store
    /// (then from `fallback`).
    func currentPlan(fallback: SizeFallback? = nil) throws -> LayoutPlan {
        guard let anchor else { return LayoutPlan() }
        let commit = try repository.commit(anchor)
        let lookup = try store.blobInfoLookup()
        return try LayoutPlan.scan(repository, tree: commit.treeID, defaultTime: commit.time) { id in
            try lookup(id) ?? fallback?.size(of: id)
        }
    }
}

/// The size table a clone reads from fprep's refs fetched beside it (see
/// `Cloner`), handed from that work's thread to the clone's after the
/// work's `wait`.
private final class EarlyManifest: @unchecked Sendable {
    var read: (tip: ObjectID, table: BlobSizeTable)?
}
