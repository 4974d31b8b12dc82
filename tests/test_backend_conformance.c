/* test_backend_conformance.c — every backend plugin the build made, held to the CPU reference.
 *
 * Which backends: every lmp-backend-*.so in the build's plugin folder.  Each is probed (in a
 * child process, so no OpenCL or CUDA runtime is ever initialised in the process that forks the
 * tests); one whose probe says no is SKIPPED with the probe's reason printed — a skip is not a
 * failure.  Each usable one gets every test below, in a forked process of its own:
 *
 *  - op by op (tcase "ops"): every entry of lmp_backend_i on random inputs of odd sizes,
 *    compared with the reference by normalized MSE, nmse = sum((ref-got)^2) / sum(ref^2), the
 *    threshold and its reason written next to each op (ggml's test-backend-ops).  The reference
 *    is the CPU backend plugin; for "cpu" itself it is the plain kernels of cpu_ref.c, so the
 *    CPU backend too is held to something independent.  Fake quantization and the min/max folds
 *    must match bit for bit.
 *  - the fallback rule (backend.h): an entry the backend leaves NULL, or a call it answers with
 *    LMP_EUNSUPPORTED, runs on the CPU backend through the core's dispatcher (lmp_be_*).  Each
 *    op call here goes to the backend's own entry first and, when it declines, through
 *    lmp_be_<op>; a declined op must then give exactly the CPU backend's bits.  test_fallback
 *    also checks both ways of declining explicitly (opencl: Cholesky is NULL, attention with
 *    head_dim 300 is LMP_EUNSUPPORTED) and that errors come back through the fallback.
 *  - end to end (tcase "e2e", backends other than cpu): `lmpress compare CFG --backend NAME
 *    --json` against the same with --backend cpu on each config of E2E_CONFIGS, every number of
 *    the table within the tolerance of its variant's class (core/report/table_diff.c, `lmpress diff`).
 *
 * Every measured nmse and difference is printed, so the log of a run is the record. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plugin/backend.h"
#include "cpu_ref.h"
#include "base/error.h"
#include "model/alibi.h"
#include "base/ctx.h"
#include "formats/json.h"
#include "plugin/registry.h"
#include "report/table_diff.h"

#include "fused_wgrid_ref.h"
#include "testutil.h"

#define PLUGIN_DIR LMP_BINARY_DIR "/plugins"

/* ---- the backends under test, found and probed once in main() ----------------------------- */

enum { MAX_BE = 16 };
static char g_names[MAX_BE + 1][64]; /* usable backends, "cpu" first; then "cpu:bf16" */
static int g_n;       /* usable backends: the e2e comparisons run each against cpu */
static int g_n_ops;   /* g_n + 1: the op tests also hold "cpu:bf16" to the reference */

/* "cpu" and "cpu:bf16" (the CPU backend with compute = "bf16", issue 42) are the CPU backend. */
static int is_cpu(const char *name) { return strncmp(name, "cpu", 3) == 0 && (name[3] == 0 || name[3] == ':'); }
static int is_bf16(const char *name) { return strcmp(name, "cpu:bf16") == 0; }

/* Probes every lmp-backend-*.so of the plugin folder in a child process (OpenCL and CUDA
 * runtimes must not be initialised in a process that forks later) and prints the verdicts. */
static void find_backends(void)
{
    int fd[2];
    if (pipe(fd) != 0) return;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        FILE *out = fdopen(fd[1], "w");
        lmp_ctx ctx;
        lmp_ctx_init(&ctx);
        lmp_host_set_verbosity(&ctx, LMP_LOG_ERROR);
        lmp_registry reg;
        if (lmp_registry_init(&reg, &ctx, NULL, 0) != 0) _exit(1);
        DIR *d = opendir(PLUGIN_DIR);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            size_t len = strlen(e->d_name);
            if (strncmp(e->d_name, "lmp-backend-", 12) != 0 || len < 16 ||
                strcmp(e->d_name + len - 3, ".so") != 0)
                continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", PLUGIN_DIR, e->d_name);
            const lmp_plugin *p = NULL;
            if (lmp_registry_load_file(&reg, path, LMP_PLUGIN_BACKEND, 1, &p) != 0 || !p) {
                fprintf(out, "-\t%.*s\tdoes not load: %s\n", (int)(len - 15), e->d_name + 12,
                        lmp_last_error());
                continue;
            }
            fprintf(out, "%d\t%s\t%s\n", p->usable, p->desc->name, p->usable ? "" : p->reason);
        }
        if (d) closedir(d);
        fclose(out);
        _exit(0); /* no destructors: a runtime may have threads */
    }
    close(fd[1]);
    FILE *in = fdopen(fd[0], "r");
    char line[2048];
    g_n = 1;
    snprintf(g_names[0], sizeof g_names[0], "cpu");
    while (in && fgets(line, sizeof line, in)) {
        line[strcspn(line, "\n")] = 0;
        char *name = strchr(line, '\t'), *why = name ? strchr(name + 1, '\t') : NULL;
        if (!name || !why) continue;
        *name++ = 0;
        *why++ = 0;
        if (strcmp(line, "1") == 0) {
            if (strcmp(name, "cpu") != 0 && g_n < MAX_BE)
                snprintf(g_names[g_n++], sizeof g_names[0], "%s", name);
            printf("conformance: backend %-8s usable here: tested\n", name);
        } else {
            lmp_test_skip("conformance: backend %-8s SKIPPED: %s\n", name, why);
        }
    }
    if (in) fclose(in);
    waitpid(pid, NULL, 0);
    snprintf(g_names[g_n], sizeof g_names[0], "cpu:bf16");
    g_n_ops = g_n + 1;
    fflush(stdout);
}

/* ---- the reference kernels as a vtable (the reference of the "cpu" candidate) -------------- */

