import Foundation
import Glibc
import Testing

@Suite("local-change scan")
struct ScanTests {
    /// The paths `fprep status --json` lists, by kind.
    func changes(_ box: Sandbox, _ replica: String) throws -> [String: Set<String>] {
        let status = try box.fprepJSON(["status"], cwd: replica)
        var result: [String: Set<String>] = [:]
        for change in status.objects("changes") {
            if let kind = change.string("kind"), let path = change.string("path") { result[kind, default: []].insert(path) }
        }
        return result
    }

    @Test("a folder's names are read again only when it changed or the index names other files in it")
    func untrackedCacheFollowsFoldersAndIndex() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try Data("new\n".utf8).write(to: URL(fileURLWithPath: replica + "/docs/new.txt"))
            try FileManager.default.createDirectory(atPath: replica + "/fresh/deep", withIntermediateDirectories: true)
            try Data("deep\n".utf8).write(to: URL(fileURLWithPath: replica + "/fresh/deep/file.txt"))
            // Folders changed in the last second are never cached: wait them out.
            sleepSeconds(2.2)
            let first = try changes(box, replica)
            #expect(first == ["added": ["docs/new.txt", "fresh/deep/file.txt"]], "\(first)")
            #expect(FileManager.default.fileExists(atPath: replica + "/.fprep/untracked-cache"))
            // Nothing changed: the cached answer is the same answer.
            #expect(try changes(box, replica) == first)

            // The index stops naming a file that stays on disk; its folder did
            // not change: the remote deletes a file this device edited, and
            // an incoming sync (no scan) keeps the edit as a file of its own.
            try box.fprepOK(["materialize", "docs/readme.md"], cwd: replica)
            try Data("edited here\n".utf8).write(to: URL(fileURLWithPath: replica + "/docs/readme.md"))
            let work = box.at("work")
            try box.gitOK(["clone", "-q", remote.path, work])
            try box.sh("git rm -q docs/readme.md && git commit -qm 'readme goes' && git push -q origin HEAD:main", cwd: work)
            try box.fprepOK(["sync", "--incoming"], cwd: replica)
            let untracked = try changes(box, replica)
            #expect(untracked["added"]?.contains("docs/readme.md") == true, "\(untracked)")

            // A file removed and one added in a cached folder.
            try FileManager.default.removeItem(atPath: replica + "/docs/new.txt")
            try Data("b\n".utf8).write(to: URL(fileURLWithPath: replica + "/fresh/deep/second.txt"))
            let after = try changes(box, replica)
            #expect(after["added"]?.contains("docs/new.txt") == false, "\(after)")
            #expect(after["added"]?.contains("fresh/deep/second.txt") == true, "\(after)")
        }
    }

    @Test("the scan sees edits, deletions, a folder put where a file was, and a symlink put where a folder was")
    func scanSeesEveryKindOfChange() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            _ = try box.fprepOK(["materialize", "a.txt"], cwd: replica)
            try Data("edited\n".utf8).write(to: URL(fileURLWithPath: replica + "/a.txt"))
            try FileManager.default.removeItem(atPath: replica + "/bin.dat")
            try FileManager.default.removeItem(atPath: replica + "/docs/readme.md")
            try FileManager.default.createDirectory(atPath: replica + "/docs/readme.md", withIntermediateDirectories: false)
            try Data("inside\n".utf8).write(to: URL(fileURLWithPath: replica + "/docs/readme.md/inside.txt"))
            try FileManager.default.removeItem(atPath: replica + "/docs/deep")
            #expect(symlink("../a.txt", replica + "/docs/deep") == 0)
            let found = try changes(box, replica)
            #expect(found["modified"] == ["a.txt"], "\(found)")
            #expect(found["deleted"]?.isSuperset(of: ["bin.dat", "docs/readme.md", "docs/deep/nested.txt", "docs/deep/tool"]) == true, "\(found)")
            #expect(found["added"]?.isSuperset(of: ["docs/readme.md/inside.txt", "docs/deep"]) == true, "\(found)")
        }
    }
}
