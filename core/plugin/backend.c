/* backend.c — see backend.h. */
#include "plugin/backend.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "plugin/host.h"
#include "plugin/registry.h"

static int create_backend(lmp_registry *reg, const char *name, const lmp_value *params,
                          const lmp_backend_i **vt, void **self)
{
    const lmp_plugin *p = lmp_registry_find(reg, LMP_PLUGIN_BACKEND, name);
    if (!p) return lmp_fail(LMP_EINVAL, "backend '%s' is not loaded", name);
    lmp_value *defaults = NULL;
    if (!params) {
        int st = lmp_params_defaults(p->desc, &defaults);
        if (st) return st;
        params = defaults;
    }
    *vt = p->desc->vtable;
    *self = NULL;
    int st = (*vt)->create ? (*vt)->create(lmp_host_services(), lmp_host_ctx(), params, self) : 0;
    free(defaults);
    if (st) return lmp_fail_prefix(st, "backend '%s'", name);
    return 0;
}

int lmp_backend_open(lmp_registry *reg, const char *name, const lmp_value *params,
                     lmp_backend *out)
{
    memset(out, 0, sizeof *out);
    out->name = name;
    int st = lmp_registry_require(reg, LMP_PLUGIN_BACKEND, "cpu", NULL);
    if (!st && strcmp(name, "cpu") != 0) st = lmp_registry_require(reg, LMP_PLUGIN_BACKEND, name, NULL);
    if (st) return st;
    st = create_backend(reg, "cpu", strcmp(name, "cpu") == 0 ? params : NULL, &out->cpu,
                        &out->cpu_self);
    if (st) return st;
    if (strcmp(name, "cpu") == 0) {
        out->vt = out->cpu;
        out->self = out->cpu_self;
        return 0;
    }
    st = create_backend(reg, name, params, &out->vt, &out->self);
    if (st) lmp_backend_close(out);
    return st;
}

void lmp_backend_close(lmp_backend *be)
{
    if (be->vt && be->vt != be->cpu && be->vt->destroy) be->vt->destroy(be->self);
    if (be->cpu && be->cpu->destroy) be->cpu->destroy(be->cpu_self);
    memset(be, 0, sizeof *be);
}

static lmp_be_counters counters;

const lmp_be_counters *lmp_be_counters_get(void) { return &counters; }
void lmp_be_counters_reset(void) { memset(&counters, 0, sizeof counters); }

const char *lmp_op_name(lmp_op op)
{
    static const char *const names[LMP_OP_COUNT] = {
        "gemm", "xtx_accum", "cholesky", "chol_inverse", "trsm_lower", "rmsnorm", "rope", "attention",
        "swiglu", "log_softmax", "reduce_cols", "quantize_weight", "quantize_act", "layernorm", "gelu"};
    return op >= 0 && op < LMP_OP_COUNT ? names[op] : "?";
}

/* Try the chosen backend, then the CPU one if the op is missing or unsupported there; count
 * the call and its time. */
#define DISPATCH(be, op, OP, ...)                                                             \
    do {                                                                                      \
        double t0_ = lmp_now_s();                                                             \
        int st_ = LMP_EUNSUPPORTED;                                                           \
        if ((be)->vt->op) st_ = (be)->vt->op((be)->self, __VA_ARGS__);                        \
        if (st_ == LMP_EUNSUPPORTED) st_ = (be)->cpu->op((be)->cpu_self, __VA_ARGS__);        \
        counters.seconds[OP] += lmp_now_s() - t0_;                                            \
        counters.calls[OP]++;                                                                 \
        return st_;                                                                           \
    } while (0)

