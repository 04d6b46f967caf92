/// Sleeps for `duration`; false, at once, if the task is cancelled.
///
/// Every loop that polls, backs off or ticks sleeps through this (and stops
/// on false): a cancelled task's `try? await Task.sleep` returns at once,
/// so a loop around one that does not check spins its thread. Two such
/// loops (a test's handler whose connection had closed) held both
/// cooperative threads of a two-core CI machine until its time ran out.
public func sleepUnlessCancelled(for duration: Duration) async -> Bool {
    await sleepUnlessCancelled(until: .now + duration)
}

/// As `sleepUnlessCancelled(for:)`, until `instant`.
public func sleepUnlessCancelled(until instant: ContinuousClock.Instant) async -> Bool {
    do {
        try await Task.sleep(until: instant, clock: .continuous)
        return true
    } catch {
        return false
    }
}
