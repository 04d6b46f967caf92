import CFprepSys
import Dispatch
import FoundationEssentials
import Glibc
import FprepGit

/// Writes one anchor's tree onto disk as it walks it (`TreeWalk`, after
/// `LayoutPlan.scan` checked it): folders, placeholders, symlinks, empty
/// folders for submodules, and each entry's line of a new index
/// (`IndexStream`). Placeholders are made by two threads (the floor of a
/// dataless clone is the kernel's file creation), a folder's worth at a
/// time handed over through a short queue, each going through folder
/// handles opened beneath the root, so no write ever follows a symlink.
/// Nothing of the tree is held beyond that queue.
struct PlaceholderLayout {
    let root: FolderHandle
    let progress: any ProgressReporter

    /// Placeholders handed to the threads in groups of at most this many.
    private static let batchSize = 256
    /// Groups waiting at most: the walk pauses while the threads catch up.
    private static let queueDepth = 64

    /// Lays out the tree `walk` visits, which `plan` counted, adding each
    /// entry to `index`. Symlinks need their targets: `symlinkTargets`
    /// (which may still be fetching them) is asked at the first one.
    func layOut(_ walk: TreeWalk, plan: LayoutPlan, index: IndexStream,
                symlinkTargets: () throws -> [ObjectID: [UInt8]]) throws {
        // Every folder before any file, as `mkdir -p` of the tree would:
        // ext4 gives a new folder an inode beside the last ones it gave
        // out, so the folders' inodes end up together, 512 to a read of the
        // inode table on a cold cache, where made during the walk they lay
        // among their files'. In a replica of 10^6 files, cold lookups of
        // the 963 folders of 1,000 scattered files took 4,953–4,994 reads
        // (144 MB, 134–145 ms) with the folders made during the walk, and
        // 2,388–2,421 (29 MB, 46–53 ms) with them made first.
        let foldersFirst = plan.folderPaths.isKept && plan.folderPaths.count == plan.folders
        if foldersFirst {
            let made = ProgressCounter(total: plan.folders, progress: progress, phase: "making folders")
            var since = 0
            for folder in plan.folderPaths {
                try makeFolder(folder)
                since += 1
                if since == 1024 { made.add(since); since = 0 }
            }
            made.add(since)
        }
        let counter = ProgressCounter(total: plan.files, progress: progress)
        let failures = FirstFailure()
        let queue = BatchQueue<PlaceholderBatch>(depth: Self.queueDepth)
        let workers = plan.files > 2000 ? 2 : 1
        let group = DispatchGroup()
        let root = self.root
        for _ in 0..<workers {
            // Threads of their own: they wait on the queue and the disk, and
            // the clone's fetch and recorder wait beside them (`BlockingThread`).
            group.enter()
            BlockingThread.start {
                defer { group.leave() }
                while let batch = queue.take() {
                    // After a failure the rest is only drained: the walk stops soon.
                    guard failures.first == nil else { continue }
                    do {
                        try batch.create(root: root)
                        counter.add(batch.entries.count)
                    } catch {
                        failures.record(error)
                    }
                }
            }
        }
        var batch = PlaceholderBatch(folder: .root)
        var targets: [ObjectID: [UInt8]]?
        var walkFailure: Error?
        do {
            try walk.run { step in
                if let error = failures.first { throw error }
                switch step {
                case .folder(let path):
                    if !foldersFirst { try makeFolder(path) }
                case .entry(let entry):
                    switch entry.kind {
                    case .file:
                        if entry.path.parent != batch.folder || batch.entries.count == Self.batchSize {
                            if !batch.entries.isEmpty { queue.put(batch) }
                            batch = PlaceholderBatch(folder: entry.path.parent)
                        }
                        batch.entries.append(entry)
                        try index.append(IndexEntry(path: entry.path.bytes, id: entry.id, mode: entry.gitMode,
                                                    stat: Self.recordedStat(of: entry), skipWorktree: true))
                    case .submodule:
                        try index.append(IndexEntry(path: entry.path.bytes, id: entry.id, mode: entry.gitMode,
                                                    stat: StatData(), skipWorktree: true))
                    case .symlink:
                        if targets == nil { targets = try symlinkTargets() }
                        let stat = try makeSymlink(entry, targets: targets ?? [:])
                        try index.append(IndexEntry(path: entry.path.bytes, id: entry.id, mode: entry.gitMode,
                                                    stat: stat, skipWorktree: false))
                    }
                }
            }
            if !batch.entries.isEmpty { queue.put(batch) }
        } catch {
            walkFailure = error
        }
        // The threads end once the queue is empty, after a failure too.
        queue.close(consumers: workers)
        group.wait()
        if let error = walkFailure ?? failures.first { throw error }
    }