static int r_gemm(void *s, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc)
{
    return lmp_ref_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
static int r_xtx(void *s, int64_t n, int64_t c, const float *X, float alpha, float *H)
{
    return lmp_ref_xtx_accum(n, c, X, alpha, H);
}
static int r_chol(void *s, int64_t n, float *A, int64_t *bad) { return lmp_ref_cholesky(n, A, bad); }
static int r_cinv(void *s, int64_t n, float *L) { return lmp_ref_chol_inverse(n, L); }
static int r_trsm(void *s, int trans, int64_t n, int64_t nrhs, const float *L, float *B)
{
    return lmp_ref_trsm_lower(trans, n, nrhs, L, B);
}
static int r_rmsnorm(void *s, int64_t T, int64_t C, const float *x, const float *w, float eps,
                     float *out)
{
    return lmp_ref_rmsnorm(T, C, x, w, eps, out);
}
static int r_rope(void *s, int64_t T, int64_t nh, int64_t hd, int64_t pos0, float theta, float *x)
{
    return lmp_ref_rope(T, nh, hd, pos0, theta, x);
}
static int r_attention(void *s, int64_t T, int64_t nh, int64_t nkv, int64_t hd, const float *q,
                       const float *k, const float *v, float *out)
{
    return lmp_ref_attention(T, nh, nkv, hd, q, k, v, out);
}
static int r_swiglu(void *s, int64_t n, const float *g, const float *u, float *out)
{
    return lmp_ref_swiglu(n, g, u, out);
}
static int r_log_softmax(void *s, int64_t rows, int64_t cols, const float *x, float *out)
{
    return lmp_ref_log_softmax(rows, cols, x, out);
}
static int r_reduce(void *s, lmp_reduce kind, int64_t n, int64_t c, const float *X, float *out)
{
    return lmp_ref_reduce_cols(kind, n, c, X, out);
}
static int r_choose(void *s, const lmp_wspec *spec, int64_t rows, int64_t cols, const float *W,
                    float *scales, float *zeros)
{
    return lmp_ref_choose_weight_grid(spec, rows, cols, W, scales, zeros);
}
static int r_apply(void *s, const lmp_wspec *spec, int64_t rows, int64_t cols, float *W,
                   const float *scales, const float *zeros, int32_t *codes)
{
    return lmp_ref_apply_weight_grid(spec, rows, cols, W, scales, zeros, codes);
}
static int r_qact(void *s, const lmp_aspec *spec, int64_t T, int64_t C, float *X)
{
    return lmp_ref_quantize_act(spec, T, C, X);
}
static int r_layernorm(void *s, int64_t T, int64_t C, const float *x, const float *w,
                       const float *b, float eps, float *out)
{
    return lmp_ref_layernorm(T, C, x, w, b, eps, out);
}
static int r_gelu(void *s, int64_t n, const float *x, float *out) { return lmp_ref_gelu(n, x, out); }
static int r_attention_window(void *s, int64_t T, int64_t nh, int64_t nkv, int64_t hd, int64_t window, float softcap,
                              const float *q, const float *k, const float *v, float *out)
{
    return lmp_ref_attention_window(T, nh, nkv, hd, window, softcap, q, k, v, out);
}
static int r_rope_table(void *s, int64_t T, int64_t nh, int64_t hd, int64_t n_rot, int64_t pos0, const float *inv_freq,
                        float mscale, float *x)
{
    return lmp_ref_rope_table(T, nh, hd, n_rot, pos0, inv_freq, mscale, x);
}

static int r_hadamard(void *s, int64_t rows, int64_t n, float *x) { return lmp_ref_hadamard(rows, n, x); }
static int r_attention_alibi(void *s, int64_t T, int64_t nh, int64_t nkv, int64_t hd, int64_t window,
                             const float *slopes, const float *q, const float *k, const float *v, float *out)
{
    return lmp_ref_attention_alibi(T, nh, nkv, hd, window, slopes, q, k, v, out);
}

static const lmp_backend_i ref_vtable = {
    .struct_size = sizeof(lmp_backend_i),
    .gemm = r_gemm, .xtx_accum = r_xtx, .cholesky = r_chol, .chol_inverse = r_cinv,
    .trsm_lower = r_trsm, .rmsnorm = r_rmsnorm, .rope = r_rope, .attention = r_attention,
    .swiglu = r_swiglu, .log_softmax = r_log_softmax, .reduce_cols = r_reduce,
    .choose_weight_grid = r_choose, .apply_weight_grid = r_apply, .quantize_act = r_qact,
    .layernorm = r_layernorm,
    .gelu = r_gelu,
    .rope_table = r_rope_table,
    .attention_window = r_attention_window,
    .hadamard = r_hadamard,
    .attention_alibi = r_attention_alibi,
};

/* ---- fixture: the candidate (through the core, with its CPU fallback) and its reference ---- */

static lmp_ctx g_ctx;               /* the run the candidate and its registry belong to */
static lmp_registry g_reg;
static lmp_backend g_be;            /* candidate + the CPU backend the core falls back to */
static const lmp_backend_i *g_ref;  /* the reference: the CPU plugin, or cpu_ref for "cpu" */
static void *g_ref_self;
static const char *g_name;
static int g_fallback;              /* the last CAND call ran on the CPU backend */
static uint64_t g_rng;

static const lmp_backend_i *g_f32_vt; /* "cpu:bf16": the f32 instance while lowp is the candidate */
static void *g_f32_self;

static void open_backend(int i)
{
    g_name = g_names[i];
    lmp_ctx_init(&g_ctx);
    lmp_host_set_verbosity(&g_ctx, LMP_LOG_ERROR);
    ck_assert_int_eq(lmp_registry_init(&g_reg, &g_ctx, NULL, 0), 0);
    int st;
    if (is_bf16(g_name)) {
        /* The config's backend = { name = "cpu"; params = { compute = "bf16"; }; }: the core opens
         * an f32 instance and a bf16 one (backend.h); the candidate is the bf16 one.  Where the
         * CPU has no bf16 it runs f32 (its fallback), which the same thresholds hold. */
        const lmp_plugin *p;
        lmp_value *v = NULL;
        ck_assert_int_eq(lmp_registry_require(&g_reg, LMP_PLUGIN_BACKEND, "cpu", &p), 0);
        ck_assert_int_eq(lmp_params_defaults(p->desc, &v), 0);
        for (uint32_t k = 0; k < p->desc->n_params; k++)
            if (strcmp(p->desc->params[k].name, "compute") == 0) v[k].num = 1, v[k].str = "bf16";
        st = lmp_backend_open(&g_ctx, &g_reg, "cpu", v, &g_be);
        free(v);
        ck_assert_msg(st == 0, "backend %s: %s", g_name, lmp_last_error());
        ck_assert_ptr_nonnull(g_be.lowp_vt);
        g_f32_vt = g_be.vt, g_f32_self = g_be.self;
        g_be.vt = g_be.lowp_vt, g_be.self = g_be.lowp_self;
    } else {
        st = lmp_backend_open(&g_ctx, &g_reg, g_name, NULL, &g_be);
        ck_assert_msg(st == 0, "backend %s: %s", g_name, lmp_last_error());
    }
    lmp_host_set_backend(&g_ctx, &g_be);
    if (is_cpu(g_name)) {
        g_ref = &ref_vtable;
        g_ref_self = NULL;
    } else {
        g_ref = g_be.cpu;
        g_ref_self = g_be.cpu_self;
    }
    g_rng = 0x9E3779B97F4A7C15ull;
}

static void close_backend(void)
{
    lmp_host_set_backend(&g_ctx, NULL);
    if (is_bf16(g_name)) g_be.vt = g_f32_vt, g_be.self = g_f32_self; /* as opened, for close */
    lmp_backend_close(&g_be);
    /* the registry is left loaded: unloading a runtime with live threads is not worth it */
}

/* The candidate's own entry; where it is NULL or declines (LMP_EUNSUPPORTED), the core's
 * dispatcher, which runs the CPU backend (g_fallback = 1). */
#define CAND(st, op, ...)                                                                       \
    do {                                                                                        \
        g_fallback = 0;                                                                         \
        (st) = g_be.vt->op ? g_be.vt->op(g_be.self, __VA_ARGS__) : LMP_EUNSUPPORTED;           \
        if ((st) == LMP_EUNSUPPORTED) {                                                         \
            g_fallback = 1;                                                                     \
            (st) = lmp_be_##op(&g_be, __VA_ARGS__);                                             \
        }                                                                                       \
    } while (0)
#define REF(op, ...) g_ref->op(g_ref_self, __VA_ARGS__)
/* The CPU backend itself (bits a fallback must reproduce). */
#define CPU(op, ...) g_be.cpu->op(g_be.cpu_self, __VA_ARGS__)

/* ---- data and comparisons ------------------------------------------------------------------- */

static uint64_t rng_u64(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float urand(float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(rng_u64() >> 40) / 16777216.0);
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

static double nmse_ld(const float *ref, const float *got, int64_t rows, int64_t cols, int64_t ld)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            double d = (double)got[i * ld + j] - ref[i * ld + j];
            num += d * d;
            den += (double)ref[i * ld + j] * ref[i * ld + j];
        }
    return den > 0.0 ? num / den : num;
}

static void check_nmse(const char *what, const float *ref, const float *got, int64_t rows,
                       int64_t cols, int64_t ld, double threshold)
{
    double e = nmse_ld(ref, got, rows, cols, ld);
    printf("  [%s] %-44s nmse %.2e (<= %.0e)%s\n", g_name, what, e, threshold,
           g_fallback ? " cpu fallback" : "");
    ck_assert_msg(e <= threshold, "[%s] %s: nmse %.3e > %.3e", g_name, what, e, threshold);
}

static void check_bits(const char *what, const float *ref, const float *got, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&ref[i], &got[i], sizeof(float)) == 0,
                      "[%s] %s: element %lld: ref %.9g (%a) != got %.9g (%a)", g_name, what,
                      (long long)i, (double)ref[i], (double)ref[i], (double)got[i], (double)got[i]);
}

static void report_bits(const char *what)
{
    printf("  [%s] %-44s bit for bit%s\n", g_name, what, g_fallback ? " cpu fallback" : "");
}

/* A cond ~1e2 SPD matrix A = B B^T / m + shift I. */
static float *spd_matrix(int64_t n, int64_t m, float shift)
{
    float *B = rand_mat(n * m, -1.0f, 1.0f);
    float *A = malloc((size_t)(n * n) * sizeof *A);
    ck_assert_ptr_nonnull(A);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j <= i; j++) {
            double s = 0.0;
            for (int64_t k = 0; k < m; k++) s += (double)B[i * m + k] * B[j * m + k];
            A[i * n + j] = A[j * n + i] = (float)(s / (double)m + (i == j ? shift : 0.0f));
        }
    free(B);
    return A;
}

/* f32 error model: u = 2^-24 ~ 6e-8.  One rounding: nmse ~ u^2/3 ~ 1e-15; a K-term f32 dot
 * product against another f32 one (different order) ~ K u^2 ~ 1e-13 for K ~ 100.  A real bug
 * (a wrong index, transpose, scale or mask) gives nmse ~ 1e-2 .. 1, so every threshold below sits
 * 2-4 decades above what is measured and many decades below a bug. */

/* ---- gemm: 1e-10 (K <= 200 f32 products in two different orders: ~K u^2 <= 1e-12) ---------- */
/* "cpu:bf16": both operands rounded to bf16 (8 significant bits, u = 2^-8, each rounding's
 * relative error uniform in [-u/2, u/2] at worst up to u), so each product carries a relative
 * error of variance <= 2 u^2/3 and the f32 sum of K such independent errors gives nmse ~ 2u^2/3
 * ~ 1e-5 whatever K is; the threshold 6.5 u^2 = 1e-4 leaves a decade for correlated inputs, and
 * a bug (nmse ~ 1e-2 .. 1) still fails by two decades. */
static double gemm_threshold(void) { return is_bf16(g_name) ? 1e-4 : 1e-10; }

static void gemm_case(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t pad, float alpha,
                      float beta)
{
    int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    float *A = rand_mat((ta ? K : M) * lda, -1, 1), *B = rand_mat((tb ? N : K) * ldb, -1, 1);
    float *C0 = rand_mat(M * ldc, -1, 1);
    if (beta == 0.0f) /* beta == 0 must not read C: a NaN there may not leak */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C0[i * ldc + j] = NAN;
    float *Cr = copy_of(C0, M * ldc), *Cg = copy_of(C0, M * ldc);
    int st;
    ck_assert_int_eq(REF(gemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cr, ldc), LMP_OK);
    CAND(st, gemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cg, ldc);
    ck_assert_int_eq(st, LMP_OK);
    char what[96];
    snprintf(what, sizeof what, "gemm ta=%d tb=%d %lldx%lldx%lld pad %lld beta %g", ta, tb,
             (long long)M, (long long)N, (long long)K, (long long)pad, (double)beta);
    check_nmse(what, Cr, Cg, M, N, ldc, gemm_threshold());
    for (int64_t i = 0; i < M; i++) /* the padding of C is never written */
        for (int64_t j = N; j < ldc; j++)
            ck_assert_msg(memcmp(&C0[i * ldc + j], &Cg[i * ldc + j], 4) == 0, "%s: padding written", what);
    free(A);
    free(B);
    free(C0);
    free(Cr);
    free(Cg);
}

START_TEST(test_gemm)
{
    open_backend(_i);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gemm_case(ta, tb, 37, 53, 29, 0, 1.0f, 0.0f);
            gemm_case(ta, tb, 37, 53, 29, 5, 0.75f, 1.25f);
        }
    gemm_case(0, 0, 1, 61, 200, 3, -1.5f, 0.0f); /* a gemv */
    gemm_case(0, 1, 130, 97, 71, 1, 1.0f, 1.0f); /* the forward's x W^T, CLBlast's larger path */
    gemm_case(0, 1, 17, 19, 0, 2, 1.0f, 0.5f);   /* K = 0: C = beta C */
    gemm_case(0, 0, 17, 19, 23, 2, 0.0f, 2.0f);  /* alpha = 0 */
    int st;
    float z[16] = {0};
    CAND(st, gemm, 0, 0, 2, 2, 4, 1.0f, z, 3, z, 2, 0.0f, z, 2); /* lda < K */
    ck_assert_int_eq(st, LMP_EINVAL);
    close_backend();
}
END_TEST

/* ---- xtx_accum: 1e-10 (n = 301 term sums, ~n u^2 ~ 1e-13) --------------------------------- */

