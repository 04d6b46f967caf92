import Foundation
import FprepGit
import Testing
@testable import FprepCore

/// The applying of a remote change over many small random ones: the remote
/// goes from one random tree to the next (new files, edits, mode changes,
/// symlinks, deletions, renames, whole folders moved, a file taking a
/// folder's name and the other way round, names swapped), and after each
/// `sync` the replica must hold the remote's tree exactly, with nothing set
/// aside and nothing to push. Nothing is written here but by the remote (or,
/// in a quarter of the cases, the remote's very change made here by hand
/// before an incoming sync), so any conflict copy or local change is the
/// sync's own mistake.
///
/// The model test reaches this through whole two-device stories, a few
/// syncs a seed; its seed 9137 needed 40 actions to show a cycle of moves
/// (a symlink taking a folder's name while the folder's file took the
/// symlink's) that the applier set aside as if it were the user's. Here
/// such a change is one of a few hundred made directly.
@Suite(.serialized) struct SyncApplyTests {
    /// Few names, so changes keep meeting: `d` and `e` are files in some
    /// trees and folders in others.
    static let names = ["a", "b", "d", "d/x", "d/y", "e", "e/x", "e/z", "s"]

    enum Item: Equatable {
        case file(String, executable: Bool)
        case symlink(String)
    }
    typealias Tree = [String: Item]

    @Test func everyRemoteChangeIsAppliedExactly() throws {
        let environment = ProcessInfo.processInfo.environment
        // A longer hunt: FPREP_APPLY_CASES=2000 FPREP_APPLY_SEED=7 swift test --filter SyncApplyTests
        var random = SeededRandom(seed: environment["FPREP_APPLY_SEED"].flatMap(UInt64.init) ?? 20_261_129)
        let cases = environment["FPREP_APPLY_CASES"].flatMap(Int.init) ?? 120
        let h = try SyncHarness(files: ["a": "start\n"])
        var tree: Tree = ["a": .file("start\n", executable: false)]
        var written = 0
        var failures: [String] = []
        for number in 0..<cases where failures.count < 3 {
            let next = Self.change(tree, &random, written: &written)
            if next == tree { continue }
            // Some of what the replica holds is materialized, as a user's is.
            let files = tree.keys.filter { if case .file = tree[$0] { true } else { false } }.sorted()
            let chosen = files.filter { _ in random.next(2) == 0 }
            if !chosen.isEmpty { _ = try h.replica().materialize(chosen, relativeTo: h.replicaRoot) }
            try h.push("case \(number)") { work in try Self.write(next, into: work) }
            // Now and then the device has made the remote's change itself
            // (by hand, say), and the agent's incoming sync, which scans
            // nothing, meets it: every move and change is then done already.
            let byHand = random.next(4) == 0
            if byHand { try Self.change(h.replicaRoot, from: tree, to: next) }
            let story = "case \(number) (materialized \(chosen)\(byHand ? ", the change made here by hand" : ""))\n  from \(Self.describe(tree))\n  to   \(Self.describe(next))"
            do {
                let report = try h.replica().sync(incoming: byHand)
                var problems = try Self.differences(h, next)
                if !report.keptLocal.isEmpty { problems.append("kept: \(report.keptLocal.map { "\($0.path): \($0.reason)" })") }
                if !report.localChanges.isEmpty { problems.append("pushed: \(report.localChanges)") }
                if !problems.isEmpty { failures.append("\(story)\n  " + problems.joined(separator: "\n  ")) }
            } catch {
                failures.append("\(story)\n  the sync threw: \(error)")
            }
            tree = next
            // A failed case leaves the replica apart; the next starts over.
            if failures.count > 0 { break }
        }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
    }

