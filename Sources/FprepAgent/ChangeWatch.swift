import CFprepSys
import FprepCore
import Dispatch
import Glibc

/// Follows what programs change in a replica, for the worker's own syncs:
/// a fanotify mark on every folder (not `.git`, not `.fprep`) reports
/// creates, deletes, moves, attribute changes and closes after writing in
/// it, and each batch of them calls `onChange` (on a thread of its own).
/// Runs in the worker, as the replica's owner: no privilege is needed for
/// folder marks, and the worker's own writes (fills, syncs) are told apart
/// by their process id. Folders that arrive (made, moved in, or laid out
/// by a sync) are marked as they come; a folder moved within the replica
/// keeps its marks, and the paths known for it and the folders below it
/// are rewritten (an overflow, or a folder whose mark failed, makes every
/// folder be marked again). A change says "sync soon" (the worker's own
/// writes and pure writes of a file still open do not), and every change goes into the
/// replica's `ChangeJournal`, which commands ask instead of scanning; a
/// lost event (an overflow) is a gap in it, which costs one full scan.
final class ChangeWatch: @unchecked Sendable {
    private let root: String
    private let rootFD: Int32
    private let group: Int32
    private let stopPipe: (read: Int32, write: Int32)
    private let onChange: @Sendable () -> Void
    private let onLeftOut: @Sendable () -> Void
    /// Tells changes the scan leaves out (ignored untracked items); nil when
    /// the replica's repository could not be opened: every change counts.
    private let leftOut: IgnoredChanges?
    private let own = getpid()
    /// Folder handle (type and bytes) → its path relative to the root.
    private var folders: [[UInt8]: [UInt8]] = [:]
    private var thread: BlockingThread?
    /// What changed, for commands that ask (see `changes(since:)`).
    let journal = ChangeJournal()
    /// Where cookies are made (`.fprep/cookies`), and its handle's key: a
    /// cookie's event comes after every event of changes made before it.
    private static let cookieFolder = ".fprep" + "/cookies"
    private var cookieKey: [UInt8] = []
    /// Folders whose mark failed (the user's fanotify mark limit): the
    /// journal answers nothing with paths while there are any.
    private var unmarked = Set<[UInt8]>()

    /// `onLeftOut` is called for each batch of changes all to ignored
    /// items, which starts no sync.
    init(root: String, onChange: @escaping @Sendable () -> Void, onLeftOut: @escaping @Sendable () -> Void = {}) throws {
        self.root = root
        self.onChange = onChange
        self.onLeftOut = onLeftOut
        leftOut = try? IgnoredChanges(replicaRoot: root)
        rootFD = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard rootFD >= 0 else { throw FprepError("cannot follow the changes in '\(root)': \(String(cString: strerror(errno)))") }
        group = fprep_changes_init()
        guard group >= 0 else {
            let why = String(cString: strerror(errno))
            close(rootFD)
            throw FprepError("cannot follow the changes in '\(root)': fanotify_init: \(why)")
        }
        do {
            stopPipe = try SignalPipe.makePipe()
        } catch {
            close(group)
            close(rootFD)
            throw error
        }
        markCookieFolder()
        markTree(below: [])
        journal.setUnfollowed(unmarked.count)
        thread = try BlockingThread { [self] in follow() }
    }

    /// What the journal says changed since `point`, once every change made
    /// before the call is in it (a cookie file made now, and its event
    /// waited for); nil when the cookie never comes.
    func changes(since point: JournalToken?) -> JournalAnswer? {
        guard !cookieKey.isEmpty else { return nil }
        let (number, arrived) = journal.askCookie()
        let name = Array("\(Self.cookieFolder)/\(number)".utf8).map { CChar(bitPattern: $0) } + [0]
        let fd = openat(rootFD, name, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            journal.forgetCookie(number)
            return nil
        }
        close(fd)
        defer { unlinkat(rootFD, name, 0) }
        guard arrived.wait(timeout: .now() + .seconds(10)) == .success else {
            journal.forgetCookie(number)
            return nil
        }
        return journal.answer(since: point)
    }

