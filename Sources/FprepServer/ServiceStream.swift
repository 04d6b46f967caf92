import FprepCore
import NIOCore

/// A replica's event stream from its push service, kept open: registers
/// when there is no token (or the service forgot it; the token is kept in
/// the replica's state), resumes after the last event acted on, and
/// reconnects after a drop with pauses growing to `maxBackoff`. Shared by
/// `fprep watch` and the agent's worker (`PushFollower`).
struct ServiceStream: Sendable {
    let device: DeviceClient
    let root: String
    let domain: String
    let branch: String
    let replicated: Bool
    /// How the device is named when it registers.
    let name: String
    let maxBackoff: Duration
    let idleTimeout: TimeAmount
    let output: @Sendable (String) -> Void
    /// Opens the replica for one short step (saving the token).
    let withReplica: @Sendable (String, (Replica) throws -> Void) throws -> Void

    /// Runs until the task is cancelled, or TLS refuses the service (a
    /// certificate not trusted: trying again would not help); returns why then.
    @discardableResult
    func follow(_ shared: Locked<PushSettings>, onOpen: @escaping @Sendable () -> Void,
                onPush: @escaping @Sendable (ServerSentEvent) -> Void, onDrop: @escaping @Sendable (String) -> Void) async -> TLSFailure? {
        var pause: Duration = .milliseconds(100)
        var lastRefusal: String?
        while !Task.isCancelled {
            do {
                var settings = shared.get()
                if settings.token == nil {
                    let registration: DeviceClient.Registration
                    do {
                        registration = try await device.register(domain: domain, enrollment: settings.enrollment, branch: branch,
                                                                 replicated: replicated, name: name)
                    } catch {
                        guard let refused = error as? ServiceRefused, refused.status == 401 else { throw error }
                        // Said once: the same refusal comes at every retry until an admin acts.
                        if refused.message != lastRefusal {
                            output("the push service refused to register this replica: \(refused.message); "
                                   + "run 'fprep watch --enroll SECRET' with a secret from 'fprep serve enroll'")
                            lastRefusal = refused.message
                        }
                        throw RegistrationRefused()
                    }
                    lastRefusal = nil
                    settings.device = registration.device
                    settings.token = registration.token
                    // From its first event on: a stream that drops before the
                    // first push still resumes with everything it missed.
                    settings.lastEventID = 0
                    shared.set(settings)
                    let saved = settings
                    try withReplica(root) { try $0.savePushSettings(saved) }
                    output("registered as \(registration.device)")
                }
                guard let token = settings.token else { continue }
                try await device.events(token: token, lastEventID: settings.lastEventID, idleTimeout: idleTimeout,
                                        onOpen: { onOpen() },
                                        onEvent: { event in if event.event == "push" { onPush(event) } })
                onDrop("the stream ended")
                pause = .milliseconds(100)
            } catch let failure as TLSFailure {
                return failure
            } catch is RegistrationRefused {
                onDrop("registration refused")
            } catch let refused as ServiceRefused where refused.status == 401 {
                // Unknown, expired or revoked token: register again (with the
                // enrollment secret kept in the settings).
                shared.update { $0.token = nil; $0.device = nil; $0.lastEventID = nil }
                onDrop(refused.message)
            } catch {
                onDrop("\(error)")
            }
            guard await sleepUnlessCancelled(for: pause) else { break }
            pause = min(pause * 2, maxBackoff)
        }
        return nil
    }
}

/// The service refused the enrollment secret (already told to the user).
private struct RegistrationRefused: Error {}
