import Glibc

/// When the placeholders were last all looked at. The index keeps only a
/// placeholder's size and date, not its inode, so the fast scan takes a
/// file with no data blocks and the recorded size for the placeholder
/// unless its inode changed (ctime) since a moment at which every
/// placeholder was known to be one. The index file's own date is not such
/// a moment: `sync --incoming`, `materialize`, `evict`, the agent and git
/// write the index without looking at the other files, and a placeholder
/// hard-linked or moved over another of the same size before such a write
/// would pass for the one it replaced. So the moment is kept apart, set by
/// the commands that look at every file (a clone's layout, a sync's scan
/// once its changes are committed), and nothing else moves it.
enum PlaceholderCheck {
    static let key = "placeholders_checked"

    /// Now, on the coarse clock the kernel dates inodes with: a change made
    /// after this reading gets a ctime at or after it.
    static func now() -> (seconds: Int64, nanoseconds: Int64) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &now)
        return (Int64(now.tv_sec), Int64(now.tv_nsec))
    }

    /// The last moment recorded; none recorded (a replica from before, or
    /// state rebuilt by repair): the epoch, so every placeholder whose stat
    /// data differs from its entry is checked once, marks and all.
    static func lastCompleted(_ store: StateStore) throws -> (seconds: Int64, nanoseconds: Int64) {
        guard let text = try store.meta(key) else { return (0, 0) }
        let parts = text.split(separator: " ")
        guard parts.count == 2, let seconds = Int64(parts[0]), let nanoseconds = Int64(parts[1]) else { return (0, 0) }
        return (seconds, nanoseconds)
    }

    /// Records that every placeholder was one at `moment` (only ever moved
    /// forward: an older moment only makes the next scan look at more).
    static func record(_ moment: (seconds: Int64, nanoseconds: Int64), in store: StateStore) throws {
        let last = try lastCompleted(store)
        guard moment.seconds > last.seconds || (moment.seconds == last.seconds && moment.nanoseconds > last.nanoseconds) else { return }
        // Lost to a power cut, the older moment only makes the next scan
        // look at more files: the record need not wait for the disk. (As a
        // command's first commit it still flushes: SQLite syncs a log it
        // starts again, whatever the setting.)
        try store.transaction(durability: .whenWrittenOut) {
            try store.setMeta(key, "\(moment.seconds) \(moment.nanoseconds)")
        }
    }
}
