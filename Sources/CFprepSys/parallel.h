#ifndef FPREP_PARALLEL_H
#define FPREP_PARALLEL_H
#include <stddef.h>

/* Calls job(context, i) for every i below count, on up to `threads` threads
 * (this one included) taking the next i as they go; returns when all are
 * done. For work that waits on the disk: on a cold cache the reads of
 * scattered files overlap instead of coming one after another. */
void fprep_parallel_for(size_t count, int threads, void (*job)(void *context, size_t i), void *context);

/* The same, for lookups that may or may not wait on the disk: the first few
 * run on this thread alone, and threads join for the rest only if those
 * were slow. When the cache answers (microseconds a lookup), starting and
 * joining threads would cost more than all the lookups. */
void fprep_parallel_for_disk(size_t count, int threads, void (*job)(void *context, size_t i), void *context);
#endif
