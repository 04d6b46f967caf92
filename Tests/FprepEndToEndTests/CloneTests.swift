import Foundation
import Glibc
import Testing

/// The ways a remote can be named on the command line.
enum Transport: String, CaseIterable, CustomTestStringConvertible {
    case path, fileURL, gitDaemon
    var testDescription: String { rawValue }
}

extension Sandbox {
    /// Adds a submodule entry (gitlink, mode 160000) named `name` to the
    /// remote's main branch, as a second commit with the fixed date.
    func addGitlink(to remote: Remote, name: String = "sub",
                    target: String = "1111111111111111111111111111111111111111") throws -> String {
        let listing = try gitOK(["ls-tree", "main"], cwd: remote.path)
        let tree = try gitOK(["mktree"], cwd: remote.path,
                             stdin: Data((listing + "\n160000 commit \(target)\t\(name)\n").utf8))
        let commit = try gitOK(["commit-tree", "-p", "main", "-m", "Add submodule", tree], cwd: remote.path)
        try gitOK(["update-ref", "refs/heads/main", commit], cwd: remote.path)
        return commit
    }

    /// The blob id of `path` on the remote's main branch.
    func blobID(_ remote: Remote, _ path: String) throws -> String {
        try gitOK(["rev-parse", "main:\(path)"], cwd: remote.path)
    }
}

/// Checks that `replica` lays out `remote` as placeholders: sizes, no blocks,
/// the fixed date, modes, both xattrs, folders and symlinks.
func expectPlaceholders(_ box: Sandbox, replica: String, remote: Remote, date: Int64 = fixedDate,
                        sourceLocation: SourceLocation = #_sourceLocation) throws {
    for (relative, data) in remote.files.sorted(by: { $0.key < $1.key }) {
        let path = replica + "/" + relative
        let info = try #require(lstatInfo(path), "missing placeholder \(relative)", sourceLocation: sourceLocation)
        #expect(info.isRegular, "\(relative) is not a regular file", sourceLocation: sourceLocation)
        #expect(info.size == Int64(data.count), "\(relative): size \(info.size), want \(data.count)", sourceLocation: sourceLocation)
        #expect(info.blocks == 0, "\(relative): \(info.blocks) blocks, want 0", sourceLocation: sourceLocation)
        #expect(info.mtime == date, "\(relative): mtime \(info.mtime), want \(date)", sourceLocation: sourceLocation)
        let wantMode: UInt32 = remote.isExecutable(relative) ? 0o755 : 0o644
        #expect(info.permissions == wantMode,
                "\(relative): mode \(String(info.permissions, radix: 8)), want \(String(wantMode, radix: 8))",
                sourceLocation: sourceLocation)
        #expect(xattrString(path, "user.fprep.state") == "dataless", "\(relative): state xattr", sourceLocation: sourceLocation)
        let blob = try box.blobID(remote, relative)
        #expect(xattr(path, "user.fprep.blob") == rawID(blob), "\(relative): blob xattr", sourceLocation: sourceLocation)
    }
    for (relative, target) in remote.symlinks {
        let path = replica + "/" + relative
        #expect(lstatInfo(path)?.isSymlink == true, "\(relative) is not a symlink", sourceLocation: sourceLocation)
        #expect(readLink(path) == target, "\(relative) points to \(readLink(path) ?? "nothing")", sourceLocation: sourceLocation)
    }
    var folders = Set<String>()
    for relative in remote.nodes.keys {
        var parent = (relative as NSString).deletingLastPathComponent
        while !parent.isEmpty { folders.insert(parent); parent = (parent as NSString).deletingLastPathComponent }
    }
    for folder in folders {
        #expect(lstatInfo(replica + "/" + folder)?.isDirectory == true, "\(folder) is not a folder", sourceLocation: sourceLocation)
    }
}

/// The ids `git rev-list --objects --missing=print --all` lists as missing, and those present.
func objectStore(_ box: Sandbox, replica: String) throws -> (missing: Set<String>, present: Set<String>) {
    let listing = try box.gitOK(["rev-list", "--objects", "--missing=print", "--all"], cwd: replica,
                                env: ["GIT_NO_LAZY_FETCH": "1"])
    var missing = Set<String>(), present = Set<String>()
    for line in listing.split(separator: "\n") {
        if line.hasPrefix("?") { missing.insert(String(line.dropFirst().prefix(40))) } else { present.insert(String(line.prefix(40))) }
    }
    return (missing, present)
}

