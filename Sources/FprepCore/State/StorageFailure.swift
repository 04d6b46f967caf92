import CSQLite
import FoundationEssentials
import Glibc
import FprepGit

/// Failures of the disk under a replica, whichever layer met them (a system
/// call, SQLite, libgit2, the `git` command): a full disk, a read-only
/// state folder, a damaged state database. Each becomes one line that says
/// so and what to do, never "remote unreachable" or an error dump.
enum StorageFailure: Equatable {
    case diskFull
    case readOnly(String)
    case damaged(String)

    /// What `error` says about the disk, or nil when it is about something else.
    static func of(_ error: Error) -> StorageFailure? {
        switch error {
        case let error as DatabaseError:
            switch error.code & 0xff {
            case SQLITE_FULL: return .diskFull
            case SQLITE_CORRUPT, SQLITE_NOTADB: return .damaged(error.message)
            case SQLITE_IOERR:
                // SQLite reports a full disk met by some calls as an I/O error.
                if isFull(error.systemErrno) { return .diskFull }
                if error.systemErrno == EROFS { return .readOnly(String(cString: strerror(EROFS)).lowercased()) }
                return .damaged(error.message)
            case SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_PERM: return .readOnly(error.message)
            default: return nil
            }
        case let error as SystemError:
            if isFull(error.code) { return .diskFull }
            return error.code == EROFS ? .readOnly(String(cString: strerror(EROFS)).lowercased()) : nil
        case let error as GitCommandError:
            return saysFull(error.standardError) ? .diskFull : nil
        case let error as GitError:
            return saysFull(error.message) ? .diskFull : nil
        case let error as CocoaError:
            let code = (error.userInfo["NSUnderlyingError"] as? POSIXError)?.code.rawValue
            if error.code == .fileWriteOutOfSpace || code.map(isFull) == true { return .diskFull }
            if error.code == .fileWriteVolumeReadOnly || code == EROFS { return .readOnly("read-only file system") }
            if error.code == .fileWriteNoPermission, let code { return .readOnly(String(cString: strerror(code)).lowercased()) }
            return nil
        default:
            return nil
        }
    }

    /// `error` as a few words for a message: the system's text for a
    /// Foundation file error (not its userInfo dump), else its description.
    static func reason(_ error: Error) -> String {
        if let error = error as? CocoaError {
            if let posix = error.userInfo["NSUnderlyingError"] as? POSIXError { return String(cString: strerror(posix.code.rawValue)) }
            return "file error \(error.code.rawValue)"
        }
        return String(describing: error)
    }

    private static func isFull(_ code: Int32) -> Bool { code == ENOSPC || code == EDQUOT }

    /// git and libgit2 pass strerror's text on.
    private static func saysFull(_ text: String) -> Bool {
        text.contains("No space left on device") || text.contains("Disk quota exceeded")
    }

    /// The replica the command opened last: where a full disk is said to
    /// be when the error names no path and its caller no replica (a libgit2
    /// write failing deep in a sync), rather than the current folder, which
    /// may be on another disk (`-C`). Set once per open, before any work.
    nonisolated(unsafe) static var commandRoot: String?

    /// Bytes an unprivileged writer can still put on the file system of
    /// `path` (or of its nearest existing parent), nil when unknown.
    static func freeBytes(at path: String) -> Int64? {
        var current = path.isEmpty ? "." : path
        while true {
            var info = statvfs()
            if statvfs(current, &info) == 0 { return Int64(info.f_bavail) * Int64(info.f_frsize) }
            let parent = parentFolder(of: current)
            if parent == current || parent.isEmpty { return nil }
            current = parent
        }
    }

    /// Removes what git leaves in an object store when a fetch dies: its
    /// half-written packs (`tmp_pack_*`, `tmp_idx_*`, `tmp_rev_*`) and the
    /// quarantine of received objects (`incoming-*`).
    static func removeGitTemporaries(gitDirectory: String) {
        let objects = gitDirectory + "/objects"
        for (folder, prefixes) in [(objects + "/pack", ["tmp_"]), (objects, ["incoming-"])] {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
            where prefixes.contains(where: { name.hasPrefix($0) }) {
                try? FileManager.default.removeItem(atPath: folder + "/" + name)
            }
        }
    }
}

