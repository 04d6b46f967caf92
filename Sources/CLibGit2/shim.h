#ifndef FPREP_CLIBGIT2_SHIM_H
#define FPREP_CLIBGIT2_SHIM_H
#include <git2.h>

/* git_libgit2_opts is variadic, which Swift cannot call; these wrap the options fprep sets. */
static inline int fprep_git_set_strict_hash_verification(int enabled) {
    return git_libgit2_opts(GIT_OPT_ENABLE_STRICT_HASH_VERIFICATION, enabled);
}
static inline int fprep_git_set_owner_validation(int enabled) {
    return git_libgit2_opts(GIT_OPT_SET_OWNER_VALIDATION, enabled);
}
/* Off for fprep's index writes: a dataless entry names a blob the partial clone
 * does not hold, which strict creation would reject as "object not found". */
static inline int fprep_git_set_strict_object_creation(int enabled) {
    return git_libgit2_opts(GIT_OPT_ENABLE_STRICT_OBJECT_CREATION, enabled);
}
/* How much memory libgit2 keeps of what it read: parsed objects (its cache)
 * and mapped windows of pack files. */
static inline int fprep_git_set_cache_max_size(ssize_t bytes) {
    return git_libgit2_opts(GIT_OPT_SET_CACHE_MAX_SIZE, bytes);
}
static inline int fprep_git_set_mwindow_size(size_t bytes) {
    return git_libgit2_opts(GIT_OPT_SET_MWINDOW_SIZE, bytes);
}
static inline int fprep_git_set_mwindow_mapped_limit(size_t bytes) {
    return git_libgit2_opts(GIT_OPT_SET_MWINDOW_MAPPED_LIMIT, bytes);
}
#endif
