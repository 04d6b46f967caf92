import CFprepSys
import FprepGit
import Glibc

/// The placeholders of changed and added files, made under their temporary
/// names on a thread of their own while the sync's thread works through
/// the deletions and moves.
///
/// On a cold disk each new file waits for reads of its own (its folder's
/// inode, the inode bitmap of its block group). Made after the moves, the
/// 61 placeholders of the benchmark's change of 100 files in a tree of 10^6
/// cost the sync 12–20 ms even made together (`TemporaryPlaceholders`);
/// made meanwhile, those waits overlap the moves' own.
///
/// Only paths no other step of the change touches are made early: no
/// deletion, move or new folder at or above them, so the steps before see
/// the folders as they would have. Nothing is decided here: the batch that
/// would have made a placeholder claims it once the item is classified,
/// when it is the same one (name, mode, size, date and blob, and still the
/// file made, in the folder the batch opened); what is not claimed is
/// removed. A sync killed meanwhile leaves temporaries of its token, which
/// its resumption settles as any other (`SyncApplier.removeStaleTemporaries`).
final class EarlyPlaceholders: @unchecked Sendable {
    /// A placeholder to make: the item at `path` with `entry`'s blob and
    /// mode, its size and date as the state database knows them (looked up
    /// on the work's thread: on a cold disk each lookup waits for pages of
    /// its own).
    struct Item {
        let path: RepoPath
        let entry: TreeEntry
        let temporary: [UInt8]
    }

    private let root: FolderHandle
    private let items: [Item]
    /// Per item, the inode made (0: not made) and the size and date it was
    /// made with. Written on the work's thread; read only after `work` is
    /// waited for.
    private let inodes: UnsafeMutableBufferPointer<UInt64>
    private let made: UnsafeMutableBufferPointer<(size: Int64, mtime: Int64)>
    private var work: BackgroundWork?
    private var byPath: [RepoPath: Int] = [:]
    /// Items claimed by a batch or removed.
    private var settled: Set<Int> = []

    /// Starts making `items` (none: nothing to do), their sizes and dates
    /// from the state database at `databasePath` (none known: 0 bytes and
    /// `commitTime`, as the batches make them).
    init(root: FolderHandle, items: [Item], databasePath: String, commitTime: Int64) {
        self.root = root
        self.items = items
        inodes = .allocate(capacity: max(items.count, 1))
        inodes.initialize(repeating: 0)
        made = .allocate(capacity: max(items.count, 1))
        made.initialize(repeating: (0, 0))
        for (i, item) in items.enumerated() { byPath[item.path] = i }
        guard !items.isEmpty else { return }
        let inodes = inodes, made = made, items = items, rootFD = root.fd
        // One thread: more would take the disk and the journal from the
        // deletions and moves they run beside (measured: 2 or 8 threads
        // made the sync no faster, or slower, than one).
        work = BackgroundWork {
            let sizes = try StateStore.blobInfoLookup(on: try Database(path: databasePath))
            // In the order of the table's keys: neighbours share pages.
            for i in items.indices.sorted(by: { items[$0].entry.id < items[$1].entry.id }) {
                let info = try sizes(items[i].entry.id)
                made[i] = (max(info?.size ?? 0, 0), info?.mtime ?? commitTime)
            }
            for i in items.indices {
                inodes[i] = Self.make(items[i], size: made[i].size, mtime: made[i].mtime, rootFD: rootFD)
            }
        }
    }

    deinit {
        try? work?.wait()
        inodes.deallocate()
        made.deallocate()
    }

    /// Makes one placeholder in its folder, opened beneath the root (never
    /// through a symlink); its inode, or 0 when it could not be made.
    private static func make(_ item: Item, size: Int64, mtime: Int64, rootFD: Int32) -> UInt64 {
        let parent = item.path.parent
        let folder = parent.isRoot ? rootFD : fprep_open_beneath(rootFD, cPath(parent.bytes), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0)
        guard folder >= 0 else { return 0 }
        defer { if !parent.isRoot { close(folder) } }
        var info = stat()
        let created = item.entry.id.bytes.withUnsafeBufferPointer { id in
            fprep_create_placeholder(folder, cPath(item.temporary), item.entry.mode == .executable ? 0o777 : 0o666,
                                     off_t(size), id.baseAddress, id.count, mtime, 0, &info)
        }
        return created == 0 ? UInt64(info.st_ino) : 0
    }

