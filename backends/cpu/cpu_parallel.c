/* cpu_parallel.c — see cpu_parallel.h. */
#include "cpu_parallel.h"

#include <pthread.h>

enum { MAX_PARTS = 64 };

typedef struct part {
    cpu_range_fn fn;
    void *arg;
    int index;
    int64_t i0, i1;
    int status;
} part;

static void *run_part(void *p)
{
    part *t = p;
    t->status = t->fn(t->arg, t->index, t->i0, t->i1);
    return NULL;
}

int cpu_parallel_for(int threads, int64_t n, int64_t min_part, cpu_range_fn fn, void *arg)
{
    if (n <= 0) return 0;
    int64_t k = min_part > 0 ? n / min_part : n;
    if (k > threads) k = threads;
    if (k > MAX_PARTS) k = MAX_PARTS;
    if (k < 1) k = 1;
    part parts[MAX_PARTS];
    pthread_t tid[MAX_PARTS];
    int started[MAX_PARTS] = {0};
    for (int p = 0; p < k; p++) {
        parts[p] = (part){.fn = fn, .arg = arg, .index = p, .i0 = n * p / k, .i1 = n * (p + 1) / k};
        if (p > 0) started[p] = pthread_create(&tid[p], NULL, run_part, &parts[p]) == 0;
    }
    run_part(&parts[0]);
    for (int p = 1; p < k; p++) {
        if (started[p]) pthread_join(tid[p], NULL);
        else run_part(&parts[p]);
    }
    for (int p = 0; p < k; p++)
        if (parts[p].status) return parts[p].status;
    return 0;
}