    /// The sync asks for the new content of materialized files before its
    /// diff, from a walk of the two trees along their paths that reads only
    /// the subtrees that changed: over random pairs of trees and random sets
    /// of paths (files, folders, names in neither tree), it must find what
    /// looking up each path in both trees finds.
    @Test func treeGuessFindsWhatEachPathsLookupFinds() throws {
        var random = SeededRandom(seed: 20_261_130)
        let h = try SyncHarness(files: ["a": "start\n"])
        let repository = try Repository(openingAt: h.remote)
        var tree: Tree = ["a": .file("start\n", executable: false)]
        var treeID = try #require(ObjectID(hex: try h.git(["rev-parse", "HEAD^{tree}"], in: h.work)))
        var written = 0
        // Names with a byte below '/' ('-', '.') sort between a name and
        // the paths below it: `d`, `d-x`, `d.y/z`, `d/x`.
        let names = Self.names + ["d-x", "d.y/z"]
        let candidates = names + ["d/x/q", "e/z/q", "z", "d.y"]
        func looked(_ paths: [RepoPath], from old: ObjectID?, to new: ObjectID) throws -> [ObjectID] {
            try paths.compactMap { path in
                guard let entry = try TreeLookup(repository: repository, tree: new).entry(at: path), entry.mode.isFile else { return nil }
                let before = try old.flatMap { try TreeLookup(repository: repository, tree: $0).entry(at: path) }
                return before?.id == entry.id ? nil : entry.id
            }.sorted { $0 < $1 }
        }
        for number in 0..<40 {
            let next = Self.change(tree, &random, written: &written, names: names)
            if next == tree { continue }
            try h.push("case \(number)") { work in try Self.write(next, into: work) }
            let nextID = try #require(ObjectID(hex: try h.git(["rev-parse", "HEAD^{tree}"], in: h.work)))
            let story = "case \(number)\n  from \(Self.describe(tree))\n  to   \(Self.describe(next))"
            for _ in 0..<4 {
                let chosen: [String] = candidates.filter { _ in random.next(2) == 0 }
                let paths: [RepoPath] = chosen.map { RepoPath($0) }.sorted { $0.bytes.lexicographicallyPrecedes($1.bytes) }
                for old: ObjectID? in [treeID, nil] {
                    let walked = try SyncContentFetch.changedFiles(at: paths, from: old, to: nextID, in: repository).sorted { $0 < $1 }
                    #expect(walked == (try looked(paths, from: old, to: nextID)), "\(story)\n  paths \(paths), from \(old == nil ? "no tree" : "the last")")
                }
            }
            (tree, treeID) = (next, nextID)
        }
    }

    /// The sync's requests for new content go out side by side, some for
    /// blobs it only guesses it needs: one that fails must not fail the
    /// content the others brought, and a needed blob whose request failed
    /// is asked for again, that request's error being the one given.
    @Test func aFailedRequestForContentNobodyNeedsIsNoError() throws {
        let h = try SyncHarness(files: ["a.txt": "alpha\n", "b.txt": "beta\n"])
        let replica = try h.replica()
        let a = try #require(ObjectID(hex: try h.git(["rev-parse", "HEAD:a.txt"], in: h.work)))
        let b = try #require(ObjectID(hex: try h.git(["rev-parse", "HEAD:b.txt"], in: h.work)))
        let absent = try #require(ObjectID(hex: String(repeating: "ab", count: 20)))

        let fetch = SyncContentFetch(replica: replica, token: "test-one")
        fetch.request([absent])
        fetch.request([a])
        try fetch.complete(needing: [a, b])
        #expect(fetch.requested == [a, b], "the failed request's blob is no longer counted as asked for")
        let packs = try FileManager.default.contentsOfDirectory(atPath: fetch.quarantine + "/pack").filter { $0.hasSuffix(".pack") }
        #expect(packs.count == 2, "a's request and the last one, for b: \(packs)")

        let again = SyncContentFetch(replica: replica, token: "test-two")
        again.request([absent, b])
        #expect(throws: GitCommandError.self) { try again.complete(needing: [absent]) }
        replica.removeFetchQuarantines()
    }

