#ifndef FPREP_CFPREPSQLITE_H
#define FPREP_CFPREPSQLITE_H

/* The name of the VFS `fprep_sqlite_register_vfs` registers. */
#define FPREP_SQLITE_VFS "fprep-unix"

/* Registers the VFS FPREP_SQLITE_VFS (not as the default): SQLite's unix
 * VFS, whose wal-index file ("-shm") has every block allocated before
 * SQLite uses a region of it. Returns an SQLite result code; safe to call
 * more than once and from several threads. */
int fprep_sqlite_register_vfs(void);

#endif
