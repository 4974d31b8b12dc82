/* devbe.h — argument checks shared by the device backends (opencl, cuda).
 *
 * A device backend validates exactly as the CPU backend does, with the same status codes and
 * messages of the same shape, so a caller sees the same error whatever backend it chose.  The
 * checks run on the host before anything is staged.  Header-only (static functions): a plugin
 * links nothing from the core or from another plugin.
 *
 * DEVBE_NAME must name the backend ("opencl", "cuda") for the message prefix. */
#ifndef LMP_DEVBE_H
#define LMP_DEVBE_H

#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "lmpress/plugin.h"

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

/* T x C row-wise ops (norms, softmax): T, C >= 0, pointers when non-empty, int-sized. */
static inline int devbe_check_rows(const devbe_err *e, const char *op, int64_t T, int64_t C,
                                   const void *a, const void *b, const void *c)
{
    if (T < 0 || C < 0)
        return DEVBE_FAIL(e, LMP_EINVAL, "%s: negative shape %lld x %lld", op, (long long)T,
                          (long long)C);
    if (T == 0 || C == 0) return LMP_OK;
    if (!a || !b || !c) return DEVBE_FAIL(e, LMP_EINVAL, "%s: NULL operand", op);
    if ((double)T * (double)C > (double)INT_MAX)
        return DEVBE_FAIL(e, LMP_EUNSUPPORTED, "%s: %lld x %lld exceeds the int range", op,
                          (long long)T, (long long)C);
    return LMP_OK;
}

static inline int devbe_check_wspec(const devbe_err *e, const lmp_wspec *spec)
{
    if (!spec) return DEVBE_FAIL(e, LMP_EINVAL, "quantize_weight: spec is NULL");
    if (spec->bits < 2 || spec->bits > 8)
        return DEVBE_FAIL(e, LMP_EINVAL, "quantize_weight: bits = %d is outside 2..8", spec->bits);
    if (spec->gran != LMP_GRAN_TENSOR && spec->gran != LMP_GRAN_CHANNEL && spec->gran != LMP_GRAN_GROUP)
        return DEVBE_FAIL(e, LMP_EINVAL, "quantize_weight: unknown granularity %d", (int)spec->gran);
    if (spec->gran == LMP_GRAN_GROUP && spec->group <= 0)
        return DEVBE_FAIL(e, LMP_EINVAL, "quantize_weight: group = %lld must be > 0",
                          (long long)spec->group);
    if (spec->rounding != LMP_ROUND_HALF_EVEN && spec->rounding != LMP_ROUND_HALF_AWAY)
        return DEVBE_FAIL(e, LMP_EINVAL, "quantize_weight: unknown rounding %d", (int)spec->rounding);
    return LMP_OK;
}

static inline int devbe_check_aspec(const devbe_err *e, const lmp_aspec *spec)
{
    if (!spec) return DEVBE_FAIL(e, LMP_EINVAL, "quantize_act: spec is NULL");
    if (spec->mode == LMP_ACT_NONE) return LMP_OK;
    if (spec->mode < LMP_ACT_STATIC_TENSOR || spec->mode > LMP_ACT_DYN_TOKEN)
        return DEVBE_FAIL(e, LMP_EINVAL, "quantize_act: unknown mode %d", (int)spec->mode);
    if (spec->bits < 2 || spec->bits > 16)
        return DEVBE_FAIL(e, LMP_EINVAL, "quantize_act: bits = %d is outside 2..16", spec->bits);
    if (spec->rounding != LMP_ROUND_HALF_EVEN && spec->rounding != LMP_ROUND_HALF_AWAY)
        return DEVBE_FAIL(e, LMP_EINVAL, "quantize_act: unknown rounding %d", (int)spec->rounding);
    if (spec->mode == LMP_ACT_STATIC_TENSOR && !(spec->scale > 0.0f && isfinite(spec->scale)))
        return DEVBE_FAIL(e, LMP_EINVAL, "quantize_act: static scale %g must be finite and > 0",
                          (double)spec->scale);
    return LMP_OK;
}

static inline int devbe_check_attention(const devbe_err *e, int64_t T, int64_t nh, int64_t nkv,
                                        int64_t hd)
{
    if (T < 0 || nh < 0 || nkv <= 0 || hd <= 0 || nh % nkv != 0)
        return DEVBE_FAIL(e, LMP_EINVAL,
                          "attention: bad shape T=%lld heads=%lld kv_heads=%lld hd=%lld (heads "
                          "must be a multiple of kv_heads)",
                          (long long)T, (long long)nh, (long long)nkv, (long long)hd);
    if ((double)T * (double)nh * (double)hd > (double)INT_MAX)
        return DEVBE_FAIL(e, LMP_EUNSUPPORTED, "attention: shape exceeds the int range");
    return LMP_OK;
}

