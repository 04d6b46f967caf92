import Foundation

/// SplitMix64: one seed drives every random choice of a case, so a seed
/// replays the same action list on every machine and Swift release.
public struct SplitMix64 {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// A number in 0..<bound.
    public mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(max(1, bound))) }
    public mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
    public mutating func word() -> UInt32 { UInt32(truncatingIfNeeded: next() >> 16) }
}

/// Who acts: the remote (a plain git clone that commits and pushes), one of
/// the two replicas, or the world (the network).
public enum Actor: String, Sendable, CaseIterable {
    case remote, dev1, dev2, world
}

/// Every kind of action. Remote kinds act in the plain clone and push; the
/// others act on a replica (`dev1`/`dev2`); `offline` toggles the network.
public enum Kind: String, Sendable, CaseIterable {
    // The remote's commits.
    case remoteAdd = "remote-add", remoteEdit = "remote-edit", remoteDelete = "remote-delete"
    case remoteRename = "remote-rename", remoteChmod = "remote-chmod", remoteFileToDir = "remote-file-to-dir"
    case remoteDirToFile = "remote-dir-to-file", remoteSymlink = "remote-symlink"
    // What a user or a program does on a replica.
    case materialize, evict, write, append
    case appendPlaceholder = "append-placeholder", truncate, chmod, rename, delete, mkdir
    case fileToDir = "file-to-dir", dirToFile = "dir-to-file", symlink, hardlink
    case hardlinkOutside = "hardlink-outside", fifo, concurrent
    // Items the remote's `.gitignore` (`*.tmp`) leaves out: a new one, and
    // a file (a placeholder, say) moved to such a name.
    case ignoredWrite = "ignored-write", renameIgnored = "rename-ignored"
    // `fprep pin` (or, one time in three, `unpin`) of an item.
    case pin
    // fprep's own commands, and faults.
    case sync, syncIncoming = "sync-incoming", kill, crash, offline

    public var isRemote: Bool { rawValue.hasPrefix("remote-") }
    public var isWorld: Bool { self == .offline }

    /// How often the generator picks it (syncs often, so changes meet).
    var weight: Int {
        switch self {
        case .sync: 10
        case .syncIncoming, .remoteAdd, .remoteEdit, .write, .append, .appendPlaceholder: 4
        case .offline: 2
        default: 3
        }
    }
}

/// One generated action: a kind, who does it, and three numbers that pick
/// its targets by index modulo what exists when it runs, so every action
/// applies to any state and a failing list can be shrunk by deleting actions.
public struct Action: Sendable, Equatable {
    public var setup: Bool
    public var actor: Actor
    public var kind: Kind
    public var a: UInt32, b: UInt32, c: UInt32

    public var line: String { "\(setup ? "setup" : "step") \(actor.rawValue) \(kind.rawValue) \(a) \(b) \(c)" }

    /// Parses `line`'s format.
    public init(line: String) throws {
        let f = line.split(separator: " ").map(String.init)
        guard f.count == 6, f[0] == "setup" || f[0] == "step", let actor = Actor(rawValue: f[1]),
              let kind = Kind(rawValue: f[2]), let a = UInt32(f[3]), let b = UInt32(f[4]), let c = UInt32(f[5]) else {
            throw ModelError("bad action line '\(line)' (expected: setup|step ACTOR KIND A B C)")
        }
        self.init(setup: f[0] == "setup", actor: actor, kind: kind, a: a, b: b, c: c)
    }

    public init(setup: Bool, actor: Actor, kind: Kind, a: UInt32, b: UInt32, c: UInt32) {
        self.setup = setup; self.actor = actor; self.kind = kind; self.a = a; self.b = b; self.c = c
    }
}

/// A case: the seed it came from (0 for a hand-made one) and its actions.
public struct Case: Sendable {
    public var seed: UInt64
    public var actions: [Action]
    /// Whether paths may use the long name (`long-names no` in the text leaves it out).
    public var longNames: Bool
    /// Why a stored case is expected to fail for now (`pending REASON` in the text), or nil.
    public var pending: String?

    public init(seed: UInt64, actions: [Action], longNames: Bool = true, pending: String? = nil) {
        self.seed = seed; self.actions = actions; self.longNames = longNames; self.pending = pending
    }

