import CFprepSys
import FoundationEssentials
import Glibc
import FprepGit

/// The old version of a file that a sync replaced or removed while a
/// program had it open for writing (an editor that keeps its file open,
/// a mapping, a log): the remote's version took the name, and the old file
/// waits at its temporary name (`.NAME.fprep-TOKEN`, which the scan leaves
/// out) until no program has it open for writing. Only then can fprep tell
/// whether anyone wrote into it: unchanged, it goes (nothing to keep, and
/// nothing to push); written, its bytes are the user's and become a
/// conflict copy beside the item, synced like any other file.
///
/// Deciding at the swap instead would either push a copy of bytes nobody
/// wrote (a conflict copy of an untouched file) or lose what the program
/// writes later (the old file deleted under it).
struct HeldFile: Equatable {
    /// Where the old file waits.
    let location: RepoPath
    /// The item it is the old version of.
    let item: RepoPath
    /// What it held when it was swapped out.
    let blob: ObjectID
    /// Its inode: whatever else takes the name later is not it.
    let inode: Int64
    /// It was a placeholder: holding no data means nobody wrote into it.
    let dataless: Bool
    let since: Int64
}

extension StateStore {
    func recordHeld(_ file: HeldFile) throws {
        try database.prepare("""
            INSERT INTO held_files(location, item, oid, inode, dataless, since) VALUES(?1, ?2, ?3, ?4, ?5, ?6)
            ON CONFLICT(location) DO UPDATE SET item = excluded.item, oid = excluded.oid, inode = excluded.inode,
                dataless = excluded.dataless, since = excluded.since
            """).bind(.blob(file.location.bytes), .blob(file.item.bytes), .blob(file.blob.bytes),
                      .int(file.inode), .int(file.dataless ? 1 : 0), .int(file.since)).run()
    }

    func heldFiles() throws -> [HeldFile] {
        let statement = try database.prepare("SELECT location, item, oid, inode, dataless, since FROM held_files ORDER BY location")
        var result: [HeldFile] = []
        while try statement.step() {
            guard let id = ObjectID(bytes: statement.blob(2)) else { continue }
            result.append(HeldFile(location: RepoPath(bytes: statement.blob(0)), item: RepoPath(bytes: statement.blob(1)), blob: id,
                                   inode: statement.int(3), dataless: statement.int(4) != 0, since: statement.int(5)))
        }
        return result
    }

    /// A folder moved from `from` to `to` took the held files in it along;
    /// returns where they are now.
    func moveHeld(from: RepoPath, to: RepoPath) throws -> [RepoPath] {
        func moved(_ path: RepoPath) -> RepoPath {
            path.isWithin(from) && path != from ? RepoPath(bytes: to.bytes + Array(path.bytes.dropFirst(from.bytes.count))) : path
        }
        var locations: [RepoPath] = []
        for held in try heldFiles() where held.location.isWithin(from) && held.location != from {
            try forgetHeld(held.location)
            try recordHeld(HeldFile(location: moved(held.location), item: moved(held.item), blob: held.blob, inode: held.inode,
                                    dataless: held.dataless, since: held.since))
            locations.append(moved(held.location))
        }
        return locations
    }

    func forgetHeld(_ location: RepoPath) throws {
        try database.prepare("DELETE FROM held_files WHERE location = ?1").bind(.blob(location.bytes)).run()
    }
}

extension Replica {
    /// Keeps a held file out of `git status` and `git add -A` in the
    /// replica: its exact path goes into `.git/info/exclude` (appended, so
    /// a user's edit of the file is never lost to a rewrite; the line
    /// names a path no later file has, and stays when the file goes).
    /// fprep itself knows its held files by their records and marks.
    func excludeHeld(_ location: RepoPath) {
        try? IgnoreRules.excludeHere(location, in: self, why: "an old version a program held open when a sync replaced it (never synced; it goes once the program closes it)")
    }

    /// Where the held old files wait (names the scan leaves out).
    func heldLocations() -> Set<RepoPath> {
        Set(((try? store.heldFiles()) ?? []).map(\.location))
    }

