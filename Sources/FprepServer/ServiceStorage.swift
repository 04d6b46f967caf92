import FoundationEssentials
import FprepPush

/// Where the push service keeps its durable state: `ServiceStore` (SQLite in
/// the remote, one `fprep serve`) or a shared store for several instances
/// (`SharedServiceStorage`, PostgreSQL). Synchronous: the service's actor
/// calls it between suspension points, so its own state and the store's
/// never drift apart mid-call.
package protocol ServiceStorage: AnyObject {
    // MARK: devices
    /// Every registered device, oldest first.
    func devices() throws -> [Device]
    /// The device whose bearer token has this SHA-256, or nil.
    func device(tokenHash: String) throws -> Device?
    /// Records a new device.
    func insert(_ device: Device) throws
    /// Forgets a device; false when there was none by that id.
    @discardableResult
    func delete(device id: String) throws -> Bool
    /// Whether another process changed the devices since the last call.
    func changedElsewhere() throws -> Bool
    /// Records when devices were last heard from (a time only moves forward).
    func saveLastSeen(_ times: [String: Int64]) throws

    // MARK: enrollments
    /// Records a new enrollment (its secret's hash only).
    func insert(_ enrollment: Enrollment) throws
    /// The enrollment with this id, or nil.
    func enrollment(id: String) throws -> Enrollment?
    /// Every enrollment, oldest first.
    func enrollments() throws -> [Enrollment]
    /// Marks an enrollment revoked; false when there is none by that id.
    func revoke(enrollment id: String, at time: Int64) throws -> Bool

    // MARK: enumerators and events
    /// Every recorded enumerator and its expiry.
    func enumerators() throws -> [(device: String, container: String, expires: Int64)]
    /// Opens (an expiry) or closes (nil) a device's enumerator.
    func setEnumerator(device: String, container: String, expires: Int64?) throws
    /// Stores new events and raises the devices' last sequence numbers, in one transaction.
    func append(_ events: [(device: String, event: DeviceEvent)], at time: Int64) throws
    /// A device's events after `seq`, oldest first.
    func events(device: String, after seq: Int64, limit: Int) throws -> [DeviceEvent]
    /// Records what webhook and APNs devices have received.
    func saveAcknowledgements(_ acks: [String: Int64]) throws
    /// Forgets old events, expired enumerators and long-expired devices.
    func prune(eventsBefore: Int64, devicesExpiredBefore: Int64, now: Int64) throws

    /// Lets go of connections and background work.
    func close()
}

extension ServiceStorage {
    package func close() {}
}

/// What a shared store tells every instance (PostgreSQL `NOTIFY`).
package enum ServiceNotification: Sendable, Equatable {
    /// A dispatch stored a batch of events.
    case events(batch: Int64)
    /// A device was revoked or unregistered somewhere.
    case revoked(String)
}

/// What one dispatch step claimed and stored.
package struct Dispatched: Sendable {
    /// The pushes taken (none: nothing waits).
    package var pushes: [Outbox.Entry]
    package var events: [(device: String, event: DeviceEvent)]

    package init(pushes: [Outbox.Entry], events: [(device: String, event: DeviceEvent)]) {
        self.pushes = pushes
        self.events = events
    }
}

/// A store that several `fprep serve` instances share (PostgreSQL). The
/// outbox-to-events step and each device's delivery then happen once in
/// all, through the store rather than in one process's memory:
///
/// - every instance copies the remote's outbox into the store (`ingest`,
///   each entry once by its outbox sequence number);
/// - `dispatch` claims the copied pushes not yet dispatched and, in the same
///   transaction, stores the devices' events, so a push becomes events
///   exactly once, whichever instance got there;
/// - each webhook or APNs device has a sender, the instance that sends its
///   events; it stays while that instance is alive (`heartbeat` renews a
///   lease), and a live instance takes over the devices of one whose lease
///   ran out, resending what they had not acknowledged;
/// - the commit notifies every instance (`notifications`), which reads the
///   batch: its streams and its own senders' devices get their events.
package protocol SharedServiceStorage: ServiceStorage {
    /// This instance's id in the store (new on each start).
    var instance: String { get }
    /// What the other instances (and this one) announce.
    var notifications: AsyncStream<ServiceNotification> { get }
    /// Copies outbox entries in; one already copied is skipped.
    func ingest(_ entries: [Outbox.Entry], source: String) throws
    /// Claims up to `limit` copied pushes nobody dispatched, asks `plan` for
    /// each device's payloads (given the pushes, the devices and the
    /// enumerators open at `now`), and stores them as numbered events, all
    /// in one transaction. A push is dispatched twice: to the devices on an event stream
    /// (`streams`), which then sync without waiting for thousands of
    /// webhook devices' events to be stored, and after that to the others.
    func dispatch(limit: Int, now: Int64, streams: Bool,
                  plan: (_ pushes: [Outbox.Entry], _ devices: [Device], _ active: [String: [String]]) -> [(device: String, payloads: [[UInt8]])])
        throws -> Dispatched
    /// The events a dispatch stored, with the instance that sends each.
    func events(batch: Int64) throws -> [(device: String, event: DeviceEvent, sender: String?)]
    /// Keeps this instance alive until `until`; takes over the webhook and
    /// APNs devices whose sender's lease ran out, with events they have not
    /// acknowledged, and returns them.
    func heartbeat(until: Int64, now: Int64) throws -> [Device]
    /// Renews this instance's lease for `lease` seconds every `interval`,
    /// apart from the service actor, until the store closes: the actor's
    /// own renewal (`heartbeat`) waits behind whatever it is doing, and a
    /// dispatch to 10^5 devices held it past the lease, so the instances
    /// took each other's devices over while both were alive.
    func renewLease(every interval: Duration, for lease: Int64)
}
