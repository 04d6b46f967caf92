import CFprepSys
import FoundationEssentials
import Glibc
import FprepGit

/// Seeds a remote from an ordinary folder: one commit on the remote's branch
/// whose tree is the folder's files, folders and symlinks, and the size
/// manifest entries for them.
public enum TreeImporter {
    public struct Result: Sendable, Encodable {
        /// The commit made; nil for a dry run.
        public let commit: String?
        public let branch: String
        public let files: Int
        public let symlinks: Int
        public let bytes: Int64
        /// Things that could not be imported (sockets, empty folders…), with why.
        public let skipped: [String]
        /// What the import changes in the branch's tree: files and symlinks
        /// added, changed and deleted.
        public var added = 0
        public var changed = 0
        public var deleted = 0
        public var dryRun = false
        /// The commit the branch held before (nil: it was empty).
        public var previous: String?
        /// Where the folder went in the tree (nil: the whole tree).
        public var prefix: String?
    }

    /// How an import meets a branch that already has files.
    public struct Placement: Sendable {
        /// Replace what is there (the whole tree, or the folder at `prefix`).
        public var replace = false
        /// Import below this folder, beside the rest of the tree.
        public var prefix: String?
        public var dryRun = false

        public init(replace: Bool = false, prefix: String? = nil, dryRun: Bool = false) {
            self.replace = replace
            self.prefix = prefix
            self.dryRun = dryRun
        }
    }

