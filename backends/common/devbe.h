/* devbe.h — what the device backends (opencl, cuda) share: the argument checks, and the host
 * half of every op (devbe.c).
 *
 * A device backend validates exactly as the CPU backend does, with the same status codes and
 * messages of the same shape, so a caller sees the same error whatever backend it chose.  The
 * checks run on the host before anything is staged.
 *
 * Both backends work the same way around the device: check, return early on empty shapes, stage
 * the host operands packed into a few buffer slots that grow and are reused, run, copy the
 * result back.  devbe.c does all of that once, for both, behind the lmp_backend_i entries
 * (DEVBE_VTABLE_ENTRIES); a backend supplies only a devbe_dev: buffers, strided copies, and each
 * op on staged buffers.  devbe.c is compiled into each plugin, so a plugin still links nothing
 * from the core or from another plugin.
 *
 * DEVBE_NAME names the backend ("opencl", "cuda") for the message prefix; each plugin's
 * CMakeLists defines it for all its sources. */
#ifndef LMP_DEVBE_H
#define LMP_DEVBE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "lmpress/plugin.h"

#ifndef DEVBE_NAME
#error "DEVBE_NAME must name the backend (the plugin's CMakeLists defines it)"
#endif

typedef struct devbe_err {
    const lmp_host *host;
    void *hctx;
} devbe_err;

#define DEVBE_FAIL(e, st, ...) ((e)->host->set_error((e)->hctx, (st), DEVBE_NAME ": " __VA_ARGS__))
/* Without the prefix: for probe and create() messages, which the loader already attributes. */
#define DEVBE_FAIL_RAW(e, st, ...) ((e)->host->set_error((e)->hctx, (st), __VA_ARGS__))

/* Kernels index with int: sizes above this fall back to the CPU backend (LMP_EUNSUPPORTED). */
static inline int devbe_fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* A rows x cols operand with leading dimension ld (cpu_backend.c's check_mat). */
static inline int devbe_check_mat(const devbe_err *e, const char *op, const char *what,
                                  const float *p, int64_t rows, int64_t cols, int64_t ld)
{
    if (rows < 0 || cols < 0) return DEVBE_FAIL(e, LMP_EINVAL, "%s: %s has negative shape", op, what);
    if (rows == 0 || cols == 0) return LMP_OK;
    if (!p) return DEVBE_FAIL(e, LMP_EINVAL, "%s: %s is NULL", op, what);
    if (ld < cols)
        return DEVBE_FAIL(e, LMP_EINVAL, "%s: leading dimension of %s is %lld < %lld columns", op,
                          what, (long long)ld, (long long)cols);
    if (!devbe_fits_int(rows) || !devbe_fits_int(cols) || !devbe_fits_int(ld) ||
        (double)rows * (double)ld > (double)INT_MAX)
        return DEVBE_FAIL(e, LMP_EUNSUPPORTED, "%s: %s [%lld, %lld] exceeds the int range", op,
                          what, (long long)rows, (long long)cols);
    return LMP_OK;
}

/* Copy the lower triangle of A[n,n] onto the upper one. */
static inline void devbe_mirror_lower(int64_t n, float *A)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < i; j++) A[j * n + i] = A[i * n + j];
}

/* The last RoPE table a backend built, kept because the forward rotates q and k with the same
 * positions: the device copy stays valid while the arguments match. */
typedef struct devbe_rope_cache {
    float *cs;         /* host table, devbe_rope_table's layout */
    int64_t cap;       /* floats allocated */
    int64_t T, hd, pos0;
    float theta;
    int valid;         /* the device copy holds the table for these arguments */
} devbe_rope_cache;

/* ---- the host half of a device backend (devbe.c) ---------------------------------------- */

/* A device buffer: a CUDA device pointer or an OpenCL cl_mem. */
typedef void *devbe_mem;

enum { DEVBE_SLOTS = 5, DEVBE_ROPE_SLOT = 4 };

typedef struct devbe devbe;

/* What a quantization kernel does with each slice: choose its grid and apply it (activations),
 * only choose it (choose_weight_grid: the scales and zeros out, W unchanged), or apply a given
 * one (apply_weight_grid: the scales and zeros in, W and optionally the codes out). */
enum { DEVBE_Q_FUSED = 0, DEVBE_Q_CHOOSE = 1, DEVBE_Q_APPLY = 2 };

/* One fake quantization: W[rows, cols] in n_slices slices of nr x nc, ncs of them per block
 * row (devbe_wslices). */
typedef struct devbe_quant {
    int rows, cols, nr, nc, ncs, n_slices;
    int kind; /* 0/1 weight sym/asym, 2 static activation (sscale), 3 dynamic activation */
    int bits, rounding;
    float sscale;
    float clip;     /* weights: the range ratio, in (0, 1] (plugin.h's 0 already read as 1) */
    int mode;       /* DEVBE_Q_* */
    int want_codes; /* DEVBE_Q_APPLY: write the int32 codes */
} devbe_quant;