    private func makeFolder(_ folder: RepoPath) throws {
        let parent = try root.folder(folder.parent)
        if mkdirat(parent.fd, cPath(folder.name), 0o777) != 0 {
            // A resumed layout finds the folders it already made.
            guard errno == EEXIST, parent.stat(name: folder.name)?.isDirectory == true else {
                throw SystemError("mkdir", folder.description)
            }
        }
    }

    private func makeSymlink(_ entry: TreeWalk.Entry, targets: [ObjectID: [UInt8]]) throws -> StatData {
        guard let target = targets[entry.id] else {
            throw FprepError("the target of symlink '\(entry.path)' was not fetched; run the command again")
        }
        let folder = try root.folder(entry.path.parent)
        guard symlinkat(cPath(target), folder.fd, cPath(entry.name)) == 0, let stat = folder.stat(name: entry.name) else {
            throw SystemError("symlink", entry.path.description)
        }
        return StatData(stat)
    }

    /// What the index keeps of a file laid out as a placeholder. No fstat
    /// per file: the index keeps a placeholder's size and date only, and a
    /// placeholder is unchanged while it has no data blocks and that size
    /// (see `StateClassifier`).
    static func recordedStat(of entry: TreeWalk.Entry) -> StatData {
        if case .file = entry.kind { return .placeholder(size: entry.size, mtime: entry.mtime) }
        return StatData()
    }
}

/// Placeholders of one folder, made together by one thread.
struct PlaceholderBatch: Sendable {
    let folder: RepoPath
    var entries: [TreeWalk.Entry] = []

    init(folder: RepoPath) { self.folder = folder }

    func create(root: FolderHandle) throws {
        let handle = folder.isRoot ? root : try root.folder(folder)
        for entry in entries {
            guard case .file(let executable) = entry.kind else { continue }
            let size = max(entry.size, 0)
            let created = entry.id.bytes.withUnsafeBufferPointer { id in
                fprep_create_placeholder(handle.fd, cPath(entry.name), executable ? 0o777 : 0o666, off_t(size),
                                         id.baseAddress, id.count, entry.mtime, 0, nil)
            }
            guard created == 0 else { throw SystemError("create placeholder", entry.path.description) }
        }
    }
}

/// A short first-in first-out queue between one producer and a few
/// consumer threads: `put` waits while it is full, `take` while it is
/// empty, and gives nil once it is closed and empty.
final class BatchQueue<Element: Sendable>: @unchecked Sendable {
    private let lock = Lock()
    private var items: [Element] = []
    private let available = DispatchSemaphore(value: 0)
    private let space: DispatchSemaphore

    init(depth: Int) { space = DispatchSemaphore(value: depth) }

    func put(_ item: Element) {
        space.wait()
        lock.lock()
        items.append(item)
        lock.unlock()
        available.signal()
    }

    func take() -> Element? {
        available.wait()
        lock.lock()
        guard !items.isEmpty else {
            lock.unlock()
            return nil  // closed: one wake-up per consumer
        }
        let item = items.removeFirst()
        lock.unlock()
        space.signal()
        return item
    }

    /// No more items: each of `consumers` gets nil once the rest is taken.
    func close(consumers: Int) {
        for _ in 0..<consumers { available.signal() }
    }
}

/// A progress count shared by worker threads.
final class ProgressCounter: @unchecked Sendable {
    private let lock = Lock()
    private var done = 0
    private let total: Int
    private let progress: any ProgressReporter
    private let phase: String

    init(total: Int, progress: any ProgressReporter, phase: String = "laying out placeholders") {
        self.total = total
        self.progress = progress
        self.phase = phase
    }

    func add(_ count: Int) {
        lock.lock()
        done += count
        let now = done
        lock.unlock()
        progress.report(phase, done: now, total: total)
    }
}

/// The first error any worker met.
final class FirstFailure: @unchecked Sendable {
    private let lock = Lock()
    private var error: Error?

    func record(_ error: Error) {
        lock.lock()
        if self.error == nil { self.error = error }
        lock.unlock()
    }

    var first: Error? { lock.lock(); defer { lock.unlock() }; return error }
}
