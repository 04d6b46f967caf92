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
            guard let bytes = ByteSize.parse(text) else {
                throw FprepError("fprep.agent.readAheadBytes is '\(text)', not a size in bytes, in \(replica.root)/.git/config; set it to a number of bytes such as 64m, or 0 to turn read-ahead off")
            }
            readAheadBytes = bytes
        }
        refused = RefusedPrograms(try replica.setting("fprep.agent.refuse") ?? "")
    }
}
