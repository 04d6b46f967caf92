import FoundationEssentials
import FprepGit

/// What a replica remembers about its push service: where it is, the
/// enrollment secret it registers with (again when its token expires), the
/// device it registered as, its bearer token, the last event it acted
/// on (the stream resumes after it), and the CA file that an https service's
/// certificate is checked against (nil: the system's trust store). Kept in
/// `.fprep/state.db`.
public struct PushSettings: Sendable, Equatable {
    public var service: String?
    public var ca: String?
    public var enrollment: String?
    public var device: String?
    public var token: String?
    public var lastEventID: Int64?

    public init(service: String? = nil, enrollment: String? = nil, device: String? = nil, token: String? = nil,
                lastEventID: Int64? = nil, ca: String? = nil) {
        self.service = service
        self.ca = ca
        self.enrollment = enrollment
        self.device = device
        self.token = token
        self.lastEventID = lastEventID
    }
}

extension Replica {
    private static let pushKeys = (service: "push_service", enrollment: "push_enrollment", device: "push_device", token: "push_token", lastEvent: "push_last_event", ca: "push_ca")

    /// The replica's push settings (all nil before `fprep watch` ran).
    public func pushSettings() throws -> PushSettings {
        let keys = Self.pushKeys
        return PushSettings(service: try store.meta(keys.service), enrollment: try store.meta(keys.enrollment),
                            device: try store.meta(keys.device),
                            token: try store.meta(keys.token),
                            lastEventID: try store.meta(keys.lastEvent).flatMap { Int64($0) }, ca: try store.meta(keys.ca))
    }

    /// Records the push settings; a nil field is forgotten.
    public func savePushSettings(_ settings: PushSettings) throws {
        let keys = Self.pushKeys
        let fields: [(String, String?)] = [(keys.service, settings.service), (keys.enrollment, settings.enrollment),
                                           (keys.device, settings.device),
                                           (keys.token, settings.token), (keys.lastEvent, settings.lastEventID.map(String.init)),
                                           (keys.ca, settings.ca)]
        try store.transaction {
            for (key, value) in fields {
                if let value {
                    try store.setMeta(key, value)
                } else {
                    try store.database.prepare("DELETE FROM meta WHERE key = ?1").bind(.text(key)).run()
                }
            }
        }
    }
}
