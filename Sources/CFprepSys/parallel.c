#include "parallel.h"
#include <pthread.h>
#include <stdatomic.h>

#define MAX_THREADS 64

struct parallel_work {
    size_t count;
    atomic_size_t next;
    void (*job)(void *context, size_t i);
    void *context;
};

static void *parallel_worker(void *argument) {
    struct parallel_work *work = argument;
    for (;;) {
        size_t i = atomic_fetch_add(&work->next, 1);
        if (i >= work->count) break;
        work->job(work->context, i);
    }
    return NULL;
}

void fprep_parallel_for(size_t count, int threads, void (*job)(void *context, size_t i), void *context) {
    struct parallel_work work = { .count = count, .job = job, .context = context };
    atomic_init(&work.next, 0);
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    pthread_t workers[MAX_THREADS];
    int started = 0;
    /* Threads that cannot be made leave their share to the others. */
    for (int i = 1; i < threads && (size_t)i < count; i++) {
        if (pthread_create(&workers[started], NULL, parallel_worker, &work) == 0) started++;
    }
    parallel_worker(&work);
    for (int i = 0; i < started; i++) pthread_join(workers[i], NULL);
}