START_TEST(test_xtx_accum)
{
    open_backend(_i);
    int64_t n = 301, c = 37;
    float *X = rand_mat(n * c, -2, 2), *H0 = spd_matrix(c, 5, 0.5f);
    float *Hr = copy_of(H0, c * c), *Hg = copy_of(H0, c * c);
    int st;
    ck_assert_int_eq(REF(xtx_accum, n, c, X, 0.5f, Hr), LMP_OK);
    CAND(st, xtx_accum, n, c, X, 0.5f, Hg);
    ck_assert_int_eq(st, LMP_OK);
    check_nmse("xtx_accum 301x37 alpha 0.5", Hr, Hg, c, c, c, 1e-10);
    for (int64_t i = 0; i < c; i++)
        for (int64_t j = 0; j < i; j++) ck_assert(Hg[i * c + j] == Hg[j * c + i]);
    ck_assert_int_eq(REF(xtx_accum, 7, c, X, -1.0f, Hr), LMP_OK); /* accumulates */
    CAND(st, xtx_accum, 7, c, X, -1.0f, Hg);
    ck_assert_int_eq(st, LMP_OK);
    check_nmse("xtx_accum second call", Hr, Hg, c, c, c, 1e-10);
    free(X);
    free(H0);
    free(Hr);
    free(Hg);
    /* GPTQ's shape on SmolLM2's down_proj input: a 512-token window of 1536 channels (the
     * libraries' large-matrix paths); 512-term sums: same threshold */
    n = 512;
    c = 1536;
    X = rand_mat(n * c, -1, 1);
    Hr = calloc((size_t)(c * c), sizeof *Hr);
    Hg = calloc((size_t)(c * c), sizeof *Hg);
    ck_assert_int_eq(REF(xtx_accum, n, c, X, 2.0f / 3.0f, Hr), LMP_OK);
    CAND(st, xtx_accum, n, c, X, 2.0f / 3.0f, Hg);
    ck_assert_int_eq(st, LMP_OK);
    check_nmse("xtx_accum 512x1536", Hr, Hg, c, c, c, 1e-10);
    free(X);
    free(Hr);
    free(Hg);
    close_backend();
}
END_TEST

/* ---- Cholesky 1e-9, inverse 1e-8, trsm 1e-9 (cond(A) ~1e2: factors agree to ~cond u) ------- */

START_TEST(test_cholesky)
{
    open_backend(_i);
    int64_t sizes[] = {1, 37, 150};
    for (size_t s = 0; s < 3; s++) {
        int64_t n = sizes[s];
        float *A = spd_matrix(n, n + 3, 0.05f);
        float *Lr = copy_of(A, n * n), *Lg = copy_of(A, n * n), *Lc = copy_of(A, n * n);
        int st;
        ck_assert_int_eq(REF(cholesky, n, Lr, NULL), LMP_OK);
        CAND(st, cholesky, n, Lg, NULL);
        ck_assert_int_eq(st, LMP_OK);
        char what[64];
        snprintf(what, sizeof what, "cholesky n=%lld", (long long)n);
        check_nmse(what, Lr, Lg, n, n, n, 1e-9);
        if (g_fallback) { /* the fallback is the CPU backend: its very bits */
            ck_assert_int_eq(CPU(cholesky, n, Lc, NULL), LMP_OK);
            check_bits(what, Lc, Lg, n * n);
        }
        /* the inverse of the reference factor */
        float *Ir = copy_of(Lr, n * n), *Ig = copy_of(Lr, n * n);
        ck_assert_int_eq(REF(chol_inverse, n, Ir), LMP_OK);
        CAND(st, chol_inverse, n, Ig);
        ck_assert_int_eq(st, LMP_OK);
        snprintf(what, sizeof what, "chol_inverse n=%lld", (long long)n);
        check_nmse(what, Ir, Ig, n, n, n, 1e-8);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < i; j++) ck_assert(Ig[i * n + j] == Ig[j * n + i]);
        free(A);
        free(Lr);
        free(Lg);
        free(Lc);
        free(Ir);
        free(Ig);
    }
    /* not positive definite: the error and its pivot come back, fallback or not */
    int64_t n = 37, piv = -1;
    float *A = spd_matrix(n, n + 3, 0.05f);
    A[17 * n + 17] = -1.0f;
    int st;
    CAND(st, cholesky, n, A, &piv);
    ck_assert_int_eq(st, LMP_ENOTSPD);
    ck_assert_int_eq(piv, 17);
    free(A);
    close_backend();
}
END_TEST

START_TEST(test_trsm_lower)
{
    open_backend(_i);
    int64_t n = 53, nrhs = 19;
    float *L = spd_matrix(n, n + 3, 0.05f);
    ck_assert_int_eq(lmp_ref_cholesky(n, L, NULL), LMP_OK);
    for (int64_t i = 0; i < n; i++) /* garbage in the upper triangle must be ignored */
        for (int64_t j = i + 1; j < n; j++) L[i * n + j] = 1e6f;
    for (int trans = 0; trans < 2; trans++) {
        float *B = rand_mat(n * nrhs, -1, 1), *Xr = copy_of(B, n * nrhs), *Xg = copy_of(B, n * nrhs);
        int st;
        ck_assert_int_eq(REF(trsm_lower, trans, n, nrhs, L, Xr), LMP_OK);
        CAND(st, trsm_lower, trans, n, nrhs, L, Xg);
        ck_assert_int_eq(st, LMP_OK);
        check_nmse(trans ? "trsm_lower L^T x = b 53x19" : "trsm_lower L x = b 53x19", Xr, Xg, n,
                   nrhs, nrhs, 1e-9);
        free(B);
        free(Xr);
        free(Xg);
    }
    free(L);
    close_backend();
}
END_TEST

/* ---- row-wise and elementwise ops ------------------------------------------------------------ */

/* rmsnorm, layernorm 1e-12: a C-term f32 sum of squares (~C u^2 ~ 1e-14) and a few roundings. */
START_TEST(test_norms)
{
    open_backend(_i);
    int64_t T = 7, C = 203;
    float *x = rand_mat(T * C, -3, 3), *w = rand_mat(C, 0.5f, 1.5f), *b = rand_mat(C, -1, 1);
    float *r = rand_mat(T * C, 0, 1), *g = rand_mat(T * C, 0, 1);
    int st;
    ck_assert_int_eq(REF(rmsnorm, T, C, x, w, 1e-5f, r), LMP_OK);
    CAND(st, rmsnorm, T, C, x, w, 1e-5f, g);
    ck_assert_int_eq(st, LMP_OK);
    check_nmse("rmsnorm 7x203", r, g, T, C, C, 1e-12);
    ck_assert_int_eq(REF(layernorm, T, C, x, w, b, 1e-5f, r), LMP_OK);
    CAND(st, layernorm, T, C, x, w, b, 1e-5f, g);
    ck_assert_int_eq(st, LMP_OK);
    check_nmse("layernorm 7x203 with bias", r, g, T, C, C, 1e-12);
    ck_assert_int_eq(REF(layernorm, T, C, x, w, NULL, 1e-5f, r), LMP_OK);
    CAND(st, layernorm, T, C, x, w, NULL, 1e-5f, x); /* no bias, in place */
    ck_assert_int_eq(st, LMP_OK);
    check_nmse("layernorm no bias, in place", r, x, T, C, C, 1e-12);
    free(x);
    free(w);
    free(b);
    free(r);
    free(g);
    close_backend();
}
END_TEST

/* hadamard 1e-12: the butterflies in f32 (log2 n additions per output) against the O(n^2) sum
 * in double.  Sizes 1 (the identity), 2, 64 and 512; applied twice it gives the input back (H/sqrt(n)
 * is its own inverse) to 1e-6; a width not a power of 2 is refused. */
START_TEST(test_hadamard)
{
    open_backend(_i);
    const int64_t rows = 5, sizes[] = {1, 2, 64, 512};
    for (size_t c = 0; c < sizeof sizes / sizeof *sizes; c++) {
        const int64_t n = sizes[c];
        float *x = rand_mat(rows * n, -1, 1), *r = copy_of(x, rows * n), *g = copy_of(x, rows * n);
        int st;
        ck_assert_int_eq(REF(hadamard, rows, n, r), LMP_OK);
        CAND(st, hadamard, rows, n, g);
        ck_assert_int_eq(st, LMP_OK);
        char what[64];
        snprintf(what, sizeof what, "hadamard %lldx%lld", (long long)rows, (long long)n);
        check_nmse(what, r, g, rows, n, n, 1e-12);
        CAND(st, hadamard, rows, n, g);
        ck_assert_int_eq(st, LMP_OK);
        double back = 0;
        for (int64_t i = 0; i < rows * n; i++) back = fmax(back, fabs((double)g[i] - x[i]));
        ck_assert_msg(back < 1e-6, "%s twice: off the input by %g", what, back);
        if (n > 1) { /* it mixes: some output differs from its input */
            double moved = 0;
            for (int64_t i = 0; i < rows * n; i++) moved = fmax(moved, fabs((double)r[i] - x[i]));
            ck_assert_msg(moved > 1e-3, "%s left the input as it was", what);
        }
        free(x), free(r), free(g);
    }
    float y[12] = {0};
    int st;
    CAND(st, hadamard, 1, 12, y);
    ck_assert_int_eq(st, LMP_EINVAL);
    close_backend();
}
END_TEST

/* rope_table 1e-12: both turn by the f32 angle pos * inv_freq[i] with cos and sin in double, so
 * only libm (or a device's cos/sin) separates them.  Cases: a whole head, partial rotary (the
 * dims from n_rot on must come back untouched, bit for bit), an attention factor, a far position;
 * an odd or too large n_rot is refused. */