    /// The remote's next tree: one to four changes of `tree`.
    static func change(_ tree: Tree, _ random: inout SeededRandom, written: inout Int, names: [String] = names) -> Tree {
        var files = tree
        func content() -> String {
            written += 1
            return "written \(written)\n"
        }
        func fits(_ path: String) -> Bool {
            guard files[path] == nil else { return false }
            let folder = path.split(separator: "/").dropLast().joined(separator: "/")
            if !folder.isEmpty, files[folder] != nil { return false }
            return !files.keys.contains { $0.hasPrefix(path + "/") }
        }
        for _ in 0..<(1 + random.next(4)) {
            let present = files.keys.sorted()
            let free = names.filter(fits)
            switch random.next(8) {
            case 0 where !free.isEmpty:
                let name = free[random.next(free.count)]
                files[name] = random.next(4) == 0 ? .symlink(random.next(2) == 0 ? "a" : "d/x") : .file(content(), executable: false)
            case 1 where !present.isEmpty:
                let name = present[random.next(present.count)]
                if case .file(_, let executable) = files[name] { files[name] = .file(content(), executable: executable) }
            case 2 where !present.isEmpty:
                let name = present[random.next(present.count)]
                if case .file(let text, let executable) = files[name] { files[name] = .file(text, executable: !executable) }
            case 3 where !present.isEmpty:
                files[present[random.next(present.count)]] = nil
            case 4 where !present.isEmpty:
                // A rename (same content: an exact rename to git).
                let name = present[random.next(present.count)]
                guard let moved = files.removeValue(forKey: name) else { break }
                let targets = names.filter { $0 != name && fits($0) }
                if targets.isEmpty { files[name] = moved; break }
                files[targets[random.next(targets.count)]] = moved
            case 5, 6:
                // Two names swap what they hold, whatever each is (a file, a
                // symlink, a folder): moves that land where each other leave.
                let tops = Set(present.map { String($0.split(separator: "/")[0]) }).sorted()
                guard tops.count >= 2 else { break }
                let first = tops[random.next(tops.count)]
                let second = tops.filter { $0 != first }[random.next(tops.count - 1)]
                var swapped: Tree = [:]
                for (path, item) in files {
                    let top = String(path.split(separator: "/")[0])
                    let rest = path.dropFirst(top.count)
                    swapped[top == first ? second + rest : top == second ? first + rest : path] = item
                }
                files = swapped
            case 7:
                // A folder moved whole, `d` to `e` or back.
                let (from, to) = random.next(2) == 0 ? ("d/", "e/") : ("e/", "d/")
                let inside = files.keys.filter { $0.hasPrefix(from) }
                guard !inside.isEmpty, !files.keys.contains(where: { $0.hasPrefix(to) }), files[String(to.dropLast())] == nil else { break }
                for name in inside {
                    if let moved = files.removeValue(forKey: name) { files[to + name.dropFirst(from.count)] = moved }
                }
            default: break
            }
        }
        return files
    }

    /// Makes the work tree (or the replica) hold `tree` exactly (`.git` and
    /// `.fprep` aside).
    static func write(_ tree: Tree, into work: String) throws {
        for name in try FileManager.default.contentsOfDirectory(atPath: work) where name != ".git" && name != ".fprep" {
            try FileManager.default.removeItem(atPath: work + "/" + name)
        }
        for (path, item) in tree {
            let full = work + "/" + path
            try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try place(item, at: full)
        }
    }

    /// Writes `item` as a new file or symlink at `full`.
    static func place(_ item: Item, at full: String) throws {
        switch item {
        case .file(let text, let executable):
            try Data(text.utf8).write(to: URL(fileURLWithPath: full))
            try FileManager.default.setAttributes([.posixPermissions: executable ? 0o755 : 0o644], ofItemAtPath: full)
        case .symlink(let target):
            try FileManager.default.createSymbolicLink(atPath: full, withDestinationPath: target)
        }
    }

