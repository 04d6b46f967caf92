#define _GNU_SOURCE
#include "CFprepSys.h"
#include "parallel.h"
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Index entries in git's version 2/3 layout: 40 bytes of big-endian stat
 * fields, 20 bytes of id, 16 bits of flags, 16 more when extended, path. */
static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

static inline const uint8_t *entry_path(const uint8_t *entry, size_t *length) {
    uint16_t flags = be16(entry + 60);
    const uint8_t *path = entry + ((flags & 0x4000) ? 64 : 62);
    size_t n = flags & 0xFFF;
    if (n == 0xFFF) n = strlen((const char *)path);
    *length = n;
    return path;
}

/* Adds a name's FNV-1a hash to a folder's sum: a sum does not depend on
 * the order, so the parts of one folder that two threads saw add up. */
static inline void fnv(unsigned long long *hash, const uint8_t *bytes, size_t n) {
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++) { h ^= bytes[i]; h *= 1099511628211ULL; }
    *hash += h;
}

#define MAX_DEPTH 256

struct frame {
    int fd;               /* -1: the folder could not be opened */
    size_t length;        /* its path's length (0 for the root) */
    size_t dir;           /* its record in out->dirs */
    int changed;          /* its inode changed since the last full check */
    int moved;            /* it, or a folder above it, was renamed since then */
};

/* Whether a time is at or after the last moment every placeholder was
 * known to be one (see `PlaceholderCheck`). */
static inline int since_check(long long sec, long long nsec, struct fprep_scan_times times) {
    return sec > times.checked_sec || (sec == times.checked_sec && nsec >= times.checked_nsec);
}

static int add_dir(struct fprep_scan_result *out, size_t entry, size_t length, int fd) {
    if (out->dir_count == out->dir_capacity) {
        size_t capacity = out->dir_capacity ? out->dir_capacity * 2 : 1024;
        struct fprep_scan_dir *grown = realloc(out->dirs, capacity * sizeof *grown);
        if (!grown) return -1;
        out->dirs = grown;
        out->dir_capacity = capacity;
    }
    struct fprep_scan_dir *d = &out->dirs[out->dir_count];
    memset(d, 0, sizeof *d);
    d->entry = (uint32_t)entry;
    d->length = (uint32_t)length;
    d->opened = fd >= 0;
    if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) == 0) {
            d->mtime_sec = st.st_mtim.tv_sec; d->mtime_nsec = st.st_mtim.tv_nsec;
            d->ctime_sec = st.st_ctim.tv_sec; d->ctime_nsec = st.st_ctim.tv_nsec;
            d->inode = (uint64_t)st.st_ino;
            d->blocks = st.st_blocks;
        } else {
            d->opened = 0;
        }
    }
    return (int)(out->dir_count++);
}

