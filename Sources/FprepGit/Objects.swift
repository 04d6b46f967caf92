import CLibCrypto
import CLibGit2
import Glibc

/// The kind of a tree entry, from its file mode.
public enum FileMode: Equatable, Sendable {
    case tree, blob, executable, symlink, submodule
    /// A mode git would not write; such an entry is refused.
    case unknown(UInt32)

    public init(raw: UInt32) {
        switch raw {
        case 0o040000: self = .tree
        case 0o100644, 0o100664: self = .blob
        case 0o100755: self = .executable
        case 0o120000: self = .symlink
        case 0o160000: self = .submodule
        default: self = .unknown(raw)
        }
    }

    /// The mode as git stores it.
    public var raw: UInt32 {
        switch self {
        case .tree: 0o040000
        case .blob: 0o100644
        case .executable: 0o100755
        case .symlink: 0o120000
        case .submodule: 0o160000
        case .unknown(let raw): raw
        }
    }

    public var isFile: Bool { self == .blob || self == .executable }
}

/// One entry of a tree, copied out of libgit2 (whose `git_tree_entry` pointers
/// live only as long as their tree). The name is bytes: git names need not
/// be UTF-8, and two names equal as Swift `String`s may be different entries.
public struct TreeEntry: Sendable {
    public let name: [UInt8]
    public let id: ObjectID
    public let mode: FileMode

    public init(name: [UInt8], id: ObjectID, mode: FileMode) {
        self.name = name
        self.id = id
        self.mode = mode
    }
}

/// A tree object; owns a `git_tree` (freed with `git_tree_free`).
public final class Tree {
    let pointer: OpaquePointer
    public let id: ObjectID

    init(taking pointer: OpaquePointer, id: ObjectID) {
        self.pointer = pointer
        self.id = id
    }

    deinit { git_tree_free(pointer) }

    public var count: Int { git_tree_entrycount(pointer) }

    /// The entries in git's order; wraps `git_tree_entry_byindex`.
    public var entries: [TreeEntry] {
        let n = count
        var result: [TreeEntry] = []
        result.reserveCapacity(n)
        for i in 0..<n {
            // "the returned entry is owned by the tree": copy it out now.
            guard let entry = git_tree_entry_byindex(pointer, i) else { continue }
            result.append(Self.copy(entry))
        }
        return result
    }

    /// The entry named `name`, if any; wraps `git_tree_entry_byname`.
    public func entry(named name: [UInt8]) -> TreeEntry? {
        var cName = name.map { CChar(bitPattern: $0) }
        cName.append(0)
        guard let entry = git_tree_entry_byname(pointer, cName) else { return nil }
        return Self.copy(entry)
    }

    static func copy(_ entry: OpaquePointer) -> TreeEntry {
        let namePointer = git_tree_entry_name(entry)!
        let length = strlen(namePointer)
        let name = namePointer.withMemoryRebound(to: UInt8.self, capacity: length) {
            Array(UnsafeBufferPointer(start: $0, count: length))
        }
        let id = ObjectID(git_tree_entry_id(entry)!.pointee)
        let mode = FileMode(raw: git_tree_entry_filemode_raw(entry).rawValue)
        return TreeEntry(name: name, id: id, mode: mode)
    }
}

/// A blob object; owns a `git_blob` (freed with `git_blob_free`).
public final class Blob {
    let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) { self.pointer = pointer }
    deinit { git_blob_free(pointer) }

    public var size: Int { Int(git_blob_rawsize(pointer)) }

    /// Calls `body` with the blob's bytes, which live only as long as the blob.
    public func withContent<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: git_blob_rawcontent(pointer), count: size))
    }
}

