/* cpu_bf16.c — see cpu_bf16.h. */
#include "cpu_bf16.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lmpress/plugin.h"

/* Round to nearest even; a NaN keeps its sign and becomes a quiet NaN (the plain rounding could
 * carry a NaN's low mantissa bits into the exponent: infinity).  Branch-free, so it vectorizes. */
static void from_f32_plain(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
        const uint32_t nan = (u >> 16) | 0x40u;
        dst[i] = (uint16_t)((u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
/* VCVTNE2PS2BF16: the same rounding, 32 values an instruction (the plain loop was the cost of a
 * whole bf16 GEMM on the 7B shape, tools/bench/bench_bf16_gemm.c).  It also flushes subnormal
 * inputs to zero, which the GEMM would lose to bf16's range anyway. */
__attribute__((target("avx512f,avx512bf16"))) static void from_f32_avx512bf16(const float *src, uint16_t *dst,
                                                                              int64_t n)
{
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
        _mm512_storeu_si512((void *)(dst + i), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
    from_f32_plain(src + i, dst + i, n - i);
}
static int have_avx512bf16(void) { return __builtin_cpu_supports("avx512bf16"); }
#else
static void from_f32_avx512bf16(const float *src, uint16_t *dst, int64_t n) { from_f32_plain(src, dst, n); }
static int have_avx512bf16(void) { return 0; }
#endif

void lmp_bf16_from_f32(const float *src, uint16_t *dst, int64_t n)
{
    if (have_avx512bf16()) from_f32_avx512bf16(src, dst, n);
    else from_f32_plain(src, dst, n);
}

#ifdef LMP_HAVE_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

struct lmp_bf16_gemm {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    uint16_t *a, *b;  /* the operands' bf16 copies, dense */
    size_t a_cap, b_cap;
    float *t;         /* op(A) op(B) when alpha != 1 or beta != 0 */
    size_t t_cap;
};

int lmp_bf16_available(char *why, size_t why_size)
{
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) == (unsigned)dnnl_cpu_isa_avx512_core_bf16)
        return 1;
    if (why && why_size)
        snprintf(why, why_size,
                 "this CPU has no bf16 instructions (oneDNN's ISA here: 0x%x, bf16 needs AVX-512-BF16 or AMX)",
                 (unsigned)isa);
    return 0;
}

void lmp_bf16_describe(char *out, size_t size)
{
    const dnnl_version_t *v = dnnl_version();
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    const char *name = ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_amx) == (unsigned)dnnl_cpu_isa_avx512_core_amx
                           ? "AMX-BF16 + AVX-512-BF16"
                       : ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) == (unsigned)dnnl_cpu_isa_avx512_core_bf16
                           ? "AVX-512-BF16"
                           : "no bf16";
    snprintf(out, size, "oneDNN %d.%d.%d, %s", v->major, v->minor, v->patch, name);
}

lmp_bf16_gemm *lmp_bf16_gemm_new(void)
{
    lmp_bf16_gemm *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    if (dnnl_engine_create(&g->engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&g->stream, g->engine, dnnl_stream_default_flags) != dnnl_success) {
        lmp_bf16_gemm_free(g);
        return NULL;
    }
    return g;
}

void lmp_bf16_gemm_free(lmp_bf16_gemm *g)
{
    if (!g) return;
    if (g->stream) dnnl_stream_destroy(g->stream);
    if (g->engine) dnnl_engine_destroy(g->engine);
    free(g->a), free(g->b), free(g->t);
    free(g);
}

void lmp_bf16_set_threads(int threads)
{
    if (threads > 0) omp_set_num_threads(threads);
}

static int grow(void **p, size_t *cap, size_t bytes)
{
    if (bytes <= *cap) return 0;
    void *q = realloc(*p, bytes);
    if (!q) return LMP_ENOMEM;
    *p = q;
    *cap = bytes;
    return 0;
}

/* rows x cols at ld -> dense bf16 rows x cols. */
static void to_bf16_dense(const float *src, int64_t rows, int64_t cols, int64_t ld, uint16_t *dst)
{
    /* On OpenMP's threads (oneDNN's) only when large: a 7B weight (45M values) converts in half
     * the time on two cores, but on SmolLM2's (1M) an OpenMP region cost 50x the conversion on
     * a loaded machine (a region waits for every thread to be scheduled; bench_bf16_gemm). */
    const int64_t n = rows * cols, per_part = 1 << 18;
    const int parallel = n >= ((int64_t)1 << 23);
    if (ld == cols) {
        const int64_t parts = (n + per_part - 1) / per_part;
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
        for (int64_t p = 0; p < parts; p++)
            lmp_bf16_from_f32(src + p * per_part, dst + p * per_part,
                              n - p * per_part < per_part ? n - p * per_part : per_part);
        return;
    }
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
    for (int64_t r = 0; r < rows; r++) lmp_bf16_from_f32(src + r * ld, dst + r * cols, cols);
}

/* One matmul: dst[M,N] (ld ldc, f32) = op(A)[M,K] op(B)[K,N], A and B bf16 with leading
 * dimensions lda and ldb as stored (transposition through the strides). */
