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
} lmp_backend;

/* Creates backend `name` from the registry with validated params (NULL = defaults). */
int lmp_backend_open(struct lmp_registry *reg, const char *name, const lmp_value *params,
                     lmp_backend *out);
void lmp_backend_close(lmp_backend *be);

/* The operations the core uses, each dispatched with CPU fallback (row-major, see plugin.h). */
int lmp_be_gemm(const lmp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                float beta, float *C, int64_t ldc);
int lmp_be_rmsnorm(const lmp_backend *be, int64_t T, int64_t C, const float *x, const float *w,
                   float eps, float *out);
int lmp_be_rope(const lmp_backend *be, int64_t T, int64_t n_heads, int64_t head_dim,
                int64_t pos0, float theta, float *x);
int lmp_be_attention(const lmp_backend *be, int64_t T, int64_t n_heads, int64_t n_kv_heads,
                     int64_t hd, const float *q, const float *k, const float *v, float *out);
int lmp_be_swiglu(const lmp_backend *be, int64_t n, const float *gate, const float *up,
                  float *out);
int lmp_be_log_softmax(const lmp_backend *be, int64_t rows, int64_t cols, const float *x,
                       float *out);
int lmp_be_reduce_cols(const lmp_backend *be, lmp_reduce kind, int64_t n, int64_t c,
                       const float *X, float *out);
int lmp_be_quantize_act(const lmp_backend *be, const lmp_aspec *spec, int64_t T, int64_t C,
                        float *X);

int lmp_be_xtx_accum(const lmp_backend *be, int64_t n, int64_t c, const float *X, float alpha,
                     float *H);
int lmp_be_cholesky(const lmp_backend *be, int64_t n, float *A, int64_t *bad_pivot);
int lmp_be_chol_inverse(const lmp_backend *be, int64_t n, float *L);
int lmp_be_trsm_lower(const lmp_backend *be, int trans, int64_t n, int64_t nrhs, const float *L,
                      float *B);
int lmp_be_quantize_weight(const lmp_backend *be, const lmp_wspec *spec, int64_t rows,
                           int64_t cols, float *W, float *scales, float *zeros);

/* Per-operation counters over every dispatched call since the last reset (ggml-style perf
 * counters): seconds, calls and, for gemm and xtx_accum, floating-point operations. */
typedef enum {
    LMP_OP_GEMM, LMP_OP_XTX_ACCUM, LMP_OP_CHOLESKY, LMP_OP_CHOL_INVERSE, LMP_OP_TRSM_LOWER,
    LMP_OP_RMSNORM, LMP_OP_ROPE, LMP_OP_ATTENTION, LMP_OP_SWIGLU, LMP_OP_LOG_SOFTMAX,
    LMP_OP_REDUCE_COLS, LMP_OP_QUANTIZE_WEIGHT, LMP_OP_QUANTIZE_ACT, LMP_OP_LAYERNORM, LMP_OP_GELU,
    LMP_OP_COUNT
} lmp_op;

typedef struct lmp_be_counters {
    double seconds[LMP_OP_COUNT];
    int64_t calls[LMP_OP_COUNT];
    double flops[LMP_OP_COUNT];
} lmp_be_counters;

const lmp_be_counters *lmp_be_counters_get(void);
void lmp_be_counters_reset(void);
const char *lmp_op_name(lmp_op op);

/* The vtable plugins get from host->backend(): every entry dispatches with CPU fallback; its
 * self is the lmp_backend. */
const lmp_backend_i *lmp_backend_dispatch_vtable(void);

int lmp_be_layernorm(const lmp_backend *be, int64_t T, int64_t C, const float *x, const float *w,
                     const float *b, float eps, float *out);
int lmp_be_gelu(const lmp_backend *be, int64_t n, const float *x, float *out);

/* y[T,out] = x[T,in] W[out,in]^T + b */
int lmp_be_linear(const lmp_backend *be, int64_t T, int64_t in, int64_t out, const float *x,
                  const float *W, const float *b, float *y);

#endif