START_TEST(test_rope_table)
{
    open_backend(_i);
    const int64_t T = 7, nh = 3, hd = 16;
    const struct { int64_t n_rot, pos0; float mscale; } cases[] = {{16, 0, 1.0f}, {8, 3, 1.0f}, {12, 2000, 1.2f}};
    float inv_freq[8];
    for (int i = 0; i < 8; i++) inv_freq[i] = (float)pow(1e4, -2.0 * i / 16.0) / (1.0f + 0.5f * (float)i);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        float *x = rand_mat(T * nh * hd, -1, 1), *r = copy_of(x, T * nh * hd), *g = copy_of(x, T * nh * hd);
        int st;
        ck_assert_int_eq(REF(rope_table, T, nh, hd, cases[c].n_rot, cases[c].pos0, inv_freq, cases[c].mscale, r), LMP_OK);
        CAND(st, rope_table, T, nh, hd, cases[c].n_rot, cases[c].pos0, inv_freq, cases[c].mscale, g);
        ck_assert_int_eq(st, LMP_OK);
        char what[96];
        snprintf(what, sizeof what, "rope_table 7x3x16 n_rot=%lld pos0=%lld", (long long)cases[c].n_rot,
                 (long long)cases[c].pos0);
        check_nmse(what, r, g, T, nh * hd, nh * hd, 1e-12);
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < nh; h++)
                for (int64_t j = cases[c].n_rot; j < hd; j++)
                    ck_assert_msg(g[t * nh * hd + h * hd + j] == x[t * nh * hd + h * hd + j],
                                  "%s: dim %lld beyond n_rot changed", what, (long long)j);
        /* a turn, not a stretch: each pair keeps its length times mscale */
        const float *p = g + 1 * nh * hd, *p0 = x + 1 * nh * hd;
        const double len = hypot(p[0], p[1]), len0 = hypot(p0[0], p0[1]);
        ck_assert_msg(fabs(len - cases[c].mscale * len0) < 1e-5 * (1 + len0), "%s: pair length %g, expected %g", what,
                      len, cases[c].mscale * len0);
        free(x);
        free(r);
        free(g);
    }
    float y[16] = {0};
    int st;
    CAND(st, rope_table, 1, 1, 16, 5, 0, inv_freq, 1.0f, y); /* odd n_rot */
    ck_assert_int_eq(st, LMP_EINVAL);
    CAND(st, rope_table, 1, 1, 8, 10, 0, inv_freq, 1.0f, y); /* n_rot > head_dim */
    ck_assert_int_eq(st, LMP_EINVAL);
    close_backend();
}
END_TEST

/* rope 1e-8: both compute the angle pos * theta^(-2i/hd) in f32 (llama2.c), so at position p it
 * carries ~p u of absolute error (~1e-4 rad at p = 2000): nmse up to ~(p u)^2 ~ 1e-8; pow, sin
 * and cos may differ by a few ulp between libm and an OpenCL/CUDA runtime, which is below that. */
START_TEST(test_rope)
{
    open_backend(_i);
    int64_t T = 9, nh = 3, hd = 16, pos0s[] = {0, 5, 2000};
    for (size_t s = 0; s < 3; s++) {
        float *x = rand_mat(T * nh * hd, -1, 1), *r = copy_of(x, T * nh * hd), *g = copy_of(x, T * nh * hd);
        int st;
        ck_assert_int_eq(REF(rope, T, nh, hd, pos0s[s], 10000.0f, r), LMP_OK);
        CAND(st, rope, T, nh, hd, pos0s[s], 10000.0f, g);
        ck_assert_int_eq(st, LMP_OK);
        char what[64];
        snprintf(what, sizeof what, "rope 9x3x16 pos0=%lld", (long long)pos0s[s]);
        check_nmse(what, r, g, T, nh * hd, nh * hd, 1e-8);
        free(x);
        free(r);
        free(g);
    }
    float y[4] = {0};
    int st;
    CAND(st, rope, 1, 1, 5, 0, 100.0f, y); /* odd head_dim */
    ck_assert_int_eq(st, LMP_EINVAL);
    close_backend();
}
END_TEST

/* attention 1e-10: f32 dot products of length hd and T and f32 exp, in another order (online
 * softmax on a device) than the CPU's sgemm + row softmax: ~T u^2 ~ 1e-13. */
static void attention_case(int64_t T, int64_t nh, int64_t nkv, int64_t hd, float amp)
{
    float *q = rand_mat(T * nh * hd, -amp, amp), *k = rand_mat(T * nkv * hd, -amp, amp);
    float *v = rand_mat(T * nkv * hd, -1, 1);
    float *r = rand_mat(T * nh * hd, 0, 1), *g = rand_mat(T * nh * hd, 0, 1);
    int st;
    ck_assert_int_eq(REF(attention, T, nh, nkv, hd, q, k, v, r), LMP_OK);
    CAND(st, attention, T, nh, nkv, hd, q, k, v, g);
    ck_assert_int_eq(st, LMP_OK);
    char what[80];
    snprintf(what, sizeof what, "attention T=%lld nh=%lld nkv=%lld hd=%lld", (long long)T,
             (long long)nh, (long long)nkv, (long long)hd);
    check_nmse(what, r, g, T, nh * hd, nh * hd, 1e-10);
    free(q);
    free(k);
    free(v);
    free(r);
    free(g);
}

START_TEST(test_attention)
{
    open_backend(_i);
    attention_case(37, 6, 2, 16, 2.0f); /* GQA */
    attention_case(150, 4, 4, 8, 3.0f); /* MHA, several key chunks, the last ragged */
    attention_case(1, 2, 1, 5, 1.0f);   /* one token, odd head size */
    attention_case(70, 3, 1, 12, 6.0f); /* MQA, peaky softmax */
    attention_case(5, 2, 1, 72, 1.0f);  /* head larger than a work-group */
    float z[8] = {0};
    int st;
    CAND(st, attention, 1, 3, 2, 1, z, z, z, z); /* 3 heads on 2 kv heads */
    ck_assert_int_eq(st, LMP_EINVAL);
    /* A backend with several attention kernels: each of them, whatever the device would pick
     * (opencl: "workgroup" for GPUs, "item" for CPU runtimes). */
    const lmp_plugin *p = lmp_registry_find(&g_reg, LMP_PLUGIN_BACKEND, is_cpu(g_name) ? "cpu" : g_name);
    ck_assert_ptr_nonnull(p);
    for (uint32_t k = 0; k < p->desc->n_params; k++) {
        const lmp_param_spec *ps = &p->desc->params[k];
        if (strcmp(ps->name, "attention") != 0 || ps->type != LMP_PARAM_ENUM) continue;
        for (int c = 0; ps->choices[c]; c++) {
            lmp_value *v;
            ck_assert_int_eq(lmp_params_defaults(p->desc, &v), 0);
            v[k].num = c;
            v[k].str = ps->choices[c];
            lmp_backend saved = g_be, other;
            ck_assert_msg(lmp_backend_open(&g_ctx, &g_reg, g_name, v, &other) == 0, "%s", lmp_last_error());
            free(v);
            g_be = other;
            printf("  [%s] attention = \"%s\":\n", g_name, ps->choices[c]);
            attention_case(37, 6, 2, 16, 2.0f);
            attention_case(150, 4, 4, 8, 3.0f);
            attention_case(5, 2, 1, 72, 1.0f);
            g_be = saved;
            lmp_backend_close(&other);
        }
    }
    close_backend();
}
END_TEST

/* attention_window 1e-10, as attention: a sliding window shorter than, equal to and longer than
 * the key chunk (64 rows), with and without soft-capped scores; the window crossing the whole
 * sequence and no softcap are `attention` bit for bit on the CPU backend; a negative window or
 * softcap is refused. */
START_TEST(test_attention_window)
{
    open_backend(_i);
    const struct { int64_t T, nh, nkv, hd, window; float softcap, amp; } cases[] = {
        {37, 6, 2, 16, 5, 0.0f, 2.0f}, {150, 4, 4, 8, 70, 0.0f, 3.0f}, {150, 4, 2, 8, 64, 5.0f, 6.0f},
        {70, 3, 1, 12, 1, 0.0f, 1.0f},  {20, 2, 1, 8, 0, 2.0f, 6.0f},   {33, 2, 2, 8, 500, 0.0f, 2.0f}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int64_t T = cases[c].T, nh = cases[c].nh, nkv = cases[c].nkv, hd = cases[c].hd;
        float *q = rand_mat(T * nh * hd, -cases[c].amp, cases[c].amp), *k = rand_mat(T * nkv * hd, -cases[c].amp, cases[c].amp);
        float *v = rand_mat(T * nkv * hd, -1, 1);
        float *r = rand_mat(T * nh * hd, 0, 1), *g = rand_mat(T * nh * hd, 0, 1), *plain = rand_mat(T * nh * hd, 0, 1);
        int st;
        ck_assert_int_eq(REF(attention_window, T, nh, nkv, hd, cases[c].window, cases[c].softcap, q, k, v, r), LMP_OK);
        CAND(st, attention_window, T, nh, nkv, hd, cases[c].window, cases[c].softcap, q, k, v, g);
        ck_assert_int_eq(st, LMP_OK);
        char what[96];
        snprintf(what, sizeof what, "attention_window T=%lld window=%lld softcap=%g", (long long)T,
                 (long long)cases[c].window, (double)cases[c].softcap);
        check_nmse(what, r, g, T, nh * hd, nh * hd, 1e-10);
        ck_assert_int_eq(CPU(attention, T, nh, nkv, hd, q, k, v, plain), LMP_OK);
        double differ = 0;
        for (int64_t i = 0; i < T * nh * hd; i++) differ += g[i] != plain[i];
        const int same = cases[c].window == 0 || cases[c].window >= T;
        if (same && cases[c].softcap == 0 && is_cpu(g_name))
            ck_assert_msg(differ == 0, "%s: differs from attention in %g values", what, differ);
        else if (!same || cases[c].softcap > 0)
            ck_assert_msg(differ > 0, "%s: no different from attention: the window or softcap did nothing", what);
        free(q);
        free(k);
        free(v);
        free(r);
        free(g);
        free(plain);
    }
    float z[8] = {0};
    int st;
    CAND(st, attention_window, 1, 1, 1, 4, -1, 0.0f, z, z, z, z);
    ck_assert_int_eq(st, LMP_EINVAL);
    close_backend();
}
END_TEST

/* attention_alibi (ABI 6.1) 1e-10, as attention_window: Bloom's slopes (8 heads: 2^-1 .. 2^-8) and a
 * head count that is no power of 2 (6: 4's slopes then 8's odd ones), long sequences that cross
 * the key chunk (64 rows), GQA, a window; with every slope 0 it is attention_window bit for bit
 * on the CPU backend, with Bloom's slopes it differs; NULL slopes are refused.  A backend without
 * the op answers through the CPU's. */
