/* backend.h — the active backend, as the core calls it.
 *
 * Every operation goes to the chosen backend plugin first; where the plugin leaves the entry
 * NULL or answers LMP_EUNSUPPORTED, the same call runs on the CPU backend (the reference), so a
 * backend may implement a subset.  The CPU backend is therefore always loaded. */
#ifndef LMP_CORE_BACKEND_H
#define LMP_CORE_BACKEND_H

#include "lmpress/plugin.h"

struct lmp_registry;

typedef struct lmp_backend {
    const char *name;
    const lmp_backend_i *vt;  void *self;     /* the chosen backend */
    const lmp_backend_i *cpu; void *cpu_self; /* fallback (the same object when name is "cpu") */
    struct lmp_be_counters *counters;         /* owned; counted through a const lmp_backend * */
    struct lmp_ctx *ctx;                      /* the run it was opened on (its error text) */
    /* A lower compute precision (issue 42): when the chosen backend has an enum parameter
     * `compute` set to other than its first choice ("f32"), vt/self are opened with compute =
     * "f32" and run everything, and lowp_vt/lowp_self, a second instance with the config's
     * compute, run the forward's linears (lmp_be_linear) in the views that ask for it
     * (lmp_backend_view).  NULL: no such parameter, or f32 asked. */
    const lmp_backend_i *lowp_vt; void *lowp_self;
    int lowp_linears;                         /* this view sends lmp_be_linear to lowp_self */
} lmp_backend;

/* Creates backend `name` from the registry with validated params (NULL = defaults) on the run's
 * context ctx, which the backend keeps as its hctx (errors, logs, memory): ctx must outlive it. */
struct lmp_ctx;
int lmp_backend_open(struct lmp_ctx *ctx, struct lmp_registry *reg, const char *name,
                     const lmp_value *params, lmp_backend *out);
void lmp_backend_close(lmp_backend *be);

/* A view of an open backend (shares its instances and counters; never closed): lowp != 0 sends
 * the forward's linears to the lower-precision instance where there is one.  Compression's
 * forwards run on lmp_backend_view(be, 1); evaluation on be itself unless the config's
 * eval.compute = "backend".  The solvers' GEMMs (host->backend, lmp_be_gemm) always stay on the
 * f32 instance. */
lmp_backend lmp_backend_view(const lmp_backend *be, int lowp);

/* The operations the core uses, one per line of LMP_BACKEND_OPS (plugin.h), each dispatched
 * with CPU fallback and counted: lmp_be_gemm(be, ta, tb, M, ...), lmp_be_rmsnorm(be, T, ...). */
#define LMP_BE_DECLARE(name, params, args, n_flops) int lmp_be_##name(const lmp_backend *be, LMP_UNPAREN params);
LMP_BACKEND_ALL_OPS(LMP_BE_DECLARE)
#undef LMP_BE_DECLARE

/* LMP_OP_gemm, LMP_OP_xtx_accum, ...: the ops in list order (named as in the list, since a
 * macro cannot change case), for the counters. */
#define LMP_OP_ENUM(name, params, args, n_flops) LMP_OP_##name,
typedef enum { LMP_BACKEND_ALL_OPS(LMP_OP_ENUM) LMP_OP_COUNT } lmp_op;
#undef LMP_OP_ENUM
const char *lmp_op_name(lmp_op op);

/* Per-operation counters of one open backend over every dispatched call since it was opened or
 * last reset (ggml-style perf counters): seconds, calls and, where the list gives a formula,
 * floating-point operations. */
typedef struct lmp_be_counters {
    double seconds[LMP_OP_COUNT];
    int64_t calls[LMP_OP_COUNT];
    double flops[LMP_OP_COUNT];
    double block_seconds;  /* lmp_be_block_run: the blocks the backend ran whole */
    int64_t block_calls;
} lmp_be_counters;

const lmp_be_counters *lmp_be_counters_get(const lmp_backend *be);
void lmp_be_counters_reset(const lmp_backend *be);

/* The vtable plugins get from host->backend(): every entry dispatches with CPU fallback; its
 * self is the lmp_backend. */
const lmp_backend_i *lmp_backend_dispatch_vtable(void);

/* The backend's block entry point (plugin.h's lmp_block_job, ABI 4.5): LMP_EUNSUPPORTED where
 * the backend has none or declines the job (its reason then in the host error text, which the
 * caller logs before it runs the block op by op); there is no CPU fallback at this level, the
 * per-op forward is the fallback.  Counted in block_seconds / block_calls. */
int lmp_be_block_run(const lmp_backend *be, const lmp_block_job *job);

/* Bytes the backend copied host -> device (moved[0]) and back (moved[1]) since it was opened;
 * zeros for a backend with no device or no counter. */
void lmp_be_bytes_moved(const lmp_backend *be, uint64_t moved[2]);

/* y[T,out] = x[T,in] W[out,in]^T + b */
int lmp_be_linear(const lmp_backend *be, int64_t T, int64_t in, int64_t out, const float *x,
                  const float *W, const float *b, float *y);

#endif
