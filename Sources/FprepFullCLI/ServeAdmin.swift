import ArgumentParser
import FoundationEssentials
import FprepCLI
import FprepCore
import FprepServer
import FprepServicePostgres

/// The remote a service serves, whose state the admin commands work on
/// (one group, so that `fprep serve` and its subcommands share `--remote`).
/// Optional to the parser and required by each command: a required option
/// of `fprep serve` would make `fprep serve enroll --help` show serve's help.
struct ServiceStateOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The remote (a bare repository made by init-remote or install-hooks), or with --mirror the mirror's folder (required).", valueName: "PATH"))
    var remote: String?

    @Option(help: ArgumentHelp("Keep devices, enumerators and events in this PostgreSQL database instead of the remote's fprep/service.db, so that several instances share them (postgres://USER:PASSWORD@HOST:PORT/DATABASE; PGPASSWORD is read when the URL has no password).", valueName: "URL"))
    var database: String?

    /// The remote's path; a usage error when --remote is missing.
    func path() throws -> String {
        guard let remote else { throw ValidationError("missing --remote PATH, the remote whose push service this is") }
        return remote
    }

    func open() throws -> ServiceAdmin {
        guard let database else { return try ServiceAdmin(remote: path()) }
        return try ServiceAdmin(remote: path(), openStorage: { _ in try PostgresServiceStore(url: database, listen: false) })
    }
}

struct ServeEnroll: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enroll",
        abstract: "Mint an enrollment secret: what a device shows to register with the push service.",
        discussion: """
            Prints the secret once (only its SHA-256 is kept, in the remote's fprep/service.db); hand it to the device's owner, who runs 'fprep watch --service URL --enroll SECRET' once. Any number of devices may register with one secret until it expires (--expires) or is revoked ('fprep serve revoke --enrollment ID'); a device keeps it and registers anew with it when its token expires. Works whether or not 'fprep serve' runs.

            Example: fprep serve enroll --remote ~/remotes/photos.git --expires 30d
            """
    )

    @OptionGroup var output: OutputOptions

    @OptionGroup var state: ServiceStateOptions

    @Option(help: ArgumentHelp("The domain the secret registers devices of (the remote's; naming it is a check).", valueName: "DOMAIN"))
    var domain: String?

    @Option(help: ArgumentHelp("How long the secret may register devices: 30d, 12h, 90m, 3600s, or never.", valueName: "TIME"))
    var expires = "never"

    @Flag(help: "Print the enrollment as JSON.")
    var json = false

    private struct Answer: Encodable {
        let enrollment: String
        let domain: String
        let secret: String
        let expires: String?
    }

    func run() throws {
        let lifetime = try Self.lifetime(expires)
        let admin = try state.open()
        let (enrollment, secret) = try admin.enroll(domain: domain, lifetime: lifetime)
        let expiry = enrollment.expires.map { Replica.isoDate($0) }
        if json {
            return try JSONOutput.print(Answer(enrollment: enrollment.id, domain: enrollment.domain, secret: secret.text, expires: expiry))
        }
        // The secret alone on standard output, for `SECRET=$(fprep serve enroll …)`.
        print(secret.text)
        Console.error("enrollment \(enrollment.id) for domain \(enrollment.domain), \(expiry.map { "expires \($0)" } ?? "valid until revoked"); the secret is shown only now\n")
    }

    /// `30d` → seconds; nil for `never`.
    static func lifetime(_ text: String) throws -> Int64? {
        if text == "never" { return nil }
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        guard let unit = text.last.flatMap({ units[$0] }), let count = Int64(text.dropLast()), count > 0,
              count <= Int64.max / 86_400 / 2 else {
            throw ValidationError("'\(text)' is not a time for --expires (a positive number and s, m, h or d, e.g. 30d; or never)")
        }
        return count * unit
    }
}