START_TEST(test_attention_alibi)
{
    open_backend(_i);
    const struct { int64_t T, nh, nkv, hd, window; float amp; } cases[] = {
        {37, 8, 8, 16, 0, 2.0f}, {150, 6, 2, 8, 0, 3.0f}, {150, 4, 4, 8, 70, 2.0f}, {20, 3, 1, 12, 5, 1.0f}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int64_t T = cases[c].T, nh = cases[c].nh, nkv = cases[c].nkv, hd = cases[c].hd;
        float *q = rand_mat(T * nh * hd, -cases[c].amp, cases[c].amp), *k = rand_mat(T * nkv * hd, -cases[c].amp, cases[c].amp);
        float *v = rand_mat(T * nkv * hd, -1, 1);
        float *r = rand_mat(T * nh * hd, 0, 1), *g = rand_mat(T * nh * hd, 0, 1), *plain = rand_mat(T * nh * hd, 0, 1);
        float slopes[8], zeros[8] = {0};
        lmp_alibi_slopes(nh, slopes);
        int st;
        ck_assert_int_eq(REF(attention_alibi, T, nh, nkv, hd, cases[c].window, slopes, q, k, v, r), LMP_OK);
        CAND(st, attention_alibi, T, nh, nkv, hd, cases[c].window, slopes, q, k, v, g);
        ck_assert_int_eq(st, LMP_OK);
        char what[96];
        snprintf(what, sizeof what, "attention_alibi T=%lld heads=%lld window=%lld", (long long)T, (long long)nh,
                 (long long)cases[c].window);
        check_nmse(what, r, g, T, nh * hd, nh * hd, 1e-10);
        ck_assert_int_eq(CPU(attention_window, T, nh, nkv, hd, cases[c].window, 0.0f, q, k, v, plain), LMP_OK);
        double differ = 0;
        for (int64_t i = 0; i < T * nh * hd; i++) differ += g[i] != plain[i];
        ck_assert_msg(differ > 0, "%s: no different from attention_window: the slopes did nothing", what);
        if (is_cpu(g_name)) { /* every slope 0: attention_window bit for bit */
            CAND(st, attention_alibi, T, nh, nkv, hd, cases[c].window, zeros, q, k, v, g);
            ck_assert_int_eq(st, LMP_OK);
            differ = 0;
            for (int64_t i = 0; i < T * nh * hd; i++) differ += g[i] != plain[i];
            ck_assert_msg(differ == 0, "%s, slopes 0: differs from attention_window in %g values", what, differ);
        }
        free(q);
        free(k);
        free(v);
        free(r);
        free(g);
        free(plain);
    }
    float z[8] = {0};
    int st;
    CAND(st, attention_alibi, 1, 1, 1, 4, 0, NULL, z, z, z, z);
    ck_assert_int_eq(st, LMP_EINVAL);
    close_backend();
}
END_TEST

/* Bloom's slopes as transformers' _get_alibi_slopes gives them: 2^(-8 (h+1) / n) for n a power of
 * 2; 6 heads: 4's (2^-2, 2^-4, 2^-6, 2^-8), then 8's first odd ones (2^-1, 2^-3). */
START_TEST(test_alibi_slopes)
{
    float s[8];
    lmp_alibi_slopes(8, s);
    for (int h = 0; h < 8; h++) ck_assert_float_eq(s[h], ldexpf(1.0f, -(h + 1)));
    lmp_alibi_slopes(6, s);
    const float want[6] = {0.25f, 0.0625f, 0.015625f, 0.00390625f, 0.5f, 0.125f};
    for (int h = 0; h < 6; h++) ck_assert_float_eq(s[h], want[h]);
}
END_TEST

/* swiglu, gelu 1e-12: elementwise, a few f32 roundings plus exp/tanh (OpenCL allows 3-5 ulp:
 * ~(5u)^2 ~ 1e-13 at worst, measured ~1e-15). */
START_TEST(test_activations)
{
    open_backend(_i);
    int64_t n = 1001;
    float *gt = rand_mat(n, -8, 8), *up = rand_mat(n, -2, 2), *r = rand_mat(n, 0, 1), *g = rand_mat(n, 0, 1);
    gt[0] = -100.0f; /* exp overflows in f32: silu must still be ~0, not NaN */
    gt[1] = 100.0f;
    int st;
    ck_assert_int_eq(REF(swiglu, n, gt, up, r), LMP_OK);
    CAND(st, swiglu, n, gt, up, g);
    ck_assert_int_eq(st, LMP_OK);
    check_nmse("swiglu 1001", r, g, 1, n, n, 1e-12);
    ck_assert(isfinite(g[0]) && isfinite(g[1]));
    ck_assert_int_eq(REF(gelu, n, gt, r), LMP_OK);
    CAND(st, gelu, n, gt, gt); /* in place */
    ck_assert_int_eq(st, LMP_OK);
    check_nmse("gelu 1001 in place", r, gt, 1, n, n, 1e-12);
    free(gt);
    free(up);
    free(r);
    free(g);
    close_backend();
}
END_TEST

/* log_softmax 1e-10: x - logsumexp(x).  The reference forms lse and x - lse in double; a device
 * doing them in f32 (one without fp64) is ~|lse| u off, and the row with logits ~1e4 here makes
 * that nmse ~2e-11 (measured in f32 on PoCL); with fp64 for those two steps it is ~1e-15. */
START_TEST(test_log_softmax)
{
    open_backend(_i);
    int64_t rows = 5, cols = 517;
    float *x = rand_mat(rows * cols, -30, 30);
    for (int64_t j = 0; j < cols; j++) x[4 * cols + j] += 1e4f; /* needs the max shift */
    float *r = rand_mat(rows * cols, 0, 1), *g = rand_mat(rows * cols, 0, 1);
    int st;
    ck_assert_int_eq(REF(log_softmax, rows, cols, x, r), LMP_OK);
    CAND(st, log_softmax, rows, cols, x, g);
    ck_assert_int_eq(st, LMP_OK);
    check_nmse("log_softmax 5x517", r, g, rows, cols, cols, 1e-10);
    free(x);
    free(r);
    free(g);
    close_backend();
}
END_TEST

/* reduce_cols: the folds are exact (bit for bit); SUM 1e-12 (double or compensated sums). */
START_TEST(test_reduce_cols)
{
    open_backend(_i);
    int64_t n = 301, c = 37;
    float *X = rand_mat(n * c, -5, 5);
    X[3 * c + 2] = -9.5f;
    const char *names[] = {"reduce_cols absmax", "reduce_cols min", "reduce_cols max", "reduce_cols sum"};
    for (int kind = LMP_REDUCE_ABSMAX; kind <= LMP_REDUCE_SUM; kind++) {
        float init = kind == LMP_REDUCE_MIN ? INFINITY : kind == LMP_REDUCE_MAX ? -INFINITY : 0.0f;
        float *r = malloc((size_t)c * sizeof *r), *g = malloc((size_t)c * sizeof *g);
        for (int64_t j = 0; j < c; j++) r[j] = g[j] = kind == LMP_REDUCE_SUM ? (float)j : init;
        int st;
        CAND(st, reduce_cols, (lmp_reduce)kind, 100, c, X, g); /* two calls accumulate */
        ck_assert_int_eq(st, LMP_OK);
        CAND(st, reduce_cols, (lmp_reduce)kind, n - 100, c, X + 100 * c, g);
        ck_assert_int_eq(st, LMP_OK);
        ck_assert_int_eq(REF(reduce_cols, (lmp_reduce)kind, n, c, X, r), LMP_OK);
        if (kind == LMP_REDUCE_SUM) {
            check_nmse(names[kind], r, g, 1, c, c, 1e-12);
        } else {
            check_bits(names[kind], r, g, c);
            report_bits(names[kind]);
        }
        free(r);
        free(g);
    }
    free(X);
    close_backend();
}
END_TEST

/* ---- fake quantization: bit for bit, scales and zero-points included ------------------------ */

static float *quant_input(int64_t rows, int64_t cols)
{
    float *W = rand_mat(rows * cols, -1, 1);
    for (int64_t j = 0; j < cols; j++) {
        W[1 * cols + j] = 0.0f;                             /* all-zero row */
        W[2 * cols + j] = fabsf(W[2 * cols + j]) + 0.25f;   /* all positive */
        W[3 * cols + j] = (float)((int)(j % 15) - 7) * 0.25f + ((j & 1) ? 0.125f : 0.0f); /* ties */
    }
    W[3 * cols] = 1.75f;
    return W;
}

/* choose_weight_grid and apply_weight_grid against the reference on every grid (bits x sym x
 * granularity x rounding, and clip < 1), bit for bit: scales, zero-points, weights, codes; choose
 * then apply against the fused quantization of ABI 2 (fused_wgrid_ref.h); apply on a grid it
 * did not choose; and the errors. */
