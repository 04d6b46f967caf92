import CLibGit2

/// An open git repository; owns a `git_repository` and frees it with
/// `git_repository_free`. libgit2 objects are single-thread: keep a
/// `Repository` and what it returns on one thread.
public final class Repository {
    let pointer: OpaquePointer
    /// Objects this handle wrote that no `takeWrittenObjects` took yet.
    /// libgit2 writes them loose and, like git by default, does not flush
    /// them: fprep makes them durable before a record names them.
    /// Past `writtenKept` (an import of a whole tree), only that there were more.
    private var written: [ObjectID] = []
    private var writtenOverflow = false
    private static let writtenKept = 1024

    /// The objects written since the last call, for their caller to flush;
    /// nil when there were too many to list (flush the whole filesystem).
    public func takeWrittenObjects() -> [ObjectID]? {
        defer {
            written = []
            writtenOverflow = false
        }
        return writtenOverflow ? nil : written
    }

    /// An object the caller names that another program may have written
    /// loose (git): flushed with those this handle wrote.
    public func noteForFlush(_ id: ObjectID) { noteWritten(id) }

    private func noteWritten(_ id: ObjectID) {
        guard !writtenOverflow else { return }
        guard written.count < Self.writtenKept else {
            writtenOverflow = true
            written = []
            return
        }
        written.append(id)
    }

    /// Opens the repository at `path` (a work tree or a git directory);
    /// wraps `git_repository_open_ext` without searching parent folders.
    public init(openingAt path: String) throws {
        LibGit2.ensure()
        var repo: OpaquePointer?
        try check(git_repository_open_ext(&repo, path, GIT_REPOSITORY_OPEN_NO_SEARCH.rawValue, nil),
                  "git_repository_open_ext")
        guard let repo else { throw GitError(code: .notFound, message: "no repository at \(path)", function: "git_repository_open_ext") }
        pointer = repo
    }

    /// Creates a new bare repository whose HEAD names `initialBranch`;
    /// wraps `git_repository_init_ext`.
    public init(creatingBareAt path: String, initialBranch: String) throws {
        LibGit2.ensure()
        var options = git_repository_init_options()
        try check(git_repository_init_options_init(&options, UInt32(GIT_REPOSITORY_INIT_OPTIONS_VERSION)),
                  "git_repository_init_options_init")
        options.flags = GIT_REPOSITORY_INIT_BARE.rawValue | GIT_REPOSITORY_INIT_MKPATH.rawValue
        var repo: OpaquePointer?
        try initialBranch.withCString { branch in
            options.initial_head = branch
            try check(git_repository_init_ext(&repo, path, &options), "git_repository_init_ext")
        }
        guard let repo else { throw GitError(code: .other(-1), message: "init returned no repository", function: "git_repository_init_ext") }
        pointer = repo
    }

    deinit { git_repository_free(pointer) }

    /// The git directory (`.git` of a work tree, or the bare repository).
    public var gitDirectory: String { String(cString: git_repository_path(pointer)) }

    public var isBare: Bool { git_repository_is_bare(pointer) == 1 }

    // MARK: objects

    /// The object database of this repository; wraps `git_repository_odb`.
    public func objectDatabase() throws -> ObjectDatabase {
        var odb: OpaquePointer?
        try check(git_repository_odb(&odb, pointer), "git_repository_odb")
        guard let odb else { throw GitError(code: .notFound, message: "no object database", function: "git_repository_odb") }
        return ObjectDatabase(taking: odb)
    }

    /// Looks up a commit; wraps `git_commit_lookup`.
    /// What a commit id, full or a unique prefix of 4 or more hex digits,
    /// names: the commit's id, or nil when no commit has that prefix.
    /// Throws `.ambiguous` when several do. (Ids only: no ref names or
    /// revision syntax, which a user's file name could spell.)
    public func commitID(prefix text: String) throws -> ObjectID? {
        let hex = text.lowercased()
        guard (4...40).contains(hex.count), hex.allSatisfy({ $0.isHexDigit }) else { return nil }
        var raw = git_oid()
        guard git_oid_fromstrn(&raw, hex, hex.utf8.count) == 0 else { return nil }
        var object: OpaquePointer?
        do {
            try check(git_object_lookup_prefix(&object, pointer, &raw, hex.utf8.count, GIT_OBJECT_COMMIT), "git_object_lookup_prefix")
        } catch GitError.notFound {
            return nil
        }
        guard let object else { return nil }
        defer { git_object_free(object) }
        return git_object_id(object).map { ObjectID($0.pointee) }
    }

    public func commit(_ id: ObjectID) throws -> Commit {
        var raw = id.raw
        var commit: OpaquePointer?
        try check(git_commit_lookup(&commit, pointer, &raw), "git_commit_lookup")
        guard let commit else { throw GitError(code: .notFound, message: "no commit \(id)", function: "git_commit_lookup") }
        return Commit(taking: commit)
    }