/// A commit object; owns a `git_commit` (freed with `git_commit_free`).
public final class Commit {
    let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) { self.pointer = pointer }
    deinit { git_commit_free(pointer) }

    public var id: ObjectID { ObjectID(git_commit_id(pointer)!.pointee) }
    public var treeID: ObjectID { ObjectID(git_commit_tree_id(pointer)!.pointee) }
    /// Committer time, seconds since the epoch.
    public var time: Int64 { Int64(git_commit_time(pointer)) }

    /// The author's name and email ("Name <email>"), as recorded.
    public var author: String {
        guard let signature = git_commit_author(pointer)?.pointee else { return "" }
        let name = signature.name.map { String(cString: $0) } ?? ""
        let email = signature.email.map { String(cString: $0) } ?? ""
        return email.isEmpty ? name : "\(name) <\(email)>"
    }

    /// When the author made it, seconds since the epoch.
    public var authorTime: Int64 { git_commit_author(pointer).map { Int64($0.pointee.when.time) } ?? time }

    /// The full message, as written.
    public var message: String {
        guard let raw = git_commit_message_raw(pointer) else { return "" }
        return String(cString: raw)
    }

    /// Calls `body` with the raw message bytes, without copying them.
    public func withMessageBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        guard let raw = git_commit_message_raw(pointer) else { return try body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        return try body(UnsafeRawBufferPointer(start: raw, count: strlen(raw)))
    }

    public var parentIDs: [ObjectID] {
        (0..<git_commit_parentcount(pointer)).compactMap { i in
            git_commit_parent_id(pointer, i).map { ObjectID($0.pointee) }
        }
    }
}

/// Builds one tree level; owns a `git_treebuilder` (freed with `git_treebuilder_free`).
public final class TreeBuilder {
    let pointer: OpaquePointer
    /// Told of each tree written (the repository's record of written objects).
    private let onWrite: (ObjectID) -> Void

    init(taking pointer: OpaquePointer, onWrite: @escaping (ObjectID) -> Void) {
        self.pointer = pointer
        self.onWrite = onWrite
    }
    deinit { git_treebuilder_free(pointer) }

    /// Adds or replaces an entry; wraps `git_treebuilder_insert`.
    public func insert(name: [UInt8], id: ObjectID, mode: FileMode) throws {
        var cName = name.map { CChar(bitPattern: $0) }
        cName.append(0)
        var raw = id.raw
        try check(git_treebuilder_insert(nil, pointer, cName, &raw, git_filemode_t(mode.raw)),
                  "git_treebuilder_insert")
    }

    /// Writes the tree; wraps `git_treebuilder_write`.
    public func write() throws -> ObjectID {
        var oid = git_oid()
        try check(git_treebuilder_write(&oid, pointer), "git_treebuilder_write")
        onWrite(ObjectID(oid))
        return ObjectID(oid)
    }
}