static inline int devbe_check_rope(const devbe_err *e, int64_t T, int64_t nh, int64_t hd)
{
    if (T < 0 || nh < 0 || hd < 0 || hd % 2 != 0)
        return DEVBE_FAIL(e, LMP_EINVAL, "rope: bad shape T=%lld heads=%lld head_dim=%lld (must be even)",
                          (long long)T, (long long)nh, (long long)hd);
    if ((double)T * (double)nh * (double)hd > (double)INT_MAX)
        return DEVBE_FAIL(e, LMP_EUNSUPPORTED, "rope: shape exceeds the int range");
    return LMP_OK;
}

/* Slices of a weight quantization, in the order their scales are stored (cpu_ref.c):
 * [nr, nc] blocks, ncs of them per block row. */
static inline void devbe_wslices(const lmp_wspec *s, int64_t rows, int64_t cols, int64_t *nr,
                                 int64_t *nc, int64_t *ncs, int64_t *n_slices)
{
    *nr = s->gran == LMP_GRAN_TENSOR ? rows : 1;
    *nc = s->gran == LMP_GRAN_GROUP ? s->group : cols;
    if (*nc > cols) *nc = cols;
    *ncs = (cols + *nc - 1) / *nc;
    *n_slices = ((rows + *nr - 1) / *nr) * *ncs;
}

/* RoPE's cos/sin table cs[T, head_dim/2, 2] for positions pos0.., computed on the host exactly
 * as the CPU backend computes it (f32, llama2.c: freq = 1 / theta^(2i/hd), angle = pos * freq,
 * libm's powf/cosf/sinf): a device's pow/sin/cos may be a few ulp off libm's (OpenCL allows 16
 * for pow), which would make every rotated q and k differ from the CPU's in the last bits. */
static inline void devbe_rope_table(int64_t T, int64_t head_dim, int64_t pos0, float theta, float *cs)
{
    int64_t half = head_dim / 2;
    for (int64_t t = 0; t < T; t++) {
        float pos = (float)(pos0 + t);
        for (int64_t i = 0; i < half; i++) {
            float freq = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
            float ang = pos * freq;
            cs[(t * half + i) * 2] = cosf(ang);
            cs[(t * half + i) * 2 + 1] = sinf(ang);
        }
    }
}

/* The last RoPE table a backend built, kept because the forward rotates q and k with the same
 * positions: the device copy stays valid while the arguments match. */
typedef struct devbe_rope {
    float *cs;         /* host table, devbe_rope_table's layout */
    int64_t cap;       /* floats allocated */
    int64_t T, hd, pos0;
    float theta;
    int valid;         /* the device copy holds the table for these arguments */
} devbe_rope;

/* Makes rc's host table the one for these arguments; *upload = 1 when the device copy must be
 * refreshed (the caller uploads T * hd floats and then sets rc->valid = 1). */
static inline int devbe_rope_prepare(const devbe_err *e, devbe_rope *rc, int64_t T, int64_t hd,
                                     int64_t pos0, float theta, int *upload)
{
    *upload = 0;
    if (rc->valid && rc->T == T && rc->hd == hd && rc->pos0 == pos0 && rc->theta == theta)
        return LMP_OK;
    rc->valid = 0;
    if (T * hd > rc->cap) {
        if (rc->cs) e->host->free(e->hctx, rc->cs);
        rc->cap = 0;
        if (!(rc->cs = e->host->alloc(e->hctx, (size_t)(T * hd) * sizeof(float))))
            return DEVBE_FAIL(e, LMP_ENOMEM, "rope: out of memory");
        rc->cap = T * hd;
    }
    devbe_rope_table(T, hd, pos0, theta, rc->cs);
    rc->T = T;
    rc->hd = hd;
    rc->pos0 = pos0;
    rc->theta = theta;
    *upload = 1;
    return LMP_OK;
}

static inline void devbe_rope_free(const devbe_err *e, devbe_rope *rc)
{
    if (rc->cs) e->host->free(e->hctx, rc->cs);
    rc->cs = NULL;
}

/* Copy the lower triangle of A[n,n] onto the upper one. */
static inline void devbe_mirror_lower(int64_t n, float *A)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < i; j++) A[j * n + i] = A[i * n + j];
}

#endif
