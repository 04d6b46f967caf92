import FoundationEssentials
import Glibc
import FprepGit

/// Rebuilds a replica's state database from what git holds, for when the
/// database is lost or corrupt: the settings from the git config and refs,
/// the sizes from the fetched size manifest, the materialized set from the
/// index. The tree on disk is not touched.
public enum Repair {
    public struct Result: Sendable, Encodable {
        public let root: String
        /// Where the unreadable database was moved, if there was one.
        public let movedAside: String?
        public let anchor: String?
        public let materialized: Int
        public let sizes: Int
        /// The local commit recorded as waiting to be pushed, if any.
        public let unpushed: String?
        /// Placeholders laid out before their size was known that got it.
        public var sizesLaidOut = 0
    }

    public static func rebuildState(of path: String) throws -> Result {
        let root = Remote.absolute(path)
        let gitDirectory = root + "/.git"
        let stateFolder = root + "/" + Replica.stateFolderName
        guard let repository = try? Repository(openingAt: root), FileManager.default.fileExists(atPath: gitDirectory) else {
            throw FprepError(.usage, "'\(path)' is not a replica (no .git folder to rebuild from)")
        }
        try FileManager.default.createDirectory(atPath: stateFolder, withIntermediateDirectories: true)
        let lock = try ReplicaLock(path: Replica.lockFile(replicaRoot: root), mode: .exclusive, command: "repair", wait: true, onWait: { _ in })
        defer { withExtendedLifetime(lock) {} }
        for target in [stateFolder, stateFolder + "/state.db"] where access(target, W_OK) != 0 && errno != ENOENT {
            throw FprepError.readOnlyState(stateFolder, reason: String(cString: strerror(errno)).lowercased())
        }

        let database = stateFolder + "/state.db"
        var movedAside: String?
        // A sound database (another repair's, say, that held the lock
        // first) is brought in line with git in place: what only it holds
        // (tags, favorites, trash, signals, the journal) stays.
        let sound = FileManager.default.fileExists(atPath: database) ? soundStore(at: database) : nil
        if sound == nil, ["", "-wal", "-shm", "-damaged"].contains(where: { FileManager.default.fileExists(atPath: database + $0) }) {
            let aside = database + ".broken-\(Int(Date().timeIntervalSince1970))"
            unlink(database + "-checked")
            for suffix in ["", "-wal", "-shm", "-damaged"] where FileManager.default.fileExists(atPath: database + suffix) {
                try FileManager.default.moveItem(atPath: database + suffix, toPath: aside + suffix)
            }
            movedAside = aside
        }
        let store = try sound ?? StateStore(path: database)
        let config = try repository.config()
        let url = try config.string("remote.origin.url") ?? ""
        let head = try repository.symbolicTarget("HEAD") ?? "refs/heads/main"
        let branch = head.hasPrefix("refs/heads/") ? String(head.dropFirst("refs/heads/".count)) : "main"
        let anchor = try repository.referenceTarget(head)
        // A commit of this replica the remote does not have (a sync was
        // killed before its push, and the record of that went with the
        // database) waits to be pushed: the next sync merges and pushes it
        // instead of following the remote past it.
        let remoteTip = try repository.referenceTarget("refs/remotes/origin/" + branch)
        var unpushed: ObjectID?
        if let anchor, anchor != remoteTip {
            if let remoteTip, try repository.isAncestor(anchor, of: remoteTip) {} else { unpushed = anchor }
        }
        let info = try RemoteInfo.read(repository, reference: RemoteInfo.trackingReference)
        var sizes: [(ObjectID, BlobInfo)] = []
        let manifestTip = try repository.referenceTarget(SizeManifest.trackingReference)
        if let manifestTip { sizes = try SizeManifest.entries(repository, from: manifestTip, stoppingAt: nil) }
        let index = try repository.index()
        var materialized: [(RepoPath, ObjectID)] = []
        for position in 0..<index.count {
            guard let entry = index.entry(at: position), !entry.skipWorktree, FileMode(raw: entry.mode).isFile else { continue }
            materialized.append((RepoPath(bytes: entry.path), entry.id))
        }
        let logicalSize: Int64
        if let anchor {
            let lookup = Dictionary(sizes, uniquingKeysWith: { first, _ in first })
            let commit = try repository.commit(anchor)
            logicalSize = try LayoutPlan.scan(repository, tree: commit.treeID, defaultTime: commit.time, listFolders: false) { lookup[$0] }.logicalSize
        } else {
            logicalSize = 0
        }
        try store.transaction {
            try store.setMeta("remote_url", url.hasPrefix("file://") ? String(url.dropFirst("file://".count)) : url)
            try store.setMeta("branch", branch)
            try store.setMeta("domain", info?.domain ?? RemoteInfo.defaultDomain(forFolder: Cloner.defaultDirectory(for: url)))
            try store.setMeta("anchor", anchor?.hex ?? "")
            if let manifestTip { try store.setMeta("manifest_tip", manifestTip.hex) }
            try store.setMeta("logical_size", String(logicalSize))
            try store.recordBlobInfo(sizes)
            try store.setMeta(Replica.unpushedKey, unpushed?.hex ?? "")
            // Placeholders laid out before their size was known are looked for.
            try store.setMeta(UnknownSizes.pendingKey, "1")
            let listed = Set(materialized.map(\.0))
            try store.forgetMaterialized(store.materializedRecords().map(\.path).filter { !listed.contains($0) })
            try store.recordMaterialized(materialized, at: Int64(Date().timeIntervalSince1970))
            try store.setMeta("phase", "ready")
        }
        return Result(root: root, movedAside: movedAside, anchor: anchor?.hex, materialized: materialized.count, sizes: sizes.count,
                      unpushed: unpushed?.hex)
    }

    /// The store at `path` when it passes every check (SQLite's own
    /// integrity check too: repair is rare, so it can read every page) and
    /// is a finished replica's; nil otherwise.
    private static func soundStore(at path: String) -> StateStore? {
        guard let store = try? StateStore(path: path, existing: true),
              let statement = try? store.database.prepare("PRAGMA integrity_check"),
              (try? statement.step()) == true, statement.text(0) == "ok",
              (try? store.meta("phase")) == "ready", (try? store.meta("branch")) != nil else { return nil }
        return store
    }
}