/// A repository's object database; owns a `git_odb` (freed with `git_odb_free`).
public final class ObjectDatabase {
    let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) { self.pointer = pointer }
    deinit { git_odb_free(pointer) }

    /// The object database of the objects folder at `path` (its loose
    /// objects, its packs and the alternates it names), a handle of its
    /// own: libgit2 holds one lock per handle over each read, its
    /// inflation included, so threads reading many objects at once each
    /// need one. Wraps `git_odb_open`.
    public convenience init(objectsFolder path: String) throws {
        var odb: OpaquePointer?
        try check(git_odb_open(&odb, path), "git_odb_open")
        guard let odb else { throw GitError(code: .notFound, message: "no object database at \(path)", function: "git_odb_open") }
        self.init(taking: odb)
    }

    /// Whether the object is here (a partial clone's missing blob is not);
    /// wraps `git_odb_exists`.
    public func contains(_ id: ObjectID) -> Bool {
        var raw = id.raw
        return git_odb_exists(pointer, &raw) == 1
    }

    /// Those of `ids` the database does not hold, in their order: the pack
    /// folders rescanned once, then each asked for without a rescan.
    /// `contains` rescans them on every miss (an open, a readdir and a look
    /// for a loose object each: asking for the 1,000 blobs a materialize
    /// needed cost it 20 ms before its fetch could start); this is for
    /// many objects, most of them missing. Wraps `git_odb_exists_ext` with
    /// `GIT_ODB_LOOKUP_NO_REFRESH`.
    public func missing<S: Sequence>(among ids: S) -> [ObjectID] where S.Element == ObjectID {
        _ = git_odb_refresh(pointer)
        return ids.filter { id in
            var raw = id.raw
            return git_odb_exists_ext(pointer, &raw, UInt32(GIT_ODB_LOOKUP_NO_REFRESH.rawValue)) != 1
        }
    }

    /// The size of an object from its header, without reading its content;
    /// nil when the object is not here.
    public func size(of id: ObjectID) throws -> Int? { try header(of: id)?.size }

    /// Whether the object here is a blob, from its header; nil when it is
    /// not here.
    public func isBlob(_ id: ObjectID) throws -> Bool? { try header(of: id).map { $0.type == GIT_OBJECT_BLOB } }

    /// An object's size and type without its content; nil when it is not
    /// here. Wraps `git_odb_read_header`.
    private func header(of id: ObjectID) throws -> (size: Int, type: git_object_t)? {
        var raw = id.raw
        var length = 0
        var type = GIT_OBJECT_ANY
        do {
            try check(git_odb_read_header(&length, &type, pointer, &raw), "git_odb_read_header")
        } catch GitError.notFound {
            return nil
        }
        return (length, type)
    }

    /// Hands `body` an object's bytes as stored (a commit's headers and
    /// message, say) without parsing or copying them; the bytes are freed
    /// when it returns. Wraps `git_odb_read`.
    public func withRawObject<R>(_ id: ObjectID, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        var raw = id.raw
        var object: OpaquePointer?
        try check(git_odb_read(&object, pointer, &raw), "git_odb_read")
        guard let object else { throw GitError(code: .notFound, message: "object \(id) not read", function: "git_odb_read") }
        defer { git_odb_object_free(object) }
        return try body(UnsafeRawBufferPointer(start: git_odb_object_data(object), count: git_odb_object_size(object)))
    }

    /// Rescans the pack folder so objects a `git fetch` just wrote are seen;
    /// wraps `git_odb_refresh`.
    public func refresh() throws {
        try check(git_odb_refresh(pointer), "git_odb_refresh")
    }

    /// Also reads objects from the objects folder at `path` (a fetch's
    /// quarantine); wraps `git_odb_add_disk_alternate`.
    public func addAlternate(_ path: String) throws {
        try check(git_odb_add_disk_alternate(pointer, path), "git_odb_add_disk_alternate")
        AlternatesInUse.shared.insert(path)
    }

    /// Whether `bytes`, read from this repository's object database, are
    /// the blob `id`: a check against damage between the object's arrival
    /// and its use (content about to be written into the replica). Plain
    /// SHA-1 through libcrypto (the CPU's SHA instructions), not libgit2's
    /// collision-detecting SHA-1 (`blobID(of:)`), which took 5 times as long
    /// and was the largest cost of materialize's own work: a collision
    /// attack is caught when the object arrives (`git index-pack` hashes
    /// each object of a fetch with collision detection). Bytes from any
    /// other source (a file on the disk) go through `blobID(of:)`.
    public static func isBlob(_ bytes: UnsafeRawBufferPointer, id: ObjectID) -> Bool {
        let header = Array("blob \(bytes.count)\0".utf8)
        // libcrypto failing (no SHA-1 provider): libgit2's hash decides.
        guard let digest = header.withUnsafeBytes({ sha1($0, bytes) }) else { return (try? blobID(of: bytes)) == id }
        return ObjectID(bytes: digest) == id
    }

    /// The SHA-1 of `first` followed by `second` through libcrypto; nil when it fails.
    private static func sha1(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> [UInt8]? {
        guard let context = fprep_sha1_begin() else { return nil }
        var digest = [UInt8](repeating: 0, count: 20)
        let fed = [first, second].allSatisfy { $0.isEmpty || fprep_sha1_update(context, $0.baseAddress, $0.count) == 0 }
        // Ended either way: that frees the context.
        return fprep_sha1_end(context, &digest) == 0 && fed ? digest : nil
    }

    /// The blob id of `bytes`; wraps `git_odb_hash`.
    public static func blobID(of bytes: UnsafeRawBufferPointer) throws -> ObjectID {
        LibGit2.ensure()
        var oid = git_oid()
        try check(git_odb_hash(&oid, bytes.baseAddress, bytes.count, GIT_OBJECT_BLOB), "git_odb_hash")
        return ObjectID(oid)
    }

    /// The blob id of the file at `path`, read as it is (no filters); wraps `git_odb_hashfile`.
    public static func blobID(ofFile path: String) throws -> ObjectID {
        LibGit2.ensure()
        var oid = git_oid()
        try check(git_odb_hashfile(&oid, path, GIT_OBJECT_BLOB), "git_odb_hashfile")
        return ObjectID(oid)
    }
}

