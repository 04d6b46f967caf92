import Foundation
import Glibc
import Testing

let rootContainer = "NSFileProviderRootContainerItemIdentifier"

/// Writes `bytes` into an existing file at `offset` without truncating it, as
/// a program that opens a placeholder with O_WRONLY would.
func writeInPlace(_ path: String, _ bytes: [UInt8], offset: Int64 = 0) throws {
    let fd = open(path, O_WRONLY | O_CLOEXEC)
    guard fd >= 0 else { throw HarnessError("open \(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    let written = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }
    guard written == bytes.count else { throw HarnessError("pwrite \(path) failed") }
}

/// Appends, as `echo … >> file` does.
func append(_ path: String, _ text: String) throws {
    let fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
    guard fd >= 0 else { throw HarnessError("open \(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    let bytes = Array(text.utf8)
    guard bytes.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == bytes.count else { throw HarnessError("append failed") }
}

func itemsByName(_ page: [String: Any]) -> [String: [String: Any]] {
    var result: [String: [String: Any]] = [:]
    for item in page.objects("items") { if let id = item.string("identifier") { result[id] = item } }
    return result
}

@Suite("ls")
struct ListTests {
    @Test("ls reports every field of files, folders and symlinks")
    func listFields() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)

            let page = try box.fprepJSON(["ls"], cwd: replica)
            #expect(page.string("container") == rootContainer)
            #expect(page["nextPage"] == nil || page["nextPage"] is NSNull)
            let ids = page.objects("items").compactMap { $0.string("identifier") }
            #expect(ids == ["a.txt", "bin.dat", "docs", "empty.txt", "link", "run.sh"], "git order: \(ids)")
            // Without a path, the current folder, as `ls` does; paths are relative to it.
            let inDocs = try box.fprepJSON(["ls"], cwd: replica + "/docs").objects("items").compactMap { $0.string("identifier") }
            #expect(inDocs == ["docs/deep", "docs/readme.md", "docs/up"], "\(inDocs)")
            let deeper = try box.fprepJSON(["ls", "deep"], cwd: replica + "/docs").objects("items").compactMap { $0.string("identifier") }
            #expect(deeper == ["docs/deep/nested.txt", "docs/deep/tool"], "\(deeper)")
            let items = itemsByName(page)

            let a = try #require(items["a.txt"])
            #expect(a.string("parent") == rootContainer)
            #expect(a.string("filename") == "a.txt")
            #expect(a.string("kind") == "file")
            #expect(a.int("size") == 6)
            #expect(a.string("contentVersion") == (try box.blobID(remote, "a.txt")))
            #expect(a.string("state") == "dataless")
            #expect(a.string("modified") == fixedDateISO)
            #expect(a["executable"] as? Bool == false)

            let run = try #require(items["run.sh"])
            #expect(run["executable"] as? Bool == true)
            #expect(run.int("size") == remote.files["run.sh"]?.count)

            #expect(items["empty.txt"]?.int("size") == 0)
            #expect(items["bin.dat"]?.int("size") == 10_000)

            let docs = try #require(items["docs"])
            #expect(docs.string("kind") == "folder")
            #expect(docs.string("contentVersion") == (try box.gitOK(["rev-parse", "main:docs"], cwd: remote.path)))
            #expect(docs.string("parent") == rootContainer)

            let link = try #require(items["link"])
            #expect(link.string("kind") == "symlink")
            #expect(link.string("contentVersion") == (try box.blobID(remote, "link")))

            // A sub-folder: container is its identifier; items' parent too.
            let sub = try box.fprepJSON(["ls", "docs"], cwd: replica)
            #expect(sub.string("container") == "docs")
            #expect(sub.objects("items").compactMap { $0.string("identifier") } == ["docs/deep", "docs/readme.md", "docs/up"])
            #expect(sub.objects("items").allSatisfy { $0.string("parent") == "docs" })
            let deep = try box.fprepJSON(["ls", "deep"], cwd: replica + "/docs")
            let tool = try #require(itemsByName(deep)["docs/deep/tool"])
            #expect(tool.string("parent") == "docs/deep")
            #expect(tool["executable"] as? Bool == true)
            #expect(tool.int("size") == 300)

            // The text form lists the same names.
            let text = try box.fprepOK(["ls"], cwd: replica).stdout
            for name in ["a.txt", "bin.dat", "docs/", "empty.txt", "link", "run.sh"] {
                #expect(text.contains(name), "ls text should show \(name): \(text)")
            }
            #expect(!text.contains(".fprep") && !text.contains(".git"), "state folders must not be listed: \(text)")
        }
    }

    @Test("ls shows dataless, materialized and modified states")
    func listStates() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.fprepOK(["materialize", "a.txt", "docs/readme.md"], cwd: replica)
            try writeInPlace(replica + "/bin.dat", Array("XYZ".utf8))
            try append(replica + "/docs/readme.md", "local line\n")

            let items = itemsByName(try box.fprepJSON(["ls"], cwd: replica))
            #expect(items["a.txt"]?.string("state") == "materialized")
            #expect(items["a.txt"]?.string("modified") == fixedDateISO)
            #expect(items["bin.dat"]?.string("state") == "modified")
            #expect(items["empty.txt"]?.string("state") == "dataless")
            #expect(items["run.sh"]?.string("state") == "dataless")
            let docs = itemsByName(try box.fprepJSON(["ls", "docs"], cwd: replica))
            #expect(docs["docs/readme.md"]?.string("state") == "modified")
        }
    }

    @Test("ls pages through a folder of five items, each exactly once")
    func paging() throws {
        try withSandbox { box in
            var nodes = standardTree
            for name in ["e", "a", "d", "b", "c"] { nodes["five/\(name).txt"] = .text(name) }
            let remote = try box.makeRemote(nodes: nodes)
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)

            var seen: [String] = []
            var token: String? = nil
            var pages = 0
            repeat {
                var args = ["ls", "five", "--page-size", "2"]
                if let token { args += ["--page", token] }
                let page = try box.fprepJSON(args, cwd: replica)
                pages += 1
                #expect(page.string("container") == "five")
                let ids = page.objects("items").compactMap { $0.string("identifier") }
                #expect(ids.count == (pages < 3 ? 2 : 1), "page \(pages): \(ids)")
                seen += ids
                token = page["nextPage"] as? String
                if pages == 3 { #expect(token == nil, "the last page has no nextPage") }
            } while token != nil && pages < 10
            #expect(pages == 3)
            #expect(seen == ["five/a.txt", "five/b.txt", "five/c.txt", "five/d.txt", "five/e.txt"])

            // The text form prints the token on its last line.
            let text = try box.fprepOK(["ls", "five", "--page-size", "2"], cwd: replica).stdout
            #expect(text.contains("next page: "), "text paging: \(text)")

            // A page size bigger than the folder: one page, no token.
            let all = try box.fprepJSON(["ls", "five", "--page-size", "5"], cwd: replica)
            #expect(all.objects("items").count == 5)
            #expect(all["nextPage"] == nil || all["nextPage"] is NSNull)
        }
    }

    @Test("identifiers stay unique for names that are not UTF-8")
    func nonUTF8NamesHaveDistinctIdentifiers() throws {
        try withSandbox { box in
            let source = box.at("src-bytes")
            try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: false)
            // Latin-1 'x\xe9' and 'x\xef': two files, two items.
            let made = try Shell.run(["/bin/sh", "-c", "echo one > \"$(printf 'x\\351')\"; echo two > \"$(printf 'x\\357')\""],
                                     cwd: source)
            #expect(made.status == 0, "\(made)")
            let remote = box.at("bytes.git")
            try box.fprepOK(["init-remote", remote])
            try box.fprepOK(["import-tree", source, "--into", remote])
            _ = try box.clone(remote, box.at("replica"))
            let ids = try box.fprepJSON(["ls"], cwd: box.at("replica")).objects("items").compactMap { $0.string("identifier") }
            #expect(ids.count == 2)
            #expect(Set(ids).count == 2, "two different files share the identifier \(ids)")
        }
    }

    @Test("ls refuses a bad page token with exit 64", arguments: ["bogus", "p1.", "p2.YQ"])
    func badToken(token: String) throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let result = try box.fprep(["ls", "--page", token], cwd: replica)
            expectOneLineError(result, status: 64)
            #expect(result.stdout.isEmpty)
        }
    }
}