/* The device half.  The sizes an op gets have passed the checks, so they fit int; every operand
 * is staged packed (leading dimension = its columns), and an op leaves its result on the device
 * for devbe.c to copy back. */
typedef struct devbe_dev {
    int (*alloc)(devbe *d, size_t bytes, devbe_mem *out); /* *out NULL on failure */
    void (*release)(devbe *d, devbe_mem m);
    /* Host rows x cols (row stride ld) to or from a packed buffer; read returns when the host
     * copy is complete (the end of the call). */
    int (*write)(devbe *d, devbe_mem m, const float *host, int64_t rows, int64_t cols, int64_t ld);
    int (*read)(devbe *d, devbe_mem m, float *host, int64_t rows, int64_t cols, int64_t ld);

    /* c = alpha op(a) op(b) + beta c (row-major); with beta == 0, c was not staged. */
    int (*gemm)(devbe *d, int ta, int tb, int M, int N, int K, float alpha, devbe_mem a, int lda,
                devbe_mem b, int ldb, float beta, devbe_mem c);
    /* h += alpha x^T x on h's lower triangle (row-major); devbe.c mirrors the upper one. */
    int (*xtx_accum)(devbe *d, int n, int c, float alpha, devbe_mem x, devbe_mem h);
    int (*trsm_lower)(devbe *d, int trans, int n, int nrhs, devbe_mem l, devbe_mem b);
    /* The row-wise and elementwise ops write their output over their first operand. */
    int (*rmsnorm)(devbe *d, int T, int C, devbe_mem x, devbe_mem w, float eps);
    int (*layernorm)(devbe *d, int T, int C, devbe_mem x, devbe_mem w, devbe_mem b /* or NULL */,
                     float eps);
    int (*rope)(devbe *d, int T, int n_heads, int head_dim, devbe_mem cs, devbe_mem x);
    int (*attention)(devbe *d, int T, int n_heads, int n_kv_heads, int hd, devbe_mem q,
                     devbe_mem k, devbe_mem v, devbe_mem out);
    int (*swiglu)(devbe *d, int n, devbe_mem gate, devbe_mem up);
    int (*gelu)(devbe *d, int n, devbe_mem x);
    int (*log_softmax)(devbe *d, int rows, int cols, devbe_mem x);
    int (*reduce_cols)(devbe *d, int kind, int n, int c, devbe_mem x, devbe_mem out);
    /* scales/zeros [n_slices] are read or written as q->mode says; codes [rows, cols] int32 is
     * written when q->want_codes (else it may be NULL). */
    int (*quantize)(devbe *d, const devbe_quant *q, devbe_mem w, devbe_mem scales, devbe_mem zeros,
                    devbe_mem codes);

    /* ---- the block path (devbe_block_run, plugin.h's lmp_block_job); a backend that leaves
     * any of these NULL has no block path.  Sizes are 64-bit: these kernels index with 64-bit
     * integers, so a buffer may pass 2^31 elements. */
    int (*copy)(devbe *d, devbe_mem dst, int64_t dst_at, devbe_mem src, int64_t n); /* n floats to dst + dst_at */
    int (*zero)(devbe *d, devbe_mem m, int64_t n);                  /* n floats of 0.0f */
    int (*add_bias)(devbe *d, int64_t rows, int64_t cols, devbe_mem x, devbe_mem b); /* x[r,:] += b */
    int (*add)(devbe *d, int64_t n, devbe_mem a, devbe_mem b, devbe_mem out);        /* out = a + b */
    int (*mul)(devbe *d, int64_t n, devbe_mem x, devbe_mem y);                       /* x *= y */
    int (*scale)(devbe *d, int64_t n, devbe_mem x, float s);                         /* x *= s */
    /* x[batch * T, n_heads*head_dim], batch windows of T positions each: pairs i < n_rot/2 of
     * each head turned by cs[T, n_rot/2, 2] */
    int (*rope_part)(devbe *d, int64_t batch, int64_t T, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                     devbe_mem cs, devbe_mem x);
    /* attention with a sliding window and soft-capped scores (plugin.h's attention_window) in
     * each of batch windows of T rows */
    int (*attention_window)(devbe *d, int64_t batch, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                            int64_t window, float softcap, devbe_mem q, devbe_mem k, devbe_mem v, devbe_mem out);
    int (*sqsum_cols)(devbe *d, int64_t n, int64_t c, devbe_mem x, devbe_mem out); /* out[j] += sum x^2 */
    /* Optional (NULL: attention_window): plain causal attention in each of batch windows of T rows
     * with the backend's tuned kernel (cuda: the work-group kernel per window, by pointer offsets) */
    int (*attention_batch)(devbe *d, int64_t batch, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                           devbe_mem q, devbe_mem k, devbe_mem v, devbe_mem out);
    int (*sync)(devbe *d); /* returns when everything queued has run */
} devbe_dev;

