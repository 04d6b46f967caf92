/* fanotify pre-content events (Linux 6.14+): the kernel holds the first
 * access of a marked file until the listener answers, so the listener can
 * put the file's content in place first. Debian 12's headers predate them:
 * the constants and the range record are defined here, as in the kernel's
 * include/uapi/linux/fanotify.h. */
#define _GNU_SOURCE
#include "CFprepSys.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/fanotify.h>
#include <unistd.h>

#ifndef FAN_PRE_ACCESS
#define FAN_PRE_ACCESS 0x00100000
#endif
#ifndef FAN_EVENT_INFO_TYPE_RANGE
#define FAN_EVENT_INFO_TYPE_RANGE 6
#endif
/* The range record's layout (info type 6), whatever the headers say. */
struct fprep_fanotify_info_range {
    struct fanotify_event_info_header hdr;
    uint32_t pad;
    uint64_t offset;
    uint64_t count;
};
#ifndef FAN_DENY_ERRNO
#define FAN_DENY_ERRNO(err) (FAN_DENY | ((((uint32_t)(err)) & 0xff) << 24))
#endif

int fprep_fanotify_init(void) {
    /* Read-only: an event's descriptor, held while its fill waits for the
     * replica's lock, must not make the file look open for writing (a
     * sync would take it for a program's change). The fill opens the file
     * for writing anew, under the lock (fprep_reopen). */
    return fanotify_init(FAN_CLASS_PRE_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE | FAN_UNLIMITED_MARKS,
                         O_RDONLY | O_LARGEFILE);
}

int fprep_fanotify_mark_fd(int group, int fd) {
    /* Opens too: a program gets no descriptor of a placeholder before its
     * content is in place (see EventLoop). */
    return fanotify_mark(group, FAN_MARK_ADD, FAN_PRE_ACCESS | FAN_OPEN_PERM, fd, NULL);
}

int fprep_fanotify_unmark_fd(int group, int fd) {
    return fanotify_mark(group, FAN_MARK_REMOVE, FAN_PRE_ACCESS | FAN_OPEN_PERM, fd, NULL);
}

int fprep_fanotify_unmark_at(int group, int dirfd, const char *name) {
    return fanotify_mark(group, FAN_MARK_REMOVE | FAN_MARK_DONT_FOLLOW, FAN_PRE_ACCESS | FAN_OPEN_PERM, dirfd, name);
}

int fprep_fanotify_is_open(uint64_t mask) {
    return (mask & FAN_OPEN_PERM) != 0;
}

int fprep_fanotify_probe(int dirfd, const char *path) {
    int group = fanotify_init(FAN_CLASS_PRE_CONTENT | FAN_CLOEXEC, O_RDWR | O_LARGEFILE);
    if (group < 0) {
        if (errno == EPERM) return FPREP_FANOTIFY_NOT_PRIVILEGED;
        if (errno == EINVAL || errno == ENOSYS) return FPREP_FANOTIFY_NO_KERNEL_SUPPORT;
        return FPREP_FANOTIFY_ERROR;
    }
    int status = FPREP_FANOTIFY_SUPPORTED;
    if (path != NULL && fanotify_mark(group, FAN_MARK_ADD | FAN_MARK_DONT_FOLLOW, FAN_PRE_ACCESS, dirfd, path) != 0) {
        int error = errno;
        /* An unknown mask bit is EINVAL; a filesystem without pre-content
         * support (tmpfs, most network filesystems) answers EOPNOTSUPP. */
        if (error == EINVAL) status = FPREP_FANOTIFY_NO_KERNEL_SUPPORT;
        else if (error == EOPNOTSUPP) status = FPREP_FANOTIFY_NO_FILESYSTEM_SUPPORT;
        else if (error == EPERM) status = FPREP_FANOTIFY_NOT_PRIVILEGED;
        else status = FPREP_FANOTIFY_ERROR;
        close(group);
        errno = error;
        return status;
    }
    close(group);
    return status;
}

