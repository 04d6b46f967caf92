import CFprepSys
import Foundation
import FprepGit

/// Writes a `LayoutPlan` onto disk: folders, placeholders, symlinks, and
/// empty folders for submodules. Placeholders are made by two threads (the
/// floor of a dataless clone is the kernel's file creation), each going
/// through folder handles opened beneath the root, so no write ever follows
/// a symlink.
struct PlaceholderLayout {
    let root: FolderHandle
    let progress: any ProgressReporter

    /// Lays out `plan`; returns, per plan entry, the stat data of what was
    /// written, for the index.
    func layOut(_ plan: LayoutPlan, symlinkTargets: [ObjectID: [UInt8]]) throws -> [StatData] {
        try makeFolders(plan.folders)
        let results = StatResults(count: plan.entries.count)
        let counter = ProgressCounter(total: plan.entries.count, progress: progress)
        let failures = FirstFailure()
        let workers = plan.entries.count > 2000 ? 2 : 1
        let entries = plan.entries
        let folders = plan.folders
        let root = self.root
        let chunk = (entries.count + workers - 1) / max(workers, 1)
        DispatchQueue.concurrentPerform(iterations: workers) { worker in
            let start = worker * chunk
            let end = min(entries.count, start + chunk)
            guard start < end else { return }
            do {
                try Self.layOut(entries, range: start..<end, folders: folders, root: root,
                                symlinkTargets: symlinkTargets, results: results, counter: counter)
            } catch {
                failures.record(error)
            }
        }
        if let error = failures.first { throw error }
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

    private static func layOut(_ entries: [LayoutPlan.Entry], range: Range<Int>, folders: [RepoPath],
                               root: FolderHandle, symlinkTargets: [ObjectID: [UInt8]],
                               results: StatResults, counter: ProgressCounter) throws {
        var currentFolder: Int32 = -2
        var handle: FolderHandle = root
        var sinceReport = 0
        for i in range {
            let entry = entries[i]
            if entry.folder != currentFolder {
                handle = entry.folder < 0 ? root : try root.folder(folders[Int(entry.folder)])
                currentFolder = entry.folder
            }
            let name = cPath(entry.name)
            var written = stat()
            switch entry.kind {
            case .file(let executable):
                let mode: mode_t = executable ? 0o777 : 0o666
                let id = entry.id.bytes
                if fprep_create_placeholder(handle.fd, name, mode, off_t(max(entry.size, 0)), id, id.count,
                                            entry.mtime, 0, &written) != 0 {
                    throw SystemError("create placeholder", entry.path.description)
                }
            case .symlink:
                guard let target = symlinkTargets[entry.id] else {
                    throw FprepError("the target of symlink '\(entry.path)' was not fetched; run the command again")
                }
                if symlinkat(cPath(target), handle.fd, name) != 0 || fstatat(handle.fd, name, &written, AT_SYMLINK_NOFOLLOW) != 0 {
                    throw SystemError("symlink", entry.path.description)
                }
            case .submodule:
                if fstatat(handle.fd, name, &written, AT_SYMLINK_NOFOLLOW) != 0 {
                    throw SystemError("stat", entry.path.description)
                }
            }
            var flat = fprep_stat()
            fprep_stat_flatten(&written, &flat)
            results.set(i, StatData(FileStat(flat)))
            sinceReport += 1
            if sinceReport == 512 {
                counter.add(sinceReport)
                sinceReport = 0
            }
        }
        counter.add(sinceReport)
    }
}

/// Per-entry results that worker threads fill at disjoint indices.
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
    private let lock = NSLock()
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
    private let lock = NSLock()
    private var error: Error?

    func record(_ error: Error) {
        lock.lock()
        if self.error == nil { self.error = error }
        lock.unlock()
    }

    var first: Error? { lock.lock(); defer { lock.unlock() }; return error }
}
