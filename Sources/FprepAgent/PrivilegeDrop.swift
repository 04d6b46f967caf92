import CFprepSys
import FprepCore
import Glibc

/// Whom the agent acts as for a replica: the owner of its folder, with
/// that user's group and supplementary groups. Everything the agent does
/// in a replica (its lock, journal and state, git, the files it writes)
/// runs in a worker process with these credentials, so a user's
/// `.git/config` or hooks never run as root, and the agent never writes
/// where the owner could not.
struct ReplicaOwner: Sendable, Equatable {
    let uid: uid_t
    let gid: gid_t
    let groups: [gid_t]
    /// From the password database, when the uid has an entry there.
    let name: String?
    let home: String?

    /// The owner of the replica at `root`. Refuses a replica whose `.git`
    /// or `.fprep` belongs to someone else than its folder's owner: no one
    /// user could act on all of it, and acting as either would hand one
    /// user's files to the other's programs.
    static func of(root: String) throws -> ReplicaOwner {
        var folder = fprep_stat()
        guard fprep_lstat_at(AT_FDCWD, root, &folder) == 0 else {
            throw FprepError("cannot look at the replica '\(root)': \(String(cString: strerror(errno)))")
        }
        for name in [".git", ".fprep"] {
            var inner = fprep_stat()
            guard fprep_lstat_at(AT_FDCWD, root + "/" + name, &inner) == 0 else {
                throw FprepError("cannot look at '\(root)/\(name)': \(String(cString: strerror(errno)))")
            }
            guard inner.uid == folder.uid else {
                throw FprepError("its \(name) belongs to \(userName(inner.uid)), not to the owner of the replica's folder (\(userName(folder.uid))); the agent acts for a replica as its owner only: 'chown -R' \(name) to the folder's owner")
            }
        }
        let uid = uid_t(truncatingIfNeeded: folder.uid)
        guard let entry = PasswordEntry(uid: uid) else {
            // No account: the folder's group is all there is to go by.
            let gid = gid_t(truncatingIfNeeded: folder.gid)
            return ReplicaOwner(uid: uid, gid: gid, groups: [gid], name: nil, home: nil)
        }
        return ReplicaOwner(uid: uid, gid: entry.gid, groups: entry.groups, name: entry.name, home: entry.home)
    }

    /// "uid 1000 (alice)", for messages.
    static func userName(_ uid: Int64) -> String {
        let name = PasswordEntry(uid: uid_t(truncatingIfNeeded: uid))?.name
        return "uid \(uid)" + (name.map { " (\($0))" } ?? "")
    }

    /// The environment the worker starts with: the agent's when the owner
    /// is the agent's user; for another user, only what says how programs
    /// behave (PATH, locale, git's and fprep's settings), never what
    /// reaches root's things (an ssh agent's socket, credentials), with the
    /// owner's home and name (git reads its global configuration from
    /// HOME, and one it cannot read is fatal).
    func environment(from agent: [String: String]) -> [String: String] {
        guard uid != getuid() else { return agent }
        let kept = ["PATH", "LANG", "LANGUAGE", "TZ"]
        var environment = agent.filter {
            kept.contains($0.key) || $0.key.hasPrefix("LC_") || $0.key.hasPrefix("GIT_") || $0.key.hasPrefix("FPREP_")
        }
        environment["HOME"] = home ?? "/"
        if let name {
            environment["USER"] = name
            environment["LOGNAME"] = name
        }
        return environment
    }

    /// Files of the replica's that an agent running as root left root's
    /// (its `.fprep/agent.pid`, the state's WAL and shared memory, the
    /// index it wrote): given to the owner, whose worker and commands could
    /// not open them otherwise. Only those names, directly in `.fprep` and
    /// `.git` (never through a symlink), and only a root-owned file with a
    /// single link. Returns how many were given.
    func reclaim(rootFD: Int32) -> Int {
        guard uid != 0 else { return 0 }
        let names = [".fprep": ["agent.pid", "state.db", "state.db-wal", "state.db-shm", "state.db-journal", "lock", "reserve"],
                     ".git": ["index"]]
        var given = 0
        for (folder, files) in names {
            let fd = fprep_open_folder_nofollow(rootFD, folder)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            // The folder itself is the owner's (checked by `of`): only then are its files theirs to have.
            guard owns(fd) else { continue }
            for name in files where fprep_reclaim_file(fd, name, uid, gid) == 1 { given += 1 }
        }
        return given
    }

    /// Whether the open file `fd` belongs to this owner (the agent marks
    /// only files the owner could write anyway: a hard link to someone
    /// else's file in the replica is never filled through root's descriptor).
    func owns(_ fd: Int32) -> Bool {
        var raw = fprep_stat()
        return fprep_fstat(fd, &raw) == 0 && raw.uid == Int64(uid)
    }
}

/// A user's entry in the password database, and the groups it is in.
private struct PasswordEntry {
    let name: String
    let gid: gid_t
    let home: String
    let groups: [gid_t]

    init?(uid: uid_t) {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16384)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &found) == 0, found != nil,
              let namePointer = entry.pw_name else { return nil }
        name = String(cString: namePointer)
        gid = entry.pw_gid
        home = entry.pw_dir.map { String(cString: $0) } ?? "/"
        var count: Int32 = 64
        var list = [gid_t](repeating: 0, count: Int(count))
        while getgrouplist(namePointer, gid, &list, &count) < 0 {
            list = [gid_t](repeating: 0, count: Int(count) + 64)
            count = Int32(list.count)
        }
        groups = Array(list.prefix(Int(count)))
    }
}
