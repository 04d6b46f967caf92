#define _GNU_SOURCE
#include "CFprepSys.h"
#include "parallel.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

static int open_by_walk(int dirfd, const char *path, int flags, mode_t mode) {
    char *copy = strdup(path);
    if (!copy) { errno = ENOMEM; return -1; }
    int cur = dirfd, owned = 0;
    char *save = NULL;
    char *part = strtok_r(copy, "/", &save);
    while (part) {
        char *next = strtok_r(NULL, "/", &save);
        if (strcmp(part, "..") == 0) { errno = EXDEV; goto fail; }
        if (!next) {
            int fd = openat(cur, part, flags | O_NOFOLLOW | O_CLOEXEC, mode);
            int saved = errno;
            if (owned) close(cur);
            free(copy);
            errno = saved;
            return fd;
        }
        int fd = openat(cur, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) goto fail;
        if (owned) close(cur);
        cur = fd; owned = 1;
        part = next;
    }
    /* empty path: the directory itself */
    {
        int fd = openat(cur, ".", flags | O_CLOEXEC, mode);
        int saved = errno;
        if (owned) close(cur);
        free(copy);
        errno = saved;
        return fd;
    }
fail:
    {
        int saved = errno;
        if (owned) close(cur);
        free(copy);
        errno = saved;
        return -1;
    }
}

int fprep_open_beneath(int dirfd, const char *path, int flags, mode_t mode) {
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (unsigned long long)(flags | O_CLOEXEC);
    if (flags & O_CREAT) how.mode = mode;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    const char *p = (path[0] == 0) ? "." : path;
    long fd = syscall(SYS_openat2, dirfd, p, &how, sizeof how);
    if (fd >= 0) return (int)fd;
    if (errno == ENOSYS || errno == EPERM) return open_by_walk(dirfd, path, flags, mode);
    return -1;
}

int fprep_open_regular(int dirfd, const char *path, int flags, struct fprep_stat *out) {
    struct stat st;
    /* Look first: a FIFO, socket or device is never opened at all (opening
     * a FIFO waits for a writer, opening a device may act on it). */
    if (fstatat(dirfd, path[0] ? path : ".", &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
        fprep_stat_flatten(&st, out);
        return -2;
    }
    int fd = fprep_open_beneath(dirfd, path, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0);
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    fprep_stat_flatten(&st, out);
    /* Swapped for something else between the look and the open. */
    if (!S_ISREG(st.st_mode)) { close(fd); return -2; }
    return fd;
}

/* A process holding a lease gets SIGIO when another opens the file; its
 * default action would end fprep. The lease is given back within
 * milliseconds, so the signal itself is not needed. */
static void settle_lease_signal(void) {
    struct sigaction current;
    if (sigaction(SIGIO, NULL, &current) == 0 && current.sa_handler == SIG_DFL) {
        struct sigaction ignore;
        memset(&ignore, 0, sizeof ignore);
        ignore.sa_handler = SIG_IGN;
        sigaction(SIGIO, &ignore, NULL);
    }
}

/* Looked at once (fprep sets no SIGIO handler of its own), and before any
 * thread's first lease: leases are taken on several threads at once (the
 * swaps of a materialize), and one that went on while another was still
 * settling the signal would leave fprep to SIGIO's default action. */
static void ignore_lease_signal(void) {
    static pthread_once_t settled = PTHREAD_ONCE_INIT;
    pthread_once(&settled, settle_lease_signal);
}

int fprep_take_write_lease(int fd) {
    ignore_lease_signal();
    return fcntl(fd, F_SETLEASE, F_WRLCK);
}

int fprep_take_read_lease(int fd) {
    ignore_lease_signal();
    return fcntl(fd, F_SETLEASE, F_RDLCK);
}

int fprep_release_lease(int fd) { return fcntl(fd, F_SETLEASE, F_UNLCK); }

int fprep_reopen(int fd, int flags) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return open(path, flags | O_CLOEXEC);
}

int fprep_rename_exchange(int dirfd, const char *a, const char *b) {
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif
    return (int)syscall(SYS_renameat2, dirfd, a, dirfd, b, RENAME_EXCHANGE);
}