struct ServeDevices: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices",
        abstract: "List the devices registered with the push service, and its enrollment secrets.",
        discussion: """
            One line per device: its id, domain, name, channel kind, when it registered and when the service last heard from it (saved every few seconds), then one line per enrollment: its id, and whether it is valid, expired or revoked. Works whether or not 'fprep serve' runs.

            Example: fprep serve devices --remote ~/remotes/photos.git --json
            """
    )

    @OptionGroup var output: OutputOptions

    @OptionGroup var state: ServiceStateOptions

    @Flag(help: "Print the list as JSON.")
    var json = false

    private struct Listing: Encodable {
        struct Device: Encodable {
            let id, domain, branch, name, kind, enrollment: String
            let webhook: String?
            let registered: String
            let lastSeen: String?
            let expires: String
        }

        struct Enrollment: Encodable {
            let id, domain, state, created: String
            let expires: String?
            let revoked: String?
        }

        let devices: [Device]
        let enrollments: [Enrollment]
    }

    func run() throws {
        let admin = try state.open()
        let now = Int64(Date().timeIntervalSince1970)
        let date: (Int64) -> String = { Replica.isoDate($0) }
        let listing = Listing(
            devices: try admin.devices().map {
                .init(id: $0.id, domain: $0.domain, branch: $0.branch, name: $0.name, kind: $0.kind, enrollment: $0.enrollment,
                      webhook: $0.webhook, registered: date($0.registered), lastSeen: $0.lastSeen.map(date), expires: date($0.expires))
            },
            enrollments: try admin.enrollments().map { enrollment in
                let state = enrollment.revoked != nil ? "revoked" : (enrollment.expires.map { $0 <= now } ?? false) ? "expired" : "valid"
                return .init(id: enrollment.id, domain: enrollment.domain, state: state, created: date(enrollment.created),
                             expires: enrollment.expires.map(date), revoked: enrollment.revoked.map(date))
            })
        if json { return try JSONOutput.print(listing) }
        for device in listing.devices {
            let name = device.name.isEmpty ? "-" : device.name
            print("\(device.id)  \(device.domain)  \(device.kind)  registered \(device.registered)  last seen \(device.lastSeen ?? "never")  \(name)")
        }
        for enrollment in listing.enrollments {
            print("\(enrollment.id)  \(enrollment.domain)  \(enrollment.state)  created \(enrollment.created)  expires \(enrollment.expires ?? "never")")
        }
    }
}

struct ServeRevoke: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke",
        abstract: "Revoke a device's token, or an enrollment secret.",
        discussion: """
            A revoked device is forgotten: its next request to the service is refused (401) and a running service ends its event stream at once. It registers again only with a valid enrollment secret, so revoke the secret it holds too ('--enrollment ID') to keep it out. A revoked enrollment secret registers no device any more; the devices it registered keep their tokens until revoked one by one.

            Example: fprep serve revoke --remote ~/remotes/photos.git dev-1a2b3c4d5e6f7081
            Example: fprep serve revoke --remote ~/remotes/photos.git --enrollment enr-1a2b3c4d5e6f7081
            """
    )

    @OptionGroup var output: OutputOptions

    @OptionGroup var state: ServiceStateOptions

    @Argument(help: ArgumentHelp("The device to revoke (its id, as 'fprep serve devices' lists it).", valueName: "DEVICE"))
    var device: String?

    @Option(help: ArgumentHelp("The enrollment secret to revoke (its id, enr-…).", valueName: "ID"))
    var enrollment: String?

    func validate() throws {
        guard (device == nil) != (enrollment == nil) else {
            throw ValidationError("name one device (DEVICE) or one enrollment (--enrollment ID) to revoke")
        }
        if let enrollment, !EnrollmentSecret.isID(enrollment) {
            throw ValidationError("'\(enrollment)' is not an enrollment id for --enrollment (enr- and 16 hex digits, as 'fprep serve devices' lists it)")
        }
    }

    func run() throws {
        let admin = try state.open()
        if let device {
            try admin.revoke(device: device)
            Console.error("revoked device \(device)\n")
        } else if let enrollment {
            try admin.revoke(enrollment: enrollment)
            Console.error("revoked enrollment \(enrollment)\n")
        }
    }
}