@Suite("status")
struct StatusTests {
    @Test("status counts items before and after materialize and after local edits")
    func statusCounts() throws {
        try withSandbox { box in
            let remote = try box.makeRemote(domain: "status-domain")
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            let files = remote.files.count, links = remote.symlinks.count

            let s0 = try box.fprepJSON(["status"], cwd: replica)
            #expect(s0.string("domain") == "status-domain")
            #expect(s0.string("remote") == remote.path)
            #expect(s0.string("branch") == "main")
            #expect(s0.string("anchor") == remote.commit)
            #expect(s0.string("root") == replica)
            #expect(s0.int("items") == files + links)
            #expect(s0.int("folders") == 2)
            #expect(s0.int("dataless") == files)
            #expect(s0.int("materialized") == links)
            #expect(s0.int("modified") == 0)
            #expect(s0.int("deleted") == 0)
            #expect(s0.objects("changes").isEmpty)
            let fileBytes = remote.files.values.reduce(0) { $0 + $1.count }
            #expect((s0.int("logicalSize") ?? 0) >= fileBytes)
            #expect((s0.int("bytesOnDisk") ?? 0) > 0)

            try box.fprepOK(["materialize", "docs", "a.txt"], cwd: replica)
            let s1 = try box.fprepJSON(["status"], cwd: replica)
            #expect(s1.int("dataless") == files - 4)
            #expect(s1.int("materialized") == links + 4)
            #expect(s1.int("modified") == 0)
            #expect(s1.int("items") == files + links)
            #expect((s1.int("bytesOnDisk") ?? 0) > (s0.int("bytesOnDisk") ?? 0), "materialized content takes space")

            try append(replica + "/a.txt", "edited\n")
            unlink(replica + "/empty.txt")
            let s2 = try box.fprepJSON(["status"], cwd: replica)
            #expect(s2.int("modified") == 1)
            #expect(s2.int("deleted") == 1)
            #expect(s2.int("materialized") == links + 3)
            #expect(s2.int("dataless") == files - 5)
            let changes = s2.objects("changes").map { "\($0.string("path") ?? "?"):\($0.string("kind") ?? "?")" }
            #expect(changes == ["a.txt:modified", "empty.txt:deleted"])

            let text = try box.fprepOK(["status"], cwd: replica).stdout
            #expect(text.contains("modified: a.txt") || text.contains("modified:  a.txt") || text.contains("a.txt"), "text status: \(text)")
            #expect(text.contains("status-domain"))
        }
    }

