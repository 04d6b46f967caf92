import Dispatch
import Synchronization
import FprepGit

/// Reads a walk's trees ahead of it, on a thread of its own with a
/// repository handle of its own: a clone's scan of 10^5 files spent about
/// half its time in libgit2 (inflating and parsing 9,400 trees) and half in
/// its own checks, one after the other; now the two overlap.
///
/// The trees come in the order `TreeWalk` asks for them (depth first, a
/// folder's subtrees in its order), some 65,000 entries ahead at most (a
/// few MB: the walk's memory still does not grow with the tree). A walk
/// that asks for another tree, or whose reader could not start, reads for
/// itself.
final class TreeReadAhead: @unchecked Sendable {
    private struct Read: Sendable {
        let id: ObjectID
        let entries: Result<[TreeEntry], any Error>

        /// Its share of the room ahead: one unit per `unit` entries, the
        /// whole room at most (a larger tree waits until it is alone).
        var units: Int {
            let count = (try? entries.get().count) ?? 0
            return min(max(1, (count + TreeReadAhead.unit - 1) / TreeReadAhead.unit), TreeReadAhead.roomUnits)
        }
    }

    private static let unit = 1024
    private static let roomUnits = 64
    private let queue = BatchQueue<Read>(depth: 4096)
    /// Units of room left ahead: the reader takes a read's units before it
    /// puts it in the queue, the walk gives them back as it takes it.
    private let room = DispatchSemaphore(value: TreeReadAhead.roomUnits)
    private let stopping = Atomic<Bool>(false)
    /// The walk's side only: the queue gave its last read.
    private var drained = false

    init(gitDirectory: String, root: ObjectID) {
        let queue = self.queue, room = self.room
        BlockingThread.start { [self] in
            defer { queue.close(consumers: 1) }
            guard let repository = try? Repository(openingAt: gitDirectory) else { return }
            // Depth first without recursion: a hostile tree may be
            // thousands of folders deep (the walk refuses it at its limit).
            var pending = [root]
            while let id = pending.popLast(), !stopping.load(ordering: .relaxed) {
                let read = Read(id: id, entries: Result { try repository.tree(id).entries })
                for _ in 0..<read.units { room.wait() }
                queue.put(read)
                guard case .success(let listed) = read.entries else { return }
                for entry in listed.reversed() where entry.mode == .tree { pending.append(entry.id) }
            }
        }
    }

    /// The entries of tree `id`, the next one the walk needs; nil when the
    /// reader has none for it (it stopped, read another tree, or failed).
    func entries(of id: ObjectID) -> [TreeEntry]? {
        guard let read = take() else { return nil }
        // Another tree, or one the reader failed to read: the walk reads
        // it itself (and says what failed).
        guard read.id == id, case .success(let entries) = read.entries else {
            stop()
            return nil
        }
        return entries
    }

    /// The walk is over, or failed: the reader stops after the tree it is
    /// reading (taken here, so a full queue never holds it).
    func stop() {
        stopping.store(true, ordering: .relaxed)
        while take() != nil {}
    }

    /// The next read, its room given back; nil once the reader has ended
    /// and everything it read was taken.
    private func take() -> Read? {
        guard !drained else { return nil }
        guard let read = queue.take() else {
            drained = true
            return nil
        }
        for _ in 0..<read.units { room.signal() }
        return read
    }
}
