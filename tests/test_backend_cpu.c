/* test_backend_cpu.c — the CPU backend plugin, op by op, against the reference kernels.
 *
 * The plugin is dlopen'ed from the build tree like the core would, created through a minimal
 * stub host, and every entry of its vtable is run on random inputs of odd sizes (transposes,
 * leading dimensions larger than the row) and compared with lmp_ref_<op> from cpu_ref.c:
 *   - float kernels by normalized MSE, nmse = sum((ref - got)^2) / sum(ref^2), with the
 *     threshold and its reason next to each op;
 *   - fake-quantization bit for bit (a different rounding is one whole grid step off), and
 *     choose_weight_grid + apply_weight_grid also against the fused quantization of ABI 2
 *     (fused_wgrid_ref.h), so the split changed no bit;
 *   - Cholesky and its inverse also against the math (L L^T = A, A A^-1 = I), and the
 *     not-positive-definite path with its pivot.
 * Set LMP_TEST_VERBOSE=1 to print every measured nmse.
 *
 * f32 error model behind the thresholds: unit roundoff u = 2^-24 = 6e-8, so one rounding gives
 * nmse ~ u^2/3 ~ 1e-15, and a K-term f32 dot product against a double one gives roughly
 * K u^2 ~ 1e-13 for K ~ 100 (random signs; worst case K^2 u^2 ~ 4e-11).  Thresholds sit
 * 3-4 decades above what is measured (LMP_TEST_VERBOSE=1 prints it) and many decades below what
 * a real bug (a wrong index, transpose or scale) gives, which is nmse ~ 1e-2 .. 1. */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_bf16.h"
#include "cpu_ref.h"
#include "lmpress/plugin.h"

#include "fused_wgrid_ref.h"
#include "testutil.h"

#define PLUGIN_PATH LMP_BINARY_DIR "/plugins/lmp-backend-cpu.so"

/* ---- stub host ---------------------------------------------------------------------------- */

static char g_err[1024];   /* last message given to set_error */
static int g_n_err;        /* how many times set_error was called */
static long g_live_allocs; /* host->alloc minus host->free: the plugin must give back all */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static char g_log[1024]; /* last message given to log, and its level */
static int g_log_level = -1;

static void h_log(void *ctx, int level, const char *fmt, ...)
{
    (void)ctx;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_log, sizeof g_log, fmt, ap);
    va_end(ap);
    g_log_level = level;
}

static int h_set_error(void *ctx, int status, const char *fmt, ...)
{
    (void)ctx;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    g_n_err++;
    return status;
}

static void *h_alloc(void *ctx, size_t n)
{
    (void)ctx;
    size_t sz = n == 0 ? 64 : (n + 63) / 64 * 64; /* aligned_alloc wants a multiple of 64 */
    void *p = aligned_alloc(64, sz);
    if (p) {
        memset(p, 0, sz);
        g_live_allocs++;
    }
    return p;
}

static void h_free(void *ctx, void *p)
{
    (void)ctx;
    if (p) g_live_allocs--;
    free(p);
}

static void h_progress(void *ctx, const char *what, int64_t done, int64_t total)
{
    (void)ctx, (void)what, (void)done, (void)total;
}

/* splitmix64: small, good enough for test data, identical everywhere. */
static uint64_t h_rng_u64(void *ctx)
{
    (void)ctx;
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const lmp_backend_i *g_vt; /* the plugin's vtable */
static void *g_be;                /* its instance */

static const lmp_backend_i *h_backend(void *ctx, void **self)
{
    (void)ctx;
    *self = g_be;
    return g_vt;
}

static const lmp_host g_host = {
    .struct_size = sizeof(lmp_host),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .log = h_log,
    .set_error = h_set_error,
    .alloc = h_alloc,
    .free = h_free,
    .progress = h_progress,
    .rng_u64 = h_rng_u64,
    .backend = h_backend,
    .fold_norm_scale = NULL,
};

/* ---- fixture: load and create the plugin in each test's process --------------------------- */

static void *g_dl;
static const lmp_plugin_desc *g_desc;

static void setup(void)
{
    g_dl = dlopen(PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(g_dl != NULL, "dlopen %s: %s", PLUGIN_PATH, dlerror());
    lmp_plugin_entry_fn entry;
    *(void **)&entry = dlsym(g_dl, LMP_ENTRY_SYMBOL); /* POSIX's way around the ISO C cast */
    ck_assert_msg(entry != NULL, "no %s in %s", LMP_ENTRY_SYMBOL, PLUGIN_PATH);
    g_desc = entry();
    ck_assert_ptr_nonnull(g_desc);
    g_vt = g_desc->vtable;
    /* threads = 2 exercises openblas_set_num_threads (2-core machine); no jitter */
    lmp_value params[4] = {{.num = 2}, {.num = 0}, {.num = 1}, {.num = 0}};
    g_rng = 0x9E3779B97F4A7C15ull;
    g_n_err = 0;
    g_err[0] = 0;
    int st = g_vt->create(&g_host, NULL, params, &g_be);
    ck_assert_msg(st == LMP_OK, "create: %d %s", st, g_err);
}

static void teardown(void)
{
    if (g_vt && g_be) g_vt->destroy(g_be);
    g_be = NULL;
    ck_assert_int_eq(g_live_allocs, 0);
    /* dlclose is left out on purpose: unloading OpenBLAS with live threads is not worth it. */
}

/* ---- data and comparison helpers ---------------------------------------------------------- */

static float urand(float lo, float hi) /* uniform in [lo, hi) */
{
    return lo + (hi - lo) * (float)((double)(h_rng_u64(NULL) >> 40) / 16777216.0);
}

static float *rand_mat(int64_t n, float lo, float hi)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (int64_t i = 0; i < n; i++) p[i] = urand(lo, hi);
    return p;
}

static float *copy_of(const float *p, int64_t n)
{
    float *q = malloc((size_t)(n > 0 ? n : 1) * sizeof *q);
    ck_assert_ptr_nonnull(q);
    memcpy(q, p, (size_t)n * sizeof *q);
    return q;
}

/* nmse over the rows x cols region of two ld-strided matrices; ref is the denominator. */
static double nmse_ld(const float *ref, const float *got, int64_t rows, int64_t cols, int64_t ld)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t j = 0; j < cols; j++) {
            double d = (double)got[i * ld + j] - ref[i * ld + j];
            num += d * d;
            den += (double)ref[i * ld + j] * ref[i * ld + j];
        }
    }
    return den > 0.0 ? num / den : num;
}

static void check_nmse(const char *what, const float *ref, const float *got, int64_t rows,
                       int64_t cols, int64_t ld, double threshold)
{
    double e = nmse_ld(ref, got, rows, cols, ld);
    if (getenv("LMP_TEST_VERBOSE")) fprintf(stderr, "  %-40s nmse %.3e (<= %.0e)\n", what, e, threshold);
    ck_assert_msg(e <= threshold, "%s: nmse %.3e > %.3e", what, e, threshold); /* NaN fails too */
}

/* The entries of a strided buffer that lie outside the rows x cols region are untouched. */
static void check_padding(const char *what, const float *before, const float *after, int64_t rows,
                          int64_t cols, int64_t ld)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = cols; j < ld; j++)
            ck_assert_msg(memcmp(&before[i * ld + j], &after[i * ld + j], sizeof(float)) == 0,
                          "%s: padding [%lld,%lld] was written", what, (long long)i, (long long)j);
}

static void check_bits_equal(const char *what, const float *ref, const float *got, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&ref[i], &got[i], sizeof(float)) == 0,
                      "%s: element %lld: ref %.9g (%a) != got %.9g (%a)", what, (long long)i,
                      (double)ref[i], (double)ref[i], (double)got[i], (double)got[i]);
}

/* A well-conditioned SPD matrix A[n,n] = B B^T / m + shift*I with B[n,m] uniform in [-1,1). */
static float *spd_matrix(int64_t n, int64_t m, float shift)
{
    float *B = rand_mat(n * m, -1.0f, 1.0f);
    float *A = malloc((size_t)(n * n) * sizeof *A);
    ck_assert_ptr_nonnull(A);
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = 0; j <= i; j++) {
            double s = 0.0;
            for (int64_t k = 0; k < m; k++) s += (double)B[i * m + k] * B[j * m + k];
            A[i * n + j] = A[j * n + i] = (float)(s / (double)m + (i == j ? shift : 0.0f));
        }
    }
    free(B);
    return A;
}

/* ---- descriptor and lifecycle ------------------------------------------------------------- */

