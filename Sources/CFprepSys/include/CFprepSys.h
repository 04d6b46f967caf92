#ifndef FPREP_CFPREPSYS_H
#define FPREP_CFPREPSYS_H
#include <stdint.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <time.h>

/* Opens `path` (relative, '/'-separated) below `dirfd` without following any
 * symlink and without leaving `dirfd`: openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS),
 * or, on kernels without openat2, a walk of O_NOFOLLOW opens one component at a time.
 * Returns the fd or -1 with errno set (ELOOP when a symlink is in the way). */
int fprep_open_beneath(int dirfd, const char *path, int flags, mode_t mode);

struct fprep_stat;
/* Opens the regular file at `path` below `dirfd` (as fprep_open_beneath, plus
 * O_NONBLOCK|O_NOCTTY) for its content: a FIFO, socket or device is looked at
 * with fstatat and never opened. Fills `out` with the file's stat. Returns the
 * fd; -1 with errno set; -2 when it is not a regular file (`out` says what). */
int fprep_open_regular(int dirfd, const char *path, int flags, struct fprep_stat *out);

/* A write lease on the open file `fd` (F_SETLEASE F_WRLCK): granted only
 * while no one else has the file open; then every other open waits until it
 * is released (fprep_release_lease). -1 with EAGAIN: open elsewhere; other
 * errno: leases unsupported here (filesystem, or not the file's owner). */
int fprep_take_write_lease(int fd);
/* A read lease on `fd` (open for reading; F_SETLEASE F_RDLCK): granted only
 * while no one has the file open for writing; then an open for writing (or a
 * truncate) waits until it is released. Readers neither refuse nor wait. */
int fprep_take_read_lease(int fd);
int fprep_release_lease(int fd);

/* Opens the file `fd` is open on anew, with `flags` (through
 * /proc/self/fd: also a file with no name left). -1 with errno set. */
int fprep_reopen(int fd, int flags);

/* Swaps the names `a` and `b` in `dirfd` atomically (renameat2 RENAME_EXCHANGE). */
int fprep_rename_exchange(int dirfd, const char *a, const char *b);

/* Renames `from` to `to` in `dirfd` unless `to` exists (renameat2
 * RENAME_NOREPLACE; EEXIST then). */
int fprep_rename_noreplace(int dirfd, const char *from, const char *to);

/* As fprep_rename_noreplace, from one folder to another. */
int fprep_rename_noreplace_between(int from_dirfd, const char *from, int to_dirfd, const char *to);

/* Whether the open regular file `fd` holds no data (no data extents, or only
 * zeros): 1 yes, 0 no, -1 error. */
int fprep_holds_no_data(int fd);

/* Creates a placeholder: a new regular file (O_EXCL, never through a symlink) of
 * `size` bytes with no data blocks, the xattrs `user.fprep.state`=`dataless` and
 * `user.fprep.blob`=the blob id's raw bytes, and the given mtime. Fills `out` with
 * the final stat unless it is NULL. Returns 0 or -1 with errno set.
 * The id is stored raw (20 bytes), not as 40 hex digits: both attributes then fit
 * inside an ext4 inode, so a placeholder takes no block at all. */
int fprep_create_placeholder(int dirfd, const char *name, mode_t mode, off_t size,
                             const unsigned char *blob_id, size_t blob_len,
                             long long mtime_sec, long mtime_nsec, struct stat *out);

/* Turns the open regular file `fd` back into a placeholder in place: frees every
 * data block (fallocate PUNCH_HOLE, size kept), marks it with the placeholder
 * xattrs and restores its mtime. Fills `out` with the final stat. */
int fprep_punch_to_placeholder(int fd, const unsigned char *blob_id, size_t blob_len,
                               long long mtime_sec, long mtime_nsec, struct stat *out);

/* Removes the placeholder xattrs from the open file `fd` (a file that holds
 * its content again); attributes that are not there are no error. */
int fprep_clear_placeholder_marks(int fd);

/* The mark of a file fprep writes at a temporary name (its value: the
 * operation's token), so that recovery removes only files it can prove
 * are its own, never a user's file a rename put at that name. */
#define FPREP_TEMPORARY_MARK "user.fprep.temporary"

/* Creates `name` in `dirfd` for writing, marked with `token` before it
 * has its name (O_TMPFILE, then a link); returns the descriptor or -1. */
int fprep_create_marked_temporary(int dirfd, const char *name, mode_t mode, const char *token);

/* 1 when the open file carries the temporary mark of `token`. */
int fprep_is_marked_temporary(int fd, const char *token);