int lmp_be_gemm(const lmp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                float beta, float *C, int64_t ldc)
{
    counters.flops[LMP_OP_GEMM] += 2.0 * (double)M * (double)N * (double)K;
    DISPATCH(be, gemm, LMP_OP_GEMM, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

int lmp_be_rmsnorm(const lmp_backend *be, int64_t T, int64_t C, const float *x, const float *w,
                   float eps, float *out)
{
    DISPATCH(be, rmsnorm, LMP_OP_RMSNORM, T, C, x, w, eps, out);
}

int lmp_be_rope(const lmp_backend *be, int64_t T, int64_t n_heads, int64_t head_dim,
                int64_t pos0, float theta, float *x)
{
    DISPATCH(be, rope, LMP_OP_ROPE, T, n_heads, head_dim, pos0, theta, x);
}

int lmp_be_attention(const lmp_backend *be, int64_t T, int64_t n_heads, int64_t n_kv_heads,
                     int64_t hd, const float *q, const float *k, const float *v, float *out)
{
    DISPATCH(be, attention, LMP_OP_ATTENTION, T, n_heads, n_kv_heads, hd, q, k, v, out);
}

int lmp_be_swiglu(const lmp_backend *be, int64_t n, const float *gate, const float *up,
                  float *out)
{
    DISPATCH(be, swiglu, LMP_OP_SWIGLU, n, gate, up, out);
}

int lmp_be_log_softmax(const lmp_backend *be, int64_t rows, int64_t cols, const float *x,
                       float *out)
{
    DISPATCH(be, log_softmax, LMP_OP_LOG_SOFTMAX, rows, cols, x, out);
}

int lmp_be_reduce_cols(const lmp_backend *be, lmp_reduce kind, int64_t n, int64_t c,
                       const float *X, float *out)
{
    DISPATCH(be, reduce_cols, LMP_OP_REDUCE_COLS, kind, n, c, X, out);
}

int lmp_be_quantize_act(const lmp_backend *be, const lmp_aspec *spec, int64_t T, int64_t C,
                        float *X)
{
    DISPATCH(be, quantize_act, LMP_OP_QUANTIZE_ACT, spec, T, C, X);
}

int lmp_be_xtx_accum(const lmp_backend *be, int64_t n, int64_t c, const float *X, float alpha,
                     float *H)
{
    counters.flops[LMP_OP_XTX_ACCUM] += (double)n * (double)c * (double)(c + 1); /* SYRK's count */
    DISPATCH(be, xtx_accum, LMP_OP_XTX_ACCUM, n, c, X, alpha, H);
}

int lmp_be_cholesky(const lmp_backend *be, int64_t n, float *A, int64_t *bad_pivot)
{
    DISPATCH(be, cholesky, LMP_OP_CHOLESKY, n, A, bad_pivot);
}

int lmp_be_chol_inverse(const lmp_backend *be, int64_t n, float *L)
{
    DISPATCH(be, chol_inverse, LMP_OP_CHOL_INVERSE, n, L);
}

int lmp_be_trsm_lower(const lmp_backend *be, int trans, int64_t n, int64_t nrhs, const float *L,
                      float *B)
{
    DISPATCH(be, trsm_lower, LMP_OP_TRSM_LOWER, trans, n, nrhs, L, B);
}

int lmp_be_quantize_weight(const lmp_backend *be, const lmp_wspec *spec, int64_t rows,
                           int64_t cols, float *W, float *scales, float *zeros)
{
    DISPATCH(be, quantize_weight, LMP_OP_QUANTIZE_WEIGHT, spec, rows, cols, W, scales, zeros);
}

int lmp_be_layernorm(const lmp_backend *be, int64_t T, int64_t C, const float *x, const float *w,
                     const float *b, float eps, float *out)
{
    DISPATCH(be, layernorm, LMP_OP_LAYERNORM, T, C, x, w, b, eps, out);
}

int lmp_be_gelu(const lmp_backend *be, int64_t n, const float *x, float *out)
{
    DISPATCH(be, gelu, LMP_OP_GELU, n, x, out);
}

/* ---- the dispatching vtable handed to plugins: self is the lmp_backend ---------------- */
static int v_gemm(void *s, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc)
{
    return lmp_be_gemm(s, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
static int v_xtx(void *s, int64_t n, int64_t c, const float *X, float alpha, float *H)
{
    return lmp_be_xtx_accum(s, n, c, X, alpha, H);
}
static int v_chol(void *s, int64_t n, float *A, int64_t *bad) { return lmp_be_cholesky(s, n, A, bad); }
static int v_cinv(void *s, int64_t n, float *L) { return lmp_be_chol_inverse(s, n, L); }
static int v_trsm(void *s, int trans, int64_t n, int64_t nrhs, const float *L, float *B)
{
    return lmp_be_trsm_lower(s, trans, n, nrhs, L, B);
}
static int v_rmsnorm(void *s, int64_t T, int64_t C, const float *x, const float *w, float eps, float *out)
{
    return lmp_be_rmsnorm(s, T, C, x, w, eps, out);
}
static int v_rope(void *s, int64_t T, int64_t nh, int64_t hd, int64_t pos0, float theta, float *x)
{
    return lmp_be_rope(s, T, nh, hd, pos0, theta, x);
}
static int v_attention(void *s, int64_t T, int64_t nh, int64_t nkv, int64_t hd, const float *q,
                       const float *k, const float *v, float *out)
{
    return lmp_be_attention(s, T, nh, nkv, hd, q, k, v, out);
}
static int v_swiglu(void *s, int64_t n, const float *g, const float *u, float *out)
{
    return lmp_be_swiglu(s, n, g, u, out);
}
static int v_log_softmax(void *s, int64_t rows, int64_t cols, const float *x, float *out)
{
    return lmp_be_log_softmax(s, rows, cols, x, out);
}
static int v_reduce(void *s, lmp_reduce kind, int64_t n, int64_t c, const float *X, float *out)
{
    return lmp_be_reduce_cols(s, kind, n, c, X, out);
}
static int v_qweight(void *s, const lmp_wspec *spec, int64_t rows, int64_t cols, float *W,
                     float *scales, float *zeros)
{
    return lmp_be_quantize_weight(s, spec, rows, cols, W, scales, zeros);
}
static int v_qact(void *s, const lmp_aspec *spec, int64_t T, int64_t C, float *X)
{
    return lmp_be_quantize_act(s, spec, T, C, X);
}

static int v_layernorm(void *s, int64_t T, int64_t C, const float *x, const float *w,
                       const float *b, float eps, float *out)
{
    return lmp_be_layernorm(s, T, C, x, w, b, eps, out);
}
static int v_gelu(void *s, int64_t n, const float *x, float *out) { return lmp_be_gelu(s, n, x, out); }

static const lmp_backend_i dispatch_vtable = {
    .struct_size = sizeof(lmp_backend_i),
    .gemm = v_gemm, .xtx_accum = v_xtx, .cholesky = v_chol, .chol_inverse = v_cinv,
    .trsm_lower = v_trsm, .rmsnorm = v_rmsnorm, .rope = v_rope, .attention = v_attention,
    .swiglu = v_swiglu, .log_softmax = v_log_softmax, .reduce_cols = v_reduce,
    .quantize_weight = v_qweight, .quantize_act = v_qact, .layernorm = v_layernorm,
    .gelu = v_gelu,
};

const lmp_backend_i *lmp_backend_dispatch_vtable(void) { return &dispatch_vtable; }

int lmp_be_linear(const lmp_backend *be, int64_t T, int64_t in, int64_t out, const float *x,
                  const float *W, const float *b, float *y)
{
    int st = lmp_be_gemm(be, 0, 1, T, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
    if (st || !b) return st;
    for (int64_t t = 0; t < T; t++)
        for (int64_t o = 0; o < out; o++) y[t * out + o] += b[o];
    return 0;
}