int fprep_rename_noreplace(int dirfd, const char *from, const char *to) {
    return fprep_rename_noreplace_between(dirfd, from, dirfd, to);
}

int fprep_rename_noreplace_between(int from_dirfd, const char *from, int to_dirfd, const char *to) {
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
    return (int)syscall(SYS_renameat2, from_dirfd, from, to_dirfd, to, RENAME_NOREPLACE);
}

int fprep_holds_no_data(int fd) {
    off_t at = lseek(fd, 0, SEEK_DATA);
    if (at < 0) return errno == ENXIO ? 1 : -1;
    static __thread char buffer[65536];
    for (;;) {
        ssize_t n = pread(fd, buffer, sizeof buffer, at);
        if (n < 0) { if (errno == EINTR) continue; return -1; }
        if (n == 0) break;
        for (ssize_t i = 0; i < n; i++) if (buffer[i]) return 0;
        at += n;
    }
    return 1;
}

void fprep_stat_flatten(const struct stat *st, struct fprep_stat *out) {
    out->dev = (long long)st->st_dev;
    out->ino = (long long)st->st_ino;
    out->mode = (long long)st->st_mode;
    out->nlink = (long long)st->st_nlink;
    out->uid = (long long)st->st_uid;
    out->gid = (long long)st->st_gid;
    out->size = (long long)st->st_size;
    out->blocks = (long long)st->st_blocks;
    out->mtime_sec = (long long)st->st_mtim.tv_sec;
    out->mtime_nsec = (long long)st->st_mtim.tv_nsec;
    out->ctime_sec = (long long)st->st_ctim.tv_sec;
    out->ctime_nsec = (long long)st->st_ctim.tv_nsec;
    out->atime_sec = (long long)st->st_atim.tv_sec;
    out->atime_nsec = (long long)st->st_atim.tv_nsec;
}

int fprep_lstat_at(int dirfd, const char *path, struct fprep_stat *out) {
    struct stat st;
    if (fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) != 0) return -1;
    fprep_stat_flatten(&st, out);
    return 0;
}

int fprep_lstat_beneath(int dirfd, const char *path, struct fprep_stat *out) {
    const char *slash = strrchr(path, '/');
    if (!slash) return fprep_lstat_at(dirfd, path, out);
    size_t length = (size_t)(slash - path);
    char *parent = strndup(path, length);
    if (!parent) { errno = ENOMEM; return -1; }
    int fd = fprep_open_beneath(dirfd, parent, O_PATH | O_DIRECTORY, 0);
    free(parent);
    if (fd < 0) return -1;
    int result = fprep_lstat_at(fd, slash + 1, out);
    int saved = errno;
    close(fd);
    errno = saved;
    return result;
}

int fprep_fstat(int fd, struct fprep_stat *out) {
    struct stat st;
    if (fstat(fd, &st) != 0) return -1;
    fprep_stat_flatten(&st, out);
    return 0;
}

int fprep_touch_access_time(int fd) {
    const struct timespec accessed[2] = { { .tv_nsec = UTIME_NOW }, { .tv_nsec = UTIME_OMIT } };
    return futimens(fd, accessed);
}

int fprep_set_mtime(int fd, long long sec, long nsec) {
    struct timespec ts[2];
    ts[0].tv_sec = sec; ts[0].tv_nsec = nsec;
    ts[1].tv_sec = sec; ts[1].tv_nsec = nsec;
    return futimens(fd, ts);
}

static int mark_placeholder(int fd, const unsigned char *blob_id, size_t blob_len) {
    static const char state[] = "dataless";
    if (fsetxattr(fd, "user.fprep.state", state, sizeof state - 1, 0) != 0) return -1;
    if (fsetxattr(fd, "user.fprep.blob", blob_id, blob_len, 0) != 0) return -1;
    return 0;
}

int fprep_create_placeholder(int dirfd, const char *name, mode_t mode, off_t size,
                             const unsigned char *blob_id, size_t blob_len,
                             long long mtime_sec, long mtime_nsec, struct stat *out) {
    int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) return -1;
    if ((size > 0 && ftruncate(fd, size) != 0) || mark_placeholder(fd, blob_id, blob_len) != 0 ||
        fprep_set_mtime(fd, mtime_sec, mtime_nsec) != 0 || (out && fstat(fd, out) != 0)) {
        int saved = errno;
        close(fd);
        unlinkat(dirfd, name, 0);
        errno = saved;
        return -1;
    }
    return close(fd);
}

