import Glibc
import FoundationEssentials
import FprepGit

/// Names fprep makes from an item's name (its temporary files, conflict
/// copies). They must fit in NAME_MAX like any name, so a long name's stem
/// is shortened, and then followed by a hash of the whole name: two long
/// names that share their start still get two names.
enum DerivedName {
    /// `prefix + stem + suffix`, the stem cut (at a character boundary) and
    /// marked `~HASH` of `whole` when the result would pass NAME_MAX.
    static func fitting(prefix: [UInt8] = [], stem: [UInt8], suffix: [UInt8], whole: [UInt8]) -> [UInt8] {
        let limit = EntryNameCheck.maxNameLength
        if prefix.count + stem.count + suffix.count <= limit { return prefix + stem + suffix }
        let mark = Array("~".utf8) + hash(whole)
        var keep = max(0, limit - prefix.count - suffix.count - mark.count)
        keep = min(keep, stem.count)
        // Never end inside a UTF-8 sequence: back off its continuation bytes.
        while keep > 0, keep < stem.count, stem[keep] & 0xC0 == 0x80 { keep -= 1 }
        let result = prefix + stem.prefix(keep) + mark + suffix
        return Array(result.prefix(limit))
    }

    /// 16 hex digits of the FNV-1a hash of `bytes`.
    static func hash(_ bytes: [UInt8]) -> [UInt8] {
        var value: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes { value = (value ^ UInt64(byte)) &* 0x100_0000_01b3 }
        let digits = String(value, radix: 16)
        return Array((String(repeating: "0", count: 16 - digits.count) + digits).utf8)
    }
}

extension ContentOperations {
    /// The temporary file fprep writes `name`'s new content or placeholder
    /// into before renaming it over `name`: `.NAME.fprep-TOKEN`, the
    /// token being the operation's, recorded in its journal record.
    static func temporaryName(for name: [UInt8], token: String) -> [UInt8] {
        DerivedName.fitting(prefix: Array(".".utf8), stem: name, suffix: Array(".fprep-\(token)".utf8), whole: name)
    }

    /// The token of a name shaped like fprep's temporary files, or nil.
    /// The shape alone says nothing: a user may name a file so.
    static func temporaryToken(in name: [UInt8]) -> String? {
        let marker = Array(".fprep-".utf8)
        guard name.first == 0x2E, name.count > marker.count + 1 else { return nil }
        let tail = name.suffix(14 + marker.count)
        guard let start = tail.indices.reversed().first(where: { tail[$0...].starts(with: marker) }) else { return nil }
        let token = name[(start + marker.count)...]
        guard !token.isEmpty, token.count <= 13, start > 0,
              token.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x7A).contains($0) }) else { return nil }
        return String(decoding: token, as: UTF8.self)
    }

    /// The token an operation's journal record names its temporaries by.
    static func temporaryToken(ofOperation operation: String, payload: [UInt8]) -> String? {
        operation == "sync" ? SyncJournal.decode(payload)?.token : ContentJournal.decode(payload)?.token
    }
}

extension Replica {
    /// The tokens of the operations whose journal records are open: the
    /// only operations whose temporary files can be on disk (each is
    /// settled, its temporaries removed, by the next command).
    func pendingTemporaryTokens() -> Set<String> {
        var tokens = Set<String>()
        for record in (try? store.pendingOperations()) ?? [] {
            if let token = ContentOperations.temporaryToken(ofOperation: record.operation, payload: record.payload) { tokens.insert(token) }
        }
        return tokens
    }

    /// Tokens of operations that began recently, ended or not: the
    /// temporaries they name are fprep's wherever they are found.
    func recentTemporaryTokens() -> Set<String> {
        Set(((try? store.meta("recent_tokens")) ?? nil ?? "").split(separator: " ").map(String.init))
    }

    /// Temporaries of ended operations the scan met (a killed run's, moved
    /// with their folder before recovery looked): a placeholder's zeros go,
    /// and so does content fprep fetched (the bytes of the blob the file
    /// beside it stands for, or of one in the object store); anything else
    /// stays, as a conflict copy, since its bytes may be a user's file the
    /// operation had swapped out.
    func settleStrayTemporaries(_ paths: [RepoPath]) {
        let odb = try? repository.objectDatabase()
        let held = heldLocations()
        for path in paths where !held.contains(path) {
            guard let folder = try? rootFolder.folder(path.parent), let stat = folder.stat(name: path.name) else { continue }
            // The folder a sync's cycle of moves used, left empty by a kill
            // after the sync ended (anything in it stays, for a later look).
            if stat.isDirectory { folder.removeEmptyFolder(path.name) }
            guard stat.isRegular else { continue }
            // `.NAME.fprep-TOKEN` is NAME's temporary: its conflict copy is named after NAME.
            let suffix = ContentOperations.temporaryToken(in: path.name).map { ".fprep-\($0)".utf8.count } ?? 0
            let original = Array(path.name.dropFirst().dropLast(suffix))
            if let (fd, _) = try? folder.openRegular(RepoPath(bytes: path.name), flags: O_RDONLY) {
                defer { close(fd) }
                // A held old version its record lost track of (the user moved
                // its folder): settled as any held file, by its own mark.
                if let mark = Replica.heldMark(fd) {
                    _ = settleHeld(fd, size: stat.size, at: path, in: folder, itemName: original.isEmpty ? path.name : original,
                                   blob: mark.blob, dataless: mark.dataless)
                    continue
                }
                // Open for writing in a program: nothing can be told of it
                // yet; it stays, left out of the scan, until a later one.
                if SafeReplace.openForWriting(fd) { continue }
            }
            let placeholder = ContentOperations.isMarkedDataless(folder, RepoPath(bytes: path.name))
                && ContentOperations.holdsNoData(folder, RepoPath(bytes: path.name), stat)
            let fetched = !placeholder && (try? folder.readFile(RepoPath(bytes: path.name))).flatMap { bytes in
                try? bytes.withUnsafeBytes { try ObjectDatabase.blobID(of: $0) }
            }.map { id in
                ContentOperations.placeholderBlob(folder, RepoPath(bytes: original)) == id || odb?.contains(id) == true
            } == true
            if placeholder || fetched {
                unlinkat(folder.fd, cPath(path.name), 0)
            } else {
                SafeReplace(folder: folder, name: original.isEmpty ? path.name : original, temporary: path.name,
                            shown: path.description, expectsDataless: false).keepAside()
            }
        }
    }
}
