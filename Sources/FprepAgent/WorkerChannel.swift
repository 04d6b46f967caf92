import CFprepSys
import FprepCore
import FprepGit
import Glibc
import Synchronization

/// One message between the agent and a replica's worker: its kind, the
/// request it answers (or asks), and its body. Whatever the worker sends
/// is read as untrusted (it runs as the replica's owner, who may control
/// it): every length is checked, and a message that does not parse ends
/// the worker.
struct WorkerMessage: Sendable {
    enum Kind: UInt8, Sendable {
        // Agent → worker.
        /// Fill this placeholder (blob, path) through the descriptor attached.
        case hydrate = 1
        /// List the watchable placeholders again (the index changed).
        case list = 2
        /// Read-ahead: fetch these blobs in one fetch (into a quarantine).
        case fetchAhead = 3
        /// Read-ahead: fill these placeholders (token, list) from that fetch.
        case fillAhead = 4
        /// Read-ahead: the batch is over; drop its quarantine (token).
        case endAhead = 5
        // Worker → agent.
        /// Started: recovery done; the placeholders, and `.fprep/agent.pid`
        /// open and locked attached (the agent holds it from then on).
        case started = 10
        /// Cannot serve the replica: why (one line).
        case startFailed = 11
        /// Filled: bytes, the index's stat before and after.
        case hydrated = 12
        /// Not a placeholder (any more): why.
        case notAPlaceholder = 13
        /// Cannot fill it: why.
        case failed = 14
        /// The placeholders now.
        case listed = 15
        /// The replica was busy: nothing listed this time.
        case listBusy = 16
        /// Tests only (`FPREP_TEST_KILL_AGENT_AFTER_BYTES`): kill the agent now.
        case killAgent = 17
        /// Fetched ahead: the quarantine's token (or, to `endAhead`, done).
        case fetchedAhead = 18
        /// Filled ahead: the index's stat before and after, then per file
        /// an outcome (0 filled: bytes; 1 not a placeholder: why; 2 failed: why).
        case filledAhead = 19
        /// A sync of the worker's own ran (one-way): succeeded (one byte),
        /// the line that says what it did, files left for later, the anchor.
        case synced = 20
        /// A line for the agent's log (one-way): what the worker's follow
        /// of the push service did (connected, lost, registered).
        case note = 21
        /// Changes the change watch left out (one-way): how many batches
        /// of changes were all to ignored items, so started no sync.
        case leftOut = 22
        /// The worker asks (its own id) the agent to watch these files
        /// before it evicts them (the disk budget), so that no access finds
        /// an unwatched placeholder; answered by `watching`.
        case watchFirst = 23
        /// The agent watches them (the id of `watchFirst`).
        case watching = 24
        /// How the worker hears of remote changes now (one-way): the push
        /// service's address (empty: none), connected (one byte), why it
        /// was lost, the poll's interval in milliseconds.
        case remoteChanges = 25
        /// Read-ahead (one-way, with the id of `fillAhead`): one file of the
        /// chunk is filled (its position in the chunk, its bytes), so the
        /// readers waiting on it go on before the rest of the chunk is done.
        case filledOne = 26
    }

    var kind: Kind
    var id: UInt32 = 0
    var body: [UInt8] = []
}

/// Builds a message body.
struct WorkerMessageWriter {
    private(set) var bytes: [UInt8] = []

    mutating func u32(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { bytes += $0 } }
    mutating func i64(_ value: Int64) { withUnsafeBytes(of: value.littleEndian) { bytes += $0 } }
    mutating func raw(_ value: [UInt8]) { bytes += value }
    /// Length first.
    mutating func data(_ value: [UInt8]) { u32(UInt32(value.count)); bytes += value }
    mutating func text(_ value: String) { data(Array(value.utf8)) }

