import CFprepSys
import FoundationEssentials
import Glibc
import FprepGit

/// One item as an enumerator reports it (File Provider's `NSFileProviderItem`).
public struct Item: Sendable, Encodable {
    public let identifier: String
    public let parent: String
    public let filename: String
    /// `file`, `folder` or `symlink`.
    public let kind: String
    /// Bytes; nil for folders and for files whose size the remote did not say.
    public let size: Int64?
    /// The blob id (files, symlinks) or tree id (folders) of the anchor.
    public let contentVersion: String
    public let state: ItemState
    /// Content modification date, ISO 8601.
    public let modified: String
    public let executable: Bool?
    /// Set for a submodule, which fprep shows as an empty folder.
    public let unsupported: String?
    /// Set (true) for an item pinned to this device, itself or through a
    /// folder above it; left out otherwise. Only `ls` says it.
    public var pinned: Bool? = nil

    private enum CodingKeys: String, CodingKey {
        case identifier, parent, filename, kind, size, contentVersion, state, modified, executable, unsupported, pinned
    }

    /// A file's unknown size is `"size": null`, said rather than left out;
    /// folders have no size and no key.
    public func encode(to encoder: Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(identifier, forKey: .identifier)
        try container.encode(parent, forKey: .parent)
        try container.encode(filename, forKey: .filename)
        try container.encode(kind, forKey: .kind)
        if kind == "folder" { try container.encodeIfPresent(size, forKey: .size) } else { try container.encode(size, forKey: .size) }
        try container.encode(contentVersion, forKey: .contentVersion)
        try container.encode(state, forKey: .state)
        try container.encode(modified, forKey: .modified)
        try container.encodeIfPresent(executable, forKey: .executable)
        try container.encodeIfPresent(unsupported, forKey: .unsupported)
        try container.encodeIfPresent(pinned, forKey: .pinned)
    }
}

/// One page of a folder's items, and the token of the next page (nil on the last).
public struct ItemPage: Sendable, Encodable {
    public let container: String
    public let items: [Item]
    public let nextPage: String?
}

extension Replica {
    /// Enumerates the folder (or the single file) at `userPath`, `pageSize`
    /// items from the page `token` names (nil: the first page). Items come in
    /// git's order; a token is the last name of the previous page, so paging
    /// stays correct if the folder changes in between.
    public func enumerate(_ userPath: String?, relativeTo directory: String, pageSize: Int, token: String?) throws -> ItemPage {
        guard pageSize > 0 else { throw FprepError(.usage, "the page size must be at least 1") }
        // No path: the current folder, as `ls` does (the root with -C ROOT).
        let folder = try itemPath(for: userPath ?? ".", relativeTo: directory)
        let shown = userPath ?? "."
        let after = try token.map(Self.decodePageToken)
        guard let anchor else {
            guard folder.isRoot else { throw FprepError.notInReplica(shown) }
            return ItemPage(container: ContainerIdentifier.root, items: [], nextPage: nil)
        }
        let index = LazyIndex(repository)
        let sizes = try store.blobInfoLookup()
        var tree = try repository.tree(repository.commit(anchor).treeID)
        for component in folder.components {
            guard let entry = tree.entry(named: component) else { throw FprepError.notInReplica(shown) }
            if entry.mode != .tree {
                var item = try makeItem(entry, path: folder, probe: probeBeneath([folder], in: folder.parent)[0], index: index, sizes: sizes)
                if try PinSet(store).covering(folder) != nil { item.pinned = true }
                return ItemPage(container: ContainerIdentifier.of(folder.parent), items: [item], nextPage: nil)
            }
            tree = try repository.tree(entry.id)
        }
        var entries = tree.entries
        if let after {
            if let position = entries.firstIndex(where: { $0.name == after }) {
                entries.removeFirst(position + 1)
            } else {
                entries.removeAll { !after.lexicographicallyPrecedes($0.name) }
            }
        }
        let page = Array(entries.prefix(pageSize))
        let paths = page.map { folder.appending($0.name) }
        let probes = probeBeneath(paths, in: folder)
        let pins = try PinSet(store)
        let items = try page.indices.map { position in
            var item = try makeItem(page[position], path: paths[position], probe: probes[position], index: index, sizes: sizes)
            if pins.covering(paths[position]) != nil { item.pinned = true }
            return item
        }
        let next = entries.count > pageSize ? page.last.map { Self.encodePageToken($0.name) } : nil
        return ItemPage(container: ContainerIdentifier.of(folder), items: items, nextPage: next)
    }