ssize_t fprep_fanotify_read(int group, struct fprep_fanotify_event *events, size_t capacity) {
    /* The kernel hands out whole events only; 4096 bytes per read is
     * what its documentation suggests. */
    char buffer[8192] __attribute__((aligned(__alignof__(struct fanotify_event_metadata))));
    ssize_t length = read(group, buffer, sizeof buffer);
    if (length < 0) return -1;
    size_t count = 0;
    struct fanotify_event_metadata *meta = (struct fanotify_event_metadata *)buffer;
    size_t remaining = (size_t)length;
    while (FAN_EVENT_OK(meta, remaining)) {
        if (meta->vers != FANOTIFY_METADATA_VERSION) { errno = EPROTO; return -1; }
        if (count == capacity) {
            /* No room: the event cannot be put back, so it is allowed at
             * once rather than left pending (never reached with the
             * buffer sizes fprep uses: capacity covers a full read). */
            if (meta->fd >= 0) { fprep_fanotify_answer(group, meta->fd, 0); close(meta->fd); }
        } else {
            struct fprep_fanotify_event *event = &events[count++];
            event->fd = meta->fd;
            event->pid = meta->pid;
            event->mask = meta->mask;
            event->offset = 0;
            event->count = 0;
            event->has_range = 0;
            size_t info = meta->metadata_len;
            while (info + sizeof(struct fanotify_event_info_header) <= meta->event_len) {
                struct fanotify_event_info_header *header = (struct fanotify_event_info_header *)((char *)meta + info);
                if (header->len == 0) break;
                if (header->info_type == FAN_EVENT_INFO_TYPE_RANGE && header->len >= sizeof(struct fprep_fanotify_info_range)) {
                    struct fprep_fanotify_info_range *range = (struct fprep_fanotify_info_range *)header;
                    event->offset = range->offset;
                    event->count = range->count;
                    event->has_range = 1;
                }
                info += header->len;
            }
        }
        meta = FAN_EVENT_NEXT(meta, remaining);
    }
    return (ssize_t)count;
}

int fprep_fanotify_answer(int group, int fd, int error) {
    struct fanotify_response response = {
        .fd = fd,
        .response = error == 0 ? FAN_ALLOW : FAN_DENY_ERRNO(error),
    };
    ssize_t written;
    do { written = write(group, &response, sizeof response); } while (written < 0 && errno == EINTR);
    return written == (ssize_t)sizeof response ? 0 : -1;
}

int fprep_fanotify_wait(int group, int wake, int timeout_ms) {
    struct pollfd fds[2] = { { .fd = group, .events = POLLIN }, { .fd = wake, .events = POLLIN } };
    int ready = poll(fds, wake >= 0 ? 2 : 1, timeout_ms);
    if (ready < 0) return errno == EINTR ? 0 : -1;
    int result = 0;
    if (fds[0].revents & POLLIN) result |= 1;
    if (wake >= 0 && (fds[1].revents & (POLLIN | POLLHUP))) result |= 2;
    return result;
}

ssize_t fprep_pwrite_all(int fd, const void *bytes, size_t count, off_t offset) {
    size_t done = 0;
    while (done < count) {
        ssize_t written = pwrite(fd, (const char *)bytes + done, count - done, offset + (off_t)done);
        if (written < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (written == 0) { errno = EIO; return -1; }
        done += (size_t)written;
    }
    return (ssize_t)done;
}


int fprep_open_for_mark(int dirfd, const char *path) {
    /* Read-only, not O_PATH: fanotify_mark takes no O_PATH descriptor.
     * Opening a file already marked raises an open event, which the loop
     * lets through for the agent itself at once. */
    struct fprep_stat st;
    int fd = fprep_open_regular(dirfd, path, O_RDONLY | O_CLOEXEC, &st);
    if (fd == -2) errno = EINVAL;
    return fd < 0 ? -1 : fd;
}

#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>

/* Fails every event queued on `group` with EIO (async-signal-safe). */
static void deny_queued(int group) {
    char buffer[4096] __attribute__((aligned(__alignof__(struct fanotify_event_metadata))));
    ssize_t length;
    while ((length = read(group, buffer, sizeof buffer)) > 0) {
        size_t remaining = (size_t)length;
        struct fanotify_event_metadata *meta = (struct fanotify_event_metadata *)buffer;
        while (FAN_EVENT_OK(meta, remaining)) {
            if (meta->fd >= 0) {
                struct fanotify_response response = { .fd = meta->fd, .response = FAN_DENY_ERRNO(EIO) };
                (void)!write(group, &response, sizeof response);
                close(meta->fd);
            }
            meta = FAN_EVENT_NEXT(meta, remaining);
        }
    }
}

int fprep_fanotify_start_keeper(int group) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    struct rlimit limit;
    long highest = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY ? (long)limit.rlim_cur : 65536;
    if (highest > (1L << 20)) highest = 1L << 20;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        /* The child of a threaded process: async-signal-safe calls only. It
         * keeps nothing of the agent's but the group and the pipe (not the
         * replica's lock), and no terminal's signal reaches it. */
        int high_group = fcntl(group, F_DUPFD, 100);
        int high_pipe = fcntl(fds[0], F_DUPFD, 100);
        if (high_group < 0 || high_pipe < 0) _exit(1);
        if (dup2(high_group, 3) < 0 || dup2(high_pipe, 4) < 0) _exit(1);
        syscall(SYS_close_range, 5U, ~0U, 0U);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) { dup2(devnull, 0); dup2(devnull, 1); dup2(devnull, 2); if (devnull > 4) close(devnull); }
        setsid();
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        char byte;
        while (read(4, &byte, 1) != 0) {
            if (errno != EINTR && errno != EAGAIN) break;
        }
        /* The agent is gone. An event it read and never answered is known
         * only by its descriptor number in the agent: fail every number.
         * Then the events it had not read yet (and any that came since). */
        for (long fd = 0; fd < highest; fd++) {
            struct fanotify_response response = { .fd = (int)fd, .response = FAN_DENY_ERRNO(EIO) };
            (void)!write(3, &response, sizeof response);
        }
        deny_queued(3);
        _exit(0);
    }
    close(fds[0]);
    return fds[1];
}

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

