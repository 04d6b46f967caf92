import Foundation
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
            try """
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
                """.write(toFile: wrapper, atomically: true, encoding: .utf8)
            chmod(wrapper, 0o755)
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
            try """
                #!/bin/sh
                case "$1" in refs/fprep/*) echo "refs/fprep/* is not allowed here" >&2; exit 1;; esac
                exit 0
                """.write(toFile: hook, atomically: true, encoding: .utf8)
            chmod(hook, 0o755)
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
}