    /// Generates the case of `seed`: a few remote commits before the clones,
    /// then `steps` actions. Each case leaves out some kinds at random
    /// (swarm testing: fewer kinds at once reach deeper states of each);
    /// `kinds` is the set a run allows at all.
    public static func generate(seed: UInt64, steps: Int, kinds: Set<Kind>, longNames: Bool = true) -> Case {
        var rng = SplitMix64(seed: seed)
        // In a fixed order: a Set's order changes from one process to the next.
        var ordered = Kind.allCases.filter { kinds.contains($0) }.filter { $0 == .sync || rng.chance(70) }
        if ordered.isEmpty { ordered = Kind.allCases.filter { kinds.contains($0) } }
        var setupKinds = [Kind.remoteAdd, .remoteAdd, .remoteSymlink, .remoteFileToDir].filter { kinds.contains($0) }
        if setupKinds.isEmpty { setupKinds = [.remoteAdd] }
        var actions: [Action] = []
        for _ in 0..<(2 + rng.below(4)) {
            actions.append(Action(setup: true, actor: .remote, kind: setupKinds[rng.below(setupKinds.count)],
                                  a: rng.word(), b: rng.word(), c: rng.word()))
        }
        let total = ordered.reduce(0) { $0 + $1.weight }
        for _ in 0..<steps {
            guard total > 0 else { break }
            var pick = rng.below(total)
            var kind = ordered[0]
            for k in ordered {
                if pick < k.weight { kind = k; break }
                pick -= k.weight
            }
            let actor: Actor = kind.isRemote ? .remote : kind.isWorld ? .world : (rng.chance(50) ? .dev1 : .dev2)
            actions.append(Action(setup: false, actor: actor, kind: kind, a: rng.word(), b: rng.word(), c: rng.word()))
        }
        return Case(seed: seed, actions: actions, longNames: longNames)
    }

    /// The replayable text: one action a line, `#` comments.
    public func text(comment: [String] = []) -> String {
        var lines = ["# fprep-model case (replay: fprep-model --replay FILE)", "seed \(seed)"]
        if !longNames { lines.append("long-names no") }
        if let pending { lines.append("pending \(pending)") }
        lines += comment.flatMap { $0.split(separator: "\n") }.map { "# " + $0 }
        lines += actions.map(\.line)
        return lines.joined(separator: "\n") + "\n"
    }

    /// Parses `text()`'s format.
    public init(text: String) throws {
        var seed: UInt64 = 0
        var actions: [Action] = []
        var longNames = true
        var pending: String?
        for raw in text.split(separator: "\n") {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("seed ") { seed = UInt64(line.dropFirst(5)) ?? 0; continue }
            if line == "long-names no" { longNames = false; continue }
            if line.hasPrefix("pending ") { pending = String(line.dropFirst(8)); continue }
            actions.append(try Action(line: line))
        }
        self.init(seed: seed, actions: actions, longNames: longNames, pending: pending)
    }
}

/// The names every path is made of: few, so actions collide; case and
/// Unicode-normalization variants that differ only in bytes; and (unless a
/// case leaves it out) one long name whose conflict copy's name passes 255 bytes.
public struct Names: Sendable {
    let pool: [[UInt8]]

    public init(longNames: Bool) {
        var pool: [[UInt8]] = [
            Array("a".utf8), Array("A".utf8), Array("b".utf8), Array("c.txt".utf8), Array("Dir".utf8),
            Array("dir".utf8), [0xC3, 0xA9] /* é NFC */, [0x65, 0xCC, 0x81] /* é NFD */,
        ]
        if longNames { pool.append(Array((String(repeating: "L", count: 220) + ".txt").utf8)) }
        self.pool = pool
    }

    func name(_ x: UInt32) -> [UInt8] { pool[Int(x % UInt32(pool.count))] }

    /// A path one or two levels deep.
    func path(_ x: UInt32) -> [UInt8] {
        let n = UInt32(pool.count)
        let first = name(x)
        if (x / n) % 3 == 0 { return first + [0x2F] + name(x / (n * 3)) }
        return first
    }
}
