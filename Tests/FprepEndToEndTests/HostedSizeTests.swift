import Foundation
import FprepTestSupport
import Glibc
import Testing

// Sizes on a remote without fprep's post-receive hook (a hosted remote, a
// plain bare repository, a hook that cannot find fprep): the devices' own
// pushes publish the sizes of what they push, and where a size is unknown
// fprep says so instead of showing 0 bytes.

@Suite("sizes without the server hook", .serialized)
struct HostedSizeTests {
    static let emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

    /// An fprep remote whose hook is gone, and two replicas of it.
    static func hooklessRemote(_ box: Sandbox, nodes: [String: Node] = ["a.txt": .text("hello\n")]) throws -> (remote: String, a: String, b: String) {
        let remote = try box.makeRemote(nodes: nodes).path
        try FileManager.default.removeItem(atPath: remote + "/hooks/post-receive")
        let a = box.at("a"), b = box.at("b")
        _ = try box.clone(remote, a)
        _ = try box.clone(remote, b)
        return (remote, a, b)
    }

    /// Every `<id> <size>` the remote's size manifest lists, in chain order (newest first).
    static func manifestLines(_ box: Sandbox, _ remote: String) throws -> [String] {
        try box.gitOK(["log", "--format=%B", "refs/fprep/sizes"], cwd: remote).split(separator: "\n").compactMap { line in
            let words = line.split(separator: " ")
            return words.count == 3 && words[0].count == 40 ? "\(words[0]) \(words[1])" : nil
        }
    }

    static func blobID(_ box: Sandbox, _ data: Data) throws -> String {
        try box.gitOK(["hash-object", "--stdin"], stdin: data)
    }

    static func size(_ path: String) -> Int64? { lstatInfo(path).map { Int64($0.size) } }

    @Test("a placeholder moved out of a folder that goes with it is pushed without fetching its content, its size published")
    func movedPlaceholderPushesWithoutContent() throws {
        try withSandbox { box in
            let (remote, _, b) = try Self.hooklessRemote(box, nodes: standardTree)
            let before = packFiles(b)
            // The folder goes with them: the files' old paths are in no
            // tree the new commit has.
            try box.sh("mv docs/deep/nested.txt top.bin && mv docs/deep/tool tool && rmdir docs/deep", cwd: b)
            let synced = try box.fprepOK(["sync"], cwd: b)
            #expect(!synced.stdout.contains("note:"), "\(synced.stdout)")
            #expect(packFiles(b) == before, "a move fetched content: \(packFiles(b).subtracting(before))")
            let tree = try box.remoteTree(remote)
            #expect(tree["top.bin"] != nil && tree["tool"] != nil && tree["docs/deep/nested.txt"] == nil, "\(tree)")
            #expect(try Self.manifestLines(box, remote).contains { $0.hasPrefix(tree["top.bin"]?.id ?? "-") }, "size not published")
        }
    }

    @Test("a push lists the sizes of what it adds in the remote's size manifest; the other device's placeholders have them")
    func pushPublishesSizes() throws {
        try withSandbox { box in
            let (remote, a, b) = try Self.hooklessRemote(box)
            let forty = pseudoRandomBytes(40, seed: 7), nested = pseudoRandomBytes(1234, seed: 8)
            try forty.write(to: URL(fileURLWithPath: b + "/f.bin"))
            try FileManager.default.createDirectory(atPath: b + "/d", withIntermediateDirectories: true)
            try nested.write(to: URL(fileURLWithPath: b + "/d/g.bin"))
            let synced = try box.fprepOK(["sync"], cwd: b)
            #expect(!synced.stdout.contains("note:"), "\(synced)")
            let lines = try Self.manifestLines(box, remote)
            #expect(lines.contains("\(try Self.blobID(box, forty)) 40"), "\(lines)")
            #expect(lines.contains("\(try Self.blobID(box, nested)) 1234"), "\(lines)")

            try box.fprepOK(["sync"], cwd: a)
            #expect(Self.size(a + "/f.bin") == 40)
            #expect(Self.size(a + "/d/g.bin") == 1234)
            #expect(xattrString(a + "/f.bin", "user.fprep.state") == "dataless")
            let item = try box.fprepJSON(["ls", "f.bin"], cwd: a).objects("items").first
            #expect(item?.int("size") == 40)
            // And the content is what B wrote.
            try box.fprepOK(["materialize", "f.bin"], cwd: a)
            #expect(contents(a + "/f.bin") == forty)
        }
    }