/* The mark of an old version a sync swapped out while a program had it
 * open for writing (a held file): the blob it held and whether it was a
 * placeholder, so it can be judged wherever it is found (a folder moved
 * with it in it). */
#define FPREP_HELD_MARK "user.fprep.held"
int fprep_mark_held(int fd, const unsigned char *blob_id, size_t blob_len, int dataless);
/* 1 and the blob (20 bytes) and flag when the file carries the held mark. */
int fprep_held_mark(int fd, unsigned char *blob_id, int *dataless);
int fprep_clear_held_mark(int fd);

/* Flushes the whole filesystem that holds `fd` (syncfs(2)): one call makes a
 * batch of written files durable, instead of one fsync per file. */
int fprep_syncfs(int fd);

/* Reads xattr `name` of the file at `dirfd`/`name` without following a symlink
 * into `buf`; returns its length or -1. */
/* One placeholder to lay out: made as `temporary` in dirfd, then renamed
 * to `name`, never over something there (EEXIST). error receives 0 or the
 * errno of the step that failed (the temporary is removed then). */
struct fprep_placeholder_job {
    int dirfd;
    const char *temporary;
    const char *name;
    mode_t mode;
    off_t size;
    const unsigned char *blob_id;   /* 20 bytes */
    long long mtime_sec;
    int *error;
    /* Made, not renamed: fprep_rename_placeholders does that, after the
     * agent serving the replica was asked to watch the temporaries. */
    int create_only;
};
/* Runs the jobs on `threads` threads: on a cold cache the inode reads and
 * allocations of files in scattered folders overlap. */
void fprep_create_placeholders(const struct fprep_placeholder_job *jobs, size_t count, int threads);
/* The renames of jobs made with create_only (jobs whose error is set are skipped). */
void fprep_rename_placeholders(const struct fprep_placeholder_job *jobs, size_t count, int threads);

/* Looks up (fstatat, no symlink followed at the end) every path beneath
 * dirfd, results dropped, on several threads when the first lookups show a
 * cold cache (see fprep_parallel_for_disk): the folder and inode reads of
 * scattered paths then overlap instead of coming one after another. Only a
 * warm-up; nothing is decided from it. */
void fprep_prefetch_paths(int dirfd, const char *const *paths, size_t count, int threads, int folders_change);

/* Calls job(context, i) for every i below count on up to `threads` threads
 * (this one included), each taking the next i; returns when all are done
 * (see parallel.c). For Swift work on files that waits on the filesystem. */
void fprep_parallel_for(size_t count, int threads, void (*job)(void *context, size_t i), void *context);


/* The stat scan of an index (git's version 2/3 entry layout at base +
 * offsets[i], in path order): every entry's file is looked at once with
 * fstatat relative to its folder, folders opened one component at a time
 * without following symlinks, and classified against its stat data. */
enum {
    FPREP_SCAN_CLEAN = 0,      /* stat data unchanged (not racy): content unchanged */
    FPREP_SCAN_DATALESS = 1,   /* a placeholder that still holds nothing */
    FPREP_SCAN_CHECK = 2,      /* changed stat data: the caller looks closer */
    FPREP_SCAN_MISSING = 3,    /* gone (or its folder is) */
    FPREP_SCAN_SUBMODULE = 4,
    FPREP_SCAN_LINKED = 0x10,  /* a bit on the state: a regular file with more than one link */
};
/* One folder the entries live in, in the order first met (the root first). */
struct fprep_scan_dir {
    uint32_t entry;            /* an entry whose path starts with the folder's */
    uint32_t length;           /* the folder path's length in that entry's path */
    int opened;                /* 0: missing, not a folder, or a symlink */
    long long mtime_sec, mtime_nsec, ctime_sec, ctime_nsec;
    unsigned long long inode;
    long long blocks;
    unsigned long long names_hash;   /* sum of the hashes of the names the index has directly in it */
};
struct fprep_scan_result {
    struct fprep_scan_dir *dirs;
    size_t dir_count, dir_capacity;
    long long blocks;          /* of the files seen (folders' own are in dirs) */
};
#define FPREP_SCAN_MAX_PARTS 16
/* Scans in `parts` ranges of entries at once; each part's folders go to
 * out[k] (a folder split between two parts is in both, its names_hash
 * split between them: the hashes add up). states has one byte per entry.
 * Returns the number of parts used; -1 out of memory; -2 a path too deep
 * or too long (scan otherwise). */
