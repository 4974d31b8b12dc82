/* devbe.c — the host half of the device backends (devbe.h), compiled into each of them.
 *
 * Every entry checks its arguments as the CPU backend does, returns early on empty shapes,
 * stages its operands through the slots and copies the result back; between the two it calls
 * the backend's devbe_dev.  Anything a backend computes on the host is here, done once the same
 * way for both: gemm's alpha == 0 case, the mirrored half of X^T X, RoPE's table, the slices
 * of a quantization. */
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "devbe.h"

#define FAIL(d, st, ...) DEVBE_FAIL(&(d)->err, st, __VA_ARGS__)

/* ---- checks and host-side pieces -------------------------------------------------------- */

/* T x C row-wise ops (norms, softmax): T, C >= 0, pointers when non-empty, int-sized. */
static int devbe_check_rows(const devbe_err *e, const char *op, int64_t T, int64_t C,
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

/* cpu_backend.c's check_wgrid, message for message; sizes beyond the kernels' int indexing are
 * LMP_EUNSUPPORTED (the CPU backend takes them). */
static int devbe_check_wgrid(const devbe_err *e, const char *op, const lmp_wspec *spec,
                             int64_t rows, int64_t cols, const float *W, const float *scales,
                             const float *zeros)
{
    if (!spec) return DEVBE_FAIL(e, LMP_EINVAL, "%s: spec is NULL", op);
    /* The kernels implement the INT grid with f32 scales only: any other format (the GGUF blocks,
     * rounded scales, the full and signed symmetric scales) goes to the CPU backend, which also
     * gives the messages for a bad one.  No error text: nothing failed. */
    if (spec->format != LMP_WFORMAT_INT || spec->scale_type != LMP_SCALE_F32 || (spec->sym && spec->sym != LMP_SYM_QMAX))
        return LMP_EUNSUPPORTED;
    if (spec->bits < 2 || spec->bits > 8)
        return DEVBE_FAIL(e, LMP_EINVAL, "%s: bits = %d is outside 2..8", op, spec->bits);
    if (spec->gran != LMP_GRAN_TENSOR && spec->gran != LMP_GRAN_CHANNEL && spec->gran != LMP_GRAN_GROUP)
        return DEVBE_FAIL(e, LMP_EINVAL, "%s: unknown granularity %d", op, (int)spec->gran);
    if (spec->gran == LMP_GRAN_GROUP && spec->group <= 0)
        return DEVBE_FAIL(e, LMP_EINVAL, "%s: group = %lld must be > 0", op, (long long)spec->group);
    if (spec->rounding != LMP_ROUND_HALF_EVEN && spec->rounding != LMP_ROUND_HALF_AWAY)
        return DEVBE_FAIL(e, LMP_EINVAL, "%s: unknown rounding %d", op, (int)spec->rounding);
    if (!(spec->clip >= 0.0f && spec->clip <= 1.0f))
        return DEVBE_FAIL(e, LMP_EINVAL, "%s: clip = %g is outside (0, 1] (0 means 1)", op, (double)spec->clip);
    if (rows < 0 || cols < 0)
        return DEVBE_FAIL(e, LMP_EINVAL, "%s: negative shape %lld x %lld", op, (long long)rows, (long long)cols);
    if (rows == 0 || cols == 0) return LMP_OK;
    if (!W) return DEVBE_FAIL(e, LMP_EINVAL, "%s: W is NULL", op);
    if (!scales) return DEVBE_FAIL(e, LMP_EINVAL, "%s: scales is NULL", op);
    if (!spec->sym && !zeros) return DEVBE_FAIL(e, LMP_EINVAL, "%s: zeros is NULL for an asymmetric grid", op);
    if ((double)rows * (double)cols > (double)INT_MAX)
        return DEVBE_FAIL(e, LMP_EUNSUPPORTED, "%s: %lld x %lld exceeds the int range", op,
                          (long long)rows, (long long)cols);
    return LMP_OK;
}

static int devbe_check_aspec(const devbe_err *e, const lmp_aspec *spec)
{
    if (!spec) return DEVBE_FAIL(e, LMP_EINVAL, "quantize_act: spec is NULL");
    if (spec->mode == LMP_ACT_NONE) return LMP_OK;
    /* the floating-point activations (ABI 4.5) run on the CPU backend: no error text, nothing failed */
    if (spec->mode >= LMP_ACT_FP8_STATIC_TENSOR && spec->mode <= LMP_ACT_MXFP4) return LMP_EUNSUPPORTED;
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

static int devbe_check_attention(const devbe_err *e, int64_t T, int64_t nh, int64_t nkv,
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

static int devbe_check_rope(const devbe_err *e, int64_t T, int64_t nh, int64_t hd)
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
static void devbe_wslices(const lmp_wspec *s, int64_t rows, int64_t cols, int64_t *nr,
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
static void devbe_rope_table(int64_t T, int64_t head_dim, int64_t pos0, float theta, float *cs)
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

/* Makes rc's host table the one for these arguments; *upload = 1 when the device copy must be
 * refreshed (the caller uploads T * hd floats and then sets rc->valid = 1). */
static int devbe_rope_prepare(const devbe_err *e, devbe_rope_cache *rc, int64_t T, int64_t hd,
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

static void devbe_rope_free(const devbe_err *e, devbe_rope_cache *rc)
{
    if (rc->cs) e->host->free(e->hctx, rc->cs);
    rc->cs = NULL;
}

/* ---- instance and slots ------------------------------------------------------------------- */

void devbe_init(devbe *d, const lmp_host *host, void *hctx, const devbe_dev *dev)
{
    d->err = (devbe_err){host, hctx};
    d->dev = dev;
}

void devbe_fini(devbe *d)
{
    for (int i = 0; i < DEVBE_SLOTS; i++)
        if (d->buf[i]) d->dev->release(d, d->buf[i]);
    devbe_rope_free(&d->err, &d->rope);
}

int devbe_slot(devbe *d, int i, size_t bytes, devbe_mem *out)
{
    if (bytes == 0) bytes = 4;
    if (d->cap[i] < bytes) {
        size_t cap = d->cap[i] ? d->cap[i] : 1 << 16;
        while (cap < bytes) cap *= 2;
        if (d->buf[i]) d->dev->release(d, d->buf[i]);
        d->buf[i] = NULL;
        d->cap[i] = 0;
        int st = d->dev->alloc(d, cap, &d->buf[i]);
        if (st) return st;
        d->cap[i] = cap;
    }
    *out = d->buf[i];
    return LMP_OK;
}

int devbe_put(devbe *d, int i, const float *host, int64_t rows, int64_t cols, int64_t ld,
              devbe_mem *out)
{
    int st = devbe_slot(d, i, (size_t)rows * (size_t)cols * sizeof(float), out);
    if (st || rows == 0 || cols == 0) return st;
    d->moved[0] += (uint64_t)rows * (uint64_t)cols * sizeof(float);
    return d->dev->write(d, *out, host, rows, cols, ld);
}

int devbe_get(devbe *d, devbe_mem m, float *host, int64_t rows, int64_t cols, int64_t ld)
{
    if (rows == 0 || cols == 0) return LMP_OK;
    d->moved[1] += (uint64_t)rows * (uint64_t)cols * sizeof(float);
    return d->dev->read(d, m, host, rows, cols, ld);
}

/* ---- linear algebra ------------------------------------------------------------------------ */

int devbe_gemm(void *self, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
               int64_t ldc)
{
    devbe *d = self;
    int st;
    if (M < 0 || N < 0 || K < 0)
        return FAIL(d, LMP_EINVAL, "gemm: negative shape M=%lld N=%lld K=%lld", (long long)M,
                    (long long)N, (long long)K);
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    if ((st = devbe_check_mat(&d->err, "gemm", "A", A, ar, ac, lda)) ||
        (st = devbe_check_mat(&d->err, "gemm", "B", B, br, bc, ldb)) ||
        (st = devbe_check_mat(&d->err, "gemm", "C", C, M, N, ldc)))
        return st;
    if (M == 0 || N == 0) return LMP_OK;
    if (K == 0 || alpha == 0.0f) { /* C = beta*C, A and B unread (BLAS semantics) */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return LMP_OK;
    }
    devbe_mem a, b, c;
    if ((st = devbe_put(d, 0, A, ar, ac, lda, &a)) || (st = devbe_put(d, 1, B, br, bc, ldb, &b)))
        return st;
    st = beta == 0.0f ? devbe_slot(d, 2, (size_t)(M * N) * sizeof(float), &c) /* C unread */
                      : devbe_put(d, 2, C, M, N, ldc, &c);
    if (st || (st = d->dev->gemm(d, ta, tb, (int)M, (int)N, (int)K, alpha, a, (int)ac, b, (int)bc,
                                 beta, c)))
        return st;
    return devbe_get(d, c, C, M, N, ldc);
}

int devbe_xtx_accum(void *self, int64_t n, int64_t c, const float *X, float alpha, float *H)
{
    devbe *d = self;
    int st;
    if ((st = devbe_check_mat(&d->err, "xtx_accum", "X", X, n, c, c)) ||
        (st = devbe_check_mat(&d->err, "xtx_accum", "H", H, c, c, c)))
        return st;
    if (n == 0 || c == 0) return LMP_OK;
    devbe_mem x, h;
    if ((st = devbe_put(d, 0, X, n, c, c, &x)) || (st = devbe_put(d, 2, H, c, c, c, &h)) ||
        (st = d->dev->xtx_accum(d, (int)n, (int)c, alpha, x, h)) ||
        (st = devbe_get(d, h, H, c, c, c)))
        return st;
    devbe_mirror_lower(c, H); /* the device computed one triangle: half the FLOPs */
    return LMP_OK;
}

int devbe_trsm_lower(void *self, int trans, int64_t n, int64_t nrhs, const float *L, float *B)
{
    devbe *d = self;
    int st;
    if ((st = devbe_check_mat(&d->err, "trsm_lower", "L", L, n, n, n)) ||
        (st = devbe_check_mat(&d->err, "trsm_lower", "B", B, n, nrhs, nrhs)))
        return st;
    if (n == 0 || nrhs == 0) return LMP_OK;
    devbe_mem l, b;
    if ((st = devbe_put(d, 0, L, n, n, n, &l)) || (st = devbe_put(d, 2, B, n, nrhs, nrhs, &b)) ||
        (st = d->dev->trsm_lower(d, trans, (int)n, (int)nrhs, l, b)))
        return st;
    return devbe_get(d, b, B, n, nrhs, nrhs);
}

/* ---- transformer pieces -------------------------------------------------------------------- */

int devbe_rmsnorm(void *self, int64_t T, int64_t C, const float *x, const float *w, float eps,
                  float *out)
{
    devbe *d = self;
    int st = devbe_check_rows(&d->err, "rmsnorm", T, C, x, w, out);
    if (st || T == 0 || C == 0) return st;
    devbe_mem dx, dw;
    if ((st = devbe_put(d, 0, x, T, C, C, &dx)) || (st = devbe_put(d, 1, w, 1, C, C, &dw)) ||
        (st = d->dev->rmsnorm(d, (int)T, (int)C, dx, dw, eps)))
        return st;
    return devbe_get(d, dx, out, T, C, C);
}

int devbe_layernorm(void *self, int64_t T, int64_t C, const float *x, const float *w,
                    const float *b, float eps, float *out)
{
    devbe *d = self;
    int st = devbe_check_rows(&d->err, "layernorm", T, C, x, w, out);
    if (st || T == 0 || C == 0) return st;
    devbe_mem dx, dw, db = NULL;
    if ((st = devbe_put(d, 0, x, T, C, C, &dx)) || (st = devbe_put(d, 1, w, 1, C, C, &dw)) ||
        (b && (st = devbe_put(d, 2, b, 1, C, C, &db))) ||
        (st = d->dev->layernorm(d, (int)T, (int)C, dx, dw, db, eps)))
        return st;
    return devbe_get(d, dx, out, T, C, C);
}

int devbe_rope(void *self, int64_t T, int64_t n_heads, int64_t head_dim, int64_t pos0,
               float theta, float *x)
{
    devbe *d = self;
    int st = devbe_check_rope(&d->err, T, n_heads, head_dim);
    if (st || T == 0 || n_heads == 0 || head_dim == 0) return st;
    if (!x) return FAIL(d, LMP_EINVAL, "rope: x is NULL");
    int64_t n = T * n_heads * head_dim, ncs = T * head_dim; /* [T, head_dim/2, 2] */
    devbe_mem dx, dcs;
    int upload;
    if ((st = devbe_rope_prepare(&d->err, &d->rope, T, head_dim, pos0, theta, &upload))) return st;
    if (upload) {
        if ((st = devbe_put(d, DEVBE_ROPE_SLOT, d->rope.cs, 1, ncs, ncs, &dcs))) return st;
        d->rope.valid = 1;
    }
    dcs = d->buf[DEVBE_ROPE_SLOT];
    if ((st = devbe_put(d, 0, x, 1, n, n, &dx)) ||
        (st = d->dev->rope(d, (int)T, (int)n_heads, (int)head_dim, dcs, dx)))
        return st;
    return devbe_get(d, dx, x, 1, n, n);
}

int devbe_attention(void *self, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                    const float *q, const float *k, const float *v, float *out)
{
    devbe *d = self;
    int st = devbe_check_attention(&d->err, T, n_heads, n_kv_heads, hd);
    if (st || T == 0 || n_heads == 0) return st;
    if (!q || !k || !v || !out) return FAIL(d, LMP_EINVAL, "attention: NULL operand");
    if (hd > d->att_max_hd || T > d->att_max_T) return LMP_EUNSUPPORTED;
    int64_t nq = T * n_heads * hd, nkv = T * n_kv_heads * hd;
    devbe_mem dq, dk, dv, dout;
    if ((st = devbe_put(d, 0, q, 1, nq, nq, &dq)) || (st = devbe_put(d, 1, k, 1, nkv, nkv, &dk)) ||
        (st = devbe_put(d, 2, v, 1, nkv, nkv, &dv)) ||
        (st = devbe_slot(d, 3, (size_t)nq * sizeof(float), &dout)) ||
        (st = d->dev->attention(d, (int)T, (int)n_heads, (int)n_kv_heads, (int)hd, dq, dk, dv, dout)))
        return st;
    return devbe_get(d, dout, out, 1, nq, nq);
}

int devbe_swiglu(void *self, int64_t n, const float *gate, const float *up, float *out)
{
    devbe *d = self;
    int st = devbe_check_rows(&d->err, "swiglu", 1, n, gate, up, out);
    if (st || n == 0) return st;
    devbe_mem g, u;
    if ((st = devbe_put(d, 0, gate, 1, n, n, &g)) || (st = devbe_put(d, 1, up, 1, n, n, &u)) ||
        (st = d->dev->swiglu(d, (int)n, g, u)))
        return st;
    return devbe_get(d, g, out, 1, n, n);
}

int devbe_gelu(void *self, int64_t n, const float *x, float *out)
{
    devbe *d = self;
    int st = devbe_check_rows(&d->err, "gelu", 1, n, x, x, out);
    if (st || n == 0) return st;
    devbe_mem dx;
    if ((st = devbe_put(d, 0, x, 1, n, n, &dx)) || (st = d->dev->gelu(d, (int)n, dx))) return st;
    return devbe_get(d, dx, out, 1, n, n);
}

int devbe_log_softmax(void *self, int64_t rows, int64_t cols, const float *x, float *out)
{
    devbe *d = self;
    int st = devbe_check_rows(&d->err, "log_softmax", rows, cols, x, x, out);
    if (st || rows == 0 || cols == 0) return st;
    devbe_mem dx;
    if ((st = devbe_put(d, 0, x, rows, cols, cols, &dx)) ||
        (st = d->dev->log_softmax(d, (int)rows, (int)cols, dx)))
        return st;
    return devbe_get(d, dx, out, rows, cols, cols);
}

int devbe_reduce_cols(void *self, lmp_reduce kind, int64_t n, int64_t c, const float *X,
                      float *out)
{
    devbe *d = self;
    if (kind < LMP_REDUCE_ABSMAX || kind > LMP_REDUCE_SUM)
        return FAIL(d, LMP_EINVAL, "reduce_cols: unknown reduction %d", (int)kind);
    int st = devbe_check_mat(&d->err, "reduce_cols", "X", X, n, c, c);
    if (st || n == 0 || c == 0) return st;
    if (!out) return FAIL(d, LMP_EINVAL, "reduce_cols: out is NULL");
    devbe_mem dx, dout;
    if ((st = devbe_put(d, 0, X, n, c, c, &dx)) || (st = devbe_put(d, 1, out, 1, c, c, &dout)) ||
        (st = d->dev->reduce_cols(d, (int)kind, (int)n, (int)c, dx, dout)))
        return st;
    return devbe_get(d, dout, out, 1, c, c);
}

/* ---- fake quantization: one slice per device work-group or block ------------------------- */

/* Runs the quantization kernel over the slices of X[rows, cols] (slot 0), the result copied to
 * X_out unless it is NULL (DEVBE_Q_CHOOSE leaves X as it is).  scales/zeros (slots 1, 2) go in
 * for DEVBE_Q_APPLY and come out for DEVBE_Q_CHOOSE; codes (slot 3) come out when given. */
static int quantize_slices(devbe *d, devbe_quant *q, const float *X, float *X_out,
                           const float *scales_in, const float *zeros_in, float *scales_out,
                           float *zeros_out, int32_t *codes)
{
    const int64_t rows = q->rows, cols = q->cols, ns = q->n_slices;
    devbe_mem dw, ds, dz, dc = NULL;
    int st;
    q->want_codes = codes != NULL;
    if ((st = devbe_put(d, 0, X, rows, cols, cols, &dw))) return st;
    if (scales_in ? (st = devbe_put(d, 1, scales_in, 1, ns, ns, &ds))
                  : (st = devbe_slot(d, 1, (size_t)ns * sizeof(float), &ds)))
        return st;
    if (zeros_in ? (st = devbe_put(d, 2, zeros_in, 1, ns, ns, &dz))
                 : (st = devbe_slot(d, 2, (size_t)ns * sizeof(float), &dz)))
        return st;
    if (codes && (st = devbe_slot(d, 3, (size_t)(rows * cols) * sizeof(int32_t), &dc))) return st;
    if ((st = d->dev->quantize(d, q, dw, ds, dz, dc))) return st;
    if (scales_out && (st = devbe_get(d, ds, scales_out, 1, ns, ns))) return st;
    if (zeros_out && (st = devbe_get(d, dz, zeros_out, 1, ns, ns))) return st;
    /* The int32 codes come back as 4-byte words through the same copy as floats: the runtime
     * copies bytes, and nothing here reads them as float. */
    if (codes && (st = devbe_get(d, dc, (float *)(void *)codes, rows, cols, cols))) return st;
    return X_out ? devbe_get(d, dw, X_out, rows, cols, cols) : LMP_OK;
}

/* The kernel's description of a weight grid op on W[rows, cols] (checked: fits int). */
static devbe_quant weight_quant(const lmp_wspec *spec, int64_t rows, int64_t cols, int mode)
{
    int64_t nr, nc, ncs, ns;
    devbe_wslices(spec, rows, cols, &nr, &nc, &ncs, &ns);
    return (devbe_quant){.rows = (int)rows, .cols = (int)cols, .nr = (int)nr, .nc = (int)nc,
                         .ncs = (int)ncs, .n_slices = (int)ns, .kind = spec->sym ? 0 : 1,
                         .bits = spec->bits, .rounding = spec->rounding,
                         .clip = lmp_wspec_clip(spec), .mode = mode};
}

int devbe_choose_weight_grid(void *self, const lmp_wspec *spec, int64_t rows, int64_t cols,
                             const float *W, float *scales, float *zeros)
{
    devbe *d = self;
    int st = devbe_check_wgrid(&d->err, "choose_weight_grid", spec, rows, cols, W, scales, zeros);
    if (st || rows == 0 || cols == 0) return st;
    if (!d->exact_div) return LMP_EUNSUPPORTED; /* could not match the CPU grid bit for bit */
    devbe_quant q = weight_quant(spec, rows, cols, DEVBE_Q_CHOOSE);
    return quantize_slices(d, &q, W, NULL, NULL, NULL, scales, spec->sym ? NULL : zeros, NULL);
}

int devbe_apply_weight_grid(void *self, const lmp_wspec *spec, int64_t rows, int64_t cols, float *W,
                            const float *scales, const float *zeros, int32_t *codes)
{
    devbe *d = self;
    int st = devbe_check_wgrid(&d->err, "apply_weight_grid", spec, rows, cols, W, scales, zeros);
    if (st || rows == 0 || cols == 0) return st;
    if (!d->exact_div) return LMP_EUNSUPPORTED;
    devbe_quant q = weight_quant(spec, rows, cols, DEVBE_Q_APPLY);
    return quantize_slices(d, &q, W, W, scales, spec->sym ? NULL : zeros, NULL, NULL, codes);
}

int devbe_quantize_act(void *self, const lmp_aspec *spec, int64_t T, int64_t C, float *X)
{
    devbe *d = self;
    int st = devbe_check_aspec(&d->err, spec);
    if (st || spec->mode == LMP_ACT_NONE) return st;
    if ((st = devbe_check_rows(&d->err, "quantize_act", T, C, X, X, X)) || T == 0 || C == 0) return st;
    if (!d->exact_div) return LMP_EUNSUPPORTED;
    /* static and per-token: one slice per row; per-tensor dynamic: the whole of X */
    const int whole = spec->mode == LMP_ACT_DYN_TENSOR;
    devbe_quant q = {.rows = (int)T, .cols = (int)C, .nr = whole ? (int)T : 1, .nc = (int)C, .ncs = 1,
                     .n_slices = whole ? 1 : (int)T, .kind = spec->mode == LMP_ACT_STATIC_TENSOR ? 2 : 3,
                     .bits = spec->bits, .rounding = spec->rounding, .sscale = spec->scale,
                     .clip = 1.0f, .mode = DEVBE_Q_FUSED};
    return quantize_slices(d, &q, X, X, NULL, NULL, NULL, NULL, NULL);
}