    @Test("a manifest another push moved between this device's fetch and its push: the branch lands, both pushes' lines stay")
    func manifestMovedMeanwhile() throws {
        try withSandbox { box in
            let (remote, a, b) = try Self.hooklessRemote(box)
            // Another device's manifest line lands just before B's push
            // (B's lease on the tip it fetched is then stale).
            let other = String(repeating: "ab", count: 20)
            let marker = box.at("moved")
            let wrapper = box.at("git-moving-manifest")
            try writeExecutable("""
                #!/bin/sh
                case "$*" in
                *" push "*refs/fprep/sizes*)
                    if [ ! -e '\(marker)' ]; then
                        : > '\(marker)'
                        c=$(printf 'fprep sizes v1\\n\\n\(other) 7 1700000000\\n' | '\(Binaries.git)' -C '\(remote)' commit-tree -p refs/fprep/sizes \(Self.emptyTree)) || exit 1
                        '\(Binaries.git)' -C '\(remote)' update-ref refs/fprep/sizes "$c" || exit 1
                    fi;;
                esac
                exec '\(Binaries.git)' "$@"
                """, to: wrapper)
            let forty = pseudoRandomBytes(40, seed: 9)
            try forty.write(to: URL(fileURLWithPath: b + "/f.bin"))
            let synced = try box.fprepOK(["sync"], cwd: b, env: ["FPREP_GIT": wrapper])
            #expect(FileManager.default.fileExists(atPath: marker), "the push never carried the manifest")
            #expect(!synced.stdout.contains("note:"), "\(synced)")
            #expect(try box.gitOK(["rev-parse", "refs/heads/main"], cwd: remote) == box.gitOK(["rev-parse", "HEAD"], cwd: b))
            let lines = try Self.manifestLines(box, remote)
            #expect(lines.contains("\(other) 7"), "the other push's line was lost: \(lines)")
            #expect(lines.contains("\(try Self.blobID(box, forty)) 40"), "\(lines)")
            try box.fprepOK(["sync"], cwd: a)
            #expect(Self.size(a + "/f.bin") == 40)
        }
    }

    @Test("a remote that refuses fprep's refs still takes the branch; the sync says the sizes were not published")
    func refusedManifestNeverFailsThePush() throws {
        try withSandbox { box in
            let (remote, _, b) = try Self.hooklessRemote(box)
            let hook = remote + "/hooks/update"
            try writeExecutable("""
                #!/bin/sh
                case "$1" in refs/fprep/*) echo "refs/fprep/* is not allowed here" >&2; exit 1;; esac
                exit 0
                """, to: hook)
            let before = try Self.manifestLines(box, remote)
            try pseudoRandomBytes(40, seed: 10).write(to: URL(fileURLWithPath: b + "/f.bin"))
            let synced = try box.fprepOK(["sync"], cwd: b)
            #expect(synced.stdout.contains("pushed "), "\(synced)")
            #expect(synced.stdout.contains("note: the remote did not take the sizes of 1 pushed file"), "\(synced)")
            #expect(try box.gitOK(["rev-parse", "refs/heads/main"], cwd: remote) == box.gitOK(["rev-parse", "HEAD"], cwd: b))
            #expect(try Self.manifestLines(box, remote) == before)
            // Nothing waits: the next sync is up to date.
            #expect(try box.fprepOK(["sync"], cwd: b).stdout.contains("up to date"))
        }
    }

    // MARK: - unknown sizes