/* The two moments a scan compares dates with: when the index file was
 * written (git's racily-clean rule for files with content), and when the
 * last scan that looked at every placeholder began (a placeholder's index
 * entry keeps only its size and date, so a change of its inode after that
 * moment is found by its ctime; an index written since, by a command that
 * did not look, proves nothing about the placeholders). */
struct fprep_scan_times {
    long long index_sec, index_nsec;
    long long checked_sec, checked_nsec;
};
int fprep_scan_index(int rootfd, const uint8_t *base, const int32_t *offsets, size_t count,
                     struct fprep_scan_times times, int parts,
                     unsigned char *states, struct fprep_scan_result *out);
void fprep_scan_result_free(struct fprep_scan_result *result);

/* Whether a regular file beneath dirfd holds no data: no data extents (its
 * blocks are extended attributes), or only zeros. 1 yes, 0 no, -1 error. */
int fprep_holds_no_data_at(int dirfd, const char *path);

/* An extended attribute of the item at `path` beneath dirfd (never through
 * a symlink; a symlink itself fails with ELOOP), read without opening the
 * file for its content: the agent is asked nothing (see `probe_one`). */
ssize_t fprep_get_xattr_at(int dirfd, const char *path, const char *attr, char *buf, size_t len);
/* Reads xattr `attr` of the open file `fd` (fgetxattr). */
ssize_t fprep_get_xattr(int fd, const char *attr, void *buf, size_t len);

/* fstatat(AT_SYMLINK_NOFOLLOW) with the nanosecond fields flattened, so Swift
 * needs no knowledge of struct stat's layout. */
struct fprep_stat {
    long long dev, ino, mode, nlink, uid, gid, size, blocks;
    long long mtime_sec, mtime_nsec, ctime_sec, ctime_nsec, atime_sec, atime_nsec;
};
int fprep_lstat_at(int dirfd, const char *path, struct fprep_stat *out);
/* fprep_lstat_at of a path below dirfd that never goes through a symlink or
 * leaves dirfd on the way (a user's symlink in place of a folder reads as
 * nothing there, errno ELOOP), as every open of fprep's. */
int fprep_lstat_beneath(int dirfd, const char *path, struct fprep_stat *out);
int fprep_fstat(int fd, struct fprep_stat *out);
void fprep_stat_flatten(const struct stat *st, struct fprep_stat *out);

/* What an item's enumeration reads from the disk, in one pass per path:
 * its lstat and, for a regular file, the placeholder attributes
 * (user.fprep.blob, 20 bytes; user.fprep.state, "dataless"). */
struct fprep_probe {
    int found;
    int has_blob;
    int marked_dataless;
    unsigned char blob[20];
    struct fprep_stat stat;
};

/* Probes every path beneath dirfd, on up to `threads` threads when the
 * first lookups show the disk is being read (see fprep_parallel_for_disk). */
void fprep_probe_paths(int dirfd, const char *const *paths, size_t count, int threads, struct fprep_probe *results);

/* Sets the access time of the file open as fd to now (see FolderHandle.willChange). */
int fprep_touch_access_time(int fd);

/* Sets the mtime (and atime to the same) of an open fd. */
int fprep_set_mtime(int fd, long long sec, long nsec);

/* Copies up to `length` bytes of `from` at *offset to `to`'s position, in
 * the kernel (copy_file_range); advances *offset. Returns the count, 0 at
 * the end of `from`, -1 with errno set. */
long long fprep_copy_range(int from, long long *offset, int to, long long length);

/* On SIGINT or SIGTERM: write `line` to standard error and exit with
 * 128 + the signal's number (what the journal left, the next command
 * settles). Commands that stop on a signal by themselves install their own
 * handlers afterwards. */
void fprep_on_interrupt_say(const char *line);

/* fanotify pre-content events (fanotify.c). */
enum {
    FPREP_FANOTIFY_SUPPORTED = 0,
    FPREP_FANOTIFY_NOT_PRIVILEGED = 1,        /* not root, no CAP_SYS_ADMIN */
    FPREP_FANOTIFY_NO_KERNEL_SUPPORT = 2,     /* kernel older than 6.14, or built without them */
    FPREP_FANOTIFY_NO_FILESYSTEM_SUPPORT = 3, /* tmpfs, most network filesystems */
    FPREP_FANOTIFY_ERROR = 4,                 /* anything else: errno says */
};
/* Whether pre-content events can be had for the file `path` beneath `dirfd`
 * (NULL: whether this process may have a pre-content group at all):
 * one of the FPREP_FANOTIFY_* values (errno set for FPREP_FANOTIFY_ERROR). */
