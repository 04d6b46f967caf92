import Foundation
import FprepGit
import Testing
@testable import FprepCore

/// The three-way merge over many small random cases: two devices change
/// one base tree independently (new files, edits, mode changes, deletions,
/// renames, whole folders moved), and the merge of the two must keep every
/// file either device wrote and bring back nothing neither side holds.
///
/// The model test reaches the merge through whole syncs, a few hundred
/// actions a seed; this one puts thousands of pairs of changes into it
/// directly, so a rule that lets one local put replace another, or a
/// remote's file replace a local one, shows up as a named case.
@Suite struct TreeMergeTests {
    /// Names the cases use: few, so the two sides keep meeting at one
    /// name; a folder that moves whole (`d` to `e`) and a file that can
    /// take its name (`d`), and an ignored-style name (`a.tmp`) the
    /// model's renames use.
    static let names = ["a", "b", "a.tmp", "d", "d/x", "d/y", "e/x", "e/z"]

    @Test func everyFileEitherDeviceWroteSurvivesTheMerge() throws {
        let harness = try SyncHarness(files: ["seed.txt": "seed\n"])
        let replica = try harness.replica()
        let repository = replica.repository
        let merge = TreeMerge(replica: replica, device: "test", date: "2026-01-01")
        // A longer hunt: FPREP_MERGE_CASES=100000 FPREP_MERGE_SEED=7 swift test --filter TreeMergeTests
        let environment = ProcessInfo.processInfo.environment
        var random = SeededRandom(seed: environment["FPREP_MERGE_SEED"].flatMap(UInt64.init) ?? 20_261_128)
        var written = 0
        func newBlob() throws -> ObjectID {
            written += 1
            let text = Array("written \(written)\n".utf8)
            return try text.withUnsafeBytes { try repository.writeBlob($0) }
        }
        var failures: [String] = []
        let cases = environment["FPREP_MERGE_CASES"].flatMap(Int.init) ?? 1_500
        for number in 0..<cases where failures.count < 5 {
            let base = try Self.randomTree(&random, blob: newBlob)
            let ours = try Self.change(base, &random, blob: newBlob)
            let theirs = try Self.change(base, &random, blob: newBlob)
            let commits = try [base, ours, theirs].map { try Self.commit($0, in: repository) }
            let story = "case \(number)\n  base   \(Self.describe(base))\n  ours   \(Self.describe(ours))\n  theirs \(Self.describe(theirs))"
            let result: [String: TreeEntry]
            do {
                let merged = try merge.merge(base: commits[0], ours: commits[1], theirs: commits[2])
                result = try Self.files(of: merged.tree, in: repository)
            } catch {
                failures.append("\(story)\n  the merge threw: \(error)")
                continue
            }
            let kept = Set(result.values.map(\.id))
            let baseBlobs = Set(base.values.map(\.id))
            let lost = Set(ours.values.map(\.id)).union(theirs.values.map(\.id)).subtracting(baseBlobs).subtracting(kept)
            let either = Set(ours.values.map(\.id)).union(theirs.values.map(\.id))
            let revived = kept.subtracting(either)
            if !lost.isEmpty || !revived.isEmpty {
                failures.append("\(story)\n  merged \(Self.describe(result))\n  lost \(lost.map(\.hex)) revived \(revived.map(\.hex))")
            }
        }
        #expect(failures.isEmpty, "\(failures.count) merges lost or revived files:\n\(failures.joined(separator: "\n"))")
    }

    // MARK: - Cases

    typealias Files = [String: TreeEntry]

    static func entry(_ path: String, _ id: ObjectID, _ mode: FileMode) -> TreeEntry {
        TreeEntry(name: Array(path.utf8), id: id, mode: mode)
    }

    /// Whether `path` can be added to `files` (no file where a folder of it
    /// is, no folder where it is).
    static func fits(_ path: String, in files: Files) -> Bool {
        guard files[path] == nil else { return false }
        let folder = path.split(separator: "/").dropLast().joined(separator: "/")
        if !folder.isEmpty, files[folder] != nil { return false }
        return !files.keys.contains { $0.hasPrefix(path + "/") }
    }