/// A repository configuration; owns a `git_config` (freed with `git_config_free`).
public final class Config {
    let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) { self.pointer = pointer }
    deinit { git_config_free(pointer) }

    /// The config file at `path` alone (a repository's own `config`, without
    /// the user's and the system's): read without opening the repository;
    /// wraps `git_config_open_ondisk`.
    public convenience init(file path: String) throws {
        LibGit2.ensure()
        var cfg: OpaquePointer?
        try check(git_config_open_ondisk(&cfg, path), "git_config_open_ondisk")
        guard let cfg else { throw GitError(code: .notFound, message: "no config at \(path)", function: "git_config_open_ondisk") }
        self.init(taking: cfg)
    }

    /// The value of `name`, or nil when it is not set; wraps `git_config_get_string_buf`.
    public func string(_ name: String) throws -> String? {
        var buffer = git_buf()
        defer { git_buf_dispose(&buffer) }
        do {
            try check(git_config_get_string_buf(&buffer, pointer, name), "git_config_get_string_buf")
        } catch GitError.notFound {
            return nil
        }
        guard let ptr = buffer.ptr else { return "" }
        return String(cString: ptr)
    }

    /// The boolean value of `name` (git's spellings: true, yes, on, 1…), or
    /// nil when it is not set; wraps `git_config_get_bool`.
    public func bool(_ name: String) throws -> Bool? {
        var value: Int32 = 0
        do {
            try check(git_config_get_bool(&value, pointer, name), "git_config_get_bool")
        } catch GitError.notFound {
            return nil
        }
        return value != 0
    }

    /// Sets `name` in the repository's own config file; wraps `git_config_set_string`.
    public func set(_ name: String, _ value: String) throws {
        try check(git_config_set_string(pointer, name, value), "git_config_set_string")
    }

    /// Every value of a multi-valued `name`, in the files' order (empty when
    /// unset); wraps `git_config_multivar_iterator_new`.
    public func strings(_ name: String) throws -> [String] {
        var iterator: OpaquePointer?
        do {
            try check(git_config_multivar_iterator_new(&iterator, pointer, name, nil), "git_config_multivar_iterator_new")
        } catch GitError.notFound {
            return []
        }
        defer { git_config_iterator_free(iterator) }
        var values: [String] = []
        var entry: UnsafeMutablePointer<git_config_entry>?
        while true {
            let status = git_config_next(&entry, iterator)
            if status == GIT_ITEROVER.rawValue { break }
            try check(status, "git_config_next")
            if let value = entry?.pointee.value { values.append(String(cString: value)) }
        }
        return values
    }

    /// Adds `value` to the multi-valued `name` unless it is there already;
    /// wraps `git_config_set_multivar`.
    public func add(_ name: String, _ value: String) throws {
        try check(git_config_set_multivar(pointer, name, Self.exactly(value), value), "git_config_set_multivar")
    }

    /// Removes `value` from the multi-valued `name` (nothing when it is not
    /// there); wraps `git_config_delete_multivar`.
    public func remove(_ name: String, _ value: String) throws {
        do {
            try check(git_config_delete_multivar(pointer, name, Self.exactly(value)), "git_config_delete_multivar")
        } catch GitError.notFound {
            return
        }
    }

    /// A regular expression that matches `value` and nothing else.
    private static func exactly(_ value: String) -> String {
        "^" + value.map { "\\^$.|?*+()[]{}".contains($0) ? "\\\($0)" : String($0) }.joined() + "$"
    }
}

/// The object folders this process added to an object database as
/// alternates. libgit2 cannot drop an alternate again, and once its folder
/// is gone every later refresh of the database fails, so a lookup of an
/// object fetched afterwards (a new pack in the repository's own folder)
/// finds nothing: such a folder may be emptied, never removed, while the
/// process runs.
public final class AlternatesInUse: @unchecked Sendable {
    public static let shared = AlternatesInUse()
    private var paths = Set<String>()
    private var lock = pthread_mutex_t()

    private init() { pthread_mutex_init(&lock, nil) }

    func insert(_ path: String) {
        pthread_mutex_lock(&lock)
        defer { pthread_mutex_unlock(&lock) }
        paths.insert(path)
    }

    /// Whether `path` (an objects folder) is an alternate of this process.
    public func contains(_ path: String) -> Bool {
        pthread_mutex_lock(&lock)
        defer { pthread_mutex_unlock(&lock) }
        return paths.contains(path)
    }
}