int fprep_create_marked_temporary(int dirfd, const char *name, mode_t mode, const char *token) {
    /* Unnamed first (O_TMPFILE): the file has its mark before it has a
     * name, so no name ever holds an unmarked file of fprep's. */
    int fd = openat(dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
    if (fd >= 0) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        if (fsetxattr(fd, FPREP_TEMPORARY_MARK, token, strlen(token), 0) != 0 ||
            linkat(AT_FDCWD, proc, dirfd, name, AT_SYMLINK_FOLLOW) != 0) {
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
        return fd;
    }
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) return -1;
    /* A filesystem without O_TMPFILE: named, then marked. */
    fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) return -1;
    if (fsetxattr(fd, FPREP_TEMPORARY_MARK, token, strlen(token), 0) != 0) {
        int saved = errno;
        close(fd);
        unlinkat(dirfd, name, 0);
        errno = saved;
        return -1;
    }
    return fd;
}

int fprep_is_marked_temporary(int fd, const char *token) {
    char value[64];
    ssize_t length = fgetxattr(fd, FPREP_TEMPORARY_MARK, value, sizeof value);
    return length >= 0 && (size_t)length == strlen(token) && memcmp(value, token, (size_t)length) == 0;
}

int fprep_mark_held(int fd, const unsigned char *blob_id, size_t blob_len, int dataless) {
    unsigned char value[21];
    if (blob_len != 20) { errno = EINVAL; return -1; }
    memcpy(value, blob_id, 20);
    value[20] = dataless ? 1 : 0;
    return fsetxattr(fd, FPREP_HELD_MARK, value, sizeof value, 0);
}

int fprep_held_mark(int fd, unsigned char *blob_id, int *dataless) {
    unsigned char value[21];
    if (fgetxattr(fd, FPREP_HELD_MARK, value, sizeof value) != (ssize_t)sizeof value) return 0;
    memcpy(blob_id, value, 20);
    *dataless = value[20] != 0;
    return 1;
}

int fprep_clear_held_mark(int fd) {
    return fremovexattr(fd, FPREP_HELD_MARK) != 0 && errno != ENODATA ? -1 : 0;
}

int fprep_punch_to_placeholder(int fd, const unsigned char *blob_id, size_t blob_len,
                               long long mtime_sec, long mtime_nsec, struct stat *out) {
    struct stat st;
    if (fstat(fd, &st) != 0) return -1;
    /* The mark of the operation that wrote the file goes: with the
     * placeholder's two, ext4 would keep the three in a block of their
     * own, and a placeholder holds no block. */
    if (fremovexattr(fd, FPREP_TEMPORARY_MARK) != 0 && errno != ENODATA) return -1;
    if (mark_placeholder(fd, blob_id, blob_len) != 0) return -1;
    /* Punch whole blocks up to past the end: a hole ending mid-block only
     * zeroes that block and leaves it allocated. */
    off_t block = st.st_blksize > 0 ? st.st_blksize : 4096;
    off_t length = ((st.st_size + block - 1) / block) * block;
    if (length > 0 &&
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, length) != 0)
        return -1;
    if (fprep_set_mtime(fd, mtime_sec, mtime_nsec) != 0) return -1;
    return fstat(fd, out);
}

int fprep_clear_placeholder_marks(int fd) {
    if (fremovexattr(fd, "user.fprep.state") != 0 && errno != ENODATA) return -1;
    if (fremovexattr(fd, "user.fprep.blob") != 0 && errno != ENODATA) return -1;
    return 0;
}

int fprep_syncfs(int fd) { return syncfs(fd); }

ssize_t fprep_get_xattr(int fd, const char *attr, void *buf, size_t len) { return fgetxattr(fd, attr, buf, len); }

/* Whether the marks of an item are read through /proc/self/fd and an
 * O_PATH descriptor: the file is looked up, never opened. An open of a
 * placeholder is an event the agent has to answer (a round trip per file
 * while a sync probes a hundred of them); a lookup raises none. Without
 * /proc, the file is opened for reading. */