    /// Looks at every held old file (under the replica's lock) as
    /// `settleHeld` does; returns the conflict copies made of those a
    /// program wrote into.
    func settleHeldFiles() -> [RepoPath] {
        var copies: [RepoPath] = []
        for held in (try? store.heldFiles()) ?? [] {
            switch settle(held) {
            case .gone:
                try? store.forgetHeld(held.location)
            case .copied(let copy):
                try? store.forgetHeld(held.location)
                copies.append(copy)
            case .stays:
                break
            }
        }
        return copies
    }

    enum HeldOutcome { case gone, copied(RepoPath), stays }

    /// Settles the held file open as `fd` at `location` (the old version of
    /// the item named `itemName` beside it, which held `blob`) once no
    /// program has it open for writing: it goes if it holds what it held
    /// when it was swapped out, and becomes a conflict copy otherwise. The
    /// look is made under a read lease, so no program opens it for writing
    /// between the look and the removal.
    func settleHeld(_ fd: Int32, size: Int64, at location: RepoPath, in folder: FolderHandle, itemName: [UInt8],
                    blob: ObjectID, dataless: Bool) -> HeldOutcome {
        let leased = SafeReplace.takeLease(fd, reading: true, patience: 0)
        if !leased && errno == EAGAIN { return .stays }
        defer { if leased { _ = fprep_release_lease(fd) } }
        if Self.holdsWhatItHeld(fd, size: size, blob: blob, dataless: dataless, shown: location.description) {
            unlinkat(folder.fd, cPath(location.name), 0)
            removeEmptyFolders(from: location.parent)
            return .gone
        }
        return Self.keepAside(location, in: folder, itemName: itemName)
    }

    /// The file at `location` as a conflict copy of the item `itemName` beside it.
    private static func keepAside(_ location: RepoPath, in folder: FolderHandle, itemName: [UInt8]) -> HeldOutcome {
        SafeReplace(folder: folder, name: itemName, temporary: location.name, shown: location.description, expectsDataless: false)
            .keepAside().map { .copied(location.parent.appending($0)) } ?? .stays
    }

    /// Whether a held file (open as `fd`) holds what it held when it was
    /// swapped out: its blob's bytes, or no data for a placeholder.
    private static func holdsWhatItHeld(_ fd: Int32, size: Int64, blob: ObjectID, dataless: Bool, shown: String) -> Bool {
        (dataless && fprep_holds_no_data(fd) == 1) || contentBlobID(fd, size: size, shown: shown) == blob
    }

    /// The held mark of an open file: the blob it held and whether it was a placeholder.
    static func heldMark(_ fd: Int32) -> (blob: ObjectID, dataless: Bool)? {
        var raw = [UInt8](repeating: 0, count: 20)
        var dataless: Int32 = 0
        guard fprep_held_mark(fd, &raw, &dataless) == 1, let blob = ObjectID(bytes: raw) else { return nil }
        return (blob, dataless != 0)
    }

    /// A folder the remote deleted stays while a held file is in it: once
    /// that file went, the folder (and each parent) left empty goes too.
    /// Git has no empty folders, so an empty one is no item of the tree,
    /// and nothing of anyone's is in it (nor is a folder a sync set aside
    /// because a held file kept it from going).
    private func removeEmptyFolders(from start: RepoPath) {
        var folder = start
        while !folder.isRoot, let parent = try? rootFolder.folder(folder.parent),
              unlinkat(parent.fd, cPath(folder.name), AT_REMOVEDIR) == 0 {
            folder = folder.parent
        }
    }

    private func settle(_ held: HeldFile) -> HeldOutcome {
        // Its folder went (a sync or the user removed it) and the file with
        // it, or the user moved or removed the file: nothing left to settle.
        guard let folder = try? rootFolder.folder(held.location.parent),
              let (fd, stat) = try? folder.openRegular(RepoPath(bytes: held.location.name), flags: O_RDONLY) else { return .gone }
        defer { close(fd) }
        // Something else took the name: not provably fprep's, so kept.
        guard stat.inode == held.inode else { return Self.keepAside(held.location, in: folder, itemName: held.item.name) }
        return settleHeld(fd, size: stat.size, at: held.location, in: folder, itemName: held.item.name, blob: held.blob,
                          dataless: held.dataless)
    }
}