/* The first member of a backend's instance, so that the vtable's self is a devbe. */
struct devbe {
    devbe_err err;
    const devbe_dev *dev;
    devbe_mem buf[DEVBE_SLOTS];
    size_t cap[DEVBE_SLOTS]; /* bytes */
    devbe_rope_cache rope;   /* its device copy: slot DEVBE_ROPE_SLOT */
    /* What the device cannot do as the CPU does: LMP_EUNSUPPORTED, and the CPU backend runs it. */
    int64_t att_max_hd, att_max_T; /* the largest attention the kernels take */
    int exact_div; /* 0: f32 division is not correctly rounded, so the quantization grid could
                    * differ from the CPU's */
    uint64_t moved[2]; /* bytes copied host -> device and device -> host (devbe_bytes_moved) */
    /* The block path's rows per batch of windows (0: one window at a time): a GPU wants large
     * launches; PoCL ran CLBlast's GEMM 1.45x slower on 4 windows (1024 rows) than on each. */
    int64_t block_rows;
};

void devbe_init(devbe *d, const lmp_host *host, void *hctx, const devbe_dev *dev);
/* Releases the slots and the RoPE table; the backend then tears down its device. */
void devbe_fini(devbe *d);

/* Slot i, grown to at least bytes. */
int devbe_slot(devbe *d, int i, size_t bytes, devbe_mem *out);
/* Host rows x cols (row stride ld) into slot i, packed. */
int devbe_put(devbe *d, int i, const float *host, int64_t rows, int64_t cols, int64_t ld,
              devbe_mem *out);
/* Packed device rows x cols back to host rows of stride ld. */
int devbe_get(devbe *d, devbe_mem m, float *host, int64_t rows, int64_t cols, int64_t ld);

int devbe_gemm(void *self, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
               int64_t ldc);
int devbe_xtx_accum(void *self, int64_t n, int64_t c, const float *X, float alpha, float *H);
int devbe_trsm_lower(void *self, int trans, int64_t n, int64_t nrhs, const float *L, float *B);
int devbe_rmsnorm(void *self, int64_t T, int64_t C, const float *x, const float *w, float eps,
                  float *out);
int devbe_layernorm(void *self, int64_t T, int64_t C, const float *x, const float *w,
                    const float *b, float eps, float *out);
int devbe_rope(void *self, int64_t T, int64_t n_heads, int64_t head_dim, int64_t pos0,
               float theta, float *x);
int devbe_attention(void *self, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                    const float *q, const float *k, const float *v, float *out);
int devbe_swiglu(void *self, int64_t n, const float *gate, const float *up, float *out);
int devbe_gelu(void *self, int64_t n, const float *x, float *out);
int devbe_log_softmax(void *self, int64_t rows, int64_t cols, const float *x, float *out);
int devbe_reduce_cols(void *self, lmp_reduce kind, int64_t n, int64_t c, const float *X,
                      float *out);
int devbe_choose_weight_grid(void *self, const lmp_wspec *spec, int64_t rows, int64_t cols,
                             const float *W, float *scales, float *zeros);
int devbe_apply_weight_grid(void *self, const lmp_wspec *spec, int64_t rows, int64_t cols, float *W,
                            const float *scales, const float *zeros, int32_t *codes);
int devbe_quantize_act(void *self, const lmp_aspec *spec, int64_t T, int64_t C, float *X);

/* A block on the device (plugin.h's block_run): the weights uploaded once, the windows run one
 * after the other on buffers of the block's own, the statistics folded on the device; only the
 * statistics and the outputs come back (devbe.c). */
int devbe_block_run(void *self, const lmp_block_job *job);
void devbe_bytes_moved(void *self, uint64_t moved[2]);

/* The lmp_backend_i entries above, for a backend's vtable initializer. */
#define DEVBE_VTABLE_ENTRIES                                                                   \
    .gemm = devbe_gemm, .xtx_accum = devbe_xtx_accum, .trsm_lower = devbe_trsm_lower,         \
    .rmsnorm = devbe_rmsnorm, .layernorm = devbe_layernorm, .rope = devbe_rope,               \
    .attention = devbe_attention, .swiglu = devbe_swiglu, .gelu = devbe_gelu,                 \
    .log_softmax = devbe_log_softmax, .reduce_cols = devbe_reduce_cols,                       \
    .choose_weight_grid = devbe_choose_weight_grid, .apply_weight_grid = devbe_apply_weight_grid, \
    .quantize_act = devbe_quantize_act, .block_run = devbe_block_run, .bytes_moved = devbe_bytes_moved

#endif