    @Test("changes --stdin answers each anchor with one JSON line, refusals included, until the input ends")
    func changesAnsweredFromStandardInput() throws {
        try withSandbox { box in
            let (remote, replica) = try Self.replicaSyncedPastTwoChanges(in: box)

            let base = remote.commit
            let input = "\(base)\nnot-an-anchor\n\n\(String(repeating: "0", count: 39))1\n\(base)\n"
            let result = try box.fprep(["changes", "--stdin", "--limit", "1"], cwd: replica, stdin: Data(input.utf8))
            #expect(result.status == 0, "\(result)")
            let answers = try result.stdout.split(separator: "\n").map {
                try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
            }
            #expect(answers.count == 4, "one answer a non-empty line: \(result.stdout)")
            guard answers.count == 4 else { return }
            #expect(answers[0].objects("updated").count == 1 && answers[0]["moreComing"] as? Bool == true)
            #expect(answers[1].int("status") == 64 && answers[1].string("error")?.contains("not-an-anchor") == true)
            #expect(answers[2].int("status") == 65 && answers[2].string("error")?.contains("expired") == true)
            #expect(answers[3].string("anchor") == answers[0].string("anchor"), "the same request, the same answer")

            // The continuation token of the first batch brings the rest.
            let token = try #require(answers[0].string("anchor"))
            let rest = try box.fprep(["changes", "--stdin"], cwd: replica, stdin: Data((token + "\n").utf8))
            let second = try #require(try JSONSerialization.jsonObject(with: Data(rest.stdoutData)) as? [String: Any])
            let paths = (answers[0].objects("updated") + second.objects("updated")).compactMap { $0.string("identifier") }
            #expect(Set(paths) == ["a.txt", "new.txt"])
            #expect(second["moreComing"] as? Bool == false)
            #expect(try box.fprep(["changes", "--stdin", "--from", base], cwd: replica).status == 64)
        }
    }