static int matmul(lmp_bf16_gemm *g, int ta, int tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                  int64_t lda, const uint16_t *B, int64_t ldb, float *C, int64_t ldc)
{
    dnnl_memory_desc_t a_md, b_md, c_md;
    const dnnl_dims_t a_dims = {M, K}, b_dims = {K, N}, c_dims = {M, N};
    const dnnl_dims_t a_str = {ta ? 1 : lda, ta ? lda : 1};
    const dnnl_dims_t b_str = {tb ? 1 : ldb, tb ? ldb : 1};
    const dnnl_dims_t c_str = {ldc, 1};
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t am = NULL, bm = NULL, cm = NULL;
    int st = LMP_EINVAL;
    if (dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, dnnl_bf16, a_str) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&b_md, 2, b_dims, dnnl_bf16, b_str) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_str) != dnnl_success ||
        dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md) != dnnl_success)
        return LMP_EINVAL;
    /* oneDNN keeps created primitives in its own cache (1024 by default), keyed by the
     * descriptor: the forward's few shapes are built once. */
    if (dnnl_primitive_desc_create(&pd, &desc, NULL, g->engine, NULL) != dnnl_success ||
        dnnl_primitive_create(&prim, pd) != dnnl_success ||
        dnnl_memory_create(&am, &a_md, g->engine, (void *)A) != dnnl_success ||
        dnnl_memory_create(&bm, &b_md, g->engine, (void *)B) != dnnl_success ||
        dnnl_memory_create(&cm, &c_md, g->engine, C) != dnnl_success)
        goto done;
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
    if (dnnl_primitive_execute(prim, g->stream, 3, args) == dnnl_success &&
        dnnl_stream_wait(g->stream) == dnnl_success)
        st = 0;
done:
    if (am) dnnl_memory_destroy(am);
    if (bm) dnnl_memory_destroy(bm);
    if (cm) dnnl_memory_destroy(cm);
    if (prim) dnnl_primitive_destroy(prim);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return st;
}

int lmp_bf16_gemm_run_bf16(lmp_bf16_gemm *g, int ta, int tb, int64_t M, int64_t N, int64_t K,
                           const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float *C,
                           int64_t ldc)
{
    return matmul(g, ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
}

int lmp_bf16_gemm_f32(lmp_bf16_gemm *g, int ta, int tb, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc)
{
    const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K;
    const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N;
    if (grow((void **)&g->a, &g->a_cap, (size_t)(a_rows * a_cols) * sizeof *g->a) ||
        grow((void **)&g->b, &g->b_cap, (size_t)(b_rows * b_cols) * sizeof *g->b))
        return LMP_ENOMEM;
    to_bf16_dense(A, a_rows, a_cols, lda, g->a);
    to_bf16_dense(B, b_rows, b_cols, ldb, g->b);
    if (alpha == 1.0f && beta == 0.0f)
        return matmul(g, ta, tb, M, N, K, g->a, a_cols, g->b, b_cols, C, ldc);
    /* The general case (not the forward's): the product in f32, then combined as BLAS does,
     * C not read when beta is 0 (a NaN there must not survive). */
    if (grow((void **)&g->t, &g->t_cap, (size_t)(M * N) * sizeof *g->t)) return LMP_ENOMEM;
    int st = matmul(g, ta, tb, M, N, K, g->a, a_cols, g->b, b_cols, g->t, N);
    if (st) return st;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            C[i * ldc + j] = alpha * g->t[i * N + j] + (beta == 0.0f ? 0.0f : beta * C[i * ldc + j]);
    return 0;
}

int lmp_bf16_dnnl_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                        int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc)
{
    return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc) ==
                   dnnl_success
               ? 0
               : LMP_EINVAL;
}

#else /* built without oneDNN */

struct lmp_bf16_gemm {
    int unused;
};

int lmp_bf16_available(char *why, size_t why_size)
{
    if (why && why_size)
        snprintf(why, why_size, "this lmpress was built without oneDNN (install libdnnl-dev and reconfigure)");
    return 0;
}

void lmp_bf16_describe(char *out, size_t size) { snprintf(out, size, "no oneDNN in this build"); }
lmp_bf16_gemm *lmp_bf16_gemm_new(void) { return NULL; }
void lmp_bf16_gemm_free(lmp_bf16_gemm *g) { (void)g; }
void lmp_bf16_set_threads(int threads) { (void)threads; }

int lmp_bf16_gemm_f32(lmp_bf16_gemm *g, int ta, int tb, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc)
{
    (void)g, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda;
    (void)B, (void)ldb, (void)beta, (void)C, (void)ldc;
    return LMP_EUNSUPPORTED;
}

int lmp_bf16_gemm_run_bf16(lmp_bf16_gemm *g, int ta, int tb, int64_t M, int64_t N, int64_t K,
                           const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float *C,
                           int64_t ldc)
{
    (void)g, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb;
    (void)C, (void)ldc;
    return LMP_EUNSUPPORTED;
}

int lmp_bf16_dnnl_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                        int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc)
{
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb;
    (void)C, (void)ldc;
    return LMP_EUNSUPPORTED;
}
#endif
