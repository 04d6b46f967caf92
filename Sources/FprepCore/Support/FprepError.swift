import FoundationEssentials
import Glibc
import FprepGit

/// An error a user sees as one line: what failed, where, and what to do.
/// `exitCode` is the process exit status the CLI uses for it.
public struct FprepError: Error, CustomStringConvertible, Sendable {
    public enum Kind: Sendable {
        case failure, usage, partial, busy, expiredAnchor
    }

    public let kind: Kind
    public let message: String
    /// Lower-level detail shown with `--verbose`.
    public let detail: String?
    /// For a refused remote tree entry: the entry and why, so that a
    /// command can say what the refusal leaves as it was.
    public internal(set) var refusal: (path: String, reason: String)?
    /// Which fault of the disk this is, if it is one (see `StorageFailure`).
    let storage: StorageFailure?

    public init(_ kind: Kind, _ message: String, detail: String? = nil) {
        self.kind = kind
        self.message = message
        self.detail = detail
        storage = nil
    }

    /// A plain failure (exit status 1).
    public init(_ message: String, detail: String? = nil) {
        self.init(.failure, message, detail: detail)
    }

    /// A failure of the disk (exit status 1).
    init(_ message: String, detail: String?, storage: StorageFailure) {
        kind = .failure
        self.message = message
        self.detail = detail
        self.storage = storage
    }

    /// Whether the disk is full (the command may be retried once space is freed).
    public var isDiskFull: Bool { storage == .diskFull }

    public var description: String { message }

    /// Documented exit codes: 1 failure, 2 partly done (some items refused),
    /// 64 usage, 65 sync anchor expired, 75 replica busy (`--no-wait`).
    public var exitCode: Int32 {
        switch kind {
        case .failure: 1
        case .partial: 2
        case .usage: 64
        case .expiredAnchor: 65
        case .busy: 75
        }
    }
}

extension FprepError {
    public static func notAReplica(_ path: String) -> FprepError {
        FprepError(.usage, "'\(path)' is not inside an fprep replica (run 'fprep clone URL DIR' first, or pass -C DIR)")
    }

    static func outsideReplica(_ path: String, root: String) -> FprepError {
        FprepError(.usage, "'\(path)' is outside the replica at '\(root)'")
    }

    static func notInReplica(_ path: String) -> FprepError {
        FprepError(.usage, "'\(path)' is not an item of this replica (see 'fprep ls')")
    }

    static func insideState(_ path: String) -> FprepError {
        FprepError(.usage, "'\(path)' is inside fprep's or git's own state, not a replica item")
    }

    static func remoteUnreachable(_ url: String, _ error: GitCommandError, root: String) -> FprepError {
        if let storage = storage(error, root: root) { return storage }
        return FprepError("cannot reach remote '\(url)': \(error.reason) (check the URL and that the remote is up)",
                   detail: error.standardError)
    }

    static func unsafeEntry(_ path: String, _ reason: String) -> FprepError {
        var error = FprepError("refusing remote tree entry '\(path)': \(reason); nothing was written (fix the remote's tree)")
        error.refusal = (path, reason)
        return error
    }

    /// Wraps an error from the state database.
    static func state(_ what: String, _ error: Error) -> FprepError {
        if let error = error as? FprepError { return error }
        if let storage = storage(error, root: nil) { return storage }
        return FprepError("\(what): \(StorageFailure.reason(error))")
    }

    /// Wraps a libgit2 error met while working on `what`.
    static func git(_ what: String, _ error: Error) -> FprepError {
        if let error = error as? FprepError { return error }
        if let storage = storage(error, root: nil) { return storage }
        if let error = error as? GitError { return FprepError("\(what): \(error.message)", detail: error.description) }
        if let error = error as? GitCommandError { return FprepError("\(what): \(error.reason)", detail: error.standardError) }
        return FprepError("\(what): \(StorageFailure.reason(error))")
    }
}

/// A failed system call, as one line: the call, the path, and errno's text.
struct SystemError: Error, CustomStringConvertible {
    let call: String
    let path: String
    let code: Int32

    init(_ call: String, _ path: String, _ code: Int32 = errno) {
        self.call = call
        self.path = path
        self.code = code
    }

    var description: String { "\(call) '\(path)': \(String(cString: strerror(code)))" }
}