START_TEST(test_quantize_weight)
{
    open_backend(_i);
    int64_t rows = 37, cols = 53, n = rows * cols;
    int bits[] = {2, 3, 4, 8};
    lmp_granularity grans[] = {LMP_GRAN_TENSOR, LMP_GRAN_CHANNEL, LMP_GRAN_GROUP, LMP_GRAN_GROUP};
    int64_t groups[] = {0, 0, 16, 64}; /* ragged last group; a group wider than the row */
    float clips[] = {0.0f, 0.6f};      /* 0 means 1 */
    int n_cases = 0, n_fallback = 0;
    for (int b = 0; b < 4; b++)
        for (int sym = 0; sym < 2; sym++)
            for (int gi = 0; gi < 4; gi++)
                for (int rnd = 0; rnd < 2; rnd++)
                    for (int ci = 0; ci < 2; ci++) {
                        lmp_wspec s = {.bits = bits[b], .sym = sym, .gran = grans[gi], .group = groups[gi],
                                       .rounding = (lmp_rounding)rnd, .clip = clips[ci]};
                        char what[128];
                        snprintf(what, sizeof what, "weight grid b=%d sym=%d gran=%d group=%lld round=%d clip=%g",
                                 s.bits, s.sym, (int)s.gran, (long long)s.group, (int)s.rounding, (double)s.clip);
                        float *W = quant_input(rows, cols), *W0 = copy_of(W, n);
                        int64_t ns = lmp_wspec_n_scales(&s, rows, cols);
                        float *sr = malloc((size_t)(ns + 1) * 4), *sg = malloc((size_t)(ns + 1) * 4);
                        float *zr = malloc((size_t)(ns + 1) * 4), *zg = malloc((size_t)(ns + 1) * 4);
                        for (int64_t i = 0; i <= ns; i++) sr[i] = sg[i] = zr[i] = zg[i] = -123.0f;
                        int st, fb;
                        ck_assert_int_eq(REF(choose_weight_grid, &s, rows, cols, W, sr, zr), LMP_OK);
                        CAND(st, choose_weight_grid, &s, rows, cols, W, sg, zg);
                        ck_assert_int_eq(st, LMP_OK);
                        fb = g_fallback;
                        check_bits(what, sr, sg, ns + 1);
                        check_bits(what, zr, zg, ns + 1);
                        check_bits("choose_weight_grid leaves W alone", W0, W, n);
                        float *Wr = copy_of(W, n), *Wg = copy_of(W, n);
                        int32_t *cr = malloc((size_t)n * 4), *cg = malloc((size_t)n * 4);
                        for (int64_t i = 0; i < n; i++) cr[i] = cg[i] = -999;
                        ck_assert_int_eq(REF(apply_weight_grid, &s, rows, cols, Wr, sr, zr, cr), LMP_OK);
                        CAND(st, apply_weight_grid, &s, rows, cols, Wg, sg, zg, cg);
                        ck_assert_int_eq(st, LMP_OK);
                        fb |= g_fallback;
                        check_bits(what, Wr, Wg, n);
                        ck_assert_msg(memcmp(cr, cg, (size_t)n * 4) == 0, "[%s] %s: codes differ", g_name, what);
                        if (ci == 0) { /* clip 1: choose then apply is the fused quantization of ABI 2 */
                            float *Wf = copy_of(W, n);
                            float *sf = malloc((size_t)(ns + 1) * 4), *zf = malloc((size_t)(ns + 1) * 4);
                            for (int64_t i = 0; i <= ns; i++) sf[i] = zf[i] = -123.0f;
                            fused_quantize_weight(&s, rows, cols, Wf, sf, zf);
                            check_bits("choose + apply vs the fused quantization", Wf, Wg, n);
                            check_bits("scales vs the fused quantization", sf, sg, ns + 1);
                            check_bits("zeros vs the fused quantization", zf, zg, ns + 1);
                            free(Wf);
                            free(sf);
                            free(zf);
                        }
                        /* apply on a grid chosen from other weights (W / 2, so W saturates) */
                        float *Wh = copy_of(W, n);
                        for (int64_t i = 0; i < n; i++) Wh[i] *= 0.5f;
                        ck_assert_int_eq(REF(choose_weight_grid, &s, rows, cols, Wh, sr, zr), LMP_OK);
                        memcpy(Wr, W, (size_t)n * 4);
                        memcpy(Wg, W, (size_t)n * 4);
                        ck_assert_int_eq(REF(apply_weight_grid, &s, rows, cols, Wr, sr, zr, NULL), LMP_OK);
                        CAND(st, apply_weight_grid, &s, rows, cols, Wg, sr, zr, NULL);
                        ck_assert_int_eq(st, LMP_OK);
                        fb |= g_fallback;
                        check_bits("apply_weight_grid on a given grid, no codes", Wr, Wg, n);
                        n_cases++;
                        n_fallback += fb;
                        free(W);
                        free(W0);
                        free(Wh);
                        free(Wr);
                        free(Wg);
                        free(cr);
                        free(cg);
                        free(sr);
                        free(sg);
                        free(zr);
                        free(zg);
                    }
    /* a tie: abs-max 1.75 -> scale 0.25, 0.125 rounds half to even to 0 */
    lmp_wspec s = {.bits = 4, .sym = 1, .gran = LMP_GRAN_CHANNEL, .rounding = LMP_ROUND_HALF_EVEN};
    float w[4] = {0.5f, -1.75f, 0.125f, 1.0f}, sc = 0.0f;
    int32_t codes[4];
    int st;
    CAND(st, choose_weight_grid, &s, 1, 4, w, &sc, NULL);
    ck_assert_int_eq(st, LMP_OK);
    CAND(st, apply_weight_grid, &s, 1, 4, w, &sc, NULL, codes);
    ck_assert_int_eq(st, LMP_OK);
    ck_assert(sc == 0.25f && w[0] == 0.5f && w[1] == -1.75f && w[2] == 0.0f && w[3] == 1.0f);
    ck_assert(codes[0] == 2 && codes[1] == -7 && codes[2] == 0 && codes[3] == 4);
    printf("  [%s] choose_weight_grid + apply_weight_grid: %d grids (bits x sym x granularity x rounding x clip) "
           "bit for bit, = the fused quantization at clip 1%s\n",
           g_name, n_cases, n_fallback ? " (cpu fallback)" : "");
    /* errors, as the CPU backend gives them */
    s.bits = 9;
    CAND(st, choose_weight_grid, &s, 1, 4, w, &sc, NULL);
    ck_assert_int_eq(st, LMP_EINVAL);
    CAND(st, apply_weight_grid, &s, 1, 4, w, &sc, NULL, NULL);
    ck_assert_int_eq(st, LMP_EINVAL);
    s.bits = 4;
    s.clip = 2.0f;
    CAND(st, choose_weight_grid, &s, 1, 4, w, &sc, NULL);
    ck_assert_int_eq(st, LMP_EINVAL);
    s.clip = 0.0f;
    s.sym = 0; /* asymmetric: zeros are needed */
    CAND(st, choose_weight_grid, &s, 1, 4, w, &sc, NULL);
    ck_assert_int_eq(st, LMP_EINVAL);
    CAND(st, apply_weight_grid, &s, 1, 4, w, &sc, NULL, codes);
    ck_assert_int_eq(st, LMP_EINVAL);
    CAND(st, apply_weight_grid, &s, 1, 4, w, NULL, &sc, codes);
    ck_assert_int_eq(st, LMP_EINVAL);
    CAND(st, choose_weight_grid, &s, 1, 4, NULL, &sc, &sc);
    ck_assert_int_eq(st, LMP_EINVAL);
    CAND(st, choose_weight_grid, &s, -1, 4, w, &sc, &sc);
    ck_assert_int_eq(st, LMP_EINVAL);
    CAND(st, apply_weight_grid, NULL, 1, 4, w, &sc, &sc, codes);
    ck_assert_int_eq(st, LMP_EINVAL);
    close_backend();
}
END_TEST

/* The GGUF block formats (plugin.h): every backend gives the reference's bits (the device
 * backends by declining, LMP_EUNSUPPORTED, so the CPU backend runs them), with clip 1 and < 1,
 * on a chosen grid and on a grid chosen from other weights; a row width not a multiple of 32 is
 * refused through the fallback. */
START_TEST(test_weight_formats)
{
    open_backend(_i);
    const int64_t rows = 37, cols = 96, n = rows * cols, nb = n / LMP_WFORMAT_BLOCK;
    const lmp_wformat fmts[] = {LMP_WFORMAT_GGUF_Q8_0, LMP_WFORMAT_GGUF_Q4_0, LMP_WFORMAT_GGUF_Q4_1};
    const float clips[] = {0.0f, 0.6f};
    int n_fallback = 0;
    for (int k = 0; k < 3; k++)
        for (int ci = 0; ci < 2; ci++) {
            const lmp_wspec s = lmp_wspec_for_format(fmts[k], clips[ci]);
            char what[96];
            snprintf(what, sizeof what, "format %s clip=%g", lmp_wformat_name(fmts[k]), (double)s.clip);
            float *W = quant_input(rows, cols), *Wr = copy_of(W, n), *Wg = copy_of(W, n);
            float *sr = malloc((size_t)nb * 4), *sg = malloc((size_t)nb * 4);
            float *zr = malloc((size_t)nb * 4), *zg = malloc((size_t)nb * 4);
            int32_t *cr = malloc((size_t)n * 4), *cg = malloc((size_t)n * 4);
            for (int64_t i = 0; i < nb; i++) sr[i] = sg[i] = zr[i] = zg[i] = -123.0f;
            int st;
            ck_assert_int_eq(REF(choose_weight_grid, &s, rows, cols, W, sr, zr), LMP_OK);
            CAND(st, choose_weight_grid, &s, rows, cols, W, sg, zg);
            ck_assert_msg(st == LMP_OK, "[%s] %s: %s", g_name, what, lmp_last_error());
            n_fallback += g_fallback;
            check_bits(what, sr, sg, nb);
            check_bits(what, zr, zg, nb);
            ck_assert_int_eq(REF(apply_weight_grid, &s, rows, cols, Wr, sr, zr, cr), LMP_OK);
            CAND(st, apply_weight_grid, &s, rows, cols, Wg, sg, zg, cg);
            ck_assert_int_eq(st, LMP_OK);
            n_fallback += g_fallback;
            check_bits(what, Wr, Wg, n);
            ck_assert_msg(memcmp(cr, cg, (size_t)n * 4) == 0, "[%s] %s: codes differ", g_name, what);
            for (int64_t i = 0; i < n; i++) /* the codes the file stores */
                ck_assert(fmts[k] == LMP_WFORMAT_GGUF_Q8_0 ? cg[i] >= -127 && cg[i] <= 127 : cg[i] >= 0 && cg[i] <= 15);
            for (int64_t i = 0; i < n; i++) W[i] *= 0.5f; /* a grid from other weights: W saturates */
            ck_assert_int_eq(REF(choose_weight_grid, &s, rows, cols, W, sr, zr), LMP_OK);
            for (int64_t i = 0; i < n; i++) Wr[i] = Wg[i] = 2.0f * W[i];
            ck_assert_int_eq(REF(apply_weight_grid, &s, rows, cols, Wr, sr, zr, NULL), LMP_OK);
            CAND(st, apply_weight_grid, &s, rows, cols, Wg, sr, zr, NULL);
            ck_assert_int_eq(st, LMP_OK);
            n_fallback += g_fallback;
            check_bits("apply on a given block grid", Wr, Wg, n);
            free(W), free(Wr), free(Wg), free(sr), free(sg), free(zr), free(zg), free(cr), free(cg);
        }
    /* the device backends implement no block format: every call was a fallback */
    if (!is_cpu(g_name)) ck_assert_int_eq(n_fallback, 3 * 2 * 3);
    printf("  [%s] GGUF q8_0 / q4_0 / q4_1 weight grids bit for bit%s\n", g_name, n_fallback ? " (cpu fallback)" : "");
    const lmp_wspec s = lmp_wspec_for_format(LMP_WFORMAT_GGUF_Q4_0, 0.0f);
    float w[48] = {0}, sc[2];
    int st;
    CAND(st, choose_weight_grid, &s, 1, 48, w, sc, NULL);
    ck_assert_int_eq(st, LMP_EINVAL);
    ck_assert_msg(strstr(lmp_last_error(), "q4_0") && strstr(lmp_last_error(), "48"), "%s", lmp_last_error());
    close_backend();
}
END_TEST

