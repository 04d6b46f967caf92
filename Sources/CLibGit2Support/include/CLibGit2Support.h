#ifndef FPREP_CLIBGIT2_SUPPORT_H
#define FPREP_CLIBGIT2_SUPPORT_H
/* Nothing to call: this target only supplies symbols libgit2's static
 * archive needs (see network_init.c and gssapi_absent.c). */
#endif
