#define _GNU_SOURCE
#include "CLibGit2Support.h"

int fprep_spawn_close_from(posix_spawn_file_actions_t *actions, int low) {
    return posix_spawn_file_actions_addclosefrom_np(actions, low);
}