long long fprep_file_generation(int dirfd, const char *name) {
    /* The file handle (what NFS gives out) carries the generation on ext4,
     * xfs and btrfs, and is had by name without opening the file. */
    char space[sizeof(struct file_handle) + MAX_HANDLE_SZ] __attribute__((aligned(__alignof__(struct file_handle))));
    struct file_handle *handle = (struct file_handle *)space;
    handle->handle_bytes = MAX_HANDLE_SZ;
    int mount_id;
    if (name_to_handle_at(dirfd, name != NULL ? name : "", handle, &mount_id, name != NULL ? 0 : AT_EMPTY_PATH) != 0) return 0;
    uint64_t hash = 1469598103934665603ULL;  /* FNV-1a over the type and the bytes */
    const unsigned char *type = (const unsigned char *)&handle->handle_type;
    for (size_t i = 0; i < sizeof handle->handle_type; i++) hash = (hash ^ type[i]) * 1099511628211ULL;
    for (unsigned i = 0; i < handle->handle_bytes && i < MAX_HANDLE_SZ; i++) hash = (hash ^ handle->f_handle[i]) * 1099511628211ULL;
    return (long long)hash;
}

/* The parent of process `pid`, or 0 (from /proc/PID/stat, after the
 * command name, which may hold spaces and parentheses). */
static int parent_of(int pid) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *file = fopen(path, "re");
    if (file == NULL) return 0;
    size_t length = fread(line, 1, sizeof line - 1, file);
    fclose(file);
    line[length] = 0;
    char *end = strrchr(line, ')');
    int parent = 0;
    if (end == NULL || sscanf(end + 1, " %*c %d", &parent) != 1) return 0;
    return parent;
}

/* What a lock line says of the file (dev, ino), from its ordinal on
 * ("1: FLOCK  ADVISORY  WRITE 4380 fe:00:16222211 0 EOF", as /proc/locks
 * and /proc/PID/fdinfo write them): 2 a flock held exclusively, 1 shared,
 * 0 anything else (a waiter's line, with "->", holds nothing). `holder`:
 * the process that took it. */
static int flock_line(const char *line, unsigned long long dev, unsigned long long ino, int *holder) {
    char kind[16], advice[16], access_[16];
    unsigned int major, minor;
    unsigned long long inode;
    const char *rest = strchr(line, ':');
    if (rest == NULL || strstr(line, "->") != NULL) return 0;
    if (sscanf(rest + 1, "%15s %15s %15s %d %x:%x:%llu", kind, advice, access_, holder, &major, &minor, &inode) != 7) return 0;
    if (strcmp(kind, "FLOCK") != 0 || inode != ino || makedev(major, minor) != (dev_t)dev) return 0;
    return strcmp(access_, "WRITE") == 0 ? 2 : 1;
}

