import FprepCore

/// What a replica's git configuration says to its agent, read when serving
/// starts: `fprep.agent.readAheadBytes` (the byte budget of one read-ahead
/// fetch; 0 turns it off) and `fprep.agent.refuse` (the programs refused
/// hydration).
struct AgentSettings: Sendable {
    static let defaultReadAheadBytes: Int64 = 64 << 20

    var readAheadBytes = defaultReadAheadBytes
    var refused = RefusedPrograms("")
    /// Whether the worker syncs by itself (`fprep.agent.sync`, read by the
    /// worker: see `SyncScheduler.Settings`); the agent then logs its syncs.
    var syncs = false

    init() {}

    init(_ replica: Replica) throws {
        if let text = try replica.setting("fprep.agent.readAheadBytes") {
            guard let bytes = Self.size(text) else {
                throw FprepError("fprep.agent.readAheadBytes is '\(text)', not a size in bytes, in \(replica.root)/.git/config; set it to a number of bytes such as 64m, or 0 to turn read-ahead off")
            }
            readAheadBytes = bytes
        }
        refused = RefusedPrograms(try replica.setting("fprep.agent.refuse") ?? "")
    }

    /// `65536`, `64k`, `64m`, `1g` (git's suffixes, any case); nil when it is none of these.
    static func size(_ text: String) -> Int64? {
        var digits = Array(text.utf8).filter { $0 != 0x20 }
        var scale: Int64 = 1
        if let last = digits.last, let shift = [UInt8(ascii: "k"): 10, UInt8(ascii: "m"): 20, UInt8(ascii: "g"): 30][last | 0x20] {
            scale = 1 << Int64(shift)
            digits.removeLast()
        }
        guard !digits.isEmpty, digits.count <= 12, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        let value = digits.reduce(Int64(0)) { $0 * 10 + Int64($1 - 0x30) }
        let (product, overflow) = value.multipliedReportingOverflow(by: scale)
        return overflow ? nil : product
    }
}
