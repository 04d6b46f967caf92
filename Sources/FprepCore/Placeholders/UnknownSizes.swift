import CFprepSys
import FoundationEssentials
import Glibc
import FprepGit

/// Placeholders whose size was unknown when they were laid out: the remote's
/// size manifest did not list their blob (a remote without fprep's hook, a
/// push by an older fprep). There is no honest size to give such a file on
/// disk, so its placeholder is 0 bytes long and the index records 0, which
/// keeps `StateClassifier` consistent; everything shown to the user says
/// "size unknown" instead of 0 bytes (a missing `blob_info` row is unknown).
///
/// Once the size is known (a manifest that lists it arrives, `fprep
/// repair`), `layOutLearnedSizes` gives the placeholder its real size.
public enum UnknownSizes {
    /// The store's key that says a placeholder was laid out without a known
    /// size since the last pass found none: only then does a sync look.
    static let pendingKey = "sizes_unknown"

    /// The git blob id of empty content: the one blob whose size is 0.
    static let emptyBlob = ObjectID(hex: "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391")

    /// What the index holds of placeholders laid out at size 0 for content
    /// that is not empty: those whose size is still unknown (counted), and
    /// those whose size the store knows now (to lay out again).
    struct Census {
        var unknown = 0
        var learned: [(entry: IndexEntry, info: BlobInfo)] = []
    }

    /// Up to this many 0-byte placeholders, every sync looks them up.
    static let cheapLook = 256

    /// The 0-byte placeholders of the index (its entries' bytes read in
    /// place; every entry when they cannot be).
    static func candidateCount(_ index: Index) -> Int {
        index.withEntryLayout { base, offsets in
            offsets.reduce(0) { count, offset in
                let entry = Index.EntryFields(base + Int(offset))
                return count + (entry.fileSize == 0 && entry.skipWorktree ? 1 : 0)
            }
        } ?? index.count
    }

    static func census(_ index: Index, sizes: (ObjectID) throws -> BlobInfo?) throws -> Census {
        var census = Census()
        // Only placeholders of 0 bytes can be of unknown size: picked from
        // the entries' bytes in place (skip-worktree, size 0), so a large
        // index is not decoded entry by entry.
        let candidates: [Int] = index.withEntryLayout { base, offsets in
            var found: [Int] = []
            for (position, offset) in offsets.enumerated() {
                let entry = Index.EntryFields(base + Int(offset))
                if entry.fileSize == 0, entry.skipWorktree { found.append(position) }
            }
            return found
        } ?? Array(0..<index.count)
        for position in candidates {
            guard let entry = index.entry(at: position), entry.skipWorktree, entry.stat.fileSize == 0,
                  FileMode(raw: entry.mode).isFile, entry.id != emptyBlob else { continue }
            if let info = try sizes(entry.id) {
                if UInt32(truncatingIfNeeded: info.size) != 0 { census.learned.append((entry, info)) }
            } else {
                census.unknown += 1
            }
        }
        return census
    }

    /// Whether a change lays out a file whose size the store does not know.
    static func anyUnknown(_ changes: ChangeSet, sizes: (ObjectID) throws -> BlobInfo?) throws -> Bool {
        try changes.updated.contains { update in
            guard update.new.mode.isFile, update.new.id != emptyBlob else { return false }
            return try sizes(update.new.id) == nil
        }
    }

    /// What `status` and `clone` say after "size unknown for N files": why,
    /// and how to fix it.
    public static func hint(_ count: Int) -> String {
        "the remote's size manifest does not list \(count == 1 ? "it" : "them") (0 bytes on disk until it does); "
            + "run 'fprep install-hooks' on the remote (for a hosted one, GitHub or GitLab: 'fprep serve --mirror URL'), or let the devices that push use a current fprep, then 'fprep sync'"
    }
}

extension Replica {
    /// The number of placeholders whose size is unknown.
    func unknownSizeCount(_ index: Index) throws -> Int {
        try UnknownSizes.census(index, sizes: store.blobInfoLookup()).unknown
    }