    /// Waits for the work (once).
    func finish() {
        try? work?.wait()
    }

    /// Whether the placeholder a batch is about to make at `path` was made
    /// early, exactly so, and is still the file made at `temporary` in
    /// `folder`: then it is the batch's to place. Otherwise the early one
    /// goes (the batch makes its own under the same name).
    func claim(_ path: RepoPath, in folder: FolderHandle, temporary: [UInt8], mode: FileMode, size: Int64, blob: ObjectID,
               mtime: Int64) -> Bool {
        guard let i = byPath[path], !settled.contains(i) else { return false }
        finish()
        let item = items[i]
        guard inodes[i] != 0, item.temporary == temporary, item.entry.mode == mode, made[i].size == size, item.entry.id == blob,
              made[i].mtime == mtime, folder.stat(name: temporary).map({ $0.isRegular && UInt64($0.inode) == inodes[i] }) == true
        else {
            remove(i)
            return false
        }
        settled.insert(i)
        return true
    }

    /// Removes the early placeholder of `path`, if one was made and not
    /// claimed: the item is written another way (content, a conflict), which
    /// makes its temporary under the same name.
    func release(_ path: RepoPath) {
        guard let i = byPath[path], !settled.contains(i) else { return }
        finish()
        remove(i)
    }

    /// Removes every early placeholder no batch claimed.
    func removeUnclaimed() {
        finish()
        for i in items.indices where !settled.contains(i) { remove(i) }
    }

    /// Removes the placeholder made for item `i`, if it is still the one
    /// made and nothing was written into it meanwhile (then it stays, a
    /// stray temporary of this sync that the next scan sets aside).
    private func remove(_ i: Int) {
        settled.insert(i)
        let item = items[i]
        let location = item.path.parent.appending(item.temporary)
        guard inodes[i] != 0, let stat = root.stat(location), stat.isRegular, UInt64(stat.inode) == inodes[i],
              ContentOperations.holdsNoData(root, location, stat),
              let folder = try? root.folder(item.path.parent) else { return }
        unlinkat(folder.fd, cPath(item.temporary), 0)
    }

    /// The items worth making early for `changes`: changed files whose old
    /// version and new one are files, and added files, that become
    /// placeholders (not a rule file the scan reads, no content fetched or
    /// held for them) at paths no deletion, move or new folder touches.
    static func items(for changes: ChangeSet, token: String, fetched: Set<ObjectID>, contains: (ObjectID) -> Bool) -> [Item] {
        var touched = Set(changes.deleted.map(\.path))
        for move in changes.moved {
            touched.insert(move.from)
            touched.insert(move.to)
        }
        for folder in changes.deletedFolders { touched.insert(folder.path) }
        for folder in changes.addedFolders { touched.insert(folder.path) }
        // A long name's temporary is cut short to fit: two paths of a folder
        // may share one, and a step before would take it.
        func temporary(_ path: RepoPath) -> [UInt8] { ContentOperations.temporaryName(for: path.name, token: token) }
        var temporaries: [RepoPath: Int] = [:]
        for path in changes.touchedPaths { temporaries[path.parent.appending(temporary(path)), default: 0] += 1 }
        var items: [Item] = []
        for update in changes.updated {
            let new = update.new, name = temporary(update.path)
            guard new.mode == .blob || new.mode == .executable, update.old.map({ $0.mode.isFile }) ?? true,
                  !IgnoreRules.isRuleFile(update.path), !fetched.contains(new.id),
                  !touched.contains(update.path), !update.path.ancestors.contains(where: touched.contains),
                  temporaries[update.path.parent.appending(name)] == 1 else { continue }
            // An added file whose content is here already gets it (`writesContent`).
            if update.old == nil, contains(new.id) { continue }
            items.append(Item(path: update.path, entry: new, temporary: name))
        }
        return items
    }
}