extension FprepError {
    /// The one line for an error that is the disk's fault (see
    /// `StorageFailure`); nil for any other error. `root` is the replica
    /// (or the folder) the command worked on, named when the error names
    /// no path of its own.
    public static func storage(_ error: Error, root: String?) -> FprepError? {
        if let error = error as? FprepError { return error.storage == nil ? nil : error }
        guard let failure = StorageFailure.of(error) else { return nil }
        let detail = String(describing: error)
        var databasePath: String?
        if let error = error as? DatabaseError { databasePath = error.path }
        var ownPath = databasePath.map(parentFolder(of:))
        if let error = error as? SystemError, error.path.hasPrefix("/") { ownPath = error.path }
        if let error = error as? CocoaError, let path = error.userInfo["NSFilePath"] as? String {
            ownPath = parentFolder(of: path)
        }
        let place = root ?? ownPath ?? StorageFailure.commandRoot ?? currentFolderPath()
        switch failure {
        case .diskFull:
            return diskFull(at: place, detail: detail)
        case .readOnly(let reason):
            return readOnlyState(ownPath ?? place, reason: reason, detail: detail)
        case .damaged(let reason):
            return damagedState(databasePath ?? place + "/" + Replica.stateFolderName + "/state.db", reason: reason, detail: detail)
        }
    }

    /// The disk that holds `path` is full.
    static func diskFull(at path: String, detail: String? = nil) -> FprepError {
        let free = StorageFailure.freeBytes(at: path).map { "\($0) bytes free" } ?? "free space unknown"
        return FprepError("the disk is full at '\(path)' (\(free)); free space (e.g. 'fprep evict FOLDER' in a replica on it) and run the command again",
                          detail: detail, storage: .diskFull)
    }

    /// The state database at `path` cannot be trusted.
    static func damagedState(_ path: String, reason: String, detail: String? = nil) -> FprepError {
        let stateFolder = parentFolder(of: path)
        let root = stateFolder.hasSuffix("/" + Replica.stateFolderName) ? parentFolder(of: stateFolder) : stateFolder
        return FprepError("the state database '\(path)' is damaged (\(reason)); run 'fprep repair \(root)' to rebuild it from git (nothing in the tree is lost)",
                          detail: detail, storage: .damaged(reason))
    }

    /// fprep cannot write its own state in `folder`.
    static func readOnlyState(_ folder: String, reason: String, detail: String? = nil) -> FprepError {
        FprepError("cannot write the replica's state in '\(folder)' (\(reason)); make it writable (chmod -R u+w '\(folder)') or run fprep as its owner",
                   detail: detail, storage: .readOnly(reason))
    }
}

private func currentFolderPath() -> String {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    guard getcwd(&buffer, buffer.count) != nil else { return "." }
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// A little space held back in `.fprep/reserve` for the one command that
/// must run on a full disk: `evict`, which frees space but first journals
/// what it does (a database write). Made by commands that write when it is
/// missing; given back when evict meets a full disk, and made again later.
enum SpaceReserve {
    /// Room for a journal record: a few pages of the write-ahead log.
    static let size: Int64 = 64 * 1024

    static func path(in stateFolder: String) -> String { stateFolder + "/reserve" }

    /// Makes the reserve if it is missing; best effort (not on a full disk).
    static func ensure(in stateFolder: String) {
        let path = path(in: stateFolder)
        guard access(path, F_OK) != 0 else { return }
        let temporary = path + ".new"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        let made = posix_fallocate(fd, 0, off_t(size)) == 0 && fsync(fd) == 0
        close(fd)
        if !made || rename(temporary, path) != 0 { unlink(temporary) }
    }

    /// Runs `body`; when it fails because the disk is full and the reserve
    /// is there, gives the reserve's space back and runs `body` once more.
    static func using<R>(in stateFolder: String, _ body: () throws -> R) throws -> R {
        do {
            return try body()
        } catch {
            guard FprepError.storage(error, root: nil)?.isDiskFull == true, unlink(path(in: stateFolder)) == 0 else { throw error }
            return try body()
        }
    }
}