/* How process `pid` holds a flock on the file (dev, ino) through its
 * descriptor number `number` (see `flock_line`), from /proc/PID/fdinfo/NUMBER,
 * which lists the locks held through that very descriptor. */
static int fdinfo_flock(int pid, int number, unsigned long long dev, unsigned long long ino) {
    char path[64], text[2048];
    snprintf(path, sizeof path, "/proc/%d/fdinfo/%d", pid, number);
    int info = open(path, O_RDONLY | O_CLOEXEC);
    if (info < 0) return 0;
    ssize_t length = read(info, text, sizeof text - 1);
    close(info);
    if (length <= 0) return 0;
    text[length] = 0;
    int holder;
    for (char *line = strstr(text, "lock:"); line != NULL; line = strstr(line + 5, "lock:")) {
        char *end = strchr(line, '\n');
        if (end != NULL) *end = 0;
        int held = flock_line(line + 5, dev, ino, &holder);
        if (held || end == NULL) return held;
        *end = '\n';
    }
    return 0;
}

/* How process `pid` holds a flock on the file (dev, ino), looking through
 * its descriptors (the one found last time first). */
static int process_flock(int pid, unsigned long long dev, unsigned long long ino) {
    /* One agent thread serves each replica: the cache is per thread. */
    static __thread int cached_pid = 0, cached_number = -1;
    if (cached_pid == pid && cached_number >= 0) {
        int held = fdinfo_flock(pid, cached_number, dev, ino);
        if (held) return held;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", pid);
    int folder = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (folder < 0) return 0;
    DIR *entries = fdopendir(folder);
    if (entries == NULL) { close(folder); return 0; }
    int held = 0;
    struct dirent *entry;
    while (held == 0 && (entry = readdir(entries)) != NULL) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
        struct stat target;
        /* Followed: the file the descriptor is open on. */
        if (fstatat(dirfd(entries), entry->d_name, &target, 0) != 0) continue;
        if ((unsigned long long)target.st_ino != ino || (unsigned long long)target.st_dev != dev) continue;
        int number = atoi(entry->d_name);
        held = fdinfo_flock(pid, number, dev, ino);
        if (held) { cached_pid = pid; cached_number = number; }
    }
    closedir(entries);
    return held;
}

/* The pid an exclusive holder of the replica's lock wrote into it
 * ("pid 1234 (fprep sync)", `ReplicaLock`), or 0. A hint only: a killed
 * holder's note stays until the next holder writes its own. */
static int noted_holder(int fd) {
    char note[64];
    ssize_t length = pread(fd, note, sizeof note - 1, 0);
    if (length <= 0) return 0;
    note[length] = 0;
    int pid = 0;
    return sscanf(note, "pid %d", &pid) == 1 && pid > 1 ? pid : 0;
}

/* The processes holding a flock on the file (dev, ino), from /proc/locks:
 * up to `room` of them. */
static int locks_holders(unsigned long long dev, unsigned long long ino, int *holders, int room) {
    FILE *locks = fopen("/proc/locks", "re");
    if (locks == NULL) return 0;
    int count = 0;
    char line[256];
    while (count < room && fgets(line, sizeof line, locks) != NULL) {
        if (flock_line(line, dev, ino, &holders[count])) count++;
    }
    fclose(locks);
    return count;
}

int fprep_holds_flock(int pid, int fd) {
    struct fprep_stat st;
    if (fprep_fstat(fd, &st) != 0) return 0;
    unsigned long long dev = (unsigned long long)st.dev, ino = (unsigned long long)st.ino;
    int holders[16];
    int count;
    /* The common case, an fprep command holding the lock alone, checked
     * exactly in that process's own descriptor table: /proc/locks takes a
     * lock every flock and fcntl lock of the system waits for, and costs
     * each access a millisecond or more while a sync runs. */
    int noted = noted_holder(fd);
    if (noted > 0 && process_flock(noted, dev, ino) == 2) {
        holders[0] = noted;  /* held exclusively: nobody else holds it */
        count = 1;
    } else {
        count = locks_holders(dev, ino, holders, 16);
    }
    /* The holder, or a program it runs (flock(1) holds the lock and runs
     * its command as a child): a few generations up. */
    for (int generation = 0; count > 0 && generation < 8 && pid > 1; generation++) {
        for (int i = 0; i < count; i++) if (holders[i] == pid) return 1;
        pid = parent_of(pid);
    }
    return 0;
}