START_TEST(test_descriptor)
{
    ck_assert_uint_eq(g_desc->struct_size, sizeof(lmp_plugin_desc));
    ck_assert_int_eq(g_desc->abi_major, LMP_ABI_MAJOR);
    ck_assert_int_le(g_desc->abi_minor, LMP_ABI_MINOR);
    ck_assert_int_eq(g_desc->kind, LMP_PLUGIN_BACKEND);
    ck_assert_str_eq(g_desc->name, "cpu");
    ck_assert_str_eq(g_desc->version, "0.1.0");
    ck_assert_ptr_nonnull(g_desc->summary);
    ck_assert(g_desc->probe == NULL);
    ck_assert_uint_eq(g_desc->n_params, 4);
    const lmp_param_spec *p = &g_desc->params[0];
    ck_assert_str_eq(p->name, "threads");
    ck_assert_int_eq(p->type, LMP_PARAM_INT);
    ck_assert_ptr_nonnull(p->help);
    ck_assert(p->def_num == 0.0 && p->min == 0.0 && p->max == 256.0);
    ck_assert_str_eq(g_desc->params[1].name, "jitter");
    ck_assert(g_desc->params[1].type == LMP_PARAM_FLOAT && g_desc->params[1].def_num == 0.0);
    ck_assert_str_eq(g_desc->params[2].name, "jitter_seed");
    ck_assert_str_eq(g_desc->params[3].name, "compute");
    ck_assert(g_desc->params[3].type == LMP_PARAM_ENUM && g_desc->params[3].def_num == 0.0);
    ck_assert_str_eq(g_desc->params[3].choices[0], "f32");
    ck_assert_str_eq(g_desc->params[3].choices[1], "bf16");
    ck_assert_ptr_null(g_desc->params[3].choices[2]);
    /* `lmpress plugins` says whether bf16 runs here (the summary, written at load) */
    ck_assert_msg(strstr(g_desc->summary, lmp_bf16_available(NULL, 0) ? "\"bf16\" runs here" : "\"bf16\" runs f32 here"),
                  "%s", g_desc->summary);

    /* Every entry is implemented: the CPU backend is the fallback of all others. */
    ck_assert_uint_eq(g_vt->struct_size, sizeof(lmp_backend_i));
    ck_assert(g_vt->create && g_vt->destroy && g_vt->gemm && g_vt->xtx_accum && g_vt->cholesky &&
              g_vt->chol_inverse && g_vt->trsm_lower && g_vt->rmsnorm && g_vt->rope &&
              g_vt->attention && g_vt->swiglu && g_vt->log_softmax && g_vt->reduce_cols &&
              g_vt->choose_weight_grid && g_vt->apply_weight_grid && g_vt->quantize_act);

    /* -fvisibility=hidden: the reference kernels linked into the plugin stay private. */
    ck_assert_ptr_null(dlsym(g_dl, "lmp_ref_gemm"));
    ck_assert_ptr_null(dlsym(g_dl, "lmp_ref_choose_weight_grid"));
    ck_assert_ptr_null(dlsym(g_dl, "lmp_ref_apply_weight_grid"));
}
END_TEST

START_TEST(test_create_params)
{
    void *be = NULL;
    lmp_value bad[4] = {{.num = 257}, {.num = 0}, {.num = 1}, {.num = 0}};
    g_n_err = 0;
    ck_assert_int_eq(g_vt->create(&g_host, NULL, bad, &be), LMP_EINVAL);
    bad[0].num = 1e300; /* no undefined float -> int conversion on the way */
    ck_assert_int_eq(g_vt->create(&g_host, NULL, bad, &be), LMP_EINVAL);
    ck_assert_ptr_null(be);
    ck_assert_int_eq(g_n_err, 2);
    ck_assert_msg(strstr(g_err, "threads") != NULL, "message: %s", g_err);
    bad[0].num = 1;
    bad[1].num = 2e-3;
    ck_assert_int_eq(g_vt->create(&g_host, NULL, bad, &be), LMP_EINVAL);
    ck_assert_msg(strstr(g_err, "jitter") != NULL, "message: %s", g_err);
    /* NULL params = the schema defaults (threads = 0). */
    ck_assert_int_eq(g_vt->create(&g_host, NULL, NULL, &be), LMP_OK);
    ck_assert_ptr_nonnull(be);
    g_vt->destroy(be);
    g_vt->destroy(NULL); /* harmless */
}
END_TEST

/* ---- gemm --------------------------------------------------------------------------------- */

/* One gemm case on padded operands.  Threshold 1e-10: K <= 200 f32 products summed by OpenBLAS
 * against a double sum gives ~K u^2 <= 1e-12 (measured ~1e-14). */
static void gemm_case(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t pad, float alpha,
                      float beta)
{
    int64_t arows = ta ? K : M, acols = ta ? M : K, lda = acols + pad;
    int64_t brows = tb ? N : K, bcols = tb ? K : N, ldb = bcols + pad;
    int64_t ldc = N + pad;
    float *A = rand_mat(arows * lda, -1.0f, 1.0f);
    float *B = rand_mat(brows * ldb, -1.0f, 1.0f);
    float *C0 = rand_mat(M * ldc, -1.0f, 1.0f);
    if (beta == 0.0f) /* beta == 0 must not read C: NaN there may not leak into the result */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C0[i * ldc + j] = NAN;
    float *Cr = copy_of(C0, M * ldc), *Cg = copy_of(C0, M * ldc);
    ck_assert_int_eq(lmp_ref_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cr, ldc), LMP_OK);
    ck_assert_int_eq(g_vt->gemm(g_be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cg, ldc), LMP_OK);
    char what[96];
    snprintf(what, sizeof what, "gemm ta=%d tb=%d %lldx%lldx%lld pad %lld b=%g", ta, tb,
             (long long)M, (long long)N, (long long)K, (long long)pad, (double)beta);
    check_nmse(what, Cr, Cg, M, N, ldc, 1e-10);
    check_padding(what, C0, Cg, M, N, ldc);
    check_padding(what, C0, Cr, M, N, ldc);
    free(A);
    free(B);
    free(C0);
    free(Cr);
    free(Cg);
}

START_TEST(test_gemm)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gemm_case(ta, tb, 37, 53, 29, 0, 1.0f, 0.0f);
            gemm_case(ta, tb, 37, 53, 29, 5, 0.75f, 1.25f);
            gemm_case(ta, tb, 1, 61, 200, 3, -1.5f, 0.0f); /* one row: a gemv */
            gemm_case(ta, tb, 130, 97, 71, 1, 1.0f, 1.0f);  /* above OpenBLAS's small-matrix path */
        }
    gemm_case(0, 1, 17, 19, 0, 2, 1.0f, 0.5f); /* K = 0: C = beta*C */
    gemm_case(0, 0, 17, 19, 23, 2, 0.0f, 2.0f); /* alpha = 0: C = beta*C */
}
END_TEST

START_TEST(test_gemm_errors)
{
    float A[16] = {0}, B[16] = {0}, C[16] = {0};
    g_n_err = 0;
    ck_assert_int_eq(g_vt->gemm(g_be, 0, 0, 2, 2, 4, 1, A, 3, B, 2, 0, C, 2), LMP_EINVAL); /* lda < K */
    ck_assert_int_eq(g_n_err, 1);
    ck_assert_msg(strstr(g_err, "gemm") != NULL, "message: %s", g_err);
    ck_assert_int_eq(g_vt->gemm(g_be, 1, 0, 2, 2, 4, 1, A, 1, B, 2, 0, C, 2), LMP_EINVAL); /* lda < M */
    ck_assert_int_eq(g_vt->gemm(g_be, 0, 1, 2, 2, 4, 1, A, 4, B, 3, 0, C, 2), LMP_EINVAL); /* ldb < K */
    ck_assert_int_eq(g_vt->gemm(g_be, 0, 0, 2, 3, 4, 1, A, 4, B, 3, 0, C, 2), LMP_EINVAL); /* ldc < N */
    ck_assert_int_eq(g_vt->gemm(g_be, 0, 0, -1, 2, 4, 1, A, 4, B, 2, 0, C, 2), LMP_EINVAL);
    ck_assert_int_eq(g_vt->gemm(g_be, 0, 0, 0, 2, 4, 1, A, 4, B, 2, 0, C, 2), LMP_OK); /* empty */
}
END_TEST


/* ---- compute = "bf16" (issue 42) ------------------------------------------------------------ */

/* Round to nearest even on bf16's 8 significant bits, checked on values whose rounding follows
 * from the format alone (IEEE 754 binary32 -> the top 16 bits, RNE). */
START_TEST(test_bf16_rounding)
{
    const struct { uint32_t in; uint16_t out; } cases[] = {
        {0x3F800000u, 0x3F80u}, /* 1.0 exact */
        {0x3F808000u, 0x3F80u}, /* 1 + 2^-8: a tie, to the even 1.0 */
        {0x3F818000u, 0x3F82u}, /* 1 + 3*2^-8: a tie, to the even 1 + 2^-6 */
        {0x3F808001u, 0x3F81u}, /* just above the tie: up */
        {0x3F807FFFu, 0x3F80u}, /* just below: down */
        {0xBF808001u, 0xBF81u}, /* the same negative */
        {0x7F7FFFFFu, 0x7F80u}, /* FLT_MAX rounds to infinity */
        {0x7F800000u, 0x7F80u}, /* +inf */
        {0xFF800000u, 0xFF80u}, /* -inf */
        {0x00000000u, 0x0000u}, {0x80000000u, 0x8000u},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    float in[64];
    uint16_t out[64];
    /* 64 values: the 32-wide vector path and the scalar tail both see every case */
    for (int i = 0; i < 64; i++) memcpy(&in[i], &cases[i % N].in, 4);
    lmp_bf16_from_f32(in, out, 64);
    for (int i = 0; i < 64; i++)
        ck_assert_msg(out[i] == cases[i % N].out, "0x%08x -> 0x%04x, expected 0x%04x", cases[i % N].in, out[i],
                      cases[i % N].out);
    const uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu}; /* quiet, signalling, negative */
    for (int i = 0; i < 3; i++) {
        memcpy(&in[0], &nans[i], 4);
        lmp_bf16_from_f32(in, out, 1);
        ck_assert_msg((out[0] & 0x7F80u) == 0x7F80u && (out[0] & 0x7Fu) != 0 && (out[0] >> 15) == (nans[i] >> 31),
                      "NaN 0x%08x -> 0x%04x", nans[i], out[0]);
    }
}
END_TEST