    mutating func stat(_ value: fprep_stat) {
        for field in [value.dev, value.ino, value.mode, value.nlink, value.uid, value.gid, value.size, value.blocks,
                      value.mtime_sec, value.mtime_nsec, value.ctime_sec, value.ctime_nsec, value.atime_sec, value.atime_nsec] {
            i64(field)
        }
    }

    mutating func placeholders(_ list: [WatchedPlaceholder]) {
        u32(UInt32(list.count))
        for placeholder in list {
            raw(placeholder.blob.bytes)
            data(placeholder.path.bytes)
        }
    }

    mutating func fileKey(_ key: FileKey) {
        i64(key.device)
        i64(key.inode)
        i64(key.generation)
    }

    /// Where each of `list` is marked (empty: at its path), after `placeholders(list)`.
    mutating func markPlaces(_ list: [WatchedPlaceholder]) {
        for placeholder in list { data(placeholder.markAt?.bytes ?? []) }
    }
}

/// Reads a message body; every read is nil past its end.
struct WorkerMessageReader {
    private let bytes: [UInt8]
    private var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var atEnd: Bool { offset == bytes.count }

    mutating func raw(_ count: Int) -> [UInt8]? {
        guard count >= 0, count <= bytes.count - offset else { return nil }
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    mutating func u32() -> UInt32? {
        raw(4).map { $0.reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) } }
    }

    mutating func i64() -> Int64? {
        raw(8).map { Int64(bitPattern: $0.reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }) }
    }

    mutating func data() -> [UInt8]? { u32().flatMap { raw(Int($0)) } }
    mutating func text() -> String? { data().map { String(decoding: $0, as: UTF8.self) } }

    mutating func stat() -> fprep_stat? {
        var fields: [Int64] = []
        for _ in 0..<14 { guard let value = i64() else { return nil }; fields.append(value) }
        return fprep_stat(dev: fields[0], ino: fields[1], mode: fields[2], nlink: fields[3], uid: fields[4], gid: fields[5],
                          size: fields[6], blocks: fields[7], mtime_sec: fields[8], mtime_nsec: fields[9],
                          ctime_sec: fields[10], ctime_nsec: fields[11], atime_sec: fields[12], atime_nsec: fields[13])
    }

    mutating func placeholder() -> WatchedPlaceholder? {
        guard let blob = raw(20).flatMap({ ObjectID(bytes: $0) }), let path = data(), Self.isRelativePath(path) else { return nil }
        return WatchedPlaceholder(path: RepoPath(bytes: path), blob: blob)
    }

    /// Reads what `markPlaces` wrote into `list`.
    mutating func markPlaces(into list: inout [WatchedPlaceholder]) -> Bool {
        for i in list.indices {
            guard let place = data() else { return false }
            if !place.isEmpty {
                guard Self.isRelativePath(place) else { return false }
                list[i].markAt = RepoPath(bytes: place)
            }
        }
        return true
    }

    mutating func fileKey() -> FileKey? {
        guard let device = i64(), let inode = i64(), let generation = i64() else { return nil }
        return FileKey(device: device, inode: inode, generation: generation)
    }

    mutating func placeholders() -> [WatchedPlaceholder]? {
        guard let count = u32() else { return nil }
        var list: [WatchedPlaceholder] = []
        for _ in 0..<count {
            guard let placeholder = placeholder() else { return nil }
            list.append(placeholder)
        }
        return list
    }

    /// A path below the replica's root as the index holds them: not empty,
    /// not absolute, no NUL, no "." or ".." part (the agent opens them
    /// beneath the root anyway).
    private static func isRelativePath(_ path: [UInt8]) -> Bool {
        guard !path.isEmpty, path.first != UInt8(ascii: "/"), !path.contains(0) else { return false }
        return !path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).contains {
            $0.isEmpty || $0.elementsEqual([UInt8(ascii: ".")]) || $0.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")])
        }
    }
}