    /// Looks up a tree; wraps `git_tree_lookup`.
    public func tree(_ id: ObjectID) throws -> Tree {
        var raw = id.raw
        var tree: OpaquePointer?
        try check(git_tree_lookup(&tree, pointer, &raw), "git_tree_lookup")
        guard let tree else { throw GitError(code: .notFound, message: "no tree \(id)", function: "git_tree_lookup") }
        return Tree(taking: tree, id: id)
    }

    /// Looks up a blob; wraps `git_blob_lookup`. A blob a partial clone does
    /// not hold is `GitError.notFound` (libgit2 never fetches it).
    public func blob(_ id: ObjectID) throws -> Blob {
        var raw = id.raw
        var blob: OpaquePointer?
        try check(git_blob_lookup(&blob, pointer, &raw), "git_blob_lookup")
        guard let blob else { throw GitError(code: .notFound, message: "no blob \(id)", function: "git_blob_lookup") }
        return Blob(taking: blob)
    }

    /// Writes `bytes` as a blob; wraps `git_blob_create_from_buffer`.
    public func writeBlob(_ bytes: UnsafeRawBufferPointer) throws -> ObjectID {
        var oid = git_oid()
        try check(git_blob_create_from_buffer(&oid, pointer, bytes.baseAddress, bytes.count),
                  "git_blob_create_from_buffer")
        noteWritten(ObjectID(oid))
        return ObjectID(oid)
    }

    /// Writes the file at `path` as a blob, streaming it; wraps `git_blob_create_from_disk`.
    public func writeBlob(fromFile path: [UInt8]) throws -> ObjectID {
        var cPath = path.map { CChar(bitPattern: $0) }
        cPath.append(0)
        var oid = git_oid()
        try check(git_blob_create_from_disk(&oid, pointer, cPath), "git_blob_create_from_disk")
        noteWritten(ObjectID(oid))
        return ObjectID(oid)
    }

    /// Writes a commit object without moving any reference; wraps `git_commit_create`.
    public func writeCommit(tree: ObjectID, parents: [ObjectID], message: String,
                            author: Signature, committer: Signature) throws -> ObjectID {
        let treeObject = try self.tree(tree)
        let parentObjects = try parents.map { try commit($0) }
        let authorSig = try author.make()
        defer { git_signature_free(authorSig) }
        let committerSig = try committer.make()
        defer { git_signature_free(committerSig) }
        var parentPointers: [OpaquePointer?] = parentObjects.map { $0.pointer }
        var oid = git_oid()
        _ = try parentPointers.withUnsafeMutableBufferPointer { buffer in
            try check(git_commit_create(&oid, pointer, nil, authorSig, committerSig, nil, message,
                                        treeObject.pointer, parentObjects.count, buffer.baseAddress),
                      "git_commit_create")
        }
        withExtendedLifetime(parentObjects) {}
        noteWritten(ObjectID(oid))
        return ObjectID(oid)
    }

    /// A builder for a new tree; wraps `git_treebuilder_new`.
    public func treeBuilder() throws -> TreeBuilder {
        var builder: OpaquePointer?
        try check(git_treebuilder_new(&builder, pointer, nil), "git_treebuilder_new")
        guard let builder else { throw GitError(code: .other(-1), message: "no tree builder", function: "git_treebuilder_new") }
        return TreeBuilder(taking: builder) { [weak self] in self?.noteWritten($0) }
    }

    /// Whether `commit` is `ancestor` or descends from it; wraps `git_graph_descendant_of`.
    public func isAncestor(_ ancestor: ObjectID, of commit: ObjectID) throws -> Bool {
        if ancestor == commit { return true }
        var a = commit.raw, b = ancestor.raw
        return try check(git_graph_descendant_of(pointer, &a, &b), "git_graph_descendant_of") == 1
    }

    // MARK: references

    /// The object a reference points at, peeled to a commit when it is a
    /// symbolic one; nil when the reference does not exist. Wraps
    /// `git_reference_name_to_id`.
    public func referenceTarget(_ name: String) throws -> ObjectID? {
        var oid = git_oid()
        do {
            try check(git_reference_name_to_id(&oid, pointer, name), "git_reference_name_to_id")
        } catch GitError.notFound {
            return nil
        }
        return ObjectID(oid)
    }

    /// The direct references whose names start with `prefix`, with their
    /// targets; wraps `git_reference_iterator_glob_new`.
    public func references(under prefix: String) throws -> [(name: String, target: ObjectID)] {
        var iterator: OpaquePointer?
        try check(git_reference_iterator_glob_new(&iterator, pointer, prefix + "*"), "git_reference_iterator_glob_new")
        defer { git_reference_iterator_free(iterator) }
        var found: [(name: String, target: ObjectID)] = []
        while true {
            var ref: OpaquePointer?
            let result = git_reference_next(&ref, iterator)
            if result == GIT_ITEROVER.rawValue { return found }
            try check(result, "git_reference_next")
            defer { git_reference_free(ref) }
            if let name = git_reference_name(ref), let target = git_reference_target(ref) {
                found.append((String(cString: name), ObjectID(target.pointee)))
            }
        }
    }