    /// Makes (empty) and follows the cookie folder; without it the journal answers nothing.
    private func markCookieFolder() {
        let path = Array(Self.cookieFolder.utf8).map { CChar(bitPattern: $0) } + [0]
        _ = mkdirat(rootFD, path, 0o700)
        let fd = openat(rootFD, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        if fd >= 0, let listing = fdopendir(fd) {
            // Cookies a killed worker left.
            while let entry = readdir(listing) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix(while: { $0 != 0 })) }
                if name.allSatisfy({ (0x30...0x39).contains($0) }), !name.isEmpty {
                    unlinkat(dirfd(listing), name.map { CChar(bitPattern: $0) } + [0], 0)
                }
            }
            closedir(listing)
        } else if fd >= 0 {
            close(fd)
        }
        var handle = fprep_change_event()
        guard fprep_changes_mark_folder(group, rootFD, path) == 0,
              fprep_changes_folder_handle(rootFD, path, &handle) == 0 else { return }
        cookieKey = Self.key(handle)
    }

    /// Folders followed now.
    var count: Int { folders.count }

    func stop() {
        var byte: UInt8 = 1
        _ = Glibc.write(stopPipe.write, &byte, 1)
        thread?.join()
        thread = nil
    }

    deinit {
        stop()
        close(group)
        close(rootFD)
        close(stopPipe.read)
        close(stopPipe.write)
    }

    private func follow() {
        var events = [fprep_change_event](repeating: fprep_change_event(), count: 256)
        while true {
            var fds = [pollfd(fd: group, events: Int16(POLLIN), revents: 0), pollfd(fd: stopPipe.read, events: Int16(POLLIN), revents: 0)]
            if poll(&fds, 2, -1) < 0 && errno != EINTR { return }
            if fds[1].revents != 0 { return }
            var changed = false
            var remark = false
            var arrived: [[UInt8]] = []
            // Where others changed something, when the event says: a batch
            // of changes all to ignored items (a swap file, build output)
            // starts no sync.
            var changedPaths: [[UInt8]] = []
            // For the journal: every change, whoever made it.
            var journaled: [[UInt8]] = []
            var gap = false
            var cookies: UInt64 = 0
            while true {
                let count = events.withUnsafeMutableBufferPointer { fprep_changes_read(group, $0.baseAddress, $0.count) }
                if count <= 0 { break }
                for event in events[0..<count] {
                    if event.mask & UInt64(FPREP_CHANGE_OVERFLOW) != 0 {
                        // Folders made meanwhile may have gone unmarked.
                        changed = true
                        remark = true
                        gap = true
                        continue
                    }
                    let key = Self.key(event)
                    let name = withUnsafeBytes(of: event.name) { Array($0.prefix(Int(event.name_length))) }
                    if key == cookieKey {
                        if event.mask & UInt64(FPREP_CHANGE_ARRIVED) != 0, let number = UInt64(String(decoding: name, as: UTF8.self)) {
                            cookies = max(cookies, number)
                        }
                        continue
                    }
                    let parent = folders[key]
                    if !name.isEmpty {
                        if let parent {
                            let path = parent.isEmpty ? name : parent + [0x2F] + name
                            if !(parent.isEmpty && (name == Array(".git".utf8) || name == Array(".fprep".utf8))) {
                                journaled.append(path)
                            }
                        } else {
                            gap = true
                        }
                    }
                    // A write to a file still open says nothing to sync yet: its close will.
                    let onlyWritten = event.mask & ~UInt64(FPREP_CHANGE_ON_FOLDER) == UInt64(FPREP_CHANGE_MODIFIED)
                    if event.pid != own && !onlyWritten {
                        if !name.isEmpty, let parent {
                            changedPaths.append(parent.isEmpty ? name : parent + [0x2F] + name)
                        } else {
                            changed = true
                        }
                    }
                    guard event.mask & UInt64(FPREP_CHANGE_ON_FOLDER) != 0 else { continue }
                    guard event.mask & UInt64(FPREP_CHANGE_MOVED | FPREP_CHANGE_ARRIVED) != 0 else { continue }
                    // A folder's marks go with it (they are on its inode);
                    // only the paths known for it and the folders below change.
                    let moved = event.mask & UInt64(FPREP_CHANGE_MOVED) != 0
                    guard let parent, !name.isEmpty else {
                        if moved { remark = true }
                        continue
                    }
                    // The folders whose mark failed are known by path only.
                    if moved, !unmarked.isEmpty {
                        remark = true
                        continue
                    }
                    let path = parent.isEmpty ? name : parent + [0x2F] + name
                    if event.mask & UInt64(FPREP_CHANGE_MOVED_FROM) != 0 { detach(path) }
                    if event.mask & UInt64(FPREP_CHANGE_MOVED_TO) != 0 {
                        if !reattach(at: path) { arrived.append(path) }
                    } else if event.mask & UInt64(FPREP_CHANGE_CREATED) != 0 {
                        arrived.append(path)
                    }
                }
            }
            if remark {
                folders = [:]
                detached = [:]
                unmarked = []
                markTree(below: [])
            } else {
                for path in arrived { markTree(below: path) }
            }
            journal.setUnfollowed(unmarked.count)
            // Recorded once new folders are followed: a command told of the
            // changes up to its cookie looks at them after this.
            if gap { journal.gap() }
            journal.record(journaled)
            if cookies > 0 { journal.cookiesArrived(upTo: cookies) }
            if changed || (!changedPaths.isEmpty && leftOut?.allLeftOut(changedPaths) != true) {
                onChange()
            } else if !changedPaths.isEmpty {
                onLeftOut()
            }
        }
    }

    /// Folders moved away from where `folders` knew them (handle → old
    /// path), until the other half of the move says where they went; those
    /// moved out of the replica stay here, unknown: an event from one is a
    /// gap in the journal.
    private var detached: [[UInt8]: [UInt8]] = [:]

    /// The folder at `path` and those below it moved away.
    private func detach(_ path: [UInt8]) {
        for (key, known) in folders where Self.isAtOrBelow(known, path) {
            folders[key] = nil
            detached[key] = known
        }
    }

    /// A folder arrived at `path` by a move: when it is one followed
    /// already, it and the folders below it are known at their new paths
    /// (rewritten, not walked and marked again: moving one folder of a
    /// large tree made the worker walk every folder); false when it came
    /// from outside (or is gone again), to be marked as new.
    private func reattach(at path: [UInt8]) -> Bool {
        var handle = fprep_change_event()
        let name = path.map { CChar(bitPattern: $0) } + [0]
        guard fprep_changes_folder_handle(rootFD, name, &handle) == 0 else { return false }
        let key = Self.key(handle)
        if let old = detached[key] {
            for (moved, known) in detached where Self.isAtOrBelow(known, old) {
                detached[moved] = nil
                folders[moved] = path + known.dropFirst(old.count)
            }
            return true
        }
        if let old = folders[key] {
            // Its move away was not seen (the events came in another order).
            for (moved, known) in folders where Self.isAtOrBelow(known, old) {
                folders[moved] = path + known.dropFirst(old.count)
            }
            return true
        }
        return false
    }

    /// Whether `path` is `folder` or a path below it.
    private static func isAtOrBelow(_ path: [UInt8], _ folder: [UInt8]) -> Bool {
        if folder.isEmpty { return true }
        guard path.count >= folder.count, path.starts(with: folder) else { return false }
        return path.count == folder.count || path[folder.count] == 0x2F
    }

    /// Marks the folder at `start` (relative to the root; [] the root) and
    /// every folder below it, never through a symlink, never `.git` or `.fprep`.
    private func markTree(below start: [UInt8]) {
        var pending = [start]
        while let relative = pending.popLast() {
            let path = (relative.isEmpty ? Array(".".utf8) : relative).map { CChar(bitPattern: $0) } + [0]
            guard fprep_changes_mark_folder(group, rootFD, path) == 0 else {
                if errno != ENOENT && errno != ENOTDIR { unmarked.insert(relative) }
                continue
            }
            unmarked.remove(relative)
            var handle = fprep_change_event()
            if fprep_changes_folder_handle(rootFD, path, &handle) == 0 { folders[Self.key(handle)] = relative }
            let fd = openat(rootFD, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0, let listing = fdopendir(fd) else {
                if fd >= 0 { close(fd) }
                continue
            }
            defer { closedir(listing) }
            while let entry = readdir(listing) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix(while: { $0 != 0 })) }
                if name == [0x2E] || name == [0x2E, 0x2E] { continue }
                if relative.isEmpty, name == Array(".git".utf8) || name == Array(".fprep".utf8) { continue }
                var isFolder = entry.pointee.d_type == UInt8(DT_DIR)
                if entry.pointee.d_type == UInt8(DT_UNKNOWN) {
                    var info = stat()
                    isFolder = fstatat(dirfd(listing), name.map { CChar(bitPattern: $0) } + [0], &info, AT_SYMLINK_NOFOLLOW) == 0
                        && info.st_mode & S_IFMT == S_IFDIR
                }
                if isFolder { pending.append(relative.isEmpty ? name : relative + [0x2F] + name) }
            }
        }
    }

    private static func key(_ event: fprep_change_event) -> [UInt8] {
        withUnsafeBytes(of: event.handle_type) { Array($0) } + withUnsafeBytes(of: event.handle) { Array($0.prefix(Int(event.handle_bytes))) }
    }
}
