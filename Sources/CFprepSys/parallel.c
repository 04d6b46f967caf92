#include "parallel.h"
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

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

static void run_from(size_t first, size_t count, int threads, void (*job)(void *context, size_t i), void *context) {
    struct parallel_work work = { .count = count, .job = job, .context = context };
    atomic_init(&work.next, first);
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    pthread_t workers[MAX_THREADS];
    int started = 0;
    /* Threads that cannot be made leave their share to the others. */
    for (int i = 1; i < threads && first + (size_t)i < count; i++) {
        if (pthread_create(&workers[started], NULL, parallel_worker, &work) == 0) started++;
    }
    parallel_worker(&work);
    for (int i = 0; i < started; i++) pthread_join(workers[i], NULL);
}

void fprep_parallel_for(size_t count, int threads, void (*job)(void *context, size_t i), void *context) {
    run_from(0, count, threads, job, context);
}

void fprep_parallel_for_disk(size_t count, int threads, void (*job)(void *context, size_t i), void *context) {
    /* Two: enough to tell the cache from the disk, few enough that a cold
     * run does not wait long on one read after another. */
    size_t sample = count < 2 ? count : 2;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (size_t i = 0; i < sample; i++) job(context, i);
    if (sample == count) return;
    clock_gettime(CLOCK_MONOTONIC, &end);
    long long elapsed = (long long)(end.tv_sec - start.tv_sec) * 1000000000LL + (end.tv_nsec - start.tv_nsec);
    /* 25 µs an item: several times a lookup the cache answers, a fraction
     * of one that reads the disk. */
    if (elapsed < (long long)sample * 25000) threads = 1;
    run_from(sample, count, threads, job, context);
}