static int marks_through_proc(void) {
    static int known = -1;  /* the same answer for every thread: a race is harmless */
    if (known < 0) known = access("/proc/self/fd", F_OK) == 0;
    return known;
}

/* A descriptor to read the marks of the item at `path` beneath dirfd (see
 * `marks_through_proc`), with its stat; never through a symlink, and a
 * symlink itself fails with ELOOP. */
static int open_for_marks(int dirfd, const char *path, struct stat *st) {
    int flags = marks_through_proc() ? O_PATH : O_RDONLY | O_NONBLOCK | O_NOCTTY;
    int fd = fprep_open_beneath(dirfd, path, flags | O_NOFOLLOW, 0);
    if (fd < 0) return -1;
    int code = fstat(fd, st) != 0 ? errno : S_ISLNK(st->st_mode) ? ELOOP : 0;
    if (code != 0) {
        close(fd);
        errno = code;
        return -1;
    }
    return fd;
}

/* The mark `name` of the item open as `fd` (from `open_for_marks`). */
static ssize_t read_mark(int fd, const char *name, void *buf, size_t len) {
    if (!marks_through_proc()) return fgetxattr(fd, name, buf, len);
    char link[48];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    return getxattr(link, name, buf, len);
}

ssize_t fprep_get_xattr_at(int dirfd, const char *path, const char *attr, char *buf, size_t len) {
    struct stat st;
    int fd = open_for_marks(dirfd, path, &st);
    if (fd < 0) return -1;
    ssize_t n = read_mark(fd, attr, buf, len);
    int saved = errno;
    close(fd);
    errno = saved;
    return n;
}

int fprep_holds_no_data_at(int dirfd, const char *path) {
    struct fprep_stat st;
    int fd = fprep_open_regular(dirfd, path, O_RDONLY, &st);
    if (fd < 0) { if (fd == -2) errno = EINVAL; return -1; }
    int result = fprep_holds_no_data(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return result;
}

struct prefetch_job {
    int dirfd;
    const char *const *paths;
    int folders_change;
};

/* A file's on-disk inode read into the cache along with its lookup. A
 * lookup alone does not read the inode's block when the inode itself is
 * still in memory (the agent's marks keep every watched placeholder's
 * there, and every folder's, while the block cache goes), and the
 * command's first change to the file (a rename, its attributes read or
 * set, a link) then reads that block, one file after another; reading the
 * attributes kept in the inode (the placeholder's blob id) reads it here,
 * on the prefetch's threads.
 *
 * A folder has no such attributes (ext4 answers from memory), and each
 * name added to or removed from it writes its inode (its times). When
 * the caller is about to change a name in each path's folder
 * (`folders_change`), that folder's access time is set now, which reads
 * its block here, together with the others: the caller's own change sets
 * its change and modification times a moment later anyway. */
static void prefetch_one(void *context, size_t i) {
    struct prefetch_job *job = context;
    const char *path = job->paths[i];
    /* Beneath the replica's root, never through a symlink (a user's link
     * in place of a folder leads out of the replica), as every open of fprep's. */
    int fd = fprep_open_beneath(job->dirfd, path, O_PATH | O_NOFOLLOW, 0);
    if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
            char proc[32], value[64];
            snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
            (void)getxattr(proc, "user.fprep.blob", value, sizeof value);
        }
        close(fd);
    }
    const char *slash = strrchr(path, '/');
    if (!job->folders_change || slash == NULL || slash == path || (size_t)(slash - path) >= 4096) return;
    char parent[4096];
    memcpy(parent, path, (size_t)(slash - path));
    parent[slash - path] = 0;
    int folder = fprep_open_beneath(job->dirfd, parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
    if (folder < 0) return;
    (void)fprep_touch_access_time(folder);
    close(folder);
}

void fprep_prefetch_paths(int dirfd, const char *const *paths, size_t count, int threads, int folders_change) {
    struct prefetch_job job = { .dirfd = dirfd, .paths = paths, .folders_change = folders_change };
    fprep_parallel_for_disk(count, threads, prefetch_one, &job);
}