    /// The reference a symbolic reference points at (`HEAD` → `refs/heads/main`);
    /// nil when `name` is missing or not symbolic. Wraps `git_reference_lookup`.
    public func symbolicTarget(_ name: String) throws -> String? {
        var ref: OpaquePointer?
        do {
            try check(git_reference_lookup(&ref, pointer, name), "git_reference_lookup")
        } catch GitError.notFound {
            return nil
        }
        defer { git_reference_free(ref) }
        guard git_reference_type(ref) == GIT_REFERENCE_SYMBOLIC, let target = git_reference_symbolic_target(ref) else { return nil }
        return String(cString: target)
    }

    /// Points `name` at `target`, only if it still points at `expected` (nil:
    /// only if it does not exist yet), so two writers never lose an update.
    /// Wraps `git_reference_create_matching`.
    public func updateReference(_ name: String, to target: ObjectID, expecting expected: ObjectID?,
                                message: String) throws {
        var targetRaw = target.raw
        var ref: OpaquePointer?
        if var expectedRaw = expected?.raw {
            try check(git_reference_create_matching(&ref, pointer, name, &targetRaw, 1, &expectedRaw, message),
                      "git_reference_create_matching")
        } else {
            try check(git_reference_create(&ref, pointer, name, &targetRaw, 0, message), "git_reference_create")
        }
        git_reference_free(ref)
    }

    /// Points `name` at `target` whatever it pointed at; wraps `git_reference_create` (forced).
    public func setReference(_ name: String, to target: ObjectID, message: String) throws {
        CrashPoint.reach()
        var targetRaw = target.raw
        var ref: OpaquePointer?
        try check(git_reference_create(&ref, pointer, name, &targetRaw, 1, message), "git_reference_create")
        git_reference_free(ref)
    }

    /// Makes `name` a symbolic reference to `target`; wraps `git_reference_symbolic_create`.
    public func setSymbolicReference(_ name: String, to target: String) throws {
        var ref: OpaquePointer?
        try check(git_reference_symbolic_create(&ref, pointer, name, target, 1, nil), "git_reference_symbolic_create")
        git_reference_free(ref)
    }

    // MARK: config and index

    /// This repository's configuration; wraps `git_repository_config`.
    public func config() throws -> Config {
        var cfg: OpaquePointer?
        try check(git_repository_config(&cfg, pointer), "git_repository_config")
        guard let cfg else { throw GitError(code: .notFound, message: "no config", function: "git_repository_config") }
        return Config(taking: cfg)
    }

    /// Whether git's ignore rules (`.gitignore` files of the work tree,
    /// `info/exclude`, `core.excludesFile`) leave `path` out, as `git
    /// check-ignore --no-index` says: whether or not the index has it, and
    /// true below an ignored folder. `path` is relative to the work tree,
    /// with a trailing `/` for a folder. Reads the `.gitignore` files on the
    /// way down: the caller makes sure none of them is a placeholder.
    /// Wraps `git_ignore_path_is_ignored`.
    public func isIgnored(_ path: [UInt8]) throws -> Bool {
        var ignored: Int32 = 0
        let text = path.map { CChar(bitPattern: $0) } + [0]
        try check(git_ignore_path_is_ignored(&ignored, pointer, text), "git_ignore_path_is_ignored")
        return ignored == 1
    }

    /// The repository's index, as the file on disk has it now.
    public func index() throws -> Index {
        let index = try Index(path: gitDirectory + "index")
        index.splitSetting = { [self] in splitIndexSetting() }
        return index
    }

    /// git's `core.splitIndex` (nil when unset, or unreadable: fprep then
    /// decides by the index's size).
    public func splitIndexSetting() -> Bool? {
        try? config().bool("core.splitIndex")
    }
}

/// An author or committer identity with a fixed time.
public struct Signature: Sendable {
    public var name: String
    public var email: String
    /// Seconds since the epoch.
    public var time: Int64
    /// Offset from UTC in minutes.
    public var offsetMinutes: Int32

    public init(name: String, email: String, time: Int64, offsetMinutes: Int32 = 0) {
        self.name = name
        self.email = email
        self.time = time
        self.offsetMinutes = offsetMinutes
    }

    /// The caller frees the result with `git_signature_free` (wraps `git_signature_new`).
    func make() throws -> UnsafeMutablePointer<git_signature> {
        var sig: UnsafeMutablePointer<git_signature>?
        try check(git_signature_new(&sig, name, email, git_time_t(time), offsetMinutes), "git_signature_new")
        guard let sig else { throw GitError(code: .invalid, message: "bad signature", function: "git_signature_new") }
        return sig
    }
}