    static func randomTree(_ random: inout SeededRandom, blob: () throws -> ObjectID) throws -> Files {
        var files: Files = [:]
        for name in names where random.next(100) < 45 && fits(name, in: files) {
            files[name] = entry(name, try blob(), random.next(4) == 0 ? .executable : .blob)
        }
        return files
    }

    /// One device's changes to `base`: one to four of new file, edit, mode
    /// change, deletion, rename of a file, move of a whole folder.
    static func change(_ base: Files, _ random: inout SeededRandom, blob: () throws -> ObjectID) throws -> Files {
        var files = base
        for _ in 0..<(1 + random.next(4)) {
            let present = files.keys.sorted()
            let free = names.filter { fits($0, in: files) }
            switch random.next(6) {
            case 0 where !free.isEmpty:
                let name = free[random.next(free.count)]
                files[name] = entry(name, try blob(), random.next(5) == 0 ? .symlink : .blob)
            case 1 where !present.isEmpty:
                let name = present[random.next(present.count)]
                files[name] = entry(name, try blob(), files[name]?.mode ?? .blob)
            case 2 where !present.isEmpty:
                let name = present[random.next(present.count)]
                if let old = files[name], old.mode != .symlink { files[name] = entry(name, old.id, old.mode == .blob ? .executable : .blob) }
            case 3 where !present.isEmpty:
                files[present[random.next(present.count)]] = nil
            case 4 where !present.isEmpty:
                let name = present[random.next(present.count)]
                guard let moved = files.removeValue(forKey: name) else { break }
                let targets = names.filter { $0 != name && fits($0, in: files) }
                if targets.isEmpty { files[name] = moved; break }
                let target = targets[random.next(targets.count)]
                files[target] = entry(target, moved.id, moved.mode)
            case 5:
                // A folder moved whole: every file of `d` to `e` (or back).
                let (from, to) = random.next(2) == 0 ? ("d/", "e/") : ("e/", "d/")
                let inside = files.keys.filter { $0.hasPrefix(from) }
                guard !inside.isEmpty, !files.keys.contains(where: { $0.hasPrefix(to) }), files[String(to.dropLast())] == nil else { break }
                for name in inside {
                    guard let moved = files.removeValue(forKey: name) else { continue }
                    let target = to + name.dropFirst(from.count)
                    files[target] = entry(target, moved.id, moved.mode)
                }
            default: break
            }
        }
        return files
    }

    static func commit(_ files: Files, in repository: Repository) throws -> ObjectID {
        var edits: [[UInt8]: TreeEditor.Edit] = [:]
        for (path, entry) in files { edits[Array(path.utf8)] = .put(entry.id, entry.mode) }
        let tree = try TreeEditor(repository).apply(edits, to: nil)
        let who = Signature(name: "Test", email: "test@example.invalid", time: 1_700_000_000)
        return try repository.writeCommit(tree: tree, parents: [], message: "case", author: who, committer: who)
    }

    /// Every file of a tree, by path.
    static func files(of tree: ObjectID, in repository: Repository, prefix: String = "") throws -> Files {
        var result: Files = [:]
        for item in try repository.tree(tree).entries {
            let path = prefix + String(decoding: item.name, as: UTF8.self)
            if item.mode == .tree {
                result.merge(try files(of: item.id, in: repository, prefix: path + "/")) { first, _ in first }
            } else {
                result[path] = entry(path, item.id, item.mode)
            }
        }
        return result
    }

    static func describe(_ files: Files) -> String {
        files.keys.sorted().map { path in
            let item = files[path]!
            return "\(path)=\(item.id.hex.prefix(7))\(item.mode == .executable ? "+x" : "")"
        }.joined(separator: " ")
    }
}

/// A small deterministic generator (splitmix64), so a failing case is the
/// same on every run.
struct SeededRandom {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next(_ bound: Int) -> Int {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        return Int(z % UInt64(bound))
    }
}
