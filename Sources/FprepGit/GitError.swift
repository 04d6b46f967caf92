import CLibGit2

/// An error reported by libgit2: the return code, libgit2's error class and
/// message (read from `git_error_last()` right after the failing call, on the
/// same thread) and the libgit2 function that failed.
public struct GitError: Error, CustomStringConvertible, Sendable {
    /// libgit2's error codes that callers match on; anything else is `.other`.
    public enum Code: Sendable, Equatable {
        case notFound, exists, ambiguous, bufferTooShort, user, bareRepository,
             unbornBranch, unmerged, nonFastForward, invalidSpec, conflict, locked,
             modified, authentication, certificate, applied, peel, eof, invalid,
             uncommitted, directory, mergeConflict, other(Int32)

        init(_ raw: Int32) {
            switch raw {
            case GIT_ENOTFOUND.rawValue: self = .notFound
            case GIT_EEXISTS.rawValue: self = .exists
            case GIT_EAMBIGUOUS.rawValue: self = .ambiguous
            case GIT_EBUFS.rawValue: self = .bufferTooShort
            case GIT_EUSER.rawValue: self = .user
            case GIT_EBAREREPO.rawValue: self = .bareRepository
            case GIT_EUNBORNBRANCH.rawValue: self = .unbornBranch
            case GIT_EUNMERGED.rawValue: self = .unmerged
            case GIT_ENONFASTFORWARD.rawValue: self = .nonFastForward
            case GIT_EINVALIDSPEC.rawValue: self = .invalidSpec
            case GIT_ECONFLICT.rawValue: self = .conflict
            case GIT_ELOCKED.rawValue: self = .locked
            case GIT_EMODIFIED.rawValue: self = .modified
            case GIT_EAUTH.rawValue: self = .authentication
            case GIT_ECERTIFICATE.rawValue: self = .certificate
            case GIT_EAPPLIED.rawValue: self = .applied
            case GIT_EPEEL.rawValue: self = .peel
            case GIT_EEOF.rawValue: self = .eof
            case GIT_EINVALID.rawValue: self = .invalid
            case GIT_EUNCOMMITTED.rawValue: self = .uncommitted
            case GIT_EDIRECTORY.rawValue: self = .directory
            case GIT_EMERGECONFLICT.rawValue: self = .mergeConflict
            default: self = .other(raw)
            }
        }
    }

    public let code: Code
    /// libgit2's `git_error_t` class of the failure (0 when libgit2 set none).
    public let errorClass: Int32
    public let message: String
    /// The libgit2 function whose return code this is.
    public let function: String

    public init(code: Code, errorClass: Int32 = 0, message: String, function: String) {
        self.code = code
        self.errorClass = errorClass
        self.message = message
        self.function = function
    }

    public var description: String { "\(function): \(message)" }

    /// Matches `catch GitError.notFound` and friends.
    public static let notFound = Code.notFound
    public static let exists = Code.exists
    public static let locked = Code.locked
    public static let modified = Code.modified
}

/// Lets `catch GitError.notFound` match a `GitError` by its code.
public func ~= (pattern: GitError.Code, value: any Error) -> Bool {
    guard let error = value as? GitError else { return false }
    return error.code == pattern
}

/// Turns a libgit2 return code into a thrown `GitError`; returns the code when
/// it is not negative (some calls return a count or a boolean).
@discardableResult
func check(_ result: Int32, _ function: String = #function) throws -> Int32 {
    guard result < 0 else { return result }
    // git_error_last() may be NULL when libgit2 set no message.
    let last = git_error_last()
    let message = last.flatMap { $0.pointee.message.map { String(cString: $0) } } ?? "libgit2 error \(result)"
    let errorClass = last.map { $0.pointee.klass } ?? 0
    throw GitError(code: .init(result), errorClass: errorClass, message: message, function: function)
}

/// libgit2 needs one process-wide initialisation before any call.
public enum LibGit2 {
    /// The version of the libgit2 fprep runs on ("1.5.1").
    public static var version: String {
        var major: Int32 = 0, minor: Int32 = 0, patch: Int32 = 0
        guard git_libgit2_version(&major, &minor, &patch) == 0 else { return "unknown" }
        return "\(major).\(minor).\(patch)"
    }

    static let initialized: Bool = {
        git_libgit2_init()
        // Dataless index entries name blobs the partial clone does not hold.
        _ = fprep_git_set_strict_object_creation(0)
        // A replica made by another user (root in CI, say) is still ours to read.
        _ = fprep_git_set_owner_validation(0)
        // Objects are read as git reads them, without hashing each again:
        // every one was hashed when it arrived (`git index-pack` checks
        // each object of a fetch, libgit2 hashes what fprep writes), and a
        // tree diff would otherwise hash every tree it opens.
        _ = fprep_git_set_strict_hash_verification(0)
        // Memory that follows what a command touches, not the repository's
        // size: libgit2 keeps up to 256 MiB of parsed objects and maps pack
        // files in windows of 1 GiB up to 8 GiB, all of it resident once
        // read, so a clone's walk of a 10^6-file tree kept some 200 MiB of
        // trees it never read again. A tree read again is inflated from a
        // window still mapped (microseconds); the cache counts raw sizes,
        // and parsed trees take two to three times that.
        _ = fprep_git_set_cache_max_size(4 << 20)
        _ = fprep_git_set_mwindow_size(4 << 20)
        _ = fprep_git_set_mwindow_mapped_limit(16 << 20)
        return true
    }()

    static func ensure() { _ = initialized }
}
