import Foundation
import Testing

// Pins ("always keep on this device"): pinned files are materialized and
// stay so, whatever syncs bring, and evict leaves them alone.

@Suite("pins")
struct PinTests {
    private func files(_ box: Sandbox, _ replica: String, _ folder: String) -> [String: String] {
        var result: [String: String] = [:]
        for item in (try? box.fprepJSON(["ls", folder], cwd: replica).objects("items")) ?? [] where item.string("kind") == "file" {
            result[item.string("filename") ?? ""] = item.string("state")
        }
        return result
    }

    @Test("a pinned folder is materialized, shown by ls, status and pin; evict refuses it (exit 2) until unpinned")
    func pinKeepsContent() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let pinned = try box.fprepJSON(["pin", "docs"], cwd: replica)
            #expect(pinned.strings("pinned") == ["docs"])
            #expect(contents(replica + "/docs/deep/nested.txt") == remote.files["docs/deep/nested.txt"])
            #expect(contents(replica + "/docs/readme.md") == remote.files["docs/readme.md"])
            #expect(files(box, replica, ".")["a.txt"] == "dataless", "what is not pinned stays dataless")

            let listing = try box.fprepJSON(["ls", "docs"], cwd: replica).objects("items")
            #expect(listing.allSatisfy { ($0["pinned"] as? Bool) == true }, "\(listing)")
            #expect(try box.fprepJSON(["ls"], cwd: replica).objects("items").first { $0.string("filename") == "a.txt" }?["pinned"] == nil)
            #expect(try box.fprepJSON(["status"], cwd: replica).strings("pins") == ["docs"])
            #expect(try box.fprepJSON(["pin"], cwd: replica).strings("pins") == ["docs"])
            #expect(try box.fprepJSON(["pin", "docs"], cwd: replica).strings("alreadyPinned") == ["docs"])

            let evict = try box.fprep(["evict", "docs/readme.md"], cwd: replica)
            #expect(evict.status == 2 && evict.stderr.contains("pinned ('docs')"), "\(evict)")
            #expect(contents(replica + "/docs/readme.md") == remote.files["docs/readme.md"])
            let inner = try box.fprep(["unpin", "docs/readme.md"], cwd: replica)
            #expect(inner.status == 2 && inner.stderr.hasPrefix("fprep: cannot unpin 'docs/readme.md': not pinned itself: it is pinned through 'docs'"), "\(inner)")

            try box.fprepOK(["unpin", "docs"], cwd: replica)
            #expect(try box.fprepJSON(["status"], cwd: replica).strings("pins").isEmpty)
            try box.fprepOK(["evict", "docs"], cwd: replica)
            #expect(files(box, replica, "docs")["readme.md"] == "dataless")
        }
    }

    @Test("what a sync brings under a pin arrives materialized, and a pin follows its folder's move on the remote")
    func syncKeepsPinsMaterialized() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica"), other = box.at("other")
            _ = try box.clone(remote.path, replica)
            _ = try box.clone(remote.path, other)
            try box.fprepOK(["pin", "docs", "a.txt"], cwd: replica)

            try box.sh("mkdir -p docs/new && echo added > docs/new/one.txt && echo outside > outside.txt", cwd: other)
            try box.fprepOK(["materialize", "a.txt"], cwd: other)
            try box.sh("echo 'changed elsewhere' > a.txt", cwd: other)
            try box.fprepOK(["sync"], cwd: other)
            let report = try box.fprepJSON(["sync"], cwd: replica)
            #expect(report.strings("pinnedMaterialized") == ["docs/new/one.txt"], "\(report)")
            #expect(contents(replica + "/docs/new/one.txt") == Data("added\n".utf8))
            #expect(contents(replica + "/a.txt") == Data("changed elsewhere\n".utf8), "a pinned file changed elsewhere gets its new content")
            #expect(files(box, replica, ".")["outside.txt"] == "dataless")

            try box.sh("mv docs papers", cwd: other)
            try box.fprepOK(["sync"], cwd: other)
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try box.fprepJSON(["status"], cwd: replica).strings("pins") == ["a.txt", "papers"])
            #expect(contents(replica + "/papers/new/one.txt") == Data("added\n".utf8))
            #expect(files(box, replica, "papers/deep").values.allSatisfy { $0 == "materialized" })
            // Pins belong to the device: the other one has none.
            #expect(try box.fprepJSON(["status"], cwd: other).strings("pins").isEmpty)
        }
    }

    @Test("a pin made offline is kept: pin says why its content could not come (exit 1), and the next sync brings it")
    func pinOffline() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let away = box.at("remote.away")
            try FileManager.default.moveItem(atPath: remote.path, toPath: away)
            let offline = try box.fprep(["pin", "docs"], cwd: replica)
            #expect(offline.status == 1, "\(offline)")
            #expect(offline.stderr.hasPrefix("fprep: pinned 'docs', but its content could not be brought:")
                    && offline.stderr.contains("'fprep sync' brings it later") && offline.stderr.split(separator: "\n").count == 1, "\(offline.stderr)")
            #expect(try box.fprepJSON(["status"], cwd: replica).strings("pins") == ["docs"])
            try FileManager.default.moveItem(atPath: away, toPath: remote.path)
            let report = try box.fprepJSON(["sync"], cwd: replica)
            #expect(Set(report.strings("pinnedMaterialized")) == ["docs/readme.md", "docs/deep/nested.txt", "docs/deep/tool"], "\(report)")
            #expect(contents(replica + "/docs/deep/tool") == remote.files["docs/deep/tool"])
        }
    }

    @Test("pinning what the replica does not have fails in one line and pins nothing")
    func pinUnknownPath() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let result = try box.fprep(["pin", "no-such"], cwd: replica)
            #expect(result.status != 0 && result.stderr.hasPrefix("fprep: ") && result.stderr.split(separator: "\n").count == 1, "\(result)")
            #expect(try box.fprepJSON(["status"], cwd: replica).strings("pins").isEmpty)
            let unpin = try box.fprep(["unpin", "a.txt"], cwd: replica)
            #expect(unpin.status == 2 && unpin.stderr == "fprep: cannot unpin 'a.txt': not pinned\n", "\(unpin)")
        }
    }
}