    /// Makes the replica hold `next` where it holds `tree`, as a user would:
    /// what differs goes and is written anew, what is the same (a placeholder
    /// most often) is left alone.
    static func change(_ root: String, from tree: Tree, to next: Tree) throws {
        let manager = FileManager.default
        for (path, item) in tree where next[path] != item {
            try manager.removeItem(atPath: root + "/" + path)
        }
        for (path, item) in next.sorted(by: { $0.key < $1.key }) where tree[path] != item {
            let full = root + "/" + path
            // A folder of the old tree where a file goes: its items went above.
            var isFolder: ObjCBool = false
            if manager.fileExists(atPath: full, isDirectory: &isFolder), isFolder.boolValue { try manager.removeItem(atPath: full) }
            let parent = (full as NSString).deletingLastPathComponent
            if let kind = try? manager.attributesOfItem(atPath: parent)[.type] as? FileAttributeType, kind != .typeDirectory {
                try manager.removeItem(atPath: parent)
            }
            try manager.createDirectory(atPath: parent, withIntermediateDirectories: true)
            try place(item, at: full)
        }
    }

    /// How the replica differs from `tree`: each item's kind, mode and
    /// content (a placeholder naming its blob, or the bytes), nothing else
    /// on disk, and nothing the replica would push.
    static func differences(_ h: SyncHarness, _ tree: Tree) throws -> [String] {
        var problems: [String] = []
        let root = h.replicaRoot
        var onDisk = Set<String>()
        func visit(_ relative: String) {
            let full = relative.isEmpty ? root : root + "/" + relative
            for name in (try? FileManager.default.contentsOfDirectory(atPath: full)) ?? [] {
                if relative.isEmpty, name == ".git" || name == ".fprep" { continue }
                let path = relative.isEmpty ? name : relative + "/" + name
                if h.stat(path)?.isDirectory == true { visit(path) } else { onDisk.insert(path) }
            }
        }
        visit("")
        let extra = onDisk.subtracting(tree.keys).sorted(), missing = Set(tree.keys).subtracting(onDisk).sorted()
        if !extra.isEmpty || !missing.isEmpty { problems.append("on disk, not in the remote: \(extra); missing: \(missing)") }
        let folder = try FolderHandle(root: root)
        for (path, item) in tree.sorted(by: { $0.key < $1.key }) {
            guard let stat = h.stat(path) else { continue }
            switch item {
            case .symlink(let target):
                let link = try? FileManager.default.destinationOfSymbolicLink(atPath: root + "/" + path)
                if !stat.isSymlink || link != target { problems.append("\(path): not the symlink to \(target)") }
            case .file(let text, let executable):
                guard stat.isRegular else {
                    problems.append("\(path): not a file")
                    continue
                }
                if (stat.mode & 0o100 != 0) != executable { problems.append("\(path): executable bit \(!executable)") }
                let id = try Array(text.utf8).withUnsafeBytes { try ObjectDatabase.blobID(of: $0) }
                if ContentOperations.holdsNoData(folder, RepoPath(path), stat) {
                    if ContentOperations.placeholderBlob(folder, RepoPath(path)) != id { problems.append("\(path): a placeholder of another blob") }
                } else if (try? String(contentsOfFile: root + "/" + path, encoding: .utf8)) != text {
                    problems.append("\(path): holds other bytes")
                }
            }
        }
        let changes = try h.replica().status().changes
        if !changes.isEmpty { problems.append("local changes: \(changes.map { "\($0.kind) \($0.path)" })") }
        return problems
    }

    static func describe(_ tree: Tree) -> String {
        tree.keys.sorted().map { path in
            switch tree[path] {
            case .file(let text, let executable): "\(path)=\(text.dropFirst(8).dropLast())\(executable ? "+x" : "")"
            case .symlink(let target): "\(path)->\(target)"
            case nil: path
            }
        }.joined(separator: " ")
    }
}