    @Test("changes from the anchor a sync left reads the change set that sync recorded; a record removed, torn or damaged is diffed again, with the same answer")
    func changesFromTheSyncsRecord() throws {
        try withSandbox { box in
            let remote = try box.makeRemote()
            let replica = box.at("replica")
            _ = try box.clone(remote.path, replica)
            try box.pushToRemote(remote, ["a.txt": Data("changed\n".utf8), "docs/new.txt": Data("new\n".utf8), "empty.txt": nil],
                                 moves: [("docs/deep", "moved"), ("bin.dat", "docs/bin.dat")], message: "every kind of change")
            try box.fprepOK(["sync"], cwd: replica)

            let folder = replica + "/.fprep/changes"
            let names = try FileManager.default.contentsOfDirectory(atPath: folder)
            #expect(names.count == 1, "the sync recorded its change set: \(names)")
            let record = folder + "/" + (names.first ?? "?")
            let recordBytes = try Data(contentsOf: URL(fileURLWithPath: record))
            let trace = box.at("trace")
            /// The batch, and whether the trees were diffed for it.
            func answer() throws -> (stdout: String, diffed: Bool) {
                unlink(trace)
                let result = try box.fprepOK(["changes", "--from", remote.commit, "--json"], cwd: replica, env: ["FPREP_TRACE": trace])
                let phases = (try? String(contentsOfFile: trace, encoding: .utf8)) ?? ""
                return (result.stdout, phases.contains("tree diff"))
            }
            let recorded = try answer()
            #expect(!recorded.diffed, "read from the record")
            for kind in ["\"a.txt\"", "\"docs/new.txt\"", "\"empty.txt\"", "\"moved\"", "\"docs/bin.dat\""] {
                #expect(recorded.stdout.contains(kind), "\(kind) in \(recorded.stdout)")
            }

            unlink(record)
            let diffed = try answer()
            #expect(diffed.diffed && diffed.stdout == recorded.stdout, "without the record: \(diffed.stdout)")

            var damaged = recordBytes
            damaged[damaged.count / 2] ^= 0x20
            for (bytes, path) in [(recordBytes.prefix(recordBytes.count - 7), record), (damaged, record),
                                  (recordBytes + Data([0]), record), (Data(), record)] {
                try bytes.write(to: URL(fileURLWithPath: path))
                let again = try answer()
                #expect(again.diffed && again.stdout == recorded.stdout, "a record of \(bytes.count) bytes: \(again.stdout)")
            }
            // Two syncs later the first anchor's changes are no sync's: diffed.
            try recordBytes.write(to: URL(fileURLWithPath: record))
            try box.pushToRemote(remote, ["a.txt": Data("again\n".utf8)], message: "one more")
            try box.fprepOK(["sync"], cwd: replica)
            #expect(try FileManager.default.contentsOfDirectory(atPath: folder).count == 2)
            #expect(try answer().diffed)
        }
    }

