import FoundationEssentials
import FprepGit

/// Pins: "always keep on this device" (File Provider's `downloadEagerly`
/// content policy). A pinned file, or every file below a pinned folder, is
/// materialized when pinned and stays so: a sync that brings new or changed
/// files under a pin fetches their content, and `evict` refuses them. Pins belong to the device: they live
/// in its state database, never in the remote, and follow the moves a sync
/// makes.
struct PinSet {
    private let paths: Set<[UInt8]>

    init(_ store: StateStore) throws {
        paths = Set(try store.pinnedPaths().map(\.bytes))
    }

    var isEmpty: Bool { paths.isEmpty }
    var all: [RepoPath] { paths.sorted { $0.lexicographicallyPrecedes($1) }.map(RepoPath.init(bytes:)) }

    /// The pin that covers `path`: the path itself or a folder above it.
    func covering(_ path: RepoPath) -> RepoPath? {
        guard !paths.isEmpty else { return nil }
        if paths.contains([]) { return .root }
        var bytes = path.bytes
        while !bytes.isEmpty {
            if paths.contains(bytes) { return RepoPath(bytes: bytes) }
            guard let slash = bytes.lastIndex(of: 0x2F) else { break }
            bytes.removeSubrange(slash...)
        }
        return nil
    }

    /// Why `evict` leaves a pinned file alone.
    static func refusal(_ pin: RepoPath) -> String {
        "it is pinned\(pin.bytes.isEmpty ? " (the whole replica)" : " ('\(pin)')") to this device; run 'fprep unpin \(pin.isRoot ? "." : pin.description)' first"
    }
}

extension StateStore {
    func pinnedPaths() throws -> [RepoPath] {
        let statement = try database.prepare("SELECT path FROM pins ORDER BY path")
        var result: [RepoPath] = []
        while try statement.step() { result.append(RepoPath(bytes: statement.blob(0))) }
        return result
    }

    /// Records a pin; false when it was there already.
    func addPin(_ path: RepoPath, at time: Int64) throws -> Bool {
        let exists = try database.prepare("SELECT 1 FROM pins WHERE path = ?1").bind(.blob(path.bytes))
        if try exists.step() { return false }
        try database.prepare("INSERT INTO pins(path, created_at) VALUES(?1, ?2)").bind(.blob(path.bytes), .int(time)).run()
        return true
    }

    /// Removes a pin; false when there was none.
    func removePin(_ path: RepoPath) throws -> Bool {
        let exists = try database.prepare("SELECT 1 FROM pins WHERE path = ?1").bind(.blob(path.bytes))
        guard try exists.step() else { return false }
        try database.prepare("DELETE FROM pins WHERE path = ?1").bind(.blob(path.bytes)).run()
        return true
    }
}

/// What `pin` did.
public struct PinResult: Sendable, Encodable {
    public var pinned: [String] = []
    public var alreadyPinned: [String] = []
    /// The content brought for them.
    public var materialize = MaterializeResult()
}

/// What `unpin` did.
public struct UnpinResult: Sendable, Encodable {
    public var unpinned: [String] = []
    /// Paths that were not pinned themselves, with why; non-empty means exit status 2.
    public var refused: [Skipped] = []
}

extension Replica {
    /// Pins the items at `paths` (files or folders the anchor or the index
    /// has) and brings their content. The pins are recorded first: content
    /// that cannot be fetched now (the remote unreachable) comes with the
    /// next sync.
    public func pin(_ paths: [String], relativeTo directory: String) throws -> PinResult {
        let index = try repository.index()
        var result = PinResult()
        var items: [(RepoPath, String)] = []
        for shown in paths {
            let path = try itemPath(for: shown, relativeTo: directory)
            _ = try indexEntries(under: path, in: index, shown: shown)  // an item of the replica, or a clear error
            items.append((path, shown))
        }
        let now = Int64(Date().timeIntervalSince1970)
        try store.transaction {
            for (path, _) in items {
                let name = path.isRoot ? "." : path.description
                if try store.addPin(path, at: now) { result.pinned.append(name) } else { result.alreadyPinned.append(name) }
            }
        }
        do {
            result.materialize = try ContentOperations(self).materialize(items)
        } catch let error as FprepError {
            throw FprepError("pinned \(items.map { "'\($0.1)'" }.joined(separator: ", ")), but its content could not be brought: \(error.message); 'fprep sync' brings it later",
                             detail: error.detail)
        }
        return result
    }

    /// Removes the pins of `paths`; their content stays until evicted.
    public func unpin(_ paths: [String], relativeTo directory: String) throws -> UnpinResult {
        var result = UnpinResult()
        let pins = try PinSet(store)
        try store.transaction {
            for shown in paths {
                let path = try itemPath(for: shown, relativeTo: directory)
                if try store.removePin(path) {
                    result.unpinned.append(path.isRoot ? "." : path.description)
                } else if let pin = pins.covering(path) {
                    result.refused.append(Skipped(path: shown, reason: "not pinned itself: it is pinned through '\(pin.isRoot ? "." : pin.description)'; unpin that"))
                } else {
                    result.refused.append(Skipped(path: shown, reason: "not pinned"))
                }
            }
        }
        return result
    }

    /// The pinned paths, sorted ("." for the whole replica).
    public func pins() throws -> [String] {
        try store.pinnedPaths().map { $0.isRoot ? "." : $0.description }
    }

    /// Brings the content of every file under a pin that is still a
    /// placeholder (what a sync brought or moved under it); the paths it
    /// materialized. Cost follows the pinned files, not the tree. A failure
    /// (the remote unreachable) leaves them for the next sync.
    func materializePinned() -> [String] {
        guard let pins = try? PinSet(store), !pins.isEmpty, let index = try? repository.index() else { return [] }
        var items: [(RepoPath, String)] = []
        for pin in pins.all {
            guard let entries = try? indexEntries(under: pin, in: index, shown: pin.description) else { continue }
            for entry in entries where entry.skipWorktree && FileMode(raw: entry.mode).isFile {
                let path = RepoPath(bytes: entry.path)
                items.append((path, path.description))
            }
        }
        guard !items.isEmpty, let result = try? ContentOperations(self).materialize(items) else { return [] }
        return result.materialized
    }
}