int fprep_fanotify_probe(int dirfd, const char *path);
/* A pre-content group (FAN_CLASS_PRE_CONTENT, non-blocking, close-on-exec;
 * event fds opened read-only: a fill opens the file for writing anew, under
 * the replica's lock). */
int fprep_fanotify_init(void);
/* Adds (removes) an inode mark for FAN_PRE_ACCESS and FAN_OPEN_PERM on the open file `fd`
 * (not an O_PATH descriptor: fanotify_mark refuses those). */
int fprep_fanotify_mark_fd(int group, int fd);
int fprep_fanotify_unmark_fd(int group, int fd);
/* Removes the mark of the file `name` in the folder open as `dirfd`,
 * without opening the file (never following a symlink). */
int fprep_fanotify_unmark_at(int group, int dirfd, const char *name);
/* Whether an event's mask is an open's (else an access's). */
int fprep_fanotify_is_open(uint64_t mask);
/* One event: `fd` is the accessed file, opened read-only for the listener
 * (its reads raise no event); the listener closes it, then answers. */
struct fprep_fanotify_event {
    int fd;
    int pid;
    uint64_t mask;
    uint64_t offset, count;   /* the range accessed, when has_range */
    int has_range;
};
/* Reads the pending events (at most `capacity`, which must cover 8 KiB of
 * events: 256); returns how many, or -1 with errno (EAGAIN: none). */
ssize_t fprep_fanotify_read(int group, struct fprep_fanotify_event *events, size_t capacity);
/* Answers the event on `fd`: allow (error 0) or fail the access with `error`
 * (EIO, EPERM, EBUSY, ETXTBSY, EAGAIN, ENOSPC or EDQUOT only). */
int fprep_fanotify_answer(int group, int fd, int error);
/* Waits up to timeout_ms for events on `group` or input on `wake` (-1: none):
 * bit 1 events, bit 2 wake, 0 timeout, -1 error. */
int fprep_fanotify_wait(int group, int wake, int timeout_ms);
/* Writes all of `bytes` at `offset` (pwrite, retried). */
ssize_t fprep_pwrite_all(int fd, const void *bytes, size_t count, off_t offset);
/* Starts the keeper of `group`: a child process that holds the group open
 * and, once the agent is gone (killed with -9 even), fails with EIO every
 * access the agent had taken and not answered; the kernel would otherwise
 * let those read zeros when the group closes. Returns the pipe the agent
 * keeps open for as long as it lives (its end is the keeper's signal), or
 * -1 with errno. */
int fprep_fanotify_start_keeper(int group);
/* Opens the regular file `path` beneath `dirfd` for marking (read-only; a FIFO or device is never opened),
 * never through a symlink or out of `dirfd`; -1 with errno otherwise. */
int fprep_open_for_mark(int dirfd, const char *path);

/* fanotify change events (changes.c). */
/* One change: where (the folder's handle, when has_folder) and the name in
 * it (empty: the folder itself), what (FAN_* bits of mask; FAN_Q_OVERFLOW:
 * events were lost), and who (pid). */
struct fprep_change_event {
    uint64_t mask;
    int pid;
    int has_folder;
    int handle_type;
    uint32_t handle_bytes;
    unsigned char handle[128];
    uint32_t name_length;
    char name[256];
};
/* A notification group reporting each event's folder (a file handle) and
 * name (FAN_REPORT_DFID_NAME; non-blocking, close-on-exec; no privilege
 * needed); -1 with errno. */
int fprep_changes_init(void);
/* Follows the folder `path` beneath `dirfd` (never through a symlink):
 * creates, deletes, moves, attribute changes, writes and closes after
 * writing of what is in it. */
int fprep_changes_mark_folder(int group, int dirfd, const char *path);
/* Fills the folder fields of `event` (handle_type, handle_bytes, handle)
 * with the handle of the folder `path` beneath `dirfd`, as events carry it. */
int fprep_changes_folder_handle(int dirfd, const char *path, struct fprep_change_event *event);
/* The bits of fprep_change_event.mask a follower reads (the kernel's
 * FAN_Q_OVERFLOW, FAN_ONDIR, FAN_CREATE, FAN_MOVED_FROM, FAN_MOVED_TO, and
 * their unions). */
