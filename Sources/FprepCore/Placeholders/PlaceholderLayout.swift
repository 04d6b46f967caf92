import CFprepSys
import Dispatch
import FoundationEssentials
import Glibc
import FprepGit

/// Writes a `LayoutPlan` onto disk: folders, placeholders, symlinks, and
/// empty folders for submodules. Placeholders are made by two threads (the
/// floor of a dataless clone is the kernel's file creation), each going
/// through folder handles opened beneath the root, so no write ever follows
/// a symlink.
struct PlaceholderLayout {
    let root: FolderHandle
    let progress: any ProgressReporter

    /// Lays out `plan`; returns, per plan entry, the stat data the index
    /// keeps for it. Files and folders first; symlinks last, once
    /// `symlinkTargets` (which may still be fetching them) gives their targets.
    func layOut(_ plan: LayoutPlan, symlinkTargets: () throws -> [ObjectID: [UInt8]]) throws -> [StatData] {
        try makeFolders(plan.folders)
        let results = StatResults(count: plan.entries.count)
        let fileCount = plan.fileCount
        let counter = ProgressCounter(total: fileCount, progress: progress)
        let failures = FirstFailure()
        let workers = fileCount > 2000 ? 2 : 1
        let entries = plan.entries
        let folders = plan.folders
        let root = self.root
        let chunk = (entries.count + workers - 1) / max(workers, 1)
        DispatchQueue.concurrentPerform(iterations: workers) { worker in
            let start = worker * chunk
            let end = min(entries.count, start + chunk)
            guard start < end else { return }
            do {
                try Self.layOutFiles(entries, range: start..<end, folders: folders, root: root,
                                     results: results, counter: counter)
            } catch {
                failures.record(error)
            }
        }
        if let error = failures.first { throw error }
        try layOutSymlinks(plan, targets: plan.entries.contains { $0.kind == .symlink } ? symlinkTargets() : [:],
                           results: results)
        return results.values
    }

    private func makeFolders(_ folders: [RepoPath]) throws {
        for folder in folders {
            let parent = try root.folder(folder.parent)
            if mkdirat(parent.fd, cPath(folder.name), 0o777) != 0 {
                // A resumed layout finds the folders it already made.
                guard errno == EEXIST, parent.stat(name: folder.name)?.isDirectory == true else {
                    throw SystemError("mkdir", folder.description)
                }
            }
        }
    }

    /// The placeholders of `range`. No fstat per file: the index keeps a
    /// placeholder's size and date only, and a placeholder is unchanged
    /// while it has no data blocks and that size (see `StateClassifier`).
    private static func layOutFiles(_ entries: [LayoutPlan.Entry], range: Range<Int>, folders: [RepoPath],
                                    root: FolderHandle, results: StatResults, counter: ProgressCounter) throws {
        var currentFolder: Int32 = -2
        var handle: FolderHandle = root
        var sinceReport = 0
        for i in range {
            let entry = entries[i]
            guard case .file(let executable) = entry.kind else { continue }
            if entry.folder != currentFolder {
                handle = entry.folder < 0 ? root : try root.folder(folders[Int(entry.folder)])
                currentFolder = entry.folder
            }
            let size = max(entry.size, 0)
            let created = entry.id.bytes.withUnsafeBufferPointer { id in
                fprep_create_placeholder(handle.fd, cPath(entry.name), executable ? 0o777 : 0o666, off_t(size),
                                         id.baseAddress, id.count, entry.mtime, 0, nil)
            }
            guard created == 0 else { throw SystemError("create placeholder", entry.path.description) }
            results.set(i, recordedStat(of: entry))
            sinceReport += 1
            if sinceReport == 512 {
                counter.add(sinceReport)
                sinceReport = 0
            }
        }
        counter.add(sinceReport)
    }

    /// What the index keeps of a plan entry laid out as a placeholder.
    static func recordedStat(of entry: LayoutPlan.Entry) -> StatData {
        if case .file = entry.kind { return .placeholder(size: entry.size, mtime: entry.mtime) }
        return StatData()
    }

    private func layOutSymlinks(_ plan: LayoutPlan, targets: [ObjectID: [UInt8]], results: StatResults) throws {
        for (i, entry) in plan.entries.enumerated() where entry.kind == .symlink {
            guard let target = targets[entry.id] else {
                throw FprepError("the target of symlink '\(entry.path)' was not fetched; run the command again")
            }
            let folder = try root.folder(entry.path.parent)
            guard symlinkat(cPath(target), folder.fd, cPath(entry.name)) == 0, let stat = folder.stat(name: entry.name) else {
                throw SystemError("symlink", entry.path.description)
            }
            results.set(i, StatData(stat))
        }
    }
}

/// A fixed buffer, not an Array: writes at disjoint indices from several
/// threads are safe only without copy-on-write.
final class StatResults: @unchecked Sendable {
    private let storage: UnsafeMutableBufferPointer<StatData>

    init(count: Int) {
        storage = .allocate(capacity: count)
        storage.initialize(repeating: StatData())
    }

    deinit { storage.deallocate() }

    func set(_ index: Int, _ value: StatData) { storage[index] = value }

    var values: [StatData] { Array(storage) }
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