/// One end of the socket between the agent and a worker: framed messages
/// (length, kind, whether a descriptor comes with it, request id, body),
/// each with at most one descriptor. Sends from any thread; receives on
/// one thread only.
final class WorkerChannel: @unchecked Sendable {
    let fd: Int32
    private let sending = Mutex(())
    private var buffer: [UInt8] = []
    private var start = 0
    private var descriptors: [Int32] = []
    /// The most a message may hold (10^5 placeholders' list is ~10 MB).
    private static let largest = 1 << 30

    /// Whether descriptors that come are kept for their messages (the
    /// worker's side; the agent's for the first message only); otherwise
    /// they are closed at once (a worker must not fill the agent's
    /// descriptor table). Changed on the receiving thread only.
    var acceptsDescriptors: Bool {
        didSet {
            guard !acceptsDescriptors else { return }
            for descriptor in descriptors { close(descriptor) }
            descriptors = []
        }
    }

    init(fd: Int32, acceptsDescriptors: Bool) {
        self.fd = fd
        self.acceptsDescriptors = acceptsDescriptors
    }

    deinit {
        close(fd)
        for descriptor in descriptors { close(descriptor) }
    }

    /// Sends `message` with `descriptor` (-1: none); false when the other end is gone.
    @discardableResult
    func send(_ message: WorkerMessage, descriptor: Int32 = -1) -> Bool {
        var frame = WorkerMessageWriter()
        frame.u32(UInt32(6 + message.body.count))
        frame.raw([message.kind.rawValue, descriptor >= 0 ? 1 : 0])
        frame.u32(message.id)
        frame.raw(message.body)
        return sending.withLock { _ in
            frame.bytes.withUnsafeBytes { fprep_channel_send(fd, $0.baseAddress, $0.count, descriptor) } == frame.bytes.count
        }
    }

    /// The next message and its descriptor (which the caller then owns);
    /// nil at the end of the stream or on a message that does not parse.
    func receive() -> (WorkerMessage, Int32?)? {
        while true {
            if let message = nextBuffered() { return message.valid ? (message.message, message.descriptor) : nil }
            var chunk = [UInt8](repeating: 0, count: 65536)
            var fds = [Int32](repeating: -1, count: 16)
            var fdCount = 0
            let count = chunk.withUnsafeMutableBytes { bytes in
                fds.withUnsafeMutableBufferPointer { fds in
                    fprep_channel_receive(fd, bytes.baseAddress, bytes.count, fds.baseAddress, fds.count, &fdCount)
                }
            }
            if acceptsDescriptors {
                descriptors += fds.prefix(fdCount)
            } else {
                for received in fds.prefix(fdCount) { close(received) }
            }
            guard count > 0 else { return nil }
            if start > 0, start >= buffer.count / 2 {
                buffer.removeFirst(start)
                start = 0
            }
            buffer += chunk[0..<count]
        }
    }

    private func nextBuffered() -> (message: WorkerMessage, descriptor: Int32?, valid: Bool)? {
        let available = buffer.count - start
        guard available >= 4 else { return nil }
        var header = WorkerMessageReader(Array(buffer[start..<start + 4]))
        guard let length = header.u32().map(Int.init), length >= 6, length <= Self.largest else {
            return (WorkerMessage(kind: .failed), nil, false)
        }
        guard available >= 4 + length else { return nil }
        var reader = WorkerMessageReader(Array(buffer[start + 4..<start + 4 + length]))
        start += 4 + length
        guard let kindByte = reader.raw(1)?.first, let kind = WorkerMessage.Kind(rawValue: kindByte),
              let carries = reader.raw(1)?.first, let id = reader.u32(), let body = reader.raw(length - 6) else {
            return (WorkerMessage(kind: .failed), nil, false)
        }
        var descriptor: Int32?
        if carries != 0 {
            // Sent with the message's first byte: here by now, in order.
            guard acceptsDescriptors, !descriptors.isEmpty else { return (WorkerMessage(kind: .failed), nil, false) }
            descriptor = descriptors.removeFirst()
        }
        return (WorkerMessage(kind: kind, id: id, body: body), descriptor, true)
    }
}
