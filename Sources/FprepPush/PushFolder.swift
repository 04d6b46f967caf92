import FoundationEssentials
import Glibc
import FprepCore
import FprepGit

/// The push side's files in a remote (a bare repository): `fprep/` beside
/// git's own folders holds the outbox the hook writes, the service's state,
/// the hook's secret and the service's lock; the service's address is in
/// the repository's config (`fprep.service`), where the hook reads it.
public struct PushFolder: Sendable {
    /// The remote's git directory (absolute).
    public let remote: String

    public init(remote: String) {
        self.remote = remote.hasSuffix("/") && remote.count > 1 ? String(remote.dropLast()) : remote
    }

    public var folder: String { remote + "/fprep" }
    public var outboxPath: String { folder + "/outbox.db" }
    public var servicePath: String { folder + "/service.db" }
    public var secretPath: String { folder + "/hook-secret" }
    public var lockPath: String { folder + "/serve.lock" }

    static let serviceKey = "fprep.service"

    /// Creates `fprep/` when missing.
    public func ensureFolder() throws {
        if mkdir(folder, 0o755) != 0 && errno != EEXIST {
            throw FprepError("cannot create '\(folder)': \(String(cString: strerror(errno)))")
        }
    }

    /// The hook's secret, made (32 random bytes, hex, mode 0600) when missing.
    @discardableResult
    public func ensureSecret() throws -> String {
        try ensureFolder()
        if let existing = secret() {
            // A secret someone made readable by others is put back to 0600.
            _ = chmod(secretPath, 0o600)
            return existing
        }
        let value = Token.random()
        let fd = open(secretPath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if fd < 0 {
            // Another process made it first: use theirs.
            if errno == EEXIST, let existing = secret() { return existing }
            throw FprepError("cannot write the hook secret '\(secretPath)': \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        let line = value + "\n"
        let written = line.withCString { write(fd, $0, strlen($0)) }
        guard written == line.utf8.count, fsync(fd) == 0 else {
            unlink(secretPath)
            throw FprepError("cannot write the hook secret '\(secretPath)': \(String(cString: strerror(errno)))")
        }
        return value
    }

    /// The hook's secret, or nil when there is none yet.
    public func secret() -> String? {
        guard let data = FileManager.default.contents(atPath: secretPath) else { return nil }
        let text = String(decoding: data, as: UTF8.self).trimmed
        return text.count >= 32 ? text : nil
    }

    /// The service's URL as `fprep serve` recorded it.
    /// Where the services of this remote listen, the one started last first
    /// (several instances on one PostgreSQL database each record theirs).
    public func serviceURLs() -> [String] {
        guard let repository = try? Repository(openingAt: remote) else { return [] }
        return ((try? repository.config().strings(Self.serviceKey)) ?? []).reversed()
    }

    /// How many addresses are kept: one an instance killed before it could
    /// take its own back stays until this many newer ones push it out.
    static let keptServiceURLs = 8

    /// Records where a service listens, for the hook to poke it (beside the
    /// addresses of other instances still running).
    public func recordServiceURL(_ url: String) throws {
        do {
            let config = try Repository(openingAt: remote).config()
            try config.remove(Self.serviceKey, url)
            try config.add(Self.serviceKey, url)
            for stale in try config.strings(Self.serviceKey).dropLast(Self.keptServiceURLs) { try config.remove(Self.serviceKey, stale) }
        } catch {
            throw FprepError("cannot record the service address in '\(remote)/config': \(error)")
        }
    }

    /// Takes a stopping service's address back.
    public func forgetServiceURL(_ url: String) {
        try? Repository(openingAt: remote).config().remove(Self.serviceKey, url)
    }
}

/// Random secrets and tokens.
public enum Token {
    /// 32 random bytes from the kernel's generator, as 64 hex digits.
    public static func random(bytes count: Int = 32) -> String {
        var generator = SystemRandomNumberGenerator()
        var text = ""
        text.reserveCapacity(count * 2)
        for _ in 0..<count {
            let byte = UInt8.random(in: 0...255, using: &generator)
            text += String(byte >> 4, radix: 16) + String(byte & 0xF, radix: 16)
        }
        return text
    }
}