    /// Probes `paths`, all in `folder`: nothing is there when something
    /// other than a folder (a user's symlink) stands on the way, so nothing
    /// is read through it.
    private func probeBeneath(_ paths: [RepoPath], in folder: RepoPath) -> [ItemProbe] {
        guard folder.isRoot || rootFolder.obstruction(on: folder) == nil else {
            return paths.map { _ in ItemProbe(fprep_probe()) }
        }
        return rootFolder.probe(paths)
    }

    /// The item for `entry` at `path`, from what `probe` read of it on disk.
    func makeItem(_ entry: TreeEntry, path: RepoPath, probe: ItemProbe, index: LazyIndex,
                  sizes: (ObjectID) throws -> BlobInfo?) throws -> Item {
        let stat = probe.stat
        let parent = ContainerIdentifier.of(path.parent)
        let filename = RepoPath(bytes: path.name).description
        switch entry.mode {
        case .tree, .submodule:
            return Item(identifier: path.description, parent: parent, filename: filename, kind: "folder", size: nil,
                        contentVersion: entry.id.hex, state: entry.mode == .tree ? .materialized : .dataless,
                        modified: Self.isoDate(stat?.mtime.0 ?? 0), executable: nil,
                        unsupported: entry.mode == .submodule ? "submodule" : nil)
        default:
            let info = try sizes(entry.id)
            let state = try itemState(entry, path: path, probe: probe, index: index)
            // Unknown (nil) only while nothing says it: not the store, not
            // the content on disk, not a placeholder laid out at its size
            // (one of unknown size is 0 bytes; see `UnknownSizes`).
            var size = state == .modified ? stat?.size : info?.size
            if size == nil, state != .modified, entry.id == UnknownSizes.emptyBlob || (stat?.size ?? 0) > 0 { size = stat?.size }
            let date = state == .modified ? stat?.mtime.0 : (info?.mtime ?? stat?.mtime.0)
            return Item(identifier: path.description, parent: parent, filename: filename,
                        kind: entry.mode == .symlink ? "symlink" : "file", size: size, contentVersion: entry.id.hex,
                        state: state, modified: Self.isoDate(date ?? 0),
                        executable: entry.mode == .symlink ? nil : entry.mode == .executable, unsupported: nil)
        }
    }

    /// An untouched placeholder says so itself (no data, its blob id in its
    /// attributes); only other files need the index, read on first need.
    private func itemState(_ entry: TreeEntry, path: RepoPath, probe: ItemProbe, index: LazyIndex) throws -> ItemState {
        guard let stat = probe.stat else { return .deleted }
        if entry.mode.isFile, stat.isRegular, probe.placeholderBlob == entry.id, probe.markedDataless,
           ContentOperations.holdsNoData(rootFolder, path, stat) {
            return .dataless
        }
        let loaded = try index.get()
        guard let indexEntry = loaded.entry(path: path.bytes) else { return .modified }
        return StateClassifier(root: rootFolder, index: loaded).state(of: indexEntry, stat: stat)
    }

    static func encodePageToken(_ name: [UInt8]) -> String {
        "p1." + Data(name).base64EncodedString()
            .replacingAll("+", with: "-").replacingAll("/", with: "_")
            .replacingAll("=", with: "")
    }

    static func decodePageToken(_ token: String) throws -> [UInt8] {
        guard token.hasPrefix("p1.") else {
            throw FprepError(.usage, "'\(token)' is not a page token (pass the token the previous page printed)")
        }
        var base64 = String(token.dropFirst(3)).replacingAll("-", with: "+").replacingAll("_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64), !data.isEmpty else {
            throw FprepError(.usage, "'\(token)' is not a page token (pass the token the previous page printed)")
        }
        return Array(data)
    }

    /// `2023-11-14T22:13:20Z`: UTC, whole seconds (made by hand: a date
    /// formatter per item costs more than the rest of the item).
    public static func isoDate(_ seconds: Int64) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }
}

/// The index, read the first time something asks for it.
final class LazyIndex {
    private let repository: Repository
    private var loaded: Index?

    init(_ repository: Repository) { self.repository = repository }

    func get() throws -> Index {
        if let loaded { return loaded }
        let index = try repository.index()
        loaded = index
        return index
    }
}
