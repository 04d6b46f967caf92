import FoundationEssentials
import FprepPush

/// How a device receives its pushes.
public enum DeliveryChannel: Sendable, Equatable {
    /// A long-lived server-sent event stream the device keeps open.
    case stream
    /// A POST to the device's URL, signed with HMAC-SHA256 of its timestamp,
    /// delivery id and body (`WebhookSignature`).
    case webhook(url: ServiceURL, secret: String)
    /// An APNs request for the device token, sent to the configured endpoint.
    case apns(deviceToken: String)

    /// The channel's name in the API and the database.
    public var kind: String {
        switch self {
        case .stream: "stream"
        case .webhook: "webhook"
        case .apns: "apns"
        }
    }
}

/// A registered device.
package struct Device: Sendable {
    package let id: String
    /// SHA-256 of the bearer token, hex: the token itself is never stored.
    package let tokenHash: String
    package let domain: String
    package let branch: String
    /// A replicated provider gets the working-set identifier only (seed 003).
    package let replicated: Bool
    package let channel: DeliveryChannel
    package let name: String
    package let created: Int64
    package let expires: Int64
    /// The sequence number of the device's last event.
    package var lastSeq: Int64
    /// Webhook and APNs devices: the last event delivered.
    package var ackedSeq: Int64
    /// The enrollment it registered with.
    package var enrollment: String = ""
    /// When it last called the service (seconds since 1970; 0: never since registering).
    package var lastSeen: Int64 = 0

    package init(id: String, tokenHash: String, domain: String, branch: String, replicated: Bool, channel: DeliveryChannel,
                 name: String, created: Int64, expires: Int64, lastSeq: Int64, ackedSeq: Int64, enrollment: String = "",
                 lastSeen: Int64 = 0) {
        self.id = id
        self.tokenHash = tokenHash
        self.domain = domain
        self.branch = branch
        self.replicated = replicated
        self.channel = channel
        self.name = name
        self.created = created
        self.expires = expires
        self.lastSeq = lastSeq
        self.ackedSeq = ackedSeq
        self.enrollment = enrollment
        self.lastSeen = lastSeen
    }
}

/// One event queued for a device: its sequence number and payload.
package struct DeviceEvent: Sendable {
    package let seq: Int64
    package let payload: [UInt8]

    package init(seq: Int64, payload: [UInt8]) {
        self.seq = seq
        self.payload = payload
    }
}
