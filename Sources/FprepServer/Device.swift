import FoundationEssentials

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
struct Device: Sendable {
    let id: String
    /// SHA-256 of the bearer token, hex: the token itself is never stored.
    let tokenHash: String
    let domain: String
    let branch: String
    /// A replicated provider gets the working-set identifier only (seed 003).
    let replicated: Bool
    let channel: DeliveryChannel
    let name: String
    let created: Int64
    let expires: Int64
    /// The sequence number of the device's last event.
    var lastSeq: Int64
    /// Webhook and APNs devices: the last event delivered.
    var ackedSeq: Int64
    /// The enrollment it registered with.
    var enrollment: String = ""
    /// When it last called the service (seconds since 1970; 0: never since registering).
    var lastSeen: Int64 = 0
}

/// One event queued for a device: its sequence number and payload.
struct DeviceEvent: Sendable {
    let seq: Int64
    let payload: [UInt8]
}
