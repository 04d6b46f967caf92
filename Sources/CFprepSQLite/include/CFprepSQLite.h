#ifndef FPREP_CFPREPSQLITE_H
#define FPREP_CFPREPSQLITE_H

/* The name of the VFS `fprep_sqlite_register_vfs` registers. */
#define FPREP_SQLITE_VFS "fprep-unix"

/* Registers the VFS FPREP_SQLITE_VFS (not as the default): SQLite's unix
 * VFS, with each region of the wal-index file ("-shm") populated for
 * writing when it is mapped, so a full disk is SQLITE_FULL, never a SIGBUS
 * (see vfs.c). Returns an SQLite result code; safe to call more than once
 * and from several threads. */
int fprep_sqlite_register_vfs(void);

#endif
