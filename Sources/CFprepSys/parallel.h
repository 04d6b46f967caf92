#ifndef FPREP_PARALLEL_H
#define FPREP_PARALLEL_H
#include <stddef.h>

/* Calls job(context, i) for every i below count, on up to `threads` threads
 * (this one included) taking the next i as they go; returns when all are
 * done. For work that waits on the disk: on a cold cache the reads of
 * scattered files overlap instead of coming one after another. */
void fprep_parallel_for(size_t count, int threads, void (*job)(void *context, size_t i), void *context);
#endif