static void probe_one(int dirfd, const char *path, struct fprep_probe *out) {
    memset(out, 0, sizeof *out);
    struct stat st;
    if (fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
    out->found = 1;
    fprep_stat_flatten(&st, &out->stat);
    if (!S_ISREG(st.st_mode)) return;
    struct stat opened;
    int fd = open_for_marks(dirfd, path, &opened);
    if (fd < 0) return;
    /* Swapped for another kind since the look: no marks. */
    if (S_ISREG(opened.st_mode)) {
        out->has_blob = read_mark(fd, "user.fprep.blob", out->blob, sizeof out->blob) == (ssize_t)sizeof out->blob;
        char state[16];
        out->marked_dataless = read_mark(fd, "user.fprep.state", state, sizeof state) == 8 && memcmp(state, "dataless", 8) == 0;
    }
    close(fd);
}

struct probe_job {
    int dirfd;
    const char *const *paths;
    struct fprep_probe *results;
};

static void probe_at(void *context, size_t i) {
    struct probe_job *job = context;
    probe_one(job->dirfd, job->paths[i], &job->results[i]);
}

void fprep_probe_paths(int dirfd, const char *const *paths, size_t count, int threads, struct fprep_probe *results) {
    struct probe_job job = { .dirfd = dirfd, .paths = paths, .results = results };
    fprep_parallel_for_disk(count, threads, probe_at, &job);
}

static void rename_one_placeholder(void *context, size_t i);

static void create_one_placeholder(void *context, size_t i) {
    const struct fprep_placeholder_job *job = (const struct fprep_placeholder_job *)context + i;
    *job->error = 0;
    if (fprep_create_placeholder(job->dirfd, job->temporary, job->mode, job->size, job->blob_id, 20,
                                 job->mtime_sec, 0, NULL) != 0) {
        *job->error = errno ? errno : EIO;
        return;
    }
    if (!job->create_only) rename_one_placeholder(context, i);
}

static void rename_one_placeholder(void *context, size_t i) {
    const struct fprep_placeholder_job *job = (const struct fprep_placeholder_job *)context + i;
    if (*job->error != 0) return;
    /* Never over a file that appeared meanwhile (EEXIST: the caller sets it aside). */
    int renamed = fprep_rename_noreplace(job->dirfd, job->temporary, job->name);
    if (renamed != 0 && (errno == EINVAL || errno == ENOSYS))
        renamed = renameat(job->dirfd, job->temporary, job->dirfd, job->name);
    if (renamed != 0) {
        *job->error = errno ? errno : EIO;
        unlinkat(job->dirfd, job->temporary, 0);
    }
}

void fprep_create_placeholders(const struct fprep_placeholder_job *jobs, size_t count, int threads) {
    fprep_parallel_for(count, threads, create_one_placeholder, (void *)jobs);
}

void fprep_rename_placeholders(const struct fprep_placeholder_job *jobs, size_t count, int threads) {
    fprep_parallel_for(count, threads, rename_one_placeholder, (void *)jobs);
}

long long fprep_copy_range(int from, long long *offset, int to, long long length) {
    off_t position = (off_t)*offset;
    ssize_t count = copy_file_range(from, &position, to, NULL, (size_t)length, 0);
    if (count > 0) *offset = (long long)position;
    return (long long)count;
}

/* The line a command prints when SIGINT or SIGTERM ends it, kept here so
 * the handler only calls async-signal-safe functions. */
static char interrupt_line[512];
static size_t interrupt_length;

static void interrupted(int signal_number) {
    if (interrupt_length > 0) {
        ssize_t ignored = write(2, interrupt_line, interrupt_length);
        (void)ignored;
    }
    _exit(128 + signal_number);
}

void fprep_on_interrupt_say(const char *line) {
    size_t length = strlen(line);
    if (length >= sizeof interrupt_line) length = sizeof interrupt_line - 1;
    memcpy(interrupt_line, line, length);
    interrupt_length = length;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = interrupted;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
}

int fprep_peer_pid(int fd) {
    struct ucred credentials;
    socklen_t length = sizeof credentials;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -1;
    return (int)credentials.pid;
}
