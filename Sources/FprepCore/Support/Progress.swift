/// Receives progress of long work (clone layout, materialize, evict). The CLI
/// draws it as one line on a terminal; called from any thread.
public protocol ProgressReporter: Sendable {
    /// `done` of `total` units of `phase` are finished.
    func report(_ phase: String, done: Int, total: Int)
    /// The work is over; clear the line.
    func finish()
}

/// Reports nothing.
public struct SilentProgress: ProgressReporter {
    public init() {}
    public func report(_ phase: String, done: Int, total: Int) {}
    public func finish() {}
}
