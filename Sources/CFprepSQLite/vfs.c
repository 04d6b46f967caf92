/* The state database's VFS: SQLite's own unix VFS, one call changed.
 *
 * SQLite maps the wal-index file (DB-shm) and reads and writes it through
 * the mapping. The first connection of a process that finds no other one
 * truncates the file and extends it again by writing one byte at the end
 * of each 4 KiB page, which allocates only that byte's block: on a
 * filesystem with 1 KiB blocks (ext4 under 512 MB) the rest of each page
 * is a hole. A store through the mapping into a hole needs a block, and on
 * a full disk the kernel has none to give: SIGBUS, and every fprep command
 * on that replica dies, the `fprep evict` that would free space among them.
 *
 * Here each region SQLite maps is populated for writing at once
 * (madvise MADV_POPULATE_WRITE: the write faults taken now, where a
 * failure is an error, not a signal; each hole gets its block); when the
 * disk has no room, the mapping is refused with SQLITE_FULL, which fprep
 * reports as a full disk. No descriptor of the file is opened: closing one
 * would drop every POSIX lock this process holds on it, SQLite's among
 * them. Every other call goes to the unix VFS unchanged. */
#define _GNU_SOURCE
#include "CFprepSQLite.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  /* Linux 5.14 */
#endif

typedef struct {
    sqlite3_file base;
    /* The unix VFS's own file, right after this struct. */
    sqlite3_file *real;
} WrappedFile;

static sqlite3_vfs *unix_vfs;
static sqlite3_vfs wrapped_vfs;
static sqlite3_io_methods wrapped_methods;
static int register_result = SQLITE_ERROR;
static pthread_once_t register_once = PTHREAD_ONCE_INIT;

#define REAL(file) (((WrappedFile *)(file))->real)

static int w_close(sqlite3_file *file) {
    WrappedFile *w = (WrappedFile *)file;
    return w->real->pMethods ? w->real->pMethods->xClose(w->real) : SQLITE_OK;
}
static int w_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o) { return REAL(f)->pMethods->xRead(REAL(f), b, n, o); }
static int w_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o) { return REAL(f)->pMethods->xWrite(REAL(f), b, n, o); }
static int w_truncate(sqlite3_file *f, sqlite3_int64 size) { return REAL(f)->pMethods->xTruncate(REAL(f), size); }
static int w_sync(sqlite3_file *f, int flags) { return REAL(f)->pMethods->xSync(REAL(f), flags); }
static int w_file_size(sqlite3_file *f, sqlite3_int64 *size) { return REAL(f)->pMethods->xFileSize(REAL(f), size); }
static int w_lock(sqlite3_file *f, int level) { return REAL(f)->pMethods->xLock(REAL(f), level); }
static int w_unlock(sqlite3_file *f, int level) { return REAL(f)->pMethods->xUnlock(REAL(f), level); }
static int w_check_reserved(sqlite3_file *f, int *out) { return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out); }
static int w_file_control(sqlite3_file *f, int op, void *arg) { return REAL(f)->pMethods->xFileControl(REAL(f), op, arg); }
static int w_sector_size(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int w_device(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int w_shm_lock(sqlite3_file *f, int offset, int n, int flags) { return REAL(f)->pMethods->xShmLock(REAL(f), offset, n, flags); }
static void w_shm_barrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int w_shm_unmap(sqlite3_file *f, int delete) { return REAL(f)->pMethods->xShmUnmap(REAL(f), delete); }
static int w_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp) { return REAL(f)->pMethods->xFetch(REAL(f), o, n, pp); }
static int w_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p) { return REAL(f)->pMethods->xUnfetch(REAL(f), o, p); }

static int w_shm_map(sqlite3_file *file, int region, int size, int extend, void volatile **pp) {
    WrappedFile *w = (WrappedFile *)file;
    int rc = w->real->pMethods->xShmMap(w->real, region, size, extend, pp);
    if (rc != SQLITE_OK || *pp == NULL) return rc;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)*pp, end = start + (uintptr_t)size;
    if (page > 0) start &= ~((uintptr_t)page - 1);
    if (madvise((void *)start, end - start, MADV_POPULATE_WRITE) != 0 && errno == EFAULT) {
        /* A write here would have been a SIGBUS (no block for a hole).
         * SQLite caches the pointer it is given: give none, so no store
         * lands in the hole; the next call tries again. (EINVAL, an older
         * kernel, or a read-only mapping: as SQLite alone would be.) */
        *pp = NULL;
        return SQLITE_FULL;
    }
    return rc;
}

static int w_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out_flags) {
    (void)vfs;
    WrappedFile *w = (WrappedFile *)file;
    memset(w, 0, sizeof *w);
    w->real = (sqlite3_file *)(w + 1);
    int rc = unix_vfs->xOpen(unix_vfs, name, w->real, flags, out_flags);
    if (rc == SQLITE_OK && w->real->pMethods != NULL && w->real->pMethods->iVersion < 3) {
        /* Not the methods this file forwards to (the unix VFS gives every
         * file version 3 on Linux): refuse rather than call a method it lacks. */
        w->real->pMethods->xClose(w->real);
        return SQLITE_CANTOPEN;
    }
    /* xClose is called on a file whose pMethods is set, even when xOpen
     * failed: forward only to a real file that was opened. */
    w->base.pMethods = w->real->pMethods ? &wrapped_methods : NULL;
    return rc;
}

static void register_vfs(void) {
    unix_vfs = sqlite3_vfs_find("unix");
    if (unix_vfs == NULL || unix_vfs->iVersion < 2) return;
    /* The unix VFS's io methods, taken from a file it opens: version 3
     * (shared memory, memory-mapped reads). */
    wrapped_methods = (sqlite3_io_methods){
        .iVersion = 3,
        .xClose = w_close, .xRead = w_read, .xWrite = w_write, .xTruncate = w_truncate,
        .xSync = w_sync, .xFileSize = w_file_size, .xLock = w_lock, .xUnlock = w_unlock,
        .xCheckReservedLock = w_check_reserved, .xFileControl = w_file_control,
        .xSectorSize = w_sector_size, .xDeviceCharacteristics = w_device,
        .xShmMap = w_shm_map, .xShmLock = w_shm_lock, .xShmBarrier = w_shm_barrier,
        .xShmUnmap = w_shm_unmap, .xFetch = w_fetch, .xUnfetch = w_unfetch,
    };
    wrapped_vfs = *unix_vfs;
    wrapped_vfs.zName = FPREP_SQLITE_VFS;
    wrapped_vfs.szOsFile = (int)sizeof(WrappedFile) + unix_vfs->szOsFile;
    wrapped_vfs.xOpen = w_open;
    wrapped_vfs.pNext = NULL;
    wrapped_vfs.pAppData = NULL;
    register_result = sqlite3_vfs_register(&wrapped_vfs, 0);
}

int fprep_sqlite_register_vfs(void) {
    pthread_once(&register_once, register_vfs);
    return register_result;
}
