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

    @Test("folders of placeholders of the same sizes and dates swapping names (found by a hostile test: the scan took each for the one the index names), with subfolders, or swapped and then written into: status sees each, a status before the sync changes nothing, and the sync pushes exactly the moves")
    func swappedFoldersOfPlaceholders() throws {
        try withSandbox { box in
            var nodes: [String: Node] = [:]
            for d in 1...6 { for i in 1...4 { nodes["d\(d)/f\(i)"] = .text("content \(d)/\(i)\n") } }
            for i in 1...3 { nodes["d6/sub/g\(i)"] = .text("deeper 6/\(i)\n") }
            for i in 1...3 { nodes["d5/sub/g\(i)"] = .text("deeper 5/\(i)\n") }
            let remote = try box.makeRemote(nodes: nodes)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            // A full check once the clock has moved past every placeholder's
            // last change: a placeholder changed within the moment the check
            // took is checked anyway, which hid the fault in small trees.
            func ctime(_ path: String) -> timespec? {
                var st = stat()
                return lstat(path, &st) == 0 ? st.st_ctim : nil
            }
            func after(_ a: timespec, _ b: timespec) -> Bool { a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec > b.tv_nsec) }
            let newest = nodes.keys.compactMap { ctime(replica + "/" + $0) }.reduce(timespec()) { after($1, $0) ? $1 : $0 }
            let probe = box.at("probe")
            #expect(waitUntil {
                _ = unlink(probe)
                let fd = creat(probe, 0o644)
                guard fd >= 0 else { return false }
                close(fd)
                guard let made = ctime(probe) else { return false }
                return after(made, newest)
            })
            try box.fprepOK(["sync"], cwd: replica)
            func move(_ from: String, _ to: String) { #expect(rename(replica + "/" + from, replica + "/" + to) == 0) }
            move("d1", "t"); move("d2", "d1"); move("t", "d2")                 // a swap
            move("d3", "t"); move("d4", "d3"); move("t", "d4")                 // a swap, then a file added in one
            try Data("new\n".utf8).write(to: URL(fileURLWithPath: replica + "/d3/added"))
            move("d5", "t"); move("d6", "d5"); move("t", "d6")                 // folders with subfolders
            let status = try box.fprepJSON(["status"], cwd: replica)
            #expect(status.int("modified") ?? 0 > 0, "\(status)")
            _ = try box.fprepJSON(["status"], cwd: replica)
            try box.fprepOK(["sync"], cwd: replica)
            func remoteHas(_ path: String) throws -> String {
                try box.gitOK(["show", "main:" + path], cwd: remote.path)
            }
            for i in 1...4 {
                #expect(try remoteHas("d1/f\(i)") == "content 2/\(i)")
                #expect(try remoteHas("d2/f\(i)") == "content 1/\(i)")
                #expect(try remoteHas("d3/f\(i)") == "content 4/\(i)")
                #expect(try remoteHas("d4/f\(i)") == "content 3/\(i)")
                #expect(try remoteHas("d5/f\(i)") == "content 6/\(i)")
                #expect(try remoteHas("d6/f\(i)") == "content 5/\(i)")
            }
            for i in 1...3 {
                #expect(try remoteHas("d5/sub/g\(i)") == "deeper 6/\(i)")
                #expect(try remoteHas("d6/sub/g\(i)") == "deeper 5/\(i)")
            }
            #expect(try remoteHas("d3/added") == "new")
            let after = try box.fprepJSON(["status"], cwd: replica)
            #expect(after.int("modified") == 0 && after.int("dataless") == nodes.count, "\(after)")
            #expect(try box.fprepJSON(["sync"], cwd: replica).int("pushed") ?? 0 == 0)
        }
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