@Suite("clone")
struct CloneTests {
    @Test("clone lays out a dataless replica", arguments: Transport.allCases)
    func cloneLaysOutPlaceholders(transport: Transport) throws {
        try withSandbox { box in
            let remote = try box.makeRemote(domain: "e2e-photos")
            let head = try box.addGitlink(to: remote)
            let url: String
            switch transport {
            case .path: url = remote.path
            case .fileURL: url = "file://" + remote.path
            case .gitDaemon: url = try box.startDaemon(base: box.path).url("remote.git")
            }
            let replica = box.at("replica")
            let result = try box.clone(url, replica)

            #expect(result.string("anchor") == head)
            #expect(result.string("branch") == "main")
            #expect(result.string("domain") == "e2e-photos")
            #expect(result.int("files") == remote.files.count)
            #expect(result.int("symlinks") == remote.symlinks.count)
            #expect(result.strings("unsupportedSubmodules") == ["sub"])
            #expect(result.int("unknownSizes") == 0)
            let fileBytes = remote.files.values.reduce(0) { $0 + $1.count }
            let linkBytes = remote.symlinks.values.reduce(0) { $0 + $1.utf8.count }
            let logical = try #require(result.int("logicalSize"))
            #expect(logical >= fileBytes && logical <= fileBytes + linkBytes, "logicalSize \(logical), files hold \(fileBytes)")

            try expectPlaceholders(box, replica: replica, remote: remote)

            // The submodule is an empty folder.
            let sub = replica + "/sub"
            #expect(lstatInfo(sub)?.isDirectory == true)
            #expect((try? FileManager.default.contentsOfDirectory(atPath: sub))?.isEmpty == true)

            // Nothing but the placeholders, folders, symlinks and the state folders.
            let top = Set(try FileManager.default.contentsOfDirectory(atPath: replica))
            #expect(top == [".git", ".fprep", "a.txt", "run.sh", "empty.txt", "bin.dat", "docs", "link", "sub"])

            // git sees a clean tree and the history (run plainly, as a user would).
            let porcelain = try box.git(["status", "--porcelain"], cwd: replica)
            #expect(porcelain.status == 0 && porcelain.stdout.isEmpty, "git status: \(porcelain)")
            #expect(porcelain.stderr.isEmpty, "git printed something because of fprep: \(porcelain.stderr)")
            let log = try box.gitOK(["log", "--format=%H %s"], cwd: replica)
            #expect(log.contains("\(head) Add submodule"), "git log: \(log)")
            #expect(log.contains("\(remote.commit) Import fixture"), "git log: \(log)")

            // No blob was fetched but the symlink targets (and git status fetched none).
            let store = try objectStore(box, replica: replica)
            let fileBlobs = Set(try remote.files.keys.map { try box.blobID(remote, $0) })
            let linkBlobs = Set(try remote.symlinks.keys.map { try box.blobID(remote, $0) })
            #expect(store.missing == fileBlobs, "missing objects \(store.missing.sorted()), want \(fileBlobs.sorted())")
            #expect(linkBlobs.isSubset(of: store.present), "symlink targets must be in the object store")
        }
    }

    @Test("clone into an existing empty folder, default folder name, and --branch")
    func cloneIntoEmptyFolderAndDefaultName() throws {
        try withSandbox { box in
            let remote = try box.makeRemote("photos.git")
            let empty = box.at("empty")
            try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: false)
            _ = try box.clone(remote.path, empty)
            try expectPlaceholders(box, replica: empty, remote: remote)

            // No folder given: the remote's name without .git, in the current folder.
            try FileManager.default.createDirectory(atPath: box.at("here"), withIntermediateDirectories: false)
            let result = try box.fprepJSON(["clone", remote.path, "--branch", "main"], cwd: box.at("here"))
            #expect(result.string("root") == box.at("here/photos"))
            try expectPlaceholders(box, replica: box.at("here/photos"), remote: remote)
        }
    }

    @Test("clone of an empty fprep remote: no anchor, empty listing, status works")
    func emptyRemote() throws {
        try withSandbox { box in
            let remote = box.at("empty.git")
            try box.fprepOK(["init-remote", remote])
            let replica = box.at("replica")
            let result = try box.clone(remote, replica)
            #expect(result["anchor"] == nil || result["anchor"] is NSNull)
            #expect(result.int("files") == 0)
            let page = try box.fprepJSON(["ls"], cwd: replica)
            #expect(page.objects("items").isEmpty)
            let status = try box.fprepJSON(["status"], cwd: replica)
            #expect(status.int("items") == 0)
            #expect(Set(try FileManager.default.contentsOfDirectory(atPath: replica)) == [".git", ".fprep"])
            expectOneLineError(try box.fprep(["materialize", "x"], cwd: replica), status: 64)
        }
    }

    @Test("a remote without fprep's size manifest, over the network, reports unknown sizes")
    func unknownSizesWithoutManifest() throws {
        try withSandbox { box in
            let repo = try box.makeBareRemote("plain.git") { repo in
                let blob = try box.writeObject(Data("twelve bytes".utf8), in: repo)
                return try box.gitOK(["mktree"], cwd: repo, stdin: Data("100644 blob \(blob)\tf.txt\n".utf8))
            }
            try box.gitOK(["config", "uploadpack.allowFilter", "true"], cwd: repo)
            try box.gitOK(["config", "uploadpack.allowAnySHA1InWant", "true"], cwd: repo)
            let daemon = try box.startDaemon(base: box.path)
            let result = try box.clone(daemon.url("plain.git"), box.at("replica"))
            #expect(result.int("unknownSizes") == 1)
            let page = try box.fprepJSON(["ls"], cwd: box.at("replica"))
            let item = try #require(page.objects("items").first)
            #expect(item["size"] == nil || item["size"] is NSNull, "size must be unknown, not guessed: \(item)")
            // Still a placeholder with no data, and materialize brings the content.
            #expect(lstatInfo(box.at("replica/f.txt"))?.blocks == 0)
            try box.fprepOK(["materialize", "f.txt"], cwd: box.at("replica"))
            #expect(contents(box.at("replica/f.txt")) == Data("twelve bytes".utf8))
        }
    }
}

