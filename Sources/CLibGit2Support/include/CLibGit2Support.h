#ifndef FPREP_CLIBGIT2_SUPPORT_H
#define FPREP_CLIBGIT2_SUPPORT_H
/* Mostly nothing to call: this target supplies symbols libgit2's static
 * archive needs (see network_init.c and gssapi_absent.c), and the one spawn
 * action Swift's Glibc module does not import (spawn_support.c). */
#include <spawn.h>

/* posix_spawn_file_actions_addclosefrom_np (glibc 2.34): the child closes
 * every descriptor from `low` up. */
int fprep_spawn_close_from(posix_spawn_file_actions_t *actions, int low);
#endif
