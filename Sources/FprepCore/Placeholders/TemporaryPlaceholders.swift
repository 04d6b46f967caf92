import CFprepSys
import FprepGit
import Glibc

/// Placeholders made under their temporary names on several threads, then
/// (for those nothing stood in the way of) renamed to their names.
///
/// On a cold disk each new file waits for blocks of its own: its folder's
/// inode (the folder changes), the inode bitmap, its own inode. Made one
/// after another those waits add up (50 changed placeholders in scattered
/// folders: 10-15 ms with the agent serving, whose marks keep inodes in
/// memory while their blocks leave the cache); made together they overlap.
final class TemporaryPlaceholders {
    struct Item {
        let folder: FolderHandle
        let temporary: [UInt8]
        let name: [UInt8]
        let mode: FileMode
        let size: Int64
        let blob: ObjectID
        let mtime: Int64
        /// Made already under its temporary name (`EarlyPlaceholders`):
        /// `create` leaves it be; the rest goes on as for the others.
        var alreadyMade = false
    }

    let items: [Item]
    /// Per item: 0, or the errno its creation (or rename) failed with;
    /// EEXIST from a rename: a file took the name meanwhile.
    var errors: [Int32] { Array(errorSlots) }

    private var jobs: [fprep_placeholder_job] = []
    private let errorSlots: UnsafeMutableBufferPointer<Int32>
    private var allocations: [UnsafeMutableRawPointer] = []

    init(_ items: [Item]) {
        self.items = items
        errorSlots = .allocate(capacity: max(items.count, 1))
        errorSlots.initialize(repeating: 0)
        guard let firstSlot = errorSlots.baseAddress else { return }
        for (i, item) in items.enumerated() {
            let temporary = allocatedCString(item.temporary)
            let name = allocatedCString(item.name)
            let id = UnsafeMutablePointer<UInt8>.allocate(capacity: 20)
            id.initialize(from: item.blob.bytes, count: 20)
            allocations += [UnsafeMutableRawPointer(temporary), UnsafeMutableRawPointer(name), UnsafeMutableRawPointer(id)]
            jobs.append(fprep_placeholder_job(dirfd: item.folder.fd, temporary: temporary, name: name,
                                              mode: item.mode == .executable ? 0o777 : 0o666, size: off_t(item.size),
                                              blob_id: id, mtime_sec: item.mtime, error: firstSlot + i, create_only: 1))
        }
    }

    deinit {
        for allocation in allocations { allocation.deallocate() }
        errorSlots.deallocate()
    }

    private var threads: Int32 { Int32(min(16, jobs.count)) }

    /// Makes every placeholder under its temporary name.
    func create() {
        // Each job writes its outcome to its own slot, whichever batch it is in.
        let toMake = zip(jobs, items).filter { !$0.1.alreadyMade }.map(\.0)
        guard !toMake.isEmpty else { return }
        fprep_create_placeholders(toMake, toMake.count, Int32(min(16, toMake.count)))
    }

    /// Renames each one made to its name, never over a file that appeared
    /// meanwhile (its error is EEXIST then, its temporary removed).
    func renameIntoPlace() {
        guard !jobs.isEmpty else { return }
        fprep_rename_placeholders(jobs, jobs.count, threads)
    }

    /// Removes the temporaries that were made (when the batch is given up).
    func removeMade() {
        for (item, error) in zip(items, errorSlots) where error == 0 {
            unlinkat(item.folder.fd, cPath(item.temporary), 0)
        }
    }
}