    /// Pushes `files` to `remote` with plain git (a device without fprep):
    /// the size manifest does not list them. Returns the old and new tips.
    static func pushWithPlainGit(_ box: Sandbox, _ remote: String, _ files: [String: Data]) throws -> (old: String, new: String) {
        let work = box.at("plain-\(UUID().uuidString.prefix(8))")
        try box.gitOK(["clone", "-q", remote, work])
        for (name, data) in files { try data.write(to: URL(fileURLWithPath: work + "/" + name)) }
        try box.gitOK(["add", "-A"], cwd: work)
        try box.gitOK(["commit", "-q", "-m", "plain git"], cwd: work)
        let old = try box.gitOK(["rev-parse", "HEAD~1"], cwd: work)
        try box.gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)
        return (old, try box.gitOK(["rev-parse", "HEAD"], cwd: work))
    }

    /// Lists the sizes of what came between `old` and `new` in the remote's
    /// manifest, as the hook (or `install-hooks`, or a mirror) would.
    static func publishSizes(_ box: Sandbox, _ remote: String, _ tips: (old: String, new: String)) throws {
        let hook = try box.fprep(["hook", "post-receive"], cwd: remote, env: ["GIT_DIR": remote],
                                 stdin: Data("\(tips.old) \(tips.new) refs/heads/main\n".utf8))
        #expect(hook.status == 0, "\(hook)")
    }

    @Test("a placeholder of unknown size says so (ls '?', --json null, status says how to fix it); a later manifest gives it its size at the next sync")
    func unknownSizeIsSaidThenLearned() throws {
        try withSandbox { box in
            let (remote, a, _) = try Self.hooklessRemote(box)
            let forty = pseudoRandomBytes(40, seed: 11)
            let tips = try Self.pushWithPlainGit(box, remote, ["f.bin": forty])
            try box.fprepOK(["sync"], cwd: a)
            #expect(Self.size(a + "/f.bin") == 0, "no honest size to give it on disk")
            #expect(xattrString(a + "/f.bin", "user.fprep.state") == "dataless")

            let listing = try box.fprepOK(["ls"], cwd: a).stdout
            let line = listing.split(separator: "\n").first { $0.hasSuffix("f.bin") }.map(String.init) ?? ""
            #expect(line.split(separator: " ").contains("?"), "\(listing)")
            #expect(listing.split(separator: "\n").first { $0.hasSuffix("a.txt") }?.split(separator: " ").contains("6") == true, "\(listing)")
            let page = try box.fprepOK(["ls", "--json"], cwd: a)
            let items = try page.json().objects("items")
            let item = items.first { $0.string("filename") == "f.bin" }
            #expect(item?.keys.contains("size") == true && item?["size"] is NSNull, "\(page.stdout)")
            #expect(items.first { $0.string("filename") == "a.txt" }?.int("size") == 6)

            let status = try box.fprepOK(["status"], cwd: a).stdout
            #expect(status.contains("size unknown for 1 file"), "\(status)")
            #expect(status.contains("fprep install-hooks") && !status.contains("init-remote"), "\(status)")
            #expect(try box.fprepJSON(["status"], cwd: a).int("sizeUnknown") == 1)
            // The unknown size is no local change: nothing to commit.
            #expect(try box.fprepJSON(["status"], cwd: a).objects("changes").isEmpty)

            try Self.publishSizes(box, remote, tips)
            try box.fprepOK(["sync"], cwd: a)
            #expect(Self.size(a + "/f.bin") == 40)
            #expect(lstatInfo(a + "/f.bin")?.blocks == 0)
            #expect(xattrString(a + "/f.bin", "user.fprep.state") == "dataless")
            #expect(try box.fprepJSON(["ls", "f.bin"], cwd: a).objects("items").first?.int("size") == 40)
            let after = try box.fprepJSON(["status"], cwd: a)
            #expect(after.int("sizeUnknown") == 0)
            #expect(after.objects("changes").isEmpty, "\(after)")
            #expect(after.int("logicalSize") == 46)
            try box.fprepOK(["materialize", "f.bin"], cwd: a)
            #expect(contents(a + "/f.bin") == forty)
        }
    }

    @Test("bytes written into a placeholder of unknown size are kept as a conflict copy when its size is learned; the name gets its real size")
    func writtenIntoUnknownSizeIsKept() throws {
        try withSandbox { box in
            let (remote, a, _) = try Self.hooklessRemote(box)
            let fifty = pseudoRandomBytes(50, seed: 12)
            let tips = try Self.pushWithPlainGit(box, remote, ["w.bin": fifty])
            try box.fprepOK(["sync"], cwd: a)
            #expect(Self.size(a + "/w.bin") == 0)
            // A program appends to what reads as an empty file.
            let handle = try #require(FileHandle(forWritingAtPath: a + "/w.bin"))
            handle.seekToEndOfFile()
            handle.write(Data("the user's line\n".utf8))
            handle.closeFile()

            try Self.publishSizes(box, remote, tips)
            let synced = try box.fprepOK(["sync"], cwd: a)
            let copies = try FileManager.default.contentsOfDirectory(atPath: a).filter { $0.hasPrefix("w (conflict ") }
            #expect(copies.count == 1, "\(synced)")
            #expect(copies.first.flatMap { contents(a + "/" + $0) } == Data("the user's line\n".utf8))
            #expect(Self.size(a + "/w.bin") == 50)
            #expect(xattrString(a + "/w.bin", "user.fprep.state") == "dataless")
            #expect(try box.fprepJSON(["status"], cwd: a).objects("changes").isEmpty)
            // The remote's content stays what plain git pushed; the copy went up beside it.
            try box.fprepOK(["materialize", "w.bin"], cwd: a)
            #expect(contents(a + "/w.bin") == fifty)
            #expect(try box.gitOK(["ls-tree", "--name-only", "main"], cwd: remote).contains("w (conflict "))
        }
    }

    @Test("repair gives placeholders the sizes a fetched manifest lists; killed at any step, the next command loses nothing and commits no zeros",
          arguments: Array(0...8))
    func repairLaysOutLearnedSizes(crashAt: Int) throws {
        try withSandbox { box in
            let (remote, a, _) = try Self.hooklessRemote(box)
            let files = ["f.bin": pseudoRandomBytes(40, seed: 13), "g.bin": pseudoRandomBytes(70, seed: 14)]
            let tips = try Self.pushWithPlainGit(box, remote, files)
            try box.fprepOK(["sync"], cwd: a)
            try Self.publishSizes(box, remote, tips)
            // The manifest arrives with a plain fetch, and repair reads it.
            try box.gitOK(["fetch", "-q", "--filter=blob:none", "origin", "+refs/fprep/*:refs/remotes/origin-fprep/*"], cwd: a)
            let repair = try box.fprep(["repair", a], env: crashAt > 0 ? ["FPREP_CRASH_AT": String(crashAt)] : [:])
            if crashAt > 0 { #expect(repair.killedBySignal == SIGKILL, "\(repair)") }
            if crashAt == 0 {
                #expect(repair.status == 0, "\(repair)")
                #expect(repair.stdout.contains("2 placeholders got the size"), "\(repair)")
            }
            // Whatever the kill left, the next commands settle it: no change
            // to commit, no conflict copy of zeros, and the sizes in place.
            let status = try box.fprepJSON(["status"], cwd: a)
            #expect(status.objects("changes").isEmpty, "\(status) after \(repair)")
            try box.fprepOK(["sync"], cwd: a)
            #expect(try FileManager.default.contentsOfDirectory(atPath: a).filter { $0.contains("conflict") }.isEmpty)
            #expect(Self.size(a + "/f.bin") == 40)
            #expect(Self.size(a + "/g.bin") == 70)
            #expect(try box.gitOK(["rev-parse", "refs/heads/main"], cwd: remote) == tips.new, "nothing was pushed")
            try box.fprepOK(["materialize", "f.bin", "g.bin"], cwd: a)
            #expect(contents(a + "/f.bin") == files["f.bin"])
            #expect(contents(a + "/g.bin") == files["g.bin"])
        }
    }

    // MARK: - servers without partial clone

    @Test("a server that does not allow partial clone is found as the clone starts: clone stops, refuses and leaves nothing unless --full, which brings every size",
          arguments: ["git", "file", "git protocol v0", "git with an askpass program (asked before the clone)"])
    func serverWithoutPartialClone(transport: String) throws {
        try withSandbox { box in
            // Protocol v0 advertises capabilities after the first ref, v2 in its own lines.
            if transport.hasSuffix("v0") { try "[protocol]\n\tversion = 0\n".write(toFile: box.home + "/.gitconfig", atomically: true, encoding: .utf8) }
            let remote = try box.makeRemote(nodes: ["a.txt": .text("hello\n"), "d/b.bin": .file(pseudoRandomBytes(5000, seed: 15))])
            try box.gitOK(["config", "uploadpack.allowFilter", "false"], cwd: remote.path)
            let url = transport.hasPrefix("git") ? try box.startDaemon(base: box.path).url("remote.git") : "file://" + remote.path
            let replica = box.at("replica")
            // With a program that may ask for a password, the server is
            // asked before the clone, never beside it (two questions at once).
            let asks = transport.contains("askpass")
            let gitTrace = box.at("git-trace.txt")
            let refused = try box.fprep(["clone", url, replica], env: asks ? ["GIT_ASKPASS": "/bin/true", "GIT_TRACE": gitTrace] : [:])
            expectOneLineError(refused, mentioning: ["does not allow partial clone", "every file", "--full", "install-hooks"])
            if asks {
                let ran = (try? String(contentsOfFile: gitTrace, encoding: .utf8)) ?? ""
                #expect(ran.contains("ls-remote") && !ran.contains("git clone"), "git ran:\n\(ran)")
            }
            #expect(!exists(replica), "nothing is left behind")

            _ = try box.clone(url, replica, extra: ["--full"])
            #expect(Self.size(replica + "/a.txt") == 6)
            #expect(Self.size(replica + "/d/b.bin") == 5000)
            #expect(try box.fprepJSON(["status"], cwd: replica).int("sizeUnknown") == 0)
            try box.fprepOK(["materialize", "d/b.bin"], cwd: replica)
            #expect(contents(replica + "/d/b.bin") == pseudoRandomBytes(5000, seed: 15))
        }
    }
}