    @Test("an enumerator's request, read without ArgumentParser, answers exactly as ArgumentParser's reading does")
    func changesReadEitherWayAnswerAlike() throws {
        try withSandbox { box in
            let (remote, replica) = try Self.replicaSyncedPastTwoChanges(in: box)
            try box.fprepOK(["materialize", "a.txt"], cwd: replica)

            let base = remote.commit
            // The first of each pair takes the quick reading; `--opt=value`
            // (or a repeated option) goes to ArgumentParser.
            let pairs: [([String], [String])] = [
                (["changes", "-C", replica, "--from", base, "--json"], ["changes", "--replica=\(replica)", "--from=\(base)", "--json"]),
                (["-C", replica, "changes", "--from", base, "--limit", "1", "--json"], ["changes", "-C", replica, "--from=\(base)", "--limit=1", "--json"]),
                (["changes", "-C", replica, "--from", base, "--container", "NSFileProviderRootContainerItemIdentifier"],
                 ["changes", "-C", replica, "--from=\(base)", "--container=NSFileProviderRootContainerItemIdentifier"]),
                (["changes", "-C", replica, "--from", "not-an-anchor"], ["changes", "-C", replica, "--from=not-an-anchor"]),
                (["changes", "-C", replica, "--from", base, "--limit", "0"], ["changes", "-C", replica, "--from=\(base)", "--limit=0"]),
            ]
            for (quick, parsed) in pairs {
                let a = try box.fprep(quick, cwd: box.path)
                let b = try box.fprep(parsed, cwd: box.path)
                #expect(a.status == b.status && a.stdout == b.stdout && a.stderr == b.stderr, "\(quick): \(a) vs \(b)")
            }
            let batch = try box.fprep(["changes", "-C", replica, "--from", base, "--json"], cwd: box.path)
            #expect(batch.status == 0 && batch.stdout.contains("\"new.txt\"") && batch.stdout.contains("\"materialized\""), "\(batch)")
            // A unique prefix of the anchor answers the same.
            let short = try box.fprep(["changes", "-C", replica, "--from", String(base.prefix(9)), "--json"], cwd: box.path)
            #expect(short.stdout == batch.stdout && short.status == 0, "\(short)")

            // What the quick reading does not take still gets ArgumentParser's answers.
            let help = try box.fprep(["changes", "--help"], cwd: replica)
            #expect(help.status == 0 && help.stdout.contains("--container"), "\(help)")
            let missing = try box.fprep(["changes", "--from"], cwd: replica)
            #expect(missing.status == 64 && missing.stderr.contains("--from"), "\(missing)")
            let twice = try box.fprep(["changes", "--from", base, "--from", base, "--json"], cwd: replica)
            #expect(twice.status == 0, "a repeated option is ArgumentParser's to settle: \(twice)")
            let unknown = try box.fprep(["changes", "--from", base, "--frm", base], cwd: replica)
            #expect(unknown.status == 64, "\(unknown)")
        }
    }

    /// A replica synced past one remote commit that changes a.txt and adds new.txt.
    static func replicaSyncedPastTwoChanges(in box: Sandbox) throws -> (remote: Remote, replica: String) {
        let remote = try box.makeRemote()
        let replica = box.at("replica")
        _ = try box.clone(remote.path, replica)
        let work = box.at("work")
        try box.gitOK(["clone", "-q", remote.path, work])
        try Data("changed\n".utf8).write(to: URL(fileURLWithPath: work + "/a.txt"))
        try Data("new\n".utf8).write(to: URL(fileURLWithPath: work + "/new.txt"))
        try box.gitOK(["add", "-A"], cwd: work)
        try box.gitOK(["commit", "-q", "-m", "two changes"], cwd: work)
        try box.gitOK(["push", "-q", "origin", "HEAD:main"], cwd: work)
        try box.fprepOK(["sync"], cwd: replica)
        return (remote, replica)
    }
}