/* One bf16 product against a double reference, element by element, within the worst-case bound:
 * a = fl16(a)(1+e), |e| <= u = 2^-8 (8 significant bits, round to nearest), so each product
 * carries |(1+ea)(1+eb) - 1| <= 2u + u^2, exact in f32 (16 bits of product); the f32 sum of K
 * of them adds gamma_K = K 2^-24 / (1 - K 2^-24) of sum |a b|; alpha and beta one f32 rounding
 * each.  So |C - C_ref| <= (2u + u^2 + gamma_K (1+u)^2) |alpha| S + 2^-22 (|alpha| S + |beta C0|),
 * S = sum_k |a_ik b_kj|.  This bound cannot fail on correct code; the "2^-8 sqrt(K)"
 * relative error is its random-walk form for |C| ~ S / sqrt(K), printed as the measured max of
 * |C - C_ref| / S.  Returns that max, which shows that bf16 was used (f32 stays below ~K 2^-24). */
static double bf16_gemm_case(void *be, int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t pad, float alpha,
                             float beta)
{
    const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    float *A = rand_mat((ta ? K : M) * lda, -1.0f, 1.0f), *B = rand_mat((tb ? N : K) * ldb, -1.0f, 1.0f);
    float *C0 = rand_mat(M * ldc, -1.0f, 1.0f);
    if (beta == 0.0f)
        for (int64_t i = 0; i < M * ldc; i++) C0[i] = NAN; /* beta 0 must not read C */
    float *C = copy_of(C0, M * ldc);
    ck_assert_int_eq(g_vt->gemm(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), LMP_OK);
    const double u = 0x1p-8, gk = K * 0x1p-24 / (1.0 - K * 0x1p-24);
    double worst = 0.0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double ref = 0.0, S = 0.0;
            for (int64_t k = 0; k < K; k++) {
                const double a = ta ? A[k * lda + i] : A[i * lda + k], b = tb ? B[j * ldb + k] : B[k * ldb + j];
                ref += a * b;
                S += fabs(a * b);
            }
            const double c0 = beta == 0.0f ? 0.0 : C0[i * ldc + j];
            ref = alpha * ref + beta * c0;
            const double err = fabs((double)C[i * ldc + j] - ref);
            const double bound = (2 * u + u * u + gk * (1 + u) * (1 + u)) * fabs(alpha) * S +
                                 0x1p-22 * (fabs(alpha) * S + fabs(beta * c0));
            ck_assert_msg(err <= bound, "bf16 gemm ta=%d tb=%d %lldx%lldx%lld: C[%lld,%lld] off by %g > bound %g", ta, tb,
                          (long long)M, (long long)N, (long long)K, (long long)i, (long long)j, err, bound);
            if (S > 0 && err / (fabs(alpha) * S) > worst) worst = err / (fabs(alpha) * S);
        }
    for (int64_t i = 0; i < M; i++) /* the padding of C is never written */
        for (int64_t j = N; j < ldc; j++) ck_assert(memcmp(&C0[i * ldc + j], &C[i * ldc + j], 4) == 0);
    free(A), free(B), free(C0), free(C);
    return worst;
}

/* compute = "bf16": within the bound above on every shape and transposition, and really bf16
 * where the CPU has it; where it has none (or DNNL_MAX_CPU_ISA hides it: ctest's
 * test_backend_cpu_nobf16), the warning and exactly the f32 GEMM. */
START_TEST(test_bf16_gemm)
{
    lmp_value params[4] = {{.num = 2}, {.num = 0}, {.num = 1}, {.num = 1, .str = "bf16"}};
    void *be = NULL;
    g_log_level = -1;
    g_log[0] = 0;
    ck_assert_int_eq(g_vt->create(&g_host, NULL, params, &be), LMP_OK);
    const int have = lmp_bf16_available(NULL, 0);
    printf("compute = \"bf16\" here: %s (%s)\n", have ? "bf16" : "f32 fallback", g_log);
    if (have) {
        ck_assert_msg(g_log_level == LMP_LOG_INFO && strstr(g_log, "bf16 with f32 sums"), "%s", g_log);
        double worst = 0;
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                double w = bf16_gemm_case(be, ta, tb, 37, 53, 97, 0, 1.0f, 0.0f);
                if (w > worst) worst = w;
                bf16_gemm_case(be, ta, tb, 37, 53, 29, 5, 0.75f, 1.25f);
            }
        bf16_gemm_case(be, 0, 1, 1, 61, 200, 3, -1.5f, 0.0f); /* a gemv */
        bf16_gemm_case(be, 0, 1, 130, 97, 576, 1, 1.0f, 0.0f); /* the forward's x W^T, SmolLM2's width */
        printf("bf16 gemm: max |C - C_ref| / sum|a b| = %.3g (u = 2^-8 = %.3g)\n", worst, 0x1p-8);
        /* f32 gives <= K 2^-24 ~ 6e-6 here; bf16's roundings reach a fraction of u */
        ck_assert_msg(worst > 0x1p-14, "max error %g: the product was not rounded to bf16", worst);
    } else {
        ck_assert_msg(g_log_level == LMP_LOG_WARN && strstr(g_log, "not available") && strstr(g_log, "f32"), "%s", g_log);
        int64_t M = 37, N = 53, K = 97;
        float *A = rand_mat(M * K, -1, 1), *B = rand_mat(N * K, -1, 1);
        float *C1 = calloc((size_t)(M * N), 4), *C2 = calloc((size_t)(M * N), 4);
        ck_assert_int_eq(g_vt->gemm(be, 0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C1, N), LMP_OK);
        ck_assert_int_eq(g_vt->gemm(g_be, 0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C2, N), LMP_OK);
        ck_assert_msg(memcmp(C1, C2, (size_t)(M * N) * 4) == 0, "the fallback is not the f32 GEMM");
        free(A), free(B), free(C1), free(C2);
    }
    /* the other ops do not change: one of them, bit for bit */
    float x[3 * 40], w[40], o1[3 * 40], o2[3 * 40];
    for (int i = 0; i < 120; i++) x[i] = (float)sin(i);
    for (int i = 0; i < 40; i++) w[i] = 1.0f + 0.01f * (float)i;
    ck_assert_int_eq(g_vt->rmsnorm(be, 3, 40, x, w, 1e-5f, o1), LMP_OK);
    ck_assert_int_eq(g_vt->rmsnorm(g_be, 3, 40, x, w, 1e-5f, o2), LMP_OK);
    ck_assert(memcmp(o1, o2, sizeof o1) == 0);
    g_vt->destroy(be);
}
END_TEST

/* ---- X^T X -------------------------------------------------------------------------------- */

/* Threshold 1e-10: each entry is an n = 301 term f32 sum (ssyrk) vs a double one, ~n u^2. */
START_TEST(test_xtx_accum)
{
    int64_t n = 301, c = 37;
    float *X = rand_mat(n * c, -2.0f, 2.0f);
    float *H0 = spd_matrix(c, 5, 0.5f); /* symmetric start: accumulation on top of earlier calls */
    float *Hr = copy_of(H0, c * c), *Hg = copy_of(H0, c * c);
    ck_assert_int_eq(lmp_ref_xtx_accum(n, c, X, 0.5f, Hr), LMP_OK);
    ck_assert_int_eq(g_vt->xtx_accum(g_be, n, c, X, 0.5f, Hg), LMP_OK);
    check_nmse("xtx_accum 301x37", Hr, Hg, c, c, c, 1e-10);
    for (int64_t i = 0; i < c; i++) /* both triangles written, and equal */
        for (int64_t j = 0; j < i; j++) ck_assert(Hg[i * c + j] == Hg[j * c + i]);
    /* a second call accumulates */
    ck_assert_int_eq(lmp_ref_xtx_accum(7, c, X, -1.0f, Hr), LMP_OK);
    ck_assert_int_eq(g_vt->xtx_accum(g_be, 7, c, X, -1.0f, Hg), LMP_OK);
    check_nmse("xtx_accum second call", Hr, Hg, c, c, c, 1e-10);
    ck_assert_int_eq(g_vt->xtx_accum(g_be, 0, c, X, 1.0f, Hg), LMP_OK); /* no rows: no-op */
    free(X);
    free(H0);
    free(Hr);
    free(Hg);
}
END_TEST

/* The jitter diagnostic: each result element moves by at most `jitter` relative, most move, the
 * Hessian stays symmetric, and the same seed gives the same numbers. */