    /// Notes that `changes` laid out placeholders of unknown size, so the
    /// next syncs look for their sizes (`layOutLearnedSizes`).
    func noteUnknownSizes(_ changes: ChangeSet) throws {
        if try UnknownSizes.anyUnknown(changes, sizes: store.blobInfoLookup()) {
            try store.setMeta(UnknownSizes.pendingKey, "1")
        }
    }

    /// Gives the placeholders laid out without a known size their size, now
    /// that the store knows it: each one still as it was laid out (dataless,
    /// 0 bytes) is swapped for a placeholder of its real size and date
    /// (`SafeReplace`: a program that writes into it meanwhile keeps its
    /// bytes as a conflict copy). One a program wrote into is left to the
    /// next sync, which keeps those bytes as a conflict copy and lays out the
    /// placeholder again. Journaled: after a crash, the next command takes
    /// each path as what its bytes on disk say. `always` looks even when no
    /// layout noted unknown sizes (repair). `lookWithoutNote`: a command
    /// that walked the whole tree anyway (a sync's full scan) also looks
    /// when nothing noted them, while there are few; one whose cost follows
    /// the change (a sync through the agent's journal, `sync --incoming`)
    /// looks only on the note: the look reads every entry of the index
    /// (5–7 ms at 10^5 files, 48–66 ms at 10^6, the pages of a cold index).
    /// Returns how many it laid out.
    @discardableResult
    public func layOutLearnedSizes(always: Bool = false, lookWithoutNote: Bool = true) throws -> Int {
        let pending = try store.meta(UnknownSizes.pendingKey) == "1"
        guard always || pending || lookWithoutNote else { return 0 }
        let index = try repository.index()
        // Without the note, still a look when it is cheap (few 0-byte
        // placeholders): a path that laid one out without noting it is
        // caught here, not left at 0 bytes for good. With many (a remote
        // whose manifest lists nothing), only when a layout noted them.
        guard always || pending || UnknownSizes.candidateCount(index) <= UnknownSizes.cheapLook else { return 0 }
        let census = try UnknownSizes.census(index, sizes: store.blobInfoLookup())
        guard !census.learned.isEmpty else {
            if pending, census.unknown == 0 { try store.setMeta(UnknownSizes.pendingKey, "") }
            return 0
        }
        let classifier = StateClassifier(root: rootFolder, index: index)
        let token = ContentOperations.newToken()
        let journal = ContentJournal(token: token, paths: census.learned.map { Data($0.entry.path) })
        let operation = try store.beginOperation("size-layout", payload: journal.encoded())
        var laidOut = 0
        var grown: Int64 = 0
        for (entry, info) in census.learned {
            let path = RepoPath(bytes: entry.path)
            guard let stat = rootFolder.stat(path), classifier.state(of: entry, stat: stat) == .dataless,
                  let folder = try? rootFolder.folder(path.parent) else { continue }
            let temporary = ContentOperations.temporaryName(for: path.name, token: token)
            let created = entry.id.bytes.withUnsafeBufferPointer { id in
                fprep_create_placeholder(folder.fd, cPath(temporary), entry.mode == FileMode.executable.raw ? 0o777 : 0o666,
                                         off_t(info.size), id.baseAddress, id.count, info.mtime, 0, nil)
            }
            guard created == 0 else { throw SystemError("create placeholder", path.description) }
            letAgentWatch([WatchedPlaceholder(path: path, blob: entry.id, markAt: path.parent.appending(temporary))])
            let replacement = SafeReplace(folder: folder, name: path.name, temporary: temporary, shown: path.description,
                                          expectsDataless: true)
            switch try replacement.run(isUnchanged: { classifier.state(of: entry, stat: $0) == .dataless }) {
            case .replaced:
                CrashPoint.reach()
                var updated = entry
                updated.stat = .placeholder(size: info.size, mtime: info.mtime)
                try index.add(updated)
                laidOut += 1
                grown += info.size
            case .refused:
                unlinkat(folder.fd, cPath(temporary), 0)
            }
        }
        try index.write()
        try store.transaction {
            let logical = Int64(try store.meta("logical_size") ?? "0") ?? 0
            try store.setMeta("logical_size", String(logical + grown))
            if census.unknown == 0 && laidOut == census.learned.count { try store.setMeta(UnknownSizes.pendingKey, "") }
            try store.endOperation(operation)
        }
        return laidOut
    }
}
