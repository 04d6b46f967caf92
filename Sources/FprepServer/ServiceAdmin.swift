import FoundationEssentials
import FprepCore
import FprepGit
import FprepPush

/// A device as the admin lists it (`fprep serve devices`).
public struct RegisteredDevice: Sendable {
    public let id: String
    public let domain: String
    public let branch: String
    public let name: String
    /// stream, webhook or apns.
    public let kind: String
    /// The webhook's URL, for a webhook device.
    public let webhook: String?
    public let enrollment: String
    /// Seconds since 1970.
    public let registered: Int64
    /// Seconds since 1970; nil when it never called after registering.
    public let lastSeen: Int64?
    public let expires: Int64
}

/// The admin's side of a remote's push service (`fprep serve enroll`,
/// `devices`, `revoke`): works on the service's state (`fprep/service.db`)
/// whether or not `fprep serve` runs. A running service sees a revoked
/// device at its next request (401) and ends its streams; revoking pokes it
/// so that this happens at once.
public final class ServiceAdmin {
    /// The remote's domain (`fprep.domain`).
    public let domain: String
    private let folder: PushFolder
    private let store: any ServiceStorage

    /// Opens the service state of the remote at `remote` (a bare repository
    /// made by init-remote or install-hooks).
    public convenience init(remote: String) throws {
        try self.init(remote: remote, openStorage: { try ServiceStore(path: $0.servicePath) })
    }

    /// Opens the state `openStorage` gives (a shared database, `--database`).
    package init(remote: String, openStorage: (PushFolder) throws -> any ServiceStorage) throws {
        (folder, domain) = try ServedRemote.open(remote)
        try folder.ensureFolder()
        store = try openStorage(folder)
    }

    deinit { store.close() }

    /// Mints an enrollment secret for `domain` (the remote's when nil),
    /// valid for `lifetime` seconds (nil: until revoked). Only its hash is
    /// kept: the secret returned is shown once.
    public func enroll(domain asked: String?, lifetime: Int64?) throws -> (enrollment: Enrollment, secret: EnrollmentSecret) {
        if let asked, asked != domain {
            throw FprepError(.usage, "this remote serves domain '\(domain)', not '\(asked)' (leave out --domain, or enroll at that domain's remote)")
        }
        let secret = EnrollmentSecret.make()
        let now = wallClockNow()
        let enrollment = Enrollment(id: secret.id, domain: domain, secretHash: secret.hash, created: now,
                                    expires: lifetime.map { now + $0 }, revoked: nil)
        try store.insert(enrollment)
        return (enrollment, secret)
    }

    /// The registered devices, oldest first (`lastSeen` is saved by the
    /// service every few seconds, so it may lag by as much).
    public func devices() throws -> [RegisteredDevice] {
        try store.devices().map { device in
            var webhook: String?
            if case .webhook(let url, _) = device.channel { webhook = url.description }
            return RegisteredDevice(id: device.id, domain: device.domain, branch: device.branch, name: device.name,
                                    kind: device.channel.kind, webhook: webhook, enrollment: device.enrollment,
                                    registered: device.created, lastSeen: device.lastSeen > 0 ? device.lastSeen : nil,
                                    expires: device.expires)
        }
    }

    /// Every enrollment, oldest first.
    public func enrollments() throws -> [Enrollment] { try store.enrollments() }

    /// Revokes a device: its token stops working and it is forgotten.
    public func revoke(device id: String) throws {
        guard try store.delete(device: id) else {
            throw FprepError(.usage, "no device '\(id)' is registered (list them with 'fprep serve devices --remote \(folder.remote)')")
        }
        nudgeService()
    }

    /// Revokes an enrollment: no device registers with its secret any more
    /// (devices registered with it keep their tokens until revoked).
    public func revoke(enrollment id: String) throws {
        guard try store.revoke(enrollment: id, at: wallClockNow()) else {
            throw FprepError(.usage, "no enrollment '\(id)' (list them with 'fprep serve devices --remote \(folder.remote)')")
        }
    }

    /// Pokes a running service, as the hook does, so it reads the state
    /// again now rather than at its next request; nothing when none runs.
    private func nudgeService() {
        guard let secret = folder.secret() else { return }
        Poke.first(of: folder.serviceURLs(), bearer: secret, timeoutMilliseconds: 500)
    }
}

/// The remote a service serves: a bare repository with an fprep domain.
enum ServedRemote {
    /// Its push folder and domain; a usage error naming what to do otherwise.
    static func open(_ path: String) throws -> (folder: PushFolder, domain: String) {
        guard let repository = try? Repository(openingAt: path), repository.isBare else {
            throw FprepError(.usage, "'\(path)' is not a bare git repository (the remote to serve)")
        }
        guard let domain = try repository.config().string("fprep.domain") else {
            throw FprepError(.usage, "'\(path)' is not an fprep remote (run 'fprep install-hooks \(path)' first)")
        }
        return (PushFolder(remote: repository.gitDirectory), domain)
    }
}
