/* cpu_parallel.h — the CPU backend's own threads for the work OpenBLAS does not do: the
 * element-wise and row-wise kernels (SwiGLU, norms, log-softmax) and attention's small per-head
 * products, which otherwise run on one core while the others wait.
 *
 * The range [0, n) is cut into at most `threads` contiguous parts, each run by fn on its own
 * thread (the first on the caller's).  Every element or row is computed by the same code
 * whatever the part it falls in, so the results do not depend on the number of threads. */
#ifndef LMP_CPU_PARALLEL_H
#define LMP_CPU_PARALLEL_H

#include <stdint.h>

/* fn(arg, part, i0, i1): part p in [0, threads) covers [i0, i1); returns 0 or a status. */
typedef int (*cpu_range_fn)(void *arg, int part, int64_t i0, int64_t i1);

/* Runs fn over [0, n) in parts of at least `min_part` (fewer threads when n is small: a thread
 * costs tens of microseconds).  Returns the first part's non-zero status, else 0.  When a
 * thread cannot be started its part runs on the caller's. */
int cpu_parallel_for(int threads, int64_t n, int64_t min_part, cpu_range_fn fn, void *arg);

#endif
