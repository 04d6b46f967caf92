import FprepCore

/// The seed's rules for who gets which push (seed 003, DESIGN "Push"):
/// a container goes only to devices that actively enumerate it; the working
/// set goes to every device on every push; a replicated device only ever
/// gets the working-set identifier.
enum PushRules {
    /// The containers one device is sent for a push that affected `pushed`.
    /// `active` is the device's few enumerated containers, so the cost per
    /// device follows them, not the size of the push.
    static func containers(pushed: Set<String>, active: [String], replicated: Bool) -> [String] {
        if replicated { return [ContainerIdentifier.workingSet] }
        return active.filter { pushed.contains($0) && $0 != ContainerIdentifier.workingSet } + [ContainerIdentifier.workingSet]
    }
}

/// What is waiting for one device between two flushes: the containers to
/// push (each once) and the span of commits they cover. Several pushes in a
/// row coalesce into one push per container, from the first push's old
/// commit to the last one's new commit.
struct Mailbox: Sendable {
    private(set) var containers: [String] = []
    private var seen: Set<String> = []
    private(set) var old: String
    private(set) var new: String

    init(old: String, new: String) {
        self.old = old
        self.new = new
    }

    /// Adds a later push's containers; the span keeps its first old commit.
    mutating func add(_ more: [String], new: String) {
        for container in more where seen.insert(container).inserted { containers.append(container) }
        self.new = new
    }

    /// The payloads of one flush.
    func payloads(domain: String) -> [PushPayload] {
        containers.map { PushPayload(container: $0, domain: domain, old: old, new: new) }
    }
}