START_TEST(test_jitter)
{
    lmp_value params[4] = {{.num = 1}, {.num = 1e-6}, {.num = 5}, {.num = 0}};
    void *a = NULL, *b = NULL;
    ck_assert_int_eq(g_vt->create(&g_host, NULL, params, &a), LMP_OK);
    ck_assert_int_eq(g_vt->create(&g_host, NULL, params, &b), LMP_OK);
    const int64_t M = 40, N = 30, K = 50, c = 37;
    float *A = rand_mat(M * K, -1, 1), *B = rand_mat(K * N, -1, 1), *C0 = rand_mat(M * N, 0, 0);
    float *C1 = copy_of(C0, M * N), *C2 = copy_of(C0, M * N);
    ck_assert_int_eq(g_vt->gemm(g_be, 0, 0, M, N, K, 1, A, K, B, N, 0, C0, N), LMP_OK);
    ck_assert_int_eq(g_vt->gemm(a, 0, 0, M, N, K, 1, A, K, B, N, 0, C1, N), LMP_OK);
    ck_assert_int_eq(g_vt->gemm(b, 0, 0, M, N, K, 1, A, K, B, N, 0, C2, N), LMP_OK);
    int moved = 0;
    for (int64_t i = 0; i < M * N; i++) {
        ck_assert(C1[i] == C2[i]);
        const double d = fabs((double)C1[i] - C0[i]) / fabs(C0[i]);
        ck_assert_msg(d <= 1e-6 + 0x1p-23, "gemm element %lld moved by %g", (long long)i, d);
        moved += d > 0;
    }
    ck_assert_int_gt(moved, M * N / 2);
    float *X = rand_mat(301 * c, -2, 2), *H = spd_matrix(c, 5, 0.5f);
    ck_assert_int_eq(g_vt->xtx_accum(a, 301, c, X, 0.5f, H), LMP_OK);
    for (int64_t i = 0; i < c; i++)
        for (int64_t j = 0; j < i; j++) ck_assert(H[i * c + j] == H[j * c + i]);
    g_vt->destroy(a);
    g_vt->destroy(b);
    free(A), free(B), free(C0), free(C1), free(C2), free(X), free(H);
}
END_TEST

/* ---- Cholesky, inverse, triangular solve -------------------------------------------------- */

/* max |(L L^T - A)[i,j]| / max |A|, in double. */
static double chol_residual(int64_t n, const float *L, const float *A)
{
    double worst = 0.0, amax = 0.0;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = 0; j < n; j++) {
            double s = 0.0;
            for (int64_t k = 0; k < n; k++) s += (double)L[i * n + k] * L[j * n + k];
            worst = fmax(worst, fabs(s - A[i * n + j]));
            amax = fmax(amax, fabs(A[i * n + j]));
        }
    }
    return worst / amax;
}

/* Thresholds: A = B B^T/m + 0.05 I has condition number ~1e2, so the factors of two f32
 * Cholesky implementations agree to ~cond * u (nmse ~1e-12, allow 1e-9), and the backward error
 * of f32 Cholesky is ~n u ~ 1e-6 of max|A| (allow 1e-5). */
START_TEST(test_cholesky)
{
    int64_t sizes[] = {1, 2, 37, 150};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *A = spd_matrix(n, n + 3, 0.05f);
        float *Lr = copy_of(A, n * n), *Lg = copy_of(A, n * n);
        for (int64_t i = 0; i < n; i++) /* the upper triangle must be ignored on input */
            for (int64_t j = i + 1; j < n; j++) Lr[i * n + j] = Lg[i * n + j] = 1e3f;
        int64_t piv = -7;
        ck_assert_int_eq(lmp_ref_cholesky(n, Lr, NULL), LMP_OK);
        ck_assert_int_eq(g_vt->cholesky(g_be, n, Lg, &piv), LMP_OK);
        ck_assert_int_eq(piv, -7); /* untouched on success */
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = i + 1; j < n; j++) ck_assert(Lg[i * n + j] == 0.0f);
        char what[64];
        snprintf(what, sizeof what, "cholesky n=%lld", (long long)n);
        check_nmse(what, Lr, Lg, n, n, n, 1e-9);
        double res = chol_residual(n, Lg, A);
        ck_assert_msg(res < 1e-5, "%s: |L L^T - A| = %.3g", what, res);
        free(A);
        free(Lr);
        free(Lg);
    }
}
END_TEST

/* Not SPD: both the backend and the reference stop at the same 0-based pivot. */
static void not_spd_case(const char *what, int64_t n, float *A, int64_t expect)
{
    float *Ar = copy_of(A, n * n);
    int64_t pg = -1, pr = -1;
    g_n_err = 0;
    ck_assert_int_eq(g_vt->cholesky(g_be, n, A, &pg), LMP_ENOTSPD);
    ck_assert_int_eq(g_n_err, 1);
    ck_assert_int_eq(lmp_ref_cholesky(n, Ar, &pr), LMP_ENOTSPD);
    ck_assert_msg(pg == expect && pr == expect, "%s: pivot backend %lld ref %lld, expected %lld",
                  what, (long long)pg, (long long)pr, (long long)expect);
    free(Ar);
}

START_TEST(test_cholesky_not_spd)
{
    int64_t n = 37;
    float *A = spd_matrix(n, n + 3, 0.05f);
    A[17 * n + 17] = -1.0f; /* a negative diagonal entry: pivot 17 */
    not_spd_case("negative diagonal", n, A, 17);
    free(A);

    /* Identity with an indefinite 2x2 block [[1,2],[2,1]] at rows 9,10: pivot 10, whose own
     * diagonal entry is positive (the failure comes from the elimination). */
    A = calloc((size_t)(n * n), sizeof *A);
    for (int64_t i = 0; i < n; i++) A[i * n + i] = 1.0f;
    A[9 * n + 10] = A[10 * n + 9] = 2.0f;
    not_spd_case("indefinite block", n, A, 10);
    memset(A, 0, (size_t)(n * n) * sizeof *A); /* all zero: pivot 0 */
    not_spd_case("zero matrix", n, A, 0);
    /* A NULL bad_pivot is allowed */
    ck_assert_int_eq(g_vt->cholesky(g_be, n, A, NULL), LMP_ENOTSPD);
    /* NaN input is refused (LAPACKE's check), with a message, never returned as a factor */
    for (int64_t i = 0; i < n; i++) A[i * n + i] = 1.0f;
    A[5 * n + 2] = NAN;
    g_n_err = 0;
    int st = g_vt->cholesky(g_be, n, A, NULL);
    ck_assert(st == LMP_EINVAL || st == LMP_ENOTSPD);
    ck_assert_int_eq(g_n_err, 1);
    free(A);
}
END_TEST

/* Thresholds: with cond(A) ~1e2 the two inverses agree to nmse ~(cond u)^2 ~ 1e-11 (allow
 * 1e-8), and |A A^-1 - I| ~ cond * n * u ~ 1e-4 at worst (allow 1e-3; measured ~1e-6). */
START_TEST(test_chol_inverse)
{
    int64_t sizes[] = {1, 37, 150};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *A = spd_matrix(n, n + 3, 0.05f);
        float *L = copy_of(A, n * n);
        ck_assert_int_eq(lmp_ref_cholesky(n, L, NULL), LMP_OK);
        float *Ir = copy_of(L, n * n), *Ig = copy_of(L, n * n);
        ck_assert_int_eq(lmp_ref_chol_inverse(n, Ir), LMP_OK);
        ck_assert_int_eq(g_vt->chol_inverse(g_be, n, Ig), LMP_OK);
        char what[64];
        snprintf(what, sizeof what, "chol_inverse n=%lld", (long long)n);
        check_nmse(what, Ir, Ig, n, n, n, 1e-8);
        double worst = 0.0;
        for (int64_t i = 0; i < n; i++) {
            for (int64_t j = 0; j < n; j++) {
                ck_assert(Ig[i * n + j] == Ig[j * n + i]); /* full and symmetric */
                double ai = 0.0; /* (A A^-1)[i,j] */
                for (int64_t k = 0; k < n; k++) ai += (double)A[i * n + k] * Ig[k * n + j];
                worst = fmax(worst, fabs(ai - (i == j ? 1.0 : 0.0)));
            }
        }
        ck_assert_msg(worst < 1e-3, "%s: |A A^-1 - I| = %.3g", what, worst);
        free(A);
        free(L);
        free(Ir);
        free(Ig);
    }
    /* A singular factor (zero on the diagonal) is refused, not turned into inf. */
    float L0[4] = {1.0f, 0.0f, 0.5f, 0.0f};
    ck_assert_int_eq(g_vt->chol_inverse(g_be, 2, L0), LMP_ENOTSPD);
}
END_TEST

/* Threshold 1e-9: L is the factor of a cond ~1e2 matrix, so cond(L) ~10 and two f32 solves
 * agree to ~(cond(L) n u)^2 ~ 1e-11. */
START_TEST(test_trsm_lower)
{
    int64_t n = 53, nrhs = 19;
    float *A = spd_matrix(n, n + 3, 0.05f);
    ck_assert_int_eq(lmp_ref_cholesky(n, A, NULL), LMP_OK);
    for (int64_t i = 0; i < n; i++) /* garbage in the upper triangle must be ignored */
        for (int64_t j = i + 1; j < n; j++) A[i * n + j] = 1e6f;
    for (int trans = 0; trans < 2; trans++) {
        float *B = rand_mat(n * nrhs, -1.0f, 1.0f);
        float *Xr = copy_of(B, n * nrhs), *Xg = copy_of(B, n * nrhs);
        ck_assert_int_eq(lmp_ref_trsm_lower(trans, n, nrhs, A, Xr), LMP_OK);
        ck_assert_int_eq(g_vt->trsm_lower(g_be, trans, n, nrhs, A, Xg), LMP_OK);
        check_nmse(trans ? "trsm L^T x = b" : "trsm L x = b", Xr, Xg, n, nrhs, nrhs, 1e-9);
        /* residual: op(L) X = B */
        float *R = malloc((size_t)(n * nrhs) * sizeof *R);
        for (int64_t i = 0; i < n; i++) {
            for (int64_t r = 0; r < nrhs; r++) {
                double s = 0.0;
                for (int64_t k = 0; k < n; k++) {
                    double l = trans ? (k >= i ? A[k * n + i] : 0.0) : (k <= i ? A[i * n + k] : 0.0);
                    s += l * Xg[k * nrhs + r];
                }
                R[i * nrhs + r] = (float)s;
            }
        }
        check_nmse("trsm residual", B, R, n, nrhs, nrhs, 1e-10);
        free(R);
        free(B);
        free(Xr);
        free(Xg);
    }
    free(A);
}
END_TEST