@Suite("help")
struct HelpTests {
    @Test("fprep --help lists every subcommand")
    func helpListsSubcommands() throws {
        try withSandbox { box in
            let help = try box.fprep(["--help"])
            #expect(help.status == 0, "\(help)")
            for name in ["init-remote", "import-tree", "clone", "ls", "materialize", "evict", "status", "hook"] {
                #expect(help.stdout.contains("  \(name) "), "--help should list \(name): \(help)")
            }
            let version = try box.fprep(["--version"])
            #expect(version.status == 0 && version.stdout.hasPrefix("fprep ") && version.stdout.contains("libgit2 "), "\(version)")
            // The commit it was built from (this checkout's HEAD, read by the BuildInfo plugin).
            let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            // (HEAD or one before it: a commit made since the last build moves HEAD on.)
            let built = version.stdout.range(of: "commit [0-9a-f]{12}", options: .regularExpression).map { String(version.stdout[$0].dropFirst(7)) }
            #expect(built != nil, "\(version.stdout)")
            if let built {
                let ancestor = try box.git(["merge-base", "--is-ancestor", built, "HEAD"], cwd: packageRoot.path)
                #expect(ancestor.status == 0, "\(built) is not HEAD or before it: \(ancestor)")
            }
            // An unknown command is a mistake, --help or not.
            let unknown = try box.fprep(["bogus", "--help"])
            #expect(unknown.status == 64 && unknown.stderr.contains("unknown command 'bogus'"), "\(unknown)")
            // Bare `fprep` is a usage mistake: the usage on standard error, 64.
            let bare = try box.fprep([])
            #expect(bare.status == 64 && bare.stdout.isEmpty && bare.stderr.contains("USAGE:"), "\(bare)")
        }
    }

    @Test("fprep hands serve, watch, agent, changes --follow and completions to fprep-full beside it; without it, one line")
    func fullCommands() throws {
        try withSandbox { box in
            // Each answers with its own help (fprep's stand-ins have none).
            for (arguments, expected) in [(["serve", "--help"], "--tls-cert"), (["help", "watch"], "--fallback-interval"),
                                          (["agent", "--help"], "worker"), (["changes", "--follow", "--help"], "--follow"),
                                          (["completions", "bash"], "materialize")] {
                let answer = try box.fprep(arguments)
                #expect(answer.status == 0 && answer.stdout.contains(expected), "\(arguments): \(answer)")
            }
            let help = try box.fprep(["--help"])
            for name in ["serve", "watch", "agent", "completions"] {
                #expect(help.stdout.contains("  \(name) "), "--help should list \(name): \(help)")
            }
            // fprep alone (installed without fprep-full): the other commands work, these say what is missing.
            let alone = box.at("alone")
            try FileManager.default.createDirectory(atPath: alone, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: Binaries.fprep, toPath: alone + "/fprep")
            let lone = try Shell.run([alone + "/fprep", "serve", "--remote", box.at("remote.git")], ioFolder: box.io)
            #expect(lone.status == 1 && lone.stdout.isEmpty, "\(lone)")
            #expect(lone.stderr == "fprep: 'serve' runs in fprep-full, which cannot be started from \(alone)/fprep-full (No such file or directory): install both programs side by side (bash scripts/install.sh does)\n", "\(lone)")
            #expect(try Shell.run([alone + "/fprep", "--version"], ioFolder: box.io).status == 0)
        }
    }
}
