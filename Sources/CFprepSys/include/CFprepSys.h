#ifndef FPREP_CFPREPSYS_H
#define FPREP_CFPREPSYS_H
#include <sys/types.h>
#include <sys/stat.h>
#include <time.h>

/* Opens `path` (relative, '/'-separated) below `dirfd` without following any
 * symlink and without leaving `dirfd`: openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS),
 * or, on kernels without openat2, a walk of O_NOFOLLOW opens one component at a time.
 * Returns the fd or -1 with errno set (ELOOP when a symlink is in the way). */
int fprep_open_beneath(int dirfd, const char *path, int flags, mode_t mode);

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

/* Flushes the whole filesystem that holds `fd` (syncfs(2)): one call makes a
 * batch of written files durable, instead of one fsync per file. */
int fprep_syncfs(int fd);

/* Reads xattr `name` of the file at `dirfd`/`name` without following a symlink
 * into `buf`; returns its length or -1. */
/* Looks up (fstatat, no symlink followed at the end) every path beneath
 * dirfd on several threads at once, results dropped: on a cold cache the
 * folder and inode reads of scattered paths then overlap instead of coming
 * one after another. Only a warm-up; nothing is decided from it. */
void fprep_prefetch_paths(int dirfd, const char *const *paths, size_t count, int threads);

/* Whether a regular file beneath dirfd holds no data: no data extents (its
 * blocks are extended attributes), or only zeros. 1 yes, 0 no, -1 error. */
int fprep_holds_no_data_at(int dirfd, const char *path);

ssize_t fprep_get_xattr_at(int dirfd, const char *path, const char *attr, char *buf, size_t len);

/* fstatat(AT_SYMLINK_NOFOLLOW) with the nanosecond fields flattened, so Swift
 * needs no knowledge of struct stat's layout. */
struct fprep_stat {
    long long dev, ino, mode, nlink, uid, gid, size, blocks;
    long long mtime_sec, mtime_nsec, ctime_sec, ctime_nsec, atime_sec, atime_nsec;
};
int fprep_lstat_at(int dirfd, const char *path, struct fprep_stat *out);
int fprep_fstat(int fd, struct fprep_stat *out);
void fprep_stat_flatten(const struct stat *st, struct fprep_stat *out);

/* Sets the mtime (and atime to the same) of an open fd. */
int fprep_set_mtime(int fd, long long sec, long nsec);

#endif