START_TEST(test_quantize_act)
{
    open_backend(_i);
    int64_t T = 7, C = 203;
    float *X = rand_mat(T * C, -4, 4);
    for (int64_t j = 0; j < C; j++) X[2 * C + j] = 0.0f;                     /* the 1e-5 clamp */
    X[5 * C + 3] = 40.0f;                                                   /* beyond static range */
    for (int64_t j = 0; j < C; j++) X[6 * C + j] = (float)(j - 101) * 0.0625f; /* ties */
    lmp_act_mode modes[] = {LMP_ACT_STATIC_TENSOR, LMP_ACT_DYN_TENSOR, LMP_ACT_DYN_TOKEN};
    int bits[] = {4, 8, 16}, n_cases = 0, n_fallback = 0;
    for (int m = 0; m < 3; m++)
        for (int b = 0; b < 3; b++)
            for (int rnd = 0; rnd < 2; rnd++) {
                lmp_aspec s = {modes[m], bits[b], (lmp_rounding)rnd, 0.125f};
                float *r = copy_of(X, T * C), *g = copy_of(X, T * C);
                int st;
                ck_assert_int_eq(REF(quantize_act, &s, T, C, r), LMP_OK);
                CAND(st, quantize_act, &s, T, C, g);
                ck_assert_int_eq(st, LMP_OK);
                char what[64];
                snprintf(what, sizeof what, "quantize_act mode=%d b=%d round=%d", (int)modes[m], bits[b], rnd);
                check_bits(what, r, g, T * C);
                n_cases++;
                n_fallback += g_fallback;
                free(r);
                free(g);
            }
    printf("  [%s] quantize_act: %d grids (mode x bits x rounding) bit for bit%s\n", g_name,
           n_cases, n_fallback ? " (cpu fallback)" : "");
    lmp_aspec none = {LMP_ACT_NONE, 8, LMP_ROUND_HALF_EVEN, 0.0f};
    float *g = copy_of(X, T * C);
    int st;
    CAND(st, quantize_act, &none, T, C, g);
    ck_assert_int_eq(st, LMP_OK);
    check_bits("quantize_act none", X, g, T * C);
    lmp_aspec bad = {LMP_ACT_STATIC_TENSOR, 8, LMP_ROUND_HALF_EVEN, 0.0f};
    CAND(st, quantize_act, &bad, T, C, g);
    ck_assert_int_eq(st, LMP_EINVAL);
    free(g);
    free(X);
    close_backend();
}
END_TEST

/* ---- empty shapes are no-ops ------------------------------------------------------------------ */

START_TEST(test_empty_shapes)
{
    open_backend(_i);
    float buf[4] = {1, 2, 3, 4};
    lmp_wspec ws = {.bits = 4, .sym = 1, .gran = LMP_GRAN_GROUP, .group = 8, .rounding = LMP_ROUND_HALF_EVEN};
    float sc[1] = {5};
    int32_t codes[1] = {7};
    lmp_aspec as = {LMP_ACT_DYN_TOKEN, 8, LMP_ROUND_HALF_EVEN, 0.0f};
    int st;
    CAND(st, gemm, 0, 0, 0, 0, 0, 1.0f, buf, 1, buf, 1, 0.0f, buf, 1);
    ck_assert_int_eq(st, LMP_OK);
    CAND(st, xtx_accum, 0, 0, buf, 1.0f, buf);
    ck_assert_int_eq(st, LMP_OK);
    CAND(st, trsm_lower, 0, 0, 3, buf, buf);
    ck_assert_int_eq(st, LMP_OK);
    CAND(st, rmsnorm, 0, 4, buf, buf, 1e-5f, buf);
    ck_assert_int_eq(st, LMP_OK);
    CAND(st, rope, 0, 1, 4, 0, 1e4f, buf);
    ck_assert_int_eq(st, LMP_OK);
    CAND(st, attention, 0, 2, 1, 2, buf, buf, buf, buf);
    ck_assert_int_eq(st, LMP_OK);
    CAND(st, swiglu, 0, buf, buf, buf);
    ck_assert_int_eq(st, LMP_OK);
    CAND(st, log_softmax, 0, 4, buf, buf);
    ck_assert_int_eq(st, LMP_OK);
    CAND(st, reduce_cols, LMP_REDUCE_SUM, 0, 4, buf, buf);
    ck_assert_int_eq(st, LMP_OK);
    CAND(st, choose_weight_grid, &ws, 0, 4, buf, sc, NULL);
    ck_assert_int_eq(st, LMP_OK);
    CAND(st, apply_weight_grid, &ws, 4, 0, buf, sc, NULL, codes);
    ck_assert_int_eq(st, LMP_OK);
    CAND(st, quantize_act, &as, 0, 4, buf);
    ck_assert_int_eq(st, LMP_OK);
    CAND(st, gelu, 0, buf, buf);
    ck_assert_int_eq(st, LMP_OK);
    ck_assert(buf[0] == 1 && buf[1] == 2 && buf[2] == 3 && buf[3] == 4);
    ck_assert(sc[0] == 5 && codes[0] == 7);
    close_backend();
}
END_TEST

/* ---- the fallback rule, explicitly ---------------------------------------------------------- */

/* Every NULL entry of the candidate runs on the CPU backend through the dispatcher (the same
 * bits as calling the CPU backend), and so does a call the backend declines at run time. */
START_TEST(test_fallback)
{
    open_backend(_i);
    const lmp_backend_i *vt = g_be.vt;
    const char *null_ops[LMP_OP_COUNT];
    int n_null = 0;
    if (!vt->gemm) null_ops[n_null++] = "gemm";
    if (!vt->xtx_accum) null_ops[n_null++] = "xtx_accum";
    if (!vt->cholesky) null_ops[n_null++] = "cholesky";
    if (!vt->chol_inverse) null_ops[n_null++] = "chol_inverse";
    if (!vt->trsm_lower) null_ops[n_null++] = "trsm_lower";
    if (!vt->rmsnorm) null_ops[n_null++] = "rmsnorm";
    if (!vt->rope) null_ops[n_null++] = "rope";
    if (!vt->attention) null_ops[n_null++] = "attention";
    if (!vt->swiglu) null_ops[n_null++] = "swiglu";
    if (!vt->log_softmax) null_ops[n_null++] = "log_softmax";
    if (!vt->reduce_cols) null_ops[n_null++] = "reduce_cols";
    if (!vt->choose_weight_grid) null_ops[n_null++] = "choose_weight_grid";
    if (!vt->apply_weight_grid) null_ops[n_null++] = "apply_weight_grid";
    if (!vt->quantize_act) null_ops[n_null++] = "quantize_act";
    if (!vt->layernorm) null_ops[n_null++] = "layernorm";
    if (!vt->gelu) null_ops[n_null++] = "gelu";
    if (!LMP_BACKEND_I_HAS(vt, attention_backward)) null_ops[n_null++] = "attention_backward";
    if (!LMP_BACKEND_I_HAS(vt, rope_table)) null_ops[n_null++] = "rope_table";
    if (!LMP_BACKEND_I_HAS(vt, attention_window)) null_ops[n_null++] = "attention_window";
    if (!LMP_BACKEND_I_HAS(vt, attention_alibi)) null_ops[n_null++] = "attention_alibi";
    printf("  [%s] entries left to the CPU backend:", g_name);
    for (int i = 0; i < n_null; i++) printf(" %s", null_ops[i]);
    printf("%s\n", n_null ? "" : " none");
    if (strcmp(g_name, "opencl") == 0) { /* declared in opencl_backend.c */
        ck_assert(vt->cholesky == NULL && vt->chol_inverse == NULL);
        ck_assert(vt->gemm != NULL && vt->attention != NULL);
    }
    /* A NULL entry: the dispatcher's answer is the CPU backend's, bit for bit. */
    int64_t n = 45;
    float *A = spd_matrix(n, n + 3, 0.05f), *Ld = copy_of(A, n * n), *Lc = copy_of(A, n * n);
    ck_assert_int_eq(lmp_be_cholesky(&g_be, n, Ld, NULL), LMP_OK);
    ck_assert_int_eq(CPU(cholesky, n, Lc, NULL), LMP_OK);
    if (!vt->cholesky) check_bits("cholesky through the dispatcher", Lc, Ld, n * n);
    ck_assert_int_eq(lmp_be_chol_inverse(&g_be, n, Ld), LMP_OK);
    ck_assert_int_eq(CPU(chol_inverse, n, Lc), LMP_OK);
    if (!vt->chol_inverse) check_bits("chol_inverse through the dispatcher", Lc, Ld, n * n);
    /* A call declined at run time: a 300-wide head is more than the opencl kernel keeps in local
     * memory (LMP_EUNSUPPORTED); through the dispatcher it is the CPU's answer. */
    int64_t T = 4, nh = 2, hd = 300;
    float *q = rand_mat(T * nh * hd, -1, 1), *k = rand_mat(T * hd, -1, 1), *v = rand_mat(T * hd, -1, 1);
    float *od = rand_mat(T * nh * hd, 0, 1), *oc = rand_mat(T * nh * hd, 0, 1);
    int direct = vt->attention ? vt->attention(g_be.self, T, nh, 1, hd, q, k, v, od) : LMP_EUNSUPPORTED;
    if (strcmp(g_name, "opencl") == 0) ck_assert_int_eq(direct, LMP_EUNSUPPORTED);
    ck_assert_int_eq(lmp_be_attention(&g_be, T, nh, 1, hd, q, k, v, od), LMP_OK);
    ck_assert_int_eq(CPU(attention, T, nh, 1, hd, q, k, v, oc), LMP_OK);
    if (direct == LMP_EUNSUPPORTED) {
        check_bits("attention hd=300 through the dispatcher", oc, od, T * nh * hd);
        printf("  [%s] attention hd=300: declined (LMP_EUNSUPPORTED), CPU fallback bit for bit\n", g_name);
    } else {
        g_fallback = 0;
        check_nmse("attention hd=300", oc, od, T, nh * hd, nh * hd, 1e-10);
    }
    /* Errors come back through the fallback: not SPD, with the pivot. */
    A[9 * n + 9] = -2.0f;
    int64_t piv = -1;
    ck_assert_int_eq(lmp_be_cholesky(&g_be, n, A, &piv), LMP_ENOTSPD);
    ck_assert_int_eq(piv, 9);
    free(A);
    free(Ld);
    free(Lc);
    free(q);
    free(k);
    free(v);
    free(od);
    free(oc);
    close_backend();
}
END_TEST