/* ---- transformer pieces ------------------------------------------------------------------- */

/* Threshold 1e-12: a handful of f32 roundings per element (~1e-15). */
START_TEST(test_rmsnorm)
{
    int64_t T = 7, C = 53;
    float *x = rand_mat(T * C, -3.0f, 3.0f), *w = rand_mat(C, 0.5f, 1.5f);
    float *r = rand_mat(T * C, 0, 1), *g = rand_mat(T * C, 0, 1);
    ck_assert_int_eq(lmp_ref_rmsnorm(T, C, x, w, 1e-5f, r), LMP_OK);
    ck_assert_int_eq(g_vt->rmsnorm(g_be, T, C, x, w, 1e-5f, g), LMP_OK);
    check_nmse("rmsnorm 7x53", r, g, T, C, C, 1e-12);
    /* out may alias x */
    ck_assert_int_eq(g_vt->rmsnorm(g_be, T, C, x, w, 1e-5f, x), LMP_OK);
    check_nmse("rmsnorm in place", r, x, T, C, C, 1e-12);
    free(x);
    free(w);
    free(r);
    free(g);
}
END_TEST

/* LayerNorm and GELU against values worked out by hand (and by PyTorch's
 * layer_norm / gelu(approximate="tanh")), then the backend against the reference on random data. */
START_TEST(test_layernorm_gelu)
{
    const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 1}, b[4] = {0, 0, 0, 10};
    float out[4];
    ck_assert_int_eq(g_vt->layernorm(g_be, 1, 4, x, w, b, 0.0f, out), LMP_OK);
    const float inv = 1.0f / sqrtf(1.25f); /* mean 2.5, biased variance 1.25 */
    ck_assert_float_eq_tol(out[0], -1.5f * inv, 1e-6f);
    ck_assert_float_eq_tol(out[1], -0.5f * inv, 1e-6f);
    ck_assert_float_eq_tol(out[2], 2 * 0.5f * inv, 1e-6f);
    ck_assert_float_eq_tol(out[3], 1.5f * inv + 10, 1e-5f);
    const float gx[4] = {0.0f, 1.0f, -1.0f, 3.0f}, gy[4] = {0.0f, 0.8411920f, -0.1588080f, 2.9963627f};
    ck_assert_int_eq(g_vt->gelu(g_be, 4, gx, out), LMP_OK);
    for (int i = 0; i < 4; i++) ck_assert_float_eq_tol(out[i], gy[i], 1e-6f);
    int64_t T = 7, C = 53;
    float *xr = rand_mat(T * C, -3.0f, 3.0f), *wr = rand_mat(C, 0.5f, 1.5f), *br = rand_mat(C, -1, 1);
    float *r = rand_mat(T * C, 0, 1), *g = rand_mat(T * C, 0, 1);
    ck_assert_int_eq(lmp_ref_layernorm(T, C, xr, wr, br, 1e-5f, r), LMP_OK);
    ck_assert_int_eq(g_vt->layernorm(g_be, T, C, xr, wr, br, 1e-5f, g), LMP_OK);
    check_nmse("layernorm 7x53", r, g, T, C, C, 1e-12);
    ck_assert_int_eq(lmp_ref_gelu(T * C, xr, r), LMP_OK);
    ck_assert_int_eq(g_vt->gelu(g_be, T * C, xr, xr), LMP_OK); /* in place */
    check_nmse("gelu in place", r, xr, T, C, C, 1e-12);
    free(xr);
    free(wr);
    free(br);
    free(r);
    free(g);
}
END_TEST

/* The backend computes angles in f32 like llama2.c, the reference in double: at position p the
 * angle pos*freq carries an absolute error ~p u, i.e. ~1e-4 rad at p ~ 2000, so nmse ~ (p u)^2
 * ~ 1e-8 there (measured ~1e-11 thanks to averaging over frequencies).  Threshold 1e-8 for
 * positions up to ~2000; a wrong pair layout or frequency gives nmse ~ 1. */
START_TEST(test_rope)
{
    int64_t T = 9, nh = 3, hd = 16;
    int64_t pos0s[] = {0, 5, 1000, 2000};
    for (size_t s = 0; s < sizeof pos0s / sizeof pos0s[0]; s++) {
        float *x = rand_mat(T * nh * hd, -1.0f, 1.0f);
        float *r = copy_of(x, T * nh * hd), *g = copy_of(x, T * nh * hd);
        ck_assert_int_eq(lmp_ref_rope(T, nh, hd, pos0s[s], 10000.0f, r), LMP_OK);
        ck_assert_int_eq(g_vt->rope(g_be, T, nh, hd, pos0s[s], 10000.0f, g), LMP_OK);
        char what[64];
        snprintf(what, sizeof what, "rope pos0=%lld", (long long)pos0s[s]);
        check_nmse(what, r, g, T, nh * hd, nh * hd, 1e-8);
        if (pos0s[s] == 0) /* position 0 is the identity */
            check_nmse("rope pos 0 identity", x, g, 1, nh * hd, nh * hd, 0.0);
        free(x);
        free(r);
        free(g);
    }
    /* Hand-checked: head_dim 4, position 1, theta 100: pair 0 turns by 1 rad, pair 1 by 0.1. */
    float y[4] = {1.0f, 0.0f, 0.0f, 1.0f};
    ck_assert_int_eq(g_vt->rope(g_be, 1, 1, 4, 1, 100.0f, y), LMP_OK);
    ck_assert_float_eq_tol(y[0], cosf(1.0f), 1e-6f);
    ck_assert_float_eq_tol(y[1], sinf(1.0f), 1e-6f);
    ck_assert_float_eq_tol(y[2], -sinf(0.1f), 1e-6f);
    ck_assert_float_eq_tol(y[3], cosf(0.1f), 1e-6f);
    ck_assert_int_eq(g_vt->rope(g_be, 1, 1, 5, 0, 100.0f, y), LMP_EINVAL); /* odd head_dim */
}
END_TEST

/* Threshold 1e-10: f32 dot products of length hd and T (sgemm) plus f32 exp, against double. */
static void attention_case(int64_t T, int64_t nh, int64_t nkv, int64_t hd, float amp)
{
    float *q = rand_mat(T * nh * hd, -amp, amp), *k = rand_mat(T * nkv * hd, -amp, amp);
    float *v = rand_mat(T * nkv * hd, -1.0f, 1.0f);
    float *r = rand_mat(T * nh * hd, 0, 1), *g = rand_mat(T * nh * hd, 0, 1);
    ck_assert_int_eq(lmp_ref_attention(T, nh, nkv, hd, q, k, v, r), LMP_OK);
    ck_assert_int_eq(g_vt->attention(g_be, T, nh, nkv, hd, q, k, v, g), LMP_OK);
    char what[80];
    snprintf(what, sizeof what, "attention T=%lld nh=%lld nkv=%lld hd=%lld", (long long)T,
             (long long)nh, (long long)nkv, (long long)hd);
    check_nmse(what, r, g, T, nh * hd, nh * hd, 1e-10);
    /* causality and the first row: query 0 sees only key 0, so out[0] = v[0] of its kv head */
    for (int64_t h = 0; h < nh; h++)
        for (int64_t d = 0; d < hd; d++)
            ck_assert_float_eq_tol(g[h * hd + d], v[(h / (nh / nkv)) * hd + d], 1e-6f);
    free(q);
    free(k);
    free(v);
    free(r);
    free(g);
}

START_TEST(test_attention)
{
    attention_case(37, 6, 2, 16, 2.0f);  /* GQA, one block */
    attention_case(150, 4, 4, 8, 3.0f);  /* MHA, 3 blocks, the last one ragged */
    attention_case(1, 2, 1, 5, 1.0f);    /* one token, odd head size */
    attention_case(70, 3, 1, 12, 6.0f);  /* MQA, peaky softmax (scores up to ~100) */
    float z[8] = {0};
    ck_assert_int_eq(g_vt->attention(g_be, 1, 3, 2, 1, z, z, z, z), LMP_EINVAL); /* 3 % 2 */
}
END_TEST

/* Threshold 1e-12: elementwise, a few roundings (f32 expf in a fast version would give ~1e-14). */
START_TEST(test_swiglu)
{
    int64_t n = 1001;
    float *gt = rand_mat(n, -8.0f, 8.0f), *up = rand_mat(n, -2.0f, 2.0f);
    float *r = rand_mat(n, 0, 1), *g = rand_mat(n, 0, 1);
    gt[0] = -100.0f; /* exp(100) overflows in f32: silu must still be ~0, not NaN */
    gt[1] = 100.0f;
    ck_assert_int_eq(lmp_ref_swiglu(n, gt, up, r), LMP_OK);
    ck_assert_int_eq(g_vt->swiglu(g_be, n, gt, up, g), LMP_OK);
    check_nmse("swiglu 1001", r, g, 1, n, n, 1e-12);
    ck_assert(isfinite(g[0]) && isfinite(g[1]));
    ck_assert_int_eq(g_vt->swiglu(g_be, n, gt, up, gt), LMP_OK); /* out may alias gate */
    check_nmse("swiglu in place", r, gt, 1, n, n, 1e-12);
    free(gt);
    free(up);
    free(r);
    free(g);
}
END_TEST