    public static func importFolder(_ rawFolder: String, into rawRemote: String, message: String?,
                                    placement: Placement = Placement()) throws -> Result {
        let folder = Remote.absolute(rawFolder)
        let remotePath = Remote.absolute(rawRemote)
        var isDirectory = false
        guard FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory), isDirectory else {
            throw FprepError(.usage, "'\(rawFolder)' is not a folder (name the folder to import)")
        }
        guard let repository = try? Repository(openingAt: remotePath), repository.isBare,
              let config = try? repository.config(), (try? config.string("fprep.domain")) ?? nil != nil else {
            throw FprepError(.usage, "'\(rawRemote)' is not an fprep remote (create it with 'fprep init-remote \(rawRemote)')")
        }
        let branch = (try? config.string("fprep.branch")) ?? nil ?? "main"
        let reference = "refs/heads/" + branch
        let parent = try repository.referenceTarget(reference)
        let oldTree = try parent.map { try repository.commit($0).treeID }
        let prefix = try placement.prefix.map { try checkedPrefix($0) }
        // Into a branch that has files, an import must say what it does
        // with them: the whole tree replaced, or the folder beside them.
        if let oldTree, oldTree != ObjectID.emptyTree, prefix == nil, !placement.replace {
            throw FprepError(.usage, "'\(rawRemote)' already has files on '\(branch)'; importing '\(rawFolder)' as the whole tree would delete every file not in it: pass --prefix DIR to import it beside them, or --replace to replace them (see what changes with --dry-run)")
        }
        if let prefix, let oldTree, !placement.replace,
           try TreeLookup(repository: repository, tree: oldTree).entry(at: prefix) != nil {
            throw FprepError(.usage, "'\(rawRemote)' already has '\(prefix)' on '\(branch)'; pass --replace to replace it with '\(rawFolder)', or choose another --prefix (see what changes with --dry-run)")
        }
        var state = ImportState()
        let imported: ObjectID
        do {
            imported = try buildTree(Array(folder.utf8), relative: [], repository: repository, state: &state)
        } catch {
            throw FprepError.git("cannot import '\(rawFolder)'", error)
        }
        let tree: ObjectID
        if let prefix {
            do {
                tree = try TreeEditor(repository).apply([prefix.bytes: .put(imported, .tree)], to: oldTree)
            } catch let conflict as TreeEditConflict {
                throw FprepError(.usage, "cannot import below '\(prefix)': \(conflict) on '\(branch)'; choose another --prefix")
            }
        } else {
            tree = imported
        }
        var result = Result(commit: nil, branch: branch, files: state.files, symlinks: state.symlinks,
                            bytes: state.bytes, skipped: state.skipped)
        result.previous = parent?.hex
        result.prefix = prefix?.description
        result.dryRun = placement.dryRun
        let before = try oldTree.map { try TreeLookup.allEntries(of: $0, in: repository) } ?? [:]
        let after = try TreeLookup.allEntries(of: tree, in: repository)
        for (path, item) in after {
            if let old = before[path] { if old.id != item.id || old.mode != item.mode { result.changed += 1 } } else { result.added += 1 }
        }
        result.deleted = before.keys.count { after[$0] == nil }
        if placement.dryRun { return result }
        let dates = CommitDates.now()
        let identity = Identity.current()
        let commitMessage = message ?? "Import \(URL(fileURLWithPath: folder).lastPathComponent) (\(counted(state.files, "file")))"
            + (prefix.map { " into \($0)" } ?? "")
        do {
            let commit = try repository.writeCommit(
                tree: tree, parents: parent.map { [$0] } ?? [], message: commitMessage + "\n",
                author: Signature(name: identity.name, email: identity.email, time: dates.author),
                committer: Signature(name: identity.name, email: identity.email, time: dates.committer))
            // The manifest first: a device that fetches the branch must find
            // the sizes, and the files' own dates.
            try SizeManifest.extend(repository, from: oldTree, to: tree, time: dates.committer, times: state.times)
            try repository.updateReference(reference, to: commit, expecting: parent, message: "fprep import-tree")
            SizeManifest.updateCommitGraph(of: remotePath)
            return Result(commit: commit.hex, branch: branch, files: state.files, symlinks: state.symlinks,
                          bytes: state.bytes, skipped: state.skipped, added: result.added, changed: result.changed,
                          deleted: result.deleted, dryRun: false, previous: parent?.hex, prefix: prefix?.description)
        } catch {
            throw FprepError.git("cannot record the import in '\(rawRemote)'", error)
        }
    }

    struct ImportState {
        var files = 0
        var symlinks = 0
        var bytes: Int64 = 0
        var skipped: [String] = []
        /// Each file's modification time, by blob (placeholders show it).
        var times: [ObjectID: Int64] = [:]
    }

    /// A folder path inside the tree, checked as clone checks names.
    static func checkedPrefix(_ raw: String) throws -> RepoPath {
        let trimmed = raw.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard !trimmed.isEmpty else { throw FprepError(.usage, "--prefix needs a folder path inside the tree (like 'photos/2026')") }
        for name in trimmed {
            if name == "." || name == ".." { throw FprepError(.usage, "--prefix '\(raw)' has '\(name)' in it; name a folder inside the tree") }
            if let problem = EntryNameCheck.problem(with: Array(name.utf8)) {
                throw FprepError(.usage, "--prefix '\(raw)': '\(name)' \(problem)")
            }
        }
        return RepoPath(trimmed.joined(separator: "/"))
    }

    /// Writes the tree of `path` bottom-up. Names are bytes from readdir, so
    /// any name the file system holds round-trips.
    private static func buildTree(_ path: [UInt8], relative: [UInt8], repository: Repository,
                                  state: inout ImportState) throws -> ObjectID {
        let builder = try repository.treeBuilder()
        for name in try listFolder(path) {
            let childPath = path + [0x2F] + name
            let childRelative = relative.isEmpty ? name : relative + [0x2F] + name
            let shown = String(decoding: childRelative, as: UTF8.self)
            if relative.isEmpty, EntryNameCheck.problem(with: name) != nil { continue }  // .git, .fprep
            if let problem = EntryNameCheck.problem(with: name) {
                state.skipped.append("\(shown): \(problem)")
                continue
            }
            var info = fprep_stat()
            let cChild = childPath.map { CChar(bitPattern: $0) } + [0]
            guard fprep_lstat_at(AT_FDCWD, cChild, &info) == 0 else { throw SystemError("lstat", shown) }
            switch mode_t(truncatingIfNeeded: info.mode) & S_IFMT {
            case S_IFDIR:
                let subtree = try buildTree(childPath, relative: childRelative, repository: repository, state: &state)
                if subtree == ObjectID.emptyTree {
                    state.skipped.append("\(shown)/: empty folder (git keeps no empty folders)")
                } else {
                    try builder.insert(name: name, id: subtree, mode: .tree)
                }
            case S_IFREG:
                let id = try repository.writeBlob(fromFile: childPath)
                let executable = (info.mode & 0o111) != 0
                try builder.insert(name: name, id: id, mode: executable ? .executable : .blob)
                state.times[id] = info.mtime_sec
                state.files += 1
                state.bytes += info.size
            case S_IFLNK:
                var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
                let length = readlink(cChild, &buffer, buffer.count)
                guard length >= 0 else { throw SystemError("readlink", shown) }
                let id = try buffer.withUnsafeBytes { try repository.writeBlob(UnsafeRawBufferPointer(rebasing: $0[0..<length])) }
                try builder.insert(name: name, id: id, mode: .symlink)
                state.symlinks += 1
            default:
                state.skipped.append("\(shown): not a file, folder or symlink")
            }
        }
        return try builder.write()
    }

    private static func listFolder(_ path: [UInt8]) throws -> [[UInt8]] {
        let cPath = path.map { CChar(bitPattern: $0) } + [0]
        guard let dir = opendir(cPath) else { throw SystemError("opendir", String(decoding: path, as: UTF8.self)) }
        defer { closedir(dir) }
        var names: [[UInt8]] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw -> [UInt8] in
                Array(raw.prefix { $0 != 0 })
            }
            if name == [0x2E] || name == [0x2E, 0x2E] { continue }
            names.append(name)
        }
        return names
    }
}

/// Who commits: git's own settings (`GIT_AUTHOR_NAME`/`EMAIL`, then
/// `user.name`/`user.email` of the global git config), else a clear default.
struct Identity {
    let name: String
    let email: String

    static func current() -> Identity {
        let environment = ProcessInfo.processInfo.environment
        var name = environment["GIT_AUTHOR_NAME"]
        var email = environment["GIT_AUTHOR_EMAIL"]
        if name == nil { name = gitConfig("user.name") }
        if email == nil { email = gitConfig("user.email") }
        return Identity(name: name ?? "fprep user", email: email ?? "fprep@localhost")
    }

    private static func gitConfig(_ key: String) -> String? {
        guard let data = try? GitCommand.run(["config", "--get", key]) else { return nil }
        let value = String(decoding: data, as: UTF8.self).trimmed
        return value.isEmpty ? nil : value
    }
}