/* ---- end to end: the compare table on each backend ----------------------------------------- */

/* Configs run on every non-CPU backend against the CPU, each with the strategy plugin it needs
 * beyond those always built (NULL: none); one whose plugin is not in the build is reported and
 * passed over.  Adding a pipeline is one line here.
 *   backend-e2e: the quickstart's RTN variants plus SmoothQuant and Shift-SmoothQuant W8A8
 *     (static and per-token), on fewer windows than the shipped configs (the file says why);
 *   backend-e2e-gptq: GPTQ W4 per channel and per group with act_order, against RTN. */
static const struct {
    const char *cfg, *needs;
} E2E_CONFIGS[] = {
    {LMP_SOURCE_DIR "/tests/backend-e2e.cfg", NULL},
    {LMP_SOURCE_DIR "/tests/backend-e2e-gptq.cfg", "gptq"},
};
enum { N_E2E = sizeof E2E_CONFIGS / sizeof E2E_CONFIGS[0] };

static lmp_json *run_compare(const char *cfg, const char *backend, const char *tag)
{
    char json[512], args[2048], out[65536];
    snprintf(json, sizeof json, "%s/conformance-%s-%d.json", LMP_BINARY_DIR, tag, (int)getpid());
    snprintf(args, sizeof args, "-q compare %s --backend %s --json %s 2>&1", cfg, backend, json);
    int rc = lmp_test_cli(args, out, sizeof out);
    ck_assert_msg(rc == 0, "lmpress %s failed (%d):\n%s", args, rc, out);
    size_t n;
    unsigned char *text = lmp_test_slurp(json, &n);
    lmp_json *j = NULL;
    ck_assert_int_eq(lmp_json_parse((const char *)text, n, json, &j), 0);
    free(text);
    unlink(json);
    return j;
}

/* The two tables must agree within the floor of each variant's class (core/report/table_diff.c,
 * docs/backends.md "Tolerances"; no noise tables: these small configs stay within the floors);
 * every difference is printed. */
static void e2e_compare(const char *cfg, const lmp_json *cpu, const lmp_json *dev)
{
    char name_b[64];
    snprintf(name_b, sizeof name_b, "%s table", g_name);
    const lmp_table a = {cpu, "cpu table"}, b = {dev, name_b};
    lmp_diff_summary sum;
    printf("  [%s] e2e %s against cpu:\n", g_name, cfg);
    int st = lmp_table_diff(&a, &b, NULL, 0, stdout, &sum);
    ck_assert_msg(st == 0, "%s: %s", cfg, lmp_last_error());
    ck_assert_int_gt(sum.variants, 0);
    ck_assert_msg(sum.beyond == 0, "%s on %s: %d numbers beyond tolerance (lines above)", cfg, g_name, sum.beyond);
}

START_TEST(test_e2e)
{
    /* the loop index runs over the non-CPU backends and the configs */
    int be = 1 + _i / N_E2E, ci = _i % N_E2E;
    g_name = g_names[be];
    const char *cfg = E2E_CONFIGS[ci].cfg, *needs = E2E_CONFIGS[ci].needs;
    if (needs) {
        char so[1024];
        snprintf(so, sizeof so, "%s/lmp-strategy-%s.so", PLUGIN_DIR, needs);
        if (access(so, R_OK) != 0) {
            lmp_test_skip("  [%s] e2e %s: SKIPPED, the %s plugin is not built\n", g_name, cfg, needs);
            return;
        }
    }
    lmp_json *cpu = run_compare(cfg, "cpu", "cpu");
    lmp_json *dev = run_compare(cfg, g_name, g_name);
    e2e_compare(cfg, cpu, dev);
    lmp_json_free(cpu);
    lmp_json_free(dev);
    fflush(stdout);
}
END_TEST

/* ---- probes: a machine without the device gets a reason, never a crash ---------------------- */

/* The text `lmpress plugins` prints under "backend NAME" (up to the next blank line). */
static const char *plugin_block(const char *listing, const char *name, char *out, size_t n)
{
    char head[64];
    snprintf(head, sizeof head, "backend %s ", name);
    const char *p = strstr(listing, head);
    if (!p) return NULL;
    const char *end = strstr(p, "\n\n");
    size_t len = end ? (size_t)(end - p) : strlen(p);
    snprintf(out, n, "%.*s", (int)len, p);
    return out;
}

/* No OpenCL platform (an empty ICD vendor folder) and no visible CUDA device
 * (CUDA_VISIBLE_DEVICES empty, which hides a GPU too): each built device backend is listed as not
 * usable with its probe's reason, and asking for it fails with that reason. */
START_TEST(test_probe_without_device)
{
    static char out[1 << 16];
    char block[4096], dir[256];
    snprintf(dir, sizeof dir, "%s/conformance-no-icd-%d", LMP_BINARY_DIR, (int)getpid());
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "OCL_ICD_VENDORS=%s CUDA_VISIBLE_DEVICES= %s plugins 2>&1", dir, LMP_CLI);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t got = fread(out, 1, sizeof out - 1, p);
    out[got] = 0;
    int status = pclose(p);
    ck_assert_msg(WIFEXITED(status), "lmpress plugins crashed without devices:\n%s", out);
    const char *expect[][2] = {{"opencl", "no OpenCL platform"}, {"cuda", "no CUDA device"}};
    for (int i = 0; i < 2; i++) {
        char so[512];
        snprintf(so, sizeof so, "%s/lmp-backend-%s.so", PLUGIN_DIR, expect[i][0]);
        if (access(so, R_OK) != 0) {
            printf("  probe %s: not built\n", expect[i][0]);
            continue;
        }
        ck_assert_msg(plugin_block(out, expect[i][0], block, sizeof block), "no %s in:\n%s",
                      expect[i][0], out);
        ck_assert_msg(strstr(block, "NOT usable here") && strstr(block, expect[i][1]),
                      "%s without a device:\n%s", expect[i][0], block);
        const char *why = strstr(block, "reason:");
        printf("  probe %s without a device: %.*s\n", expect[i][0], (int)strcspn(why, "\n"), why);
        /* choosing it fails cleanly, naming the reason */
        snprintf(cmd, sizeof cmd,
                 "OCL_ICD_VENDORS=%s CUDA_VISIBLE_DEVICES= %s -q eval --backend %s --text %s/models/stories260K/tinystories-synth-eval.txt --max-windows 1 2>&1",
                 dir, LMP_CLI, expect[i][0], LMP_SOURCE_DIR);
        p = popen(cmd, "r");
        ck_assert_ptr_nonnull(p);
        got = fread(out, 1, sizeof out - 1, p);
        out[got] = 0;
        status = pclose(p);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1 && strstr(out, expect[i][1]),
                      "eval --backend %s without a device:\n%s", expect[i][0], out);
        /* the listing again for the next backend */
        snprintf(cmd, sizeof cmd, "OCL_ICD_VENDORS=%s CUDA_VISIBLE_DEVICES= %s plugins 2>&1", dir, LMP_CLI);
        p = popen(cmd, "r");
        got = fread(out, 1, sizeof out - 1, p);
        out[got] = 0;
        pclose(p);
    }
    rmdir(dir);
}
END_TEST

static Suite *conformance_suite(void)
{
    Suite *s = suite_create("backend_conformance");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_gemm, 0, g_n_ops);
    tcase_add_loop_test(tc, test_xtx_accum, 0, g_n_ops);
    tcase_add_loop_test(tc, test_cholesky, 0, g_n_ops);
    tcase_add_loop_test(tc, test_trsm_lower, 0, g_n_ops);
    tcase_add_loop_test(tc, test_norms, 0, g_n_ops);
    tcase_add_loop_test(tc, test_rope, 0, g_n_ops);
    tcase_add_loop_test(tc, test_rope_table, 0, g_n_ops);
    tcase_add_loop_test(tc, test_hadamard, 0, g_n_ops);
    tcase_add_loop_test(tc, test_attention_window, 0, g_n_ops);
    tcase_add_loop_test(tc, test_attention_alibi, 0, g_n_ops);
    tcase_add_test(tc, test_alibi_slopes);
    tcase_add_loop_test(tc, test_attention, 0, g_n_ops);
    tcase_add_loop_test(tc, test_activations, 0, g_n_ops);
    tcase_add_loop_test(tc, test_log_softmax, 0, g_n_ops);
    tcase_add_loop_test(tc, test_reduce_cols, 0, g_n_ops);
    tcase_add_loop_test(tc, test_quantize_weight, 0, g_n_ops);
    tcase_add_loop_test(tc, test_weight_formats, 0, g_n_ops);
    tcase_add_loop_test(tc, test_quantize_act, 0, g_n_ops);
    tcase_add_loop_test(tc, test_empty_shapes, 0, g_n_ops);
    tcase_add_loop_test(tc, test_fallback, 0, g_n_ops);
    suite_add_tcase(s, tc);
    TCase *probe = tcase_create("probe");
    tcase_set_timeout(probe, 60);
    tcase_add_test(probe, test_probe_without_device);
    suite_add_tcase(s, probe);
    if (g_n > 1 && !getenv("LMP_CONFORMANCE_NO_E2E")) {
        TCase *e2e = tcase_create("e2e");
        tcase_set_timeout(e2e, 600);
        tcase_add_loop_test(e2e, test_e2e, 0, (g_n - 1) * N_E2E);
        suite_add_tcase(s, e2e);
    }
    return s;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    find_backends();
    return lmp_test_main(conformance_suite());
}