/* Threshold 1e-12: x - logsumexp(x) in f32 vs double, relative to values of size ~log(cols). */
START_TEST(test_log_softmax)
{
    int64_t rows = 5, cols = 517;
    float *x = rand_mat(rows * cols, -30.0f, 30.0f);
    for (int64_t j = 0; j < cols; j++) x[4 * cols + j] += 1e4f; /* huge logits: needs max shift */
    float *r = rand_mat(rows * cols, 0, 1), *g = rand_mat(rows * cols, 0, 1);
    ck_assert_int_eq(lmp_ref_log_softmax(rows, cols, x, r), LMP_OK);
    ck_assert_int_eq(g_vt->log_softmax(g_be, rows, cols, x, g), LMP_OK);
    check_nmse("log_softmax 5x517", r, g, rows, cols, cols, 1e-12);
    for (int64_t i = 0; i < rows; i++) { /* each row sums to 1 in probability */
        double s = 0.0;
        for (int64_t j = 0; j < cols; j++) s += exp((double)g[i * cols + j]);
        ck_assert_msg(fabs(s - 1.0) < 1e-5, "row %lld sums to %.9g", (long long)i, s);
    }
    free(x);
    free(r);
    free(g);
}
END_TEST

static void check_same_bits(const char *what, const float *a, const float *b, int64_t n)
{
    ck_assert_msg(memcmp(a, b, (size_t)n * sizeof *a) == 0, "%s: the threaded result differs from one thread's", what);
}

/* Large enough for the backend's own threads (cpu_parallel.h; the fixture has threads = 2): the
 * row-wise and element-wise kernels give the reference's bits on the whole, and attention, its
 * heads shared among the threads, what a one-thread backend gives. */
START_TEST(test_threaded_kernels_match_one_thread)
{
    const int64_t T = 512, C = 576, n = 512 * 1536, rows = 64, cols = 4099;
    float *x = rand_mat(n, -8.0f, 8.0f), *y = rand_mat(n, -2.0f, 2.0f), *w = rand_mat(cols, 0.5f, 1.5f);
    float *r = rand_mat(n, 0, 1), *g = rand_mat(n, 0, 1);
    ck_assert_int_eq(lmp_ref_rmsnorm(T, C, x, w, 1e-5f, r), LMP_OK);
    ck_assert_int_eq(g_vt->rmsnorm(g_be, T, C, x, w, 1e-5f, g), LMP_OK);
    check_same_bits("rmsnorm 512x576", r, g, T * C);
    ck_assert_int_eq(lmp_ref_layernorm(T, C, x, w, y, 1e-5f, r), LMP_OK);
    ck_assert_int_eq(g_vt->layernorm(g_be, T, C, x, w, y, 1e-5f, g), LMP_OK);
    check_same_bits("layernorm 512x576", r, g, T * C);
    ck_assert_int_eq(lmp_ref_swiglu(n, x, y, r), LMP_OK);
    ck_assert_int_eq(g_vt->swiglu(g_be, n, x, y, g), LMP_OK);
    check_same_bits("swiglu 512x1536", r, g, n);
    ck_assert_int_eq(lmp_ref_gelu(n, x, r), LMP_OK);
    ck_assert_int_eq(g_vt->gelu(g_be, n, x, g), LMP_OK);
    check_same_bits("gelu 512x1536", r, g, n);
    ck_assert_int_eq(lmp_ref_log_softmax(rows, cols, x, r), LMP_OK);
    ck_assert_int_eq(g_vt->log_softmax(g_be, rows, cols, x, g), LMP_OK);
    check_same_bits("log_softmax 64x4099", r, g, rows * cols);

    const int64_t AT = 300, nh = 9, nkv = 3, hd = 64;
    float *q = rand_mat(AT * nh * hd, -2, 2), *k = rand_mat(AT * nkv * hd, -2, 2), *v = rand_mat(AT * nkv * hd, -1, 1);
    lmp_value one[4] = {{.num = 1}, {.num = 0}, {.num = 1}, {.num = 0}};
    void *be1;
    ck_assert_int_eq(g_vt->create(&g_host, NULL, one, &be1), LMP_OK);
    ck_assert_int_eq(g_vt->attention(be1, AT, nh, nkv, hd, q, k, v, r), LMP_OK);
    g_vt->destroy(be1);
    ck_assert_int_eq(g_vt->attention(g_be, AT, nh, nkv, hd, q, k, v, g), LMP_OK);
    check_same_bits("attention T=300 nh=9 nkv=3 hd=64", r, g, AT * nh * hd);
    free(q);
    free(k);
    free(v);
    free(x);
    free(y);
    free(w);
    free(r);
    free(g);
}
END_TEST

/* Folds are exact (no arithmetic); SUM threshold 1e-12 (double accumulation in both). */
START_TEST(test_reduce_cols)
{
    int64_t n = 301, c = 37;
    float *X = rand_mat(n * c, -5.0f, 5.0f);
    X[3 * c + 2] = -9.5f; /* a clear absmax from the negative side */
    const char *names[] = {"absmax", "min", "max", "sum"};
    for (int kind = LMP_REDUCE_ABSMAX; kind <= LMP_REDUCE_SUM; kind++) {
        float init = kind == LMP_REDUCE_MIN ? INFINITY : kind == LMP_REDUCE_MAX ? -INFINITY : 0.0f;
        float *r = malloc((size_t)c * sizeof *r), *g = malloc((size_t)c * sizeof *g);
        for (int64_t j = 0; j < c; j++) r[j] = g[j] = kind == LMP_REDUCE_SUM ? (float)j : init;
        /* two calls on two halves: the reduction accumulates into out */
        ck_assert_int_eq(g_vt->reduce_cols(g_be, kind, 100, c, X, g), LMP_OK);
        ck_assert_int_eq(g_vt->reduce_cols(g_be, kind, n - 100, c, X + 100 * c, g), LMP_OK);
        ck_assert_int_eq(lmp_ref_reduce_cols(kind, n, c, X, r), LMP_OK);
        if (kind == LMP_REDUCE_SUM)
            check_nmse("reduce_cols sum", r, g, 1, c, c, 1e-12);
        else
            check_bits_equal(names[kind], r, g, c);
        if (kind == LMP_REDUCE_ABSMAX) ck_assert(g[2] == 9.5f);
        free(r);
        free(g);
    }
    float out[2] = {0};
    ck_assert_int_eq(g_vt->reduce_cols(g_be, (lmp_reduce)9, 1, 2, X, out), LMP_EINVAL);
    free(X);
}
END_TEST

/* ---- fake quantization: bit for bit ------------------------------------------------------- */

/* W has random values plus exact ties at the grid's half steps for some slices, an all-zero
 * row (T = 0 -> 1e-8; asym [0,0] -> [-1,1]) and an all-positive row (asym lo = min(0, .) = 0). */
static float *quant_input(int64_t rows, int64_t cols)
{
    float *W = rand_mat(rows * cols, -1.0f, 1.0f);
    for (int64_t j = 0; j < cols; j++) {
        W[1 * cols + j] = 0.0f;
        W[2 * cols + j] = fabsf(W[2 * cols + j]) + 0.25f;
        /* row 3: multiples of 1/4 up to 7/4 around +-7/4 max: 4-bit sym scale 1/4 exactly, ties */
        W[3 * cols + j] = (float)((int)(j % 15) - 7) * 0.25f + ((j & 1) ? 0.125f : 0.0f);
    }
    W[3 * cols + 0] = 1.75f;
    return W;
}

/* Both grid ops on one spec: the plugin against cpu_ref.c bit for bit (scales, zeros, codes,
 * weights), choose then apply against the fused quantization of ABI 2 (fused_wgrid_ref.h),
 * and apply on a grid it did not choose. */