enum {
    FPREP_CHANGE_OVERFLOW = 0x00004000,
    FPREP_CHANGE_MODIFIED = 0x00000002,
    FPREP_CHANGE_ON_FOLDER = 0x40000000,
    FPREP_CHANGE_ARRIVED = 0x00000100 | 0x00000080,
    FPREP_CHANGE_MOVED = 0x00000040 | 0x00000080,
    FPREP_CHANGE_MOVED_FROM = 0x00000040,
    FPREP_CHANGE_MOVED_TO = 0x00000080,
    FPREP_CHANGE_CREATED = 0x00000100,
};
/* Reads the pending changes (at most `capacity`, which must cover 8 KiB of
 * events: 256); returns how many, or -1 with errno (EAGAIN: none). */
ssize_t fprep_changes_read(int group, struct fprep_change_event *events, size_t capacity);
/* Whether another process has the file `path` beneath `dirfd` open for
 * writing (a read lease is refused): 1 yes, 0 no (or no such file), -1
 * with errno when that cannot be told. */
int fprep_open_for_writing_elsewhere(int dirfd, const char *path);

/* The agent's worker processes (privsep.c). */
enum {
    FPREP_WORKER_STEP_DESCRIPTORS = 1,
    FPREP_WORKER_STEP_GROUPS = 2,
    FPREP_WORKER_STEP_GID = 3,
    FPREP_WORKER_STEP_UID = 4,
    FPREP_WORKER_STEP_EXEC = 5,
};
/* Starts the program open as `exe` (O_PATH will do) with `argv` and `envp`
 * in a child that runs as `uid`, `gid` and `groups` only, in a session of
 * its own, from "/", with `channel` as its descriptor 3 and no other of the
 * caller's but standard error, and that is killed when the calling thread
 * ends. Returns its pid; -1 with errno and `failed_step` (a
 * FPREP_WORKER_STEP_*) when it could not get as far as the program. */
pid_t fprep_spawn_worker(int exe, char *const argv[], char *const envp[], uid_t uid, gid_t gid,
                         const gid_t *groups, size_t group_count, int channel, int *failed_step);
/* The running program, opened O_PATH (for fprep_spawn_worker); -1 with errno. */
int fprep_open_own_program(void);
/* A connected pair of unix stream sockets (close-on-exec). */
int fprep_channel_pair(int fds[2]);
/* Sends all of `bytes`, with the descriptor `fd` (-1: none) attached to the
 * first; -1 with errno. */
ssize_t fprep_channel_send(int channel, const void *bytes, size_t count, int fd);
/* Receives what is there (up to `capacity` bytes) and the descriptors that
 * came with it (close-on-exec; any beyond `fd_capacity` are closed); 0 at
 * the end, -1 with errno. */
ssize_t fprep_channel_receive(int channel, void *bytes, size_t capacity, int *fds, size_t fd_capacity, size_t *fd_count);
/* Gives the regular file `name` in `dirfd` to `uid`:`gid` when it is root's
 * and has one link (never following a symlink): 1 given, 0 nothing to do,
 * -1 with errno. */
int fprep_reclaim_file(int dirfd, const char *name, uid_t uid, gid_t gid);
/* Opens the folder `name` in `dirfd`, not through a symlink; -1 with errno. */
int fprep_open_folder_nofollow(int dirfd, const char *name);
/* Waits up to timeout_ms for the child `pid` to end: 1 ended (`status`
 * set), 0 still running, -1 error. */
int fprep_wait_child(pid_t pid, int timeout_ms, int *status);

/* The process id of the peer of a connected unix socket, as the kernel
 * recorded it at connect; -1 on failure. */
int fprep_peer_pid(int fd);

/* What tells the file `name` beneath `dirfd` (NULL: the open file `dirfd`)
 * apart from an earlier one that had the same inode number: a hash of its
 * file handle, which holds the inode's generation; had without opening
 * the file. 0 where the file system gives no handles. */
long long fprep_file_generation(int dirfd, const char *name);
/* Whether process `pid`, or one of its forebears (a program run by the
 * holder, as flock(1) runs one), holds a flock on the file open as `fd`:
 * through the exclusive holder's note in the file and that process's
 * /proc/PID/fdinfo, else /proc/locks. */
int fprep_holds_flock(int pid, int fd);

/* The first object of the git pack at `path`: returns its type (1 commit,
 * 2 tree, 3 blob, 4 tag, 6-7 deltas) and fills `line` with the first line of
 * its content ("tree <id>" for a commit), NUL-terminated, cut to `capacity`;
 * -1 when the file cannot be read or is not a pack. */
int fprep_pack_first_object(const char *path, char *line, size_t capacity);

#endif
