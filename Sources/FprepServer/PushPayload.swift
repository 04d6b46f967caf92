import FoundationEssentials

/// One push as a device receives it: File Provider's payload
/// (`container-identifier`, `domain`) plus the commits the change moved
/// between, so a device can drop a duplicate and notice a gap.
public struct PushPayload: Sendable, Codable, Hashable {
    public var container: String
    public var domain: String
    /// The commit the change started from (all zeros for a new branch).
    public var old: String
    /// The commit the change reached.
    public var new: String

    public init(container: String, domain: String, old: String, new: String) {
        self.container = container
        self.domain = domain
        self.old = old
        self.new = new
    }

    enum CodingKeys: String, CodingKey {
        case container = "container-identifier"
        case domain
        case old = "old-anchor"
        case new = "new-anchor"
    }
}