static void quant_weight_case(const lmp_wspec *s, int64_t rows, int64_t cols)
{
    const int64_t n = rows * cols;
    float *W = quant_input(rows, cols), *W0 = copy_of(W, n);
    int64_t ns = lmp_wspec_n_scales(s, rows, cols);
    /* one sentinel past the end: nothing beyond n_scales may be written */
    float *sr = malloc((size_t)(ns + 1) * sizeof *sr), *sg = malloc((size_t)(ns + 1) * sizeof *sg);
    float *zr = malloc((size_t)(ns + 1) * sizeof *zr), *zg = malloc((size_t)(ns + 1) * sizeof *zg);
    for (int64_t i = 0; i <= ns; i++) sr[i] = sg[i] = zr[i] = zg[i] = -123.0f;
    char what[128];
    snprintf(what, sizeof what, "weight grid b=%d sym=%d gran=%d group=%lld round=%d clip=%g", s->bits, s->sym,
             (int)s->gran, (long long)s->group, (int)s->rounding, (double)s->clip);

    /* choose: the same grid, W only read, nothing past the end, zeros only for asym */
    ck_assert_int_eq(lmp_ref_choose_weight_grid(s, rows, cols, W, sr, zr), LMP_OK);
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, s, rows, cols, W, sg, zg), LMP_OK);
    check_bits_equal(what, sr, sg, ns + 1);
    check_bits_equal(what, zr, zg, ns + 1);
    check_bits_equal("choose_weight_grid leaves W alone", W0, W, n);
    ck_assert(sg[ns] == -123.0f && zg[ns] == -123.0f);
    if (s->sym) ck_assert(zg[0] == -123.0f);

    /* apply: the same weights and codes */
    float *Wr = copy_of(W, n), *Wg = copy_of(W, n), *Wn = copy_of(W, n);
    int32_t *cr = malloc((size_t)n * sizeof *cr), *cg = malloc((size_t)n * sizeof *cg);
    for (int64_t i = 0; i < n; i++) cr[i] = cg[i] = -999;
    ck_assert_int_eq(lmp_ref_apply_weight_grid(s, rows, cols, Wr, sr, zr, cr), LMP_OK);
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, s, rows, cols, Wg, sg, zg, cg), LMP_OK);
    check_bits_equal(what, Wr, Wg, n);
    ck_assert_int_eq(memcmp(cr, cg, (size_t)n * sizeof *cr), 0);
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, s, rows, cols, Wn, sg, zg, NULL), LMP_OK); /* no codes */
    check_bits_equal("apply_weight_grid without codes", Wg, Wn, n);

    /* Every weight is its code's value on its slice's grid, and the codes are in range. */
    const int64_t per_row = s->gran == LMP_GRAN_GROUP ? (cols + s->group - 1) / s->group : 1;
    const int qlo = s->sym ? -(1 << (s->bits - 1)) : 0, qhi = s->sym ? (1 << (s->bits - 1)) - 1 : (1 << s->bits) - 1;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            int64_t si = s->gran == LMP_GRAN_TENSOR ? 0 : s->gran == LMP_GRAN_CHANNEL ? i : i * per_row + j / s->group;
            int32_t q = cg[i * cols + j];
            ck_assert_msg(q >= qlo && q <= qhi, "%s: code %d out of range", what, q);
            float v = s->sym ? (float)q * sg[si] : sg[si] * ((float)q - zg[si]);
            ck_assert_msg(v == Wg[i * cols + j], "%s: [%lld,%lld] %g is not code %d's value %g", what, (long long)i,
                          (long long)j, (double)Wg[i * cols + j], q, (double)v);
        }

    if (lmp_wspec_clip(s) == 1.0f) {
        /* choose then apply is the fused quantization of ABI 2, bit for bit */
        float *Wf = copy_of(W, n), *sf = malloc((size_t)(ns + 1) * sizeof *sf), *zf = malloc((size_t)(ns + 1) * sizeof *zf);
        for (int64_t i = 0; i <= ns; i++) sf[i] = zf[i] = -123.0f;
        fused_quantize_weight(s, rows, cols, Wf, sf, zf);
        check_bits_equal("choose + apply vs the fused quantization", Wf, Wg, n);
        check_bits_equal("scales vs the fused quantization", sf, sg, ns + 1);
        check_bits_equal("zeros vs the fused quantization", zf, zg, ns + 1);
        free(Wf);
        free(sf);
        free(zf);
        /* Independent sanity of the grid: per slice error within one step (sym half a step; asym
         * the rounded zero-point can push one clamp a step). */
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) {
                int64_t si = s->gran == LMP_GRAN_TENSOR ? 0 : s->gran == LMP_GRAN_CHANNEL ? i : i * per_row + j / s->group;
                double step = sg[si], err = fabs((double)Wg[i * cols + j] - W[i * cols + j]);
                double bound = (s->sym ? 0.5 : 1.0) * step * (1.0 + 1e-6);
                ck_assert_msg(err <= bound, "%s: [%lld,%lld] err %.3g > %.3g", what, (long long)i, (long long)j, err,
                              bound);
            }
    }

    /* apply on a grid chosen from other weights (0.5 W: half the range, so W saturates) */
    float *Wh = copy_of(W, n);
    for (int64_t i = 0; i < n; i++) Wh[i] *= 0.5f;
    ck_assert_int_eq(lmp_ref_choose_weight_grid(s, rows, cols, Wh, sr, zr), LMP_OK);
    memcpy(Wr, W, (size_t)n * sizeof *Wr);
    memcpy(Wg, W, (size_t)n * sizeof *Wg);
    ck_assert_int_eq(lmp_ref_apply_weight_grid(s, rows, cols, Wr, sr, zr, cr), LMP_OK);
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, s, rows, cols, Wg, sr, zr, cg), LMP_OK);
    check_bits_equal("apply_weight_grid on a given grid", Wr, Wg, n);
    ck_assert_int_eq(memcmp(cr, cg, (size_t)n * sizeof *cr), 0);
    free(Wh);
    free(W);
    free(W0);
    free(Wr);
    free(Wg);
    free(Wn);
    free(cr);
    free(cg);
    free(sr);
    free(sg);
    free(zr);
    free(zg);
}

START_TEST(test_quantize_weight)
{
    int bits[] = {2, 3, 4, 8};
    lmp_granularity grans[] = {LMP_GRAN_TENSOR, LMP_GRAN_CHANNEL, LMP_GRAN_GROUP, LMP_GRAN_GROUP};
    int64_t groups[] = {0, 0, 16, 32}; /* 53 columns: ragged last groups of 5 and 21 */
    float clips[] = {0.0f, 1.0f, 0.75f};  /* 0 means 1 */
    for (int b = 0; b < 4; b++)
        for (int sym = 0; sym < 2; sym++)
            for (int g = 0; g < 4; g++)
                for (int rnd = 0; rnd < 2; rnd++)
                    for (int c = 0; c < 3; c++) {
                        lmp_wspec s = {.bits = bits[b], .sym = sym, .gran = grans[g], .group = groups[g],
                                       .rounding = (lmp_rounding)rnd, .clip = clips[c]};
                        quant_weight_case(&s, 37, 53);
                    }
    /* abs-max 1.75 -> scale 0.25, 0.125 is a tie: half to even 0, half away 1 */
    lmp_wspec s = {.bits = 4, .sym = 1, .gran = LMP_GRAN_CHANNEL, .rounding = LMP_ROUND_HALF_EVEN};
    float w[4] = {0.5f, -1.75f, 0.125f, 1.0f}, sc = 0.0f;
    int32_t codes[4];
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &s, 1, 4, w, &sc, NULL), LMP_OK);
    ck_assert(sc == 0.25f);
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, &s, 1, 4, w, &sc, NULL, codes), LMP_OK);
    ck_assert(w[0] == 0.5f && w[1] == -1.75f && w[2] == 0.0f && w[3] == 1.0f);
    ck_assert(codes[0] == 2 && codes[1] == -7 && codes[2] == 0 && codes[3] == 4);
    s.rounding = LMP_ROUND_HALF_AWAY;
    w[2] = 0.125f;
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, &s, 1, 4, w, &sc, NULL, codes), LMP_OK);
    ck_assert(w[2] == 0.25f && codes[2] == 1);
    /* clip 0.5: T = 0.875, scale 0.125; -1.75 saturates at -8 (the extra code), 1.0 at 7 */
    s = (lmp_wspec){.bits = 4, .sym = 1, .gran = LMP_GRAN_CHANNEL, .rounding = LMP_ROUND_HALF_EVEN, .clip = 0.5f};
    float x[4] = {0.5f, -1.75f, 0.125f, 1.0f};
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &s, 1, 4, x, &sc, NULL), LMP_OK);
    ck_assert(sc == 0.125f);
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, &s, 1, 4, x, &sc, NULL, codes), LMP_OK);
    ck_assert(x[0] == 0.5f && x[1] == -1.0f && x[2] == 0.125f && x[3] == 0.875f);
    ck_assert(codes[0] == 4 && codes[1] == -8 && codes[2] == 1 && codes[3] == 7);
    /* asym clip 0.5 on [-1, 2] (maxq 3 at 2 bits): lo -0.5, hi 1, scale 0.5, zero 1 */
    s = (lmp_wspec){.bits = 2, .sym = 0, .gran = LMP_GRAN_TENSOR, .rounding = LMP_ROUND_HALF_EVEN, .clip = 0.5f};
    float y[4] = {-1.0f, 2.0f, 0.5f, 0.0f}, zp = -1.0f;
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &s, 2, 2, y, &sc, &zp), LMP_OK);
    ck_assert(sc == 0.5f && zp == 1.0f);
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, &s, 2, 2, y, &sc, &zp, codes), LMP_OK);
    ck_assert(y[0] == -0.5f && y[1] == 1.0f && y[2] == 0.5f && y[3] == 0.0f);
    ck_assert(codes[0] == 0 && codes[1] == 3 && codes[2] == 2 && codes[3] == 1);
}
END_TEST