static int scan_range(int rootfd, const uint8_t *base, const int32_t *offsets, size_t first, size_t end,
                      struct fprep_scan_times times, unsigned char *states, struct fprep_scan_result *out) {
    long long index_sec = times.index_sec, index_nsec = times.index_nsec;
    memset(out, 0, sizeof *out);
    struct frame stack[MAX_DEPTH + 1];
    int depth = 0;
    stack[0].fd = rootfd;
    stack[0].length = 0;
    stack[0].changed = 0;
    stack[0].moved = 0;
    if (add_dir(out, 0, 0, rootfd) < 0) return -1;
    stack[0].dir = 0;
    const uint8_t *previous = NULL;   /* the path the stack's folders come from */
    int result = 0;

    for (size_t i = first; i < end; i++) {
        const uint8_t *entry = base + offsets[i];
        size_t length;
        const uint8_t *path = entry_path(entry, &length);
        size_t slash = length;
        while (slash > 0 && path[slash - 1] != '/') slash--;
        size_t dir_length = slash ? slash - 1 : 0;   /* without the trailing slash */

        /* Pop the folders that are not a prefix of this entry's folder. */
        while (depth > 0) {
            size_t n = stack[depth].length;
            if (n <= dir_length && (n == dir_length || path[n] == '/') && memcmp(previous, path, n) == 0) break;
            if (stack[depth].fd >= 0) close(stack[depth].fd);
            depth--;
        }
        /* Open the folders still missing, one component at a time, never
         * through a symlink. */
        while (stack[depth].length < dir_length) {
            size_t start = stack[depth].length ? stack[depth].length + 1 : 0;
            size_t end = start;
            while (end < dir_length && path[end] != '/') end++;
            if (depth == MAX_DEPTH) { result = -2; goto done; }
            char name[4096];
            size_t n = end - start;
            if (n >= sizeof name) { result = -2; goto done; }
            memcpy(name, path + start, n);
            name[n] = 0;
            int parent = stack[depth].fd;
            int fd = parent >= 0 ? openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
            if (parent >= 0) fnv(&out->dirs[stack[depth].dir].names_hash, (const uint8_t *)name, n);
            int dir = add_dir(out, i, end, fd);
            if (dir < 0) { if (fd >= 0) close(fd); result = -1; goto done; }
            depth++;
            stack[depth].fd = fd;
            stack[depth].length = end;
            stack[depth].dir = (size_t)dir;
            /* A folder renamed since the last full check (its ctime moved
             * without its mtime: no name in it changed) carries placeholders
             * whose own inodes did not change, which another folder's may
             * now stand for (two folders' names swapped): every placeholder
             * below it is checked, marks and all. One whose names changed
             * has its own placeholders checked (renamed, then written into,
             * its dates agree again). */
            const struct fprep_scan_dir *d = &out->dirs[dir];
            int changed = d->opened && since_check(d->ctime_sec, d->ctime_nsec, times);
            int renamed = changed && (d->ctime_sec != d->mtime_sec || d->ctime_nsec != d->mtime_nsec);
            stack[depth].changed = changed;
            stack[depth].moved = stack[depth - 1].moved || renamed;
            previous = path;
        }
        previous = path;

        struct frame *top = &stack[depth];
        if (top->fd < 0) { states[i] = FPREP_SCAN_MISSING; continue; }
        const uint8_t *name = path + slash;
        size_t name_length = length - slash;
        fnv(&out->dirs[top->dir].names_hash, name, name_length);
        char cname[4096];
        if (name_length >= sizeof cname) { result = -2; goto done; }
        memcpy(cname, name, name_length);
        cname[name_length] = 0;
        struct stat st;
        if (fstatat(top->fd, cname, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            states[i] = (errno == ENOENT || errno == ENOTDIR) ? FPREP_SCAN_MISSING : FPREP_SCAN_CHECK;
            continue;
        }
        out->blocks += st.st_blocks;
        /* A file with another link can change through it, where no change
         * journal of this tree sees: flagged, so such a file is always looked at. */
        unsigned char linked = (S_ISREG(st.st_mode) && st.st_nlink > 1) ? FPREP_SCAN_LINKED : 0;
        uint32_t mode = be32(entry + 24);
        uint32_t type = mode & 0170000;
        if (type == 0160000) { states[i] = FPREP_SCAN_SUBMODULE; continue; }
        if (S_ISDIR(st.st_mode)) { states[i] = FPREP_SCAN_CHECK; continue; }
        int same = be32(entry + 0) == (uint32_t)st.st_ctim.tv_sec && be32(entry + 4) == (uint32_t)st.st_ctim.tv_nsec
            && be32(entry + 8) == (uint32_t)st.st_mtim.tv_sec && be32(entry + 12) == (uint32_t)st.st_mtim.tv_nsec
            && be32(entry + 16) == (uint32_t)st.st_dev && be32(entry + 20) == (uint32_t)st.st_ino
            && be32(entry + 28) == (uint32_t)st.st_uid && be32(entry + 32) == (uint32_t)st.st_gid
            && be32(entry + 36) == (uint32_t)st.st_size;
        int skip_worktree = (be16(entry + 60) & 0x4000) && (be16(entry + 62) & 0x4000);
        if (skip_worktree) {
            /* A placeholder: unchanged while it keeps its size and execute bit and holds no blocks. */
            /* One whose inode changed since the last scan that looked at
             * every placeholder (a touch, a chmod, another placeholder moved
             * or hard-linked over it) is checked, marks and all: the index
             * keeps a placeholder's size and date only. */
            int mode_ok = ((st.st_mode & 0100) != 0) == (mode == 0100755);
            int touched = since_check((long long)st.st_ctim.tv_sec, (long long)st.st_ctim.tv_nsec, times)
                || top->moved || top->changed;
            int dataless = S_ISREG(st.st_mode) && mode_ok
                && (same || (!touched && st.st_blocks == 0 && be32(entry + 36) == (uint32_t)st.st_size));
            states[i] = (dataless ? FPREP_SCAN_DATALESS : FPREP_SCAN_CHECK) | linked;
            continue;
        }
        int32_t msec = (int32_t)be32(entry + 8);
        uint32_t mnsec = be32(entry + 12);
        int racy = (long long)msec > index_sec || ((long long)msec == index_sec && (long long)mnsec >= index_nsec);
        int kind_ok = type == 0120000 ? S_ISLNK(st.st_mode)
            : (S_ISREG(st.st_mode) && (((st.st_mode & 0100) != 0) == (mode == 0100755)));
        states[i] = ((same && !racy && kind_ok) ? FPREP_SCAN_CLEAN : FPREP_SCAN_CHECK) | linked;
    }
done:
    while (depth > 0) {
        if (stack[depth].fd >= 0) close(stack[depth].fd);
        depth--;
    }
    return result;
}

struct scan_part {
    int rootfd;
    const uint8_t *base;
    const int32_t *offsets;
    size_t first, end;
    struct fprep_scan_times times;
    unsigned char *states;
    struct fprep_scan_result *out;
    int status;
};

static void scan_part_run(void *context, size_t k) {
    struct scan_part *part = (struct scan_part *)context + k;
    part->status = scan_range(part->rootfd, part->base, part->offsets, part->first, part->end,
                              part->times, part->states, part->out);
}

int fprep_scan_index(int rootfd, const uint8_t *base, const int32_t *offsets, size_t count,
                     struct fprep_scan_times times, int parts,
                     unsigned char *states, struct fprep_scan_result *out) {
    if (parts < 1) parts = 1;
    if (parts > FPREP_SCAN_MAX_PARTS) parts = FPREP_SCAN_MAX_PARTS;
    if ((size_t)parts > count / 1024 + 1) parts = (int)(count / 1024 + 1);
    struct scan_part work[FPREP_SCAN_MAX_PARTS];
    for (int k = 0; k < parts; k++) {
        work[k] = (struct scan_part){ rootfd, base, offsets, count * (size_t)k / (size_t)parts,
                                      count * (size_t)(k + 1) / (size_t)parts, times, states, &out[k], 0 };
    }
    /* Every part on a thread of its own: on a cold cache their inode reads
     * overlap (git's preloaded index does the same). */
    fprep_parallel_for((size_t)parts, parts, scan_part_run, work);
    int status = 0;
    for (int k = 0; k < parts; k++) {
        if (work[k].status != 0 && status == 0) status = work[k].status;
    }
    if (status != 0) {
        for (int k = 0; k < parts; k++) fprep_scan_result_free(&out[k]);
        return status;
    }
    return parts;
}

void fprep_scan_result_free(struct fprep_scan_result *result) {
    free(result->dirs);
    memset(result, 0, sizeof *result);
}