START_TEST(test_quantize_weight_errors)
{
    float w[4] = {0}, sc[4] = {0}, zp[4] = {0};
    int32_t codes[4];
    const lmp_wspec good = {.bits = 4, .sym = 0, .gran = LMP_GRAN_CHANNEL, .rounding = LMP_ROUND_HALF_EVEN};
    lmp_wspec bad[7];
    for (int i = 0; i < 7; i++) bad[i] = good;
    bad[0].bits = 1;
    bad[1].bits = 9;
    bad[2].gran = LMP_GRAN_GROUP; /* group 0 */
    bad[3].clip = 1.5f;
    bad[4].clip = -0.25f;
    bad[5].clip = NAN;
    bad[6].format = (lmp_wformat)1; /* no such format yet */
    for (int i = 0; i < 7; i++) {
        g_n_err = 0;
        ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &bad[i], 2, 2, w, sc, zp), LMP_EINVAL);
        ck_assert_int_eq(g_vt->apply_weight_grid(g_be, &bad[i], 2, 2, w, sc, zp, codes), LMP_EINVAL);
        ck_assert_int_eq(g_n_err, 2); /* each with a message */
        ck_assert_int_eq(lmp_ref_choose_weight_grid(&bad[i], 2, 2, w, sc, zp), LMP_EINVAL);
        ck_assert_int_eq(lmp_ref_apply_weight_grid(&bad[i], 2, 2, w, sc, zp, codes), LMP_EINVAL);
    }
    g_n_err = 0;
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, NULL, 2, 2, w, sc, zp), LMP_EINVAL);
    ck_assert_ptr_nonnull(strstr(g_err, "spec is NULL"));
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, NULL, 2, 2, w, sc, zp, codes), LMP_EINVAL);
    /* NULL operands: W, scales, and zeros when asymmetric; negative shapes */
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &good, 2, 2, NULL, sc, zp), LMP_EINVAL);
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &good, 2, 2, w, NULL, zp), LMP_EINVAL);
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &good, 2, 2, w, sc, NULL), LMP_EINVAL);
    ck_assert_ptr_nonnull(strstr(g_err, "zeros is NULL"));
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, &good, 2, 2, NULL, sc, zp, codes), LMP_EINVAL);
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, &good, 2, 2, w, NULL, zp, codes), LMP_EINVAL);
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, &good, 2, 2, w, sc, NULL, codes), LMP_EINVAL);
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &good, -1, 2, w, sc, zp), LMP_EINVAL);
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, &good, 2, -1, w, sc, zp, codes), LMP_EINVAL);
    ck_assert_int_eq(g_n_err, 10);
    ck_assert_int_eq(lmp_ref_choose_weight_grid(&good, 2, 2, w, sc, NULL), LMP_EINVAL);
    ck_assert_int_eq(lmp_ref_apply_weight_grid(&good, 2, 2, w, NULL, zp, NULL), LMP_EINVAL);
    /* a symmetric grid needs no zeros; empty shapes need no operands */
    lmp_wspec sym = good;
    sym.sym = 1;
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &sym, 2, 2, w, sc, NULL), LMP_OK);
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, &sym, 2, 2, w, sc, NULL, NULL), LMP_OK);
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &good, 0, 2, NULL, NULL, NULL), LMP_OK);
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, &good, 2, 0, NULL, NULL, NULL, NULL), LMP_OK);
}
END_TEST

START_TEST(test_quantize_act)
{
    int64_t T = 7, C = 53;
    float *X = rand_mat(T * C, -4.0f, 4.0f);
    for (int64_t j = 0; j < C; j++) X[2 * C + j] = 0.0f; /* a zero token: the 1e-5 clamp */
    X[5 * C + 3] = 40.0f;                               /* outlier beyond the static range */
    for (int64_t j = 0; j < C; j++) X[6 * C + j] = (float)(j - 26) * 0.0625f; /* ties */
    lmp_act_mode modes[] = {LMP_ACT_STATIC_TENSOR, LMP_ACT_DYN_TENSOR, LMP_ACT_DYN_TOKEN};
    int bits[] = {4, 8};
    for (int m = 0; m < 3; m++)
        for (int b = 0; b < 2; b++)
            for (int rnd = 0; rnd < 2; rnd++) {
                lmp_aspec s = {modes[m], bits[b], (lmp_rounding)rnd, 0.125f};
                float *r = copy_of(X, T * C), *g = copy_of(X, T * C);
                ck_assert_int_eq(lmp_ref_quantize_act(&s, T, C, r), LMP_OK);
                ck_assert_int_eq(g_vt->quantize_act(g_be, &s, T, C, g), LMP_OK);
                char what[64];
                snprintf(what, sizeof what, "quantize_act mode=%d b=%d round=%d", (int)modes[m],
                         bits[b], rnd);
                check_bits_equal(what, r, g, T * C);
                if (m == 0) { /* static: symmetric clamp to [-qmax, qmax] * scale */
                    float qmax = (float)((1 << (bits[b] - 1)) - 1);
                    ck_assert(g[5 * C + 3] == qmax * 0.125f);
                }
                free(r);
                free(g);
            }
    /* NONE leaves X alone; a static scale must be positive */
    float *g = copy_of(X, T * C);
    lmp_aspec none = {LMP_ACT_NONE, 8, LMP_ROUND_HALF_EVEN, 0.0f};
    ck_assert_int_eq(g_vt->quantize_act(g_be, &none, T, C, g), LMP_OK);
    check_bits_equal("quantize_act none", X, g, T * C);
    lmp_aspec bad = {LMP_ACT_STATIC_TENSOR, 8, LMP_ROUND_HALF_EVEN, 0.0f};
    g_n_err = 0;
    ck_assert_int_eq(g_vt->quantize_act(g_be, &bad, T, C, g), LMP_EINVAL);
    ck_assert_int_eq(g_n_err, 1);
    free(g);
    free(X);
}
END_TEST

/* ---- empty shapes are no-ops everywhere ------------------------------------------------- */

START_TEST(test_empty_shapes)
{
    float buf[4] = {1, 2, 3, 4};
    int64_t piv = 0;
    lmp_wspec ws = {.bits = 4, .sym = 1, .gran = LMP_GRAN_GROUP, .group = 8, .rounding = LMP_ROUND_HALF_EVEN};
    float sc[1] = {5};
    int32_t codes[1] = {7};
    lmp_aspec as = {LMP_ACT_DYN_TOKEN, 8, LMP_ROUND_HALF_EVEN, 0.0f};
    ck_assert_int_eq(g_vt->gemm(g_be, 0, 0, 0, 0, 0, 1, buf, 1, buf, 1, 0, buf, 1), LMP_OK);
    ck_assert_int_eq(g_vt->xtx_accum(g_be, 0, 0, buf, 1, buf), LMP_OK);
    ck_assert_int_eq(g_vt->cholesky(g_be, 0, buf, &piv), LMP_OK);
    ck_assert_int_eq(g_vt->chol_inverse(g_be, 0, buf), LMP_OK);
    ck_assert_int_eq(g_vt->trsm_lower(g_be, 0, 0, 3, buf, buf), LMP_OK);
    ck_assert_int_eq(g_vt->rmsnorm(g_be, 0, 4, buf, buf, 1e-5f, buf), LMP_OK);
    ck_assert_int_eq(g_vt->rope(g_be, 0, 1, 4, 0, 1e4f, buf), LMP_OK);
    ck_assert_int_eq(g_vt->attention(g_be, 0, 2, 1, 2, buf, buf, buf, buf), LMP_OK);
    ck_assert_int_eq(g_vt->swiglu(g_be, 0, buf, buf, buf), LMP_OK);
    ck_assert_int_eq(g_vt->log_softmax(g_be, 0, 4, buf, buf), LMP_OK);
    ck_assert_int_eq(g_vt->reduce_cols(g_be, LMP_REDUCE_SUM, 0, 4, buf, buf), LMP_OK);
    ck_assert_int_eq(g_vt->choose_weight_grid(g_be, &ws, 0, 4, buf, sc, NULL), LMP_OK);
    ck_assert_int_eq(g_vt->apply_weight_grid(g_be, &ws, 0, 4, buf, sc, NULL, codes), LMP_OK);
    ck_assert_int_eq(g_vt->quantize_act(g_be, &as, 0, 4, buf), LMP_OK);
    ck_assert(buf[0] == 1 && buf[1] == 2 && buf[2] == 3 && buf[3] == 4);
    ck_assert(sc[0] == 5 && codes[0] == 7);
}
END_TEST

static Suite *backend_cpu_suite(void)
{
    Suite *s = suite_create("backend_cpu");
    TCase *tc = tcase_create("ops");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_descriptor);
    tcase_add_test(tc, test_create_params);
    tcase_add_test(tc, test_gemm);
    tcase_add_test(tc, test_gemm_errors);
    tcase_add_test(tc, test_bf16_rounding);
    tcase_add_test(tc, test_bf16_gemm);
    tcase_add_test(tc, test_xtx_accum);
    tcase_add_test(tc, test_jitter);
    tcase_add_test(tc, test_cholesky);
    tcase_add_test(tc, test_cholesky_not_spd);
    tcase_add_test(tc, test_chol_inverse);
    tcase_add_test(tc, test_trsm_lower);
    tcase_add_test(tc, test_rmsnorm);
    tcase_add_test(tc, test_layernorm_gelu);
    tcase_add_test(tc, test_rope);
    tcase_add_test(tc, test_threaded_kernels_match_one_thread);
    tcase_add_test(tc, test_attention);
    tcase_add_test(tc, test_swiglu);
    tcase_add_test(tc, test_log_softmax);
    tcase_add_test(tc, test_reduce_cols);
    tcase_add_test(tc, test_quantize_weight);
    tcase_add_test(tc, test_quantize_weight_errors);
    tcase_add_test(tc, test_quantize_act);
    tcase_add_test(tc, test_empty_shapes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return lmp_test_main(backend_cpu_suite()); }
