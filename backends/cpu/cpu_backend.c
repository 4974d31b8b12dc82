/* cpu_backend.c — the CPU backend plugin ("cpu"), the reference every other backend falls back to.
 *
 * BLAS/LAPACK-shaped work goes to OpenBLAS + LAPACKE: gemm (sgemm), xtx_accum (ssyrk + mirror),
 * cholesky (spotrf), chol_inverse (spotri + mirror), trsm_lower (strsm).  Attention is blocked
 * over query rows with two sgemm calls per block.  Everything else is O(size) and runs the plain
 * kernels of cpu_ref.c, which keeps the fake-quantization bit-identical to the reference.
 *
 * Row-major tricks: a row-major n x n array read as column-major is its transpose, so the
 * row-major lower triangle is LAPACK's column-major upper triangle.  Calling LAPACKE with
 * LAPACK_COL_MAJOR and 'U' therefore works on our lower triangle in place, with no transposed
 * copy (LAPACKE's row-major path would make one).
 *
 * Validation happens here, with a message through host->set_error; the kernels below assume
 * good arguments.  Nothing here exits, aborts or prints.
 *
 * The `jitter` parameter is a diagnostic: it makes this backend a stand-in for one that sums in
 * another order (another BLAS, a GPU).  Every result of the order-dependent ops (gemm, xtx_accum,
 * cholesky, chol_inverse, trsm_lower, attention) is multiplied element by element by 1 + jitter*r,
 * r uniform in [-1, 1) from a stream seeded by `jitter_seed`.  Run a config with it and compare
 * the table with the plain one (`lmpress diff`) to see how far each variant moves when only the
 * rounding changes (tools/bench/switch_backends.sh, docs/backends.md "Tolerances"). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cblas.h>
#include <lapacke.h>

#include "cpu_bf16.h"
#include "cpu_parallel.h"
#include "cpu_ref.h"
#include "lmpress/plugin.h"

typedef struct cpu_backend {
    const lmp_host *host;
    void *hctx;
    int threads; /* 0 = OpenBLAS default */
    int blas_threads; /* what OpenBLAS uses for large problems */
    double jitter;    /* 0: none (see the top comment) */
    uint64_t rng;     /* splitmix64 state of the jitter */
    lmp_bf16_gemm *bf16; /* compute = "bf16" where the CPU has it: gemm runs there; else NULL */
} cpu_backend;

/* Below this many multiply-adds OpenBLAS's threads cost more than they save (measured on
 * stories260K's 64-wide GEMMs: 2 threads took twice as long as 1), so such calls run on one. */
#define SMALL_GEMM_MACS (1 << 22)

static void blas_threads_for(const cpu_backend *be, double macs)
{
    if (be->blas_threads > 1) openblas_set_num_threads(macs < SMALL_GEMM_MACS ? 1 : be->blas_threads);
}

#define FAIL(be, st, ...) ((be)->host->set_error((be)->hctx, (st), __VA_ARGS__))

/* The backend's own threads (cpu_parallel.h): as many as OpenBLAS uses for large problems. */
static int own_threads(const cpu_backend *be) { return be->blas_threads > 1 ? be->blas_threads : 1; }

/* Elements per thread below which one thread does the whole of an element-wise kernel. */
#define MIN_PART_ELEMS ((int64_t)1 << 15)

/* Rows of C columns per thread for a row-wise kernel. */
static int64_t min_part_rows(int64_t C) { return C > 0 && C < MIN_PART_ELEMS ? MIN_PART_ELEMS / C : 1; }

/* BLAS and LAPACK take int dimensions (blasint / lapack_int). */
static int fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* A rows x cols operand with leading dimension ld: fits the BLAS int and ld covers a row. */
static int check_mat(cpu_backend *be, const char *op, const char *what, const float *p,
                     int64_t rows, int64_t cols, int64_t ld)
{
    if (rows < 0 || cols < 0) return FAIL(be, LMP_EINVAL, "%s: %s has negative shape", op, what);
    if (rows == 0 || cols == 0) return LMP_OK;
    if (!p) return FAIL(be, LMP_EINVAL, "%s: %s is NULL", op, what);
    if (ld < cols)
        return FAIL(be, LMP_EINVAL, "%s: leading dimension of %s is %lld < %lld columns", op,
                    what, (long long)ld, (long long)cols);
    if (!fits_int(rows) || !fits_int(cols) || !fits_int(ld))
        return FAIL(be, LMP_EINVAL, "%s: %s [%lld, %lld] exceeds the BLAS int range", op, what,
                    (long long)rows, (long long)cols);
    return LMP_OK;
}

/* Maps a status of a reference kernel to one with a message. */
static int ref_status(cpu_backend *be, const char *op, int st)
{
    if (st == LMP_OK) return LMP_OK;
    if (st == LMP_ENOMEM) return FAIL(be, st, "%s: out of memory", op);
    return FAIL(be, st, "%s: invalid arguments", op);
}

/* Copy the lower triangle of A[n,n] onto the upper one, in 32x32 tiles: the plain loop writes
 * a column per row (one cache line and often one TLB entry per element), which on GPTQ's
 * 1536-wide Hessians cost a fifth of the SYRK it follows. */
static void mirror_lower(int64_t n, float *A)
{
    enum { TILE = 32 };
    for (int64_t i0 = 0; i0 < n; i0 += TILE)
        for (int64_t j0 = 0; j0 <= i0; j0 += TILE) {
            const int64_t i1 = i0 + TILE < n ? i0 + TILE : n, j1 = j0 + TILE < n ? j0 + TILE : n;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1 && j < i; j++) A[j * n + i] = A[i * n + j];
        }
}

/* X[rows, cols] (leading dimension ld; lower: only the lower triangle) *= 1 + jitter * r. */
static void jitter(cpu_backend *be, float *X, int64_t rows, int64_t cols, int64_t ld, int lower)
{
    if (!(be->jitter > 0)) return;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < (lower ? i + 1 : cols); j++) {
            uint64_t z = (be->rng += 0x9E3779B97F4A7C15ull);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z ^= z >> 31;
            const double r = (double)(z >> 11) * 0x1p-52 - 1.0;
            X[i * ld + j] = (float)(X[i * ld + j] * (1.0 + be->jitter * r));
        }
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static int cpu_create(const lmp_host *host, void *hctx, const lmp_value *params, void **self)
{
    if (!host || !self) return LMP_EINVAL;
    *self = NULL;
    double t = params ? params[0].num : 0.0;
    if (!(t >= 0.0 && t <= 256.0)) /* checked as a double: a cast of 1e300 to int is undefined */
        return host->set_error(hctx, LMP_EINVAL, "cpu: threads = %g is outside 0..256", t);
    int threads = (int)t;
    const double jit = params ? params[1].num : 0.0, seed = params ? params[2].num : 1.0;
    if (!(jit >= 0.0 && jit <= 1e-3))
        return host->set_error(hctx, LMP_EINVAL, "cpu: jitter = %g is outside 0..1e-3", jit);
    cpu_backend *be = host->alloc(hctx, sizeof *be);
    if (!be) return host->set_error(hctx, LMP_ENOMEM, "cpu: out of memory");
    be->host = host;
    be->hctx = hctx;
    be->threads = threads;
    be->jitter = jit;
    be->rng = (uint64_t)seed;
    /* compute = "bf16" (issue 42): only gemm changes; where this CPU (or this build) has no bf16
     * the backend says so once and stays f32, so a config runs the same everywhere. */
    const int want_bf16 = params && params[3].num == 1.0;
    if (want_bf16) {
        char why[200];
        if (!lmp_bf16_available(why, sizeof why)) {
            host->log(hctx, LMP_LOG_WARN, "cpu: compute = \"bf16\" is not available: %s; the GEMMs run in f32", why);
        } else if (!(be->bf16 = lmp_bf16_gemm_new())) {
            host->free(hctx, be);
            return host->set_error(hctx, LMP_ENOMEM, "cpu: compute = \"bf16\": oneDNN could not start");
        } else {
            char what[128];
            lmp_bf16_describe(what, sizeof what);
            host->log(hctx, LMP_LOG_INFO, "cpu: compute = \"bf16\": GEMMs in bf16 with f32 sums (%s)", what);
        }
    }
    /* Process-wide setting of OpenBLAS; 0 leaves its default (OPENBLAS_NUM_THREADS or cores). */
    if (threads > 0) openblas_set_num_threads(threads);
    be->blas_threads = openblas_get_num_threads();
    *self = be;
    return LMP_OK;
}

static void cpu_destroy(void *self)
{
    cpu_backend *be = self;
    if (!be) return;
    lmp_bf16_gemm_free(be->bf16);
    be->host->free(be->hctx, be);
}

/* ---- BLAS / LAPACK ------------------------------------------------------------------------ */

static int cpu_gemm(void *self, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                    float *C, int64_t ldc)
{
    cpu_backend *be = self;
    int st;
    if (M < 0 || N < 0 || K < 0)
        return FAIL(be, LMP_EINVAL, "gemm: negative shape M=%lld N=%lld K=%lld", (long long)M,
                    (long long)N, (long long)K);
    if ((st = check_mat(be, "gemm", "A", A, ta ? K : M, ta ? M : K, lda)) ||
        (st = check_mat(be, "gemm", "B", B, tb ? N : K, tb ? K : N, ldb)) ||
        (st = check_mat(be, "gemm", "C", C, M, N, ldc)))
        return st;
    if (M == 0 || N == 0) return LMP_OK;
    if (K == 0 || alpha == 0.0f) { /* C = beta*C; BLAS would want lda >= 1 here */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return LMP_OK;
    }
    if (be->bf16) {
        lmp_bf16_set_threads(be->threads);
        st = lmp_bf16_gemm_f32(be->bf16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        if (st == LMP_ENOMEM) return FAIL(be, st, "gemm: out of memory for the bf16 copies");
        if (st) return FAIL(be, st, "gemm: oneDNN refused the bf16 product M=%lld N=%lld K=%lld", (long long)M,
                            (long long)N, (long long)K);
        jitter(be, C, M, N, ldc, 0);
        return LMP_OK;
    }
    blas_threads_for(be, (double)M * (double)N * (double)K);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
    jitter(be, C, M, N, ldc, 0);
    return LMP_OK;
}

static int cpu_xtx_accum(void *self, int64_t n, int64_t c, const float *X, float alpha, float *H)
{
    cpu_backend *be = self;
    int st;
    if ((st = check_mat(be, "xtx_accum", "X", X, n, c, c)) ||
        (st = check_mat(be, "xtx_accum", "H", H, c, c, c)))
        return st;
    if (n == 0 || c == 0) return LMP_OK;
    /* Row-major ssyrk with Trans: H = alpha * X^T X + 1 * H, X being [K=n, N=c].  Only the lower
     * triangle is computed (half the FLOPs); the upper one is then copied from it. */
    cblas_ssyrk(CblasRowMajor, CblasLower, CblasTrans, (int)c, (int)n, alpha, X, (int)c, 1.0f, H,
                (int)c);
    jitter(be, H, c, c, c, 1);
    mirror_lower(c, H);
    return LMP_OK;
}

/* LAPACKE checks its input for NaN first: a NaN in the lower triangle is LMP_EINVAL here, where
 * the reference (no such check) reports LMP_ENOTSPD at the pivot the NaN reaches. */
static int cpu_cholesky(void *self, int64_t n, float *A, int64_t *bad_pivot)
{
    cpu_backend *be = self;
    int st = check_mat(be, "cholesky", "A", A, n, n, n);
    if (st || n == 0) return st;
    /* Column-major 'U' of the row-major array = our lower triangle (see the top comment). */
    lapack_int info = LAPACKE_spotrf(LAPACK_COL_MAJOR, 'U', (lapack_int)n, A, (lapack_int)n);
    if (info > 0) {
        /* info = order of the leading minor that is not positive definite (1-based). */
        if (bad_pivot) *bad_pivot = (int64_t)info - 1;
        return FAIL(be, LMP_ENOTSPD, "cholesky: matrix is not positive definite (pivot %lld of %lld)",
                    (long long)info - 1, (long long)n);
    }
    if (info == -4) /* LAPACKE's input NaN check (argument 4 is the matrix) */
        return FAIL(be, LMP_EINVAL, "cholesky: the matrix contains NaN");
    if (info < 0) return FAIL(be, LMP_EINVAL, "cholesky: LAPACKE_spotrf argument %d", (int)-info);
    for (int64_t i = 0; i < n; i++) /* spotrf leaves the other triangle untouched */
        memset(A + i * n + i + 1, 0, (size_t)(n - i - 1) * sizeof *A);
    jitter(be, A, n, n, n, 1);
    return LMP_OK;
}

static int cpu_chol_inverse(void *self, int64_t n, float *L)
{
    cpu_backend *be = self;
    int st = check_mat(be, "chol_inverse", "L", L, n, n, n);
    if (st || n == 0) return st;
    lapack_int info = LAPACKE_spotri(LAPACK_COL_MAJOR, 'U', (lapack_int)n, L, (lapack_int)n);
    if (info > 0)
        return FAIL(be, LMP_ENOTSPD, "chol_inverse: L[%lld,%lld] is zero, the matrix is singular",
                    (long long)info - 1, (long long)info - 1);
    if (info == -4) return FAIL(be, LMP_EINVAL, "chol_inverse: the factor contains NaN");
    if (info < 0) return FAIL(be, LMP_EINVAL, "chol_inverse: LAPACKE_spotri argument %d", (int)-info);
    jitter(be, L, n, n, n, 1);
    mirror_lower(n, L); /* spotri wrote one triangle of the symmetric inverse */
    return LMP_OK;
}

static int cpu_trsm_lower(void *self, int trans, int64_t n, int64_t nrhs, const float *L, float *B)
{
    cpu_backend *be = self;
    int st;
    if ((st = check_mat(be, "trsm_lower", "L", L, n, n, n)) ||
        (st = check_mat(be, "trsm_lower", "B", B, n, nrhs, nrhs)))
        return st;
    if (n == 0 || nrhs == 0) return LMP_OK;
    cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, trans ? CblasTrans : CblasNoTrans,
                CblasNonUnit, (int)n, (int)nrhs, 1.0f, L, (int)n, B, (int)nrhs);
    jitter(be, B, n, nrhs, nrhs, 0);
    return LMP_OK;
}

/* ---- transformer pieces ------------------------------------------------------------------- */

/* The row-wise and element-wise kernels, cut into ranges of rows or elements: a range's result
 * is what the reference gives on the whole, row for row (cpu_ref.c). */
typedef struct rows_args {
    int64_t C;
    const float *x, *y, *w, *b;
    float eps, *out;
} rows_args;

static int rmsnorm_rows(void *p, int part, int64_t r0, int64_t r1)
{
    const rows_args *a = p;
    (void)part;
    return lmp_ref_rmsnorm(r1 - r0, a->C, a->x + r0 * a->C, a->w, a->eps, a->out + r0 * a->C);
}

static int layernorm_rows(void *p, int part, int64_t r0, int64_t r1)
{
    const rows_args *a = p;
    (void)part;
    return lmp_ref_layernorm(r1 - r0, a->C, a->x + r0 * a->C, a->w, a->b, a->eps, a->out + r0 * a->C);
}

static int log_softmax_rows(void *p, int part, int64_t r0, int64_t r1)
{
    const rows_args *a = p;
    (void)part;
    return lmp_ref_log_softmax(r1 - r0, a->C, a->x + r0 * a->C, a->out + r0 * a->C);
}

static int swiglu_range(void *p, int part, int64_t i0, int64_t i1)
{
    const rows_args *a = p;
    (void)part;
    return lmp_ref_swiglu(i1 - i0, a->x + i0, a->y + i0, a->out + i0);
}

static int gelu_range(void *p, int part, int64_t i0, int64_t i1)
{
    const rows_args *a = p;
    (void)part;
    return lmp_ref_gelu(i1 - i0, a->x + i0, a->out + i0);
}

/* Rows (or elements: C = 1) [0, n) of a kernel, on the backend's threads when there is enough
 * work; a small or malformed call (negative sizes, NULL operands) goes to the reference whole,
 * which checks it as before. */
static int rows_parallel(cpu_backend *be, const char *op, int64_t n, int64_t C, cpu_range_fn fn, rows_args *a)
{
    const int one = n < 2 || C <= 0 || n * C < 2 * MIN_PART_ELEMS || own_threads(be) == 1;
    return ref_status(be, op, one ? fn(a, 0, 0, n) : cpu_parallel_for(own_threads(be), n, min_part_rows(C), fn, a));
}

static int cpu_rmsnorm(void *self, int64_t T, int64_t C, const float *x, const float *w,
                       float eps, float *out)
{
    rows_args a = {.C = C, .x = x, .w = w, .eps = eps, .out = out};
    return rows_parallel(self, "rmsnorm", T, C, rmsnorm_rows, &a);
}

/* llama2.c's RoPE, in f32 as llama2.c computes it (freq = 1 / theta^(2i/hd), angle = pos*freq),
 * with the cos/sin of one position computed once and applied to every head. */
static int cpu_rope(void *self, int64_t T, int64_t n_heads, int64_t head_dim, int64_t pos0,
                    float theta, float *x)
{
    cpu_backend *be = self;
    if (T < 0 || n_heads < 0 || head_dim < 0 || head_dim % 2 != 0)
        return FAIL(be, LMP_EINVAL, "rope: bad shape T=%lld heads=%lld head_dim=%lld (must be even)",
                    (long long)T, (long long)n_heads, (long long)head_dim);
    if (T == 0 || n_heads == 0 || head_dim == 0) return LMP_OK;
    if (!x) return FAIL(be, LMP_EINVAL, "rope: x is NULL");
    int64_t half = head_dim / 2, dim = n_heads * head_dim;
    float *cs = be->host->alloc(be->hctx, (size_t)half * 2 * sizeof *cs); /* [half] cos, sin */
    if (!cs) return FAIL(be, LMP_ENOMEM, "rope: out of memory");
    for (int64_t t = 0; t < T; t++) {
        float pos = (float)(pos0 + t);
        for (int64_t i = 0; i < half; i++) {
            float freq = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
            float ang = pos * freq;
            cs[2 * i] = cosf(ang);
            cs[2 * i + 1] = sinf(ang);
        }
        for (int64_t h = 0; h < n_heads; h++) {
            float *xh = x + t * dim + h * head_dim;
            for (int64_t i = 0; i < half; i++) {
                float c = cs[2 * i], s = cs[2 * i + 1];
                float x0 = xh[2 * i], x1 = xh[2 * i + 1];
                xh[2 * i] = x0 * c - x1 * s;
                xh[2 * i + 1] = x0 * s + x1 * c;
            }
        }
    }
    be->host->free(be->hctx, cs);
    return LMP_OK;
}

/* See plugin.h.  The cos and sin of one position are computed once (in double, from the f32
 * angle) and applied to every head: the same numbers as lmp_ref_rope_table. */
static int cpu_rope_table(void *self, int64_t T, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos0,
                          const float *inv_freq, float mscale, float *x)
{
    cpu_backend *be = self;
    if (T < 0 || n_heads < 0 || head_dim < 0 || n_rot < 0 || n_rot > head_dim || n_rot % 2 != 0)
        return FAIL(be, LMP_EINVAL, "rope_table: bad shape T=%lld heads=%lld head_dim=%lld n_rot=%lld "
                    "(n_rot must be even and at most head_dim)", (long long)T, (long long)n_heads,
                    (long long)head_dim, (long long)n_rot);
    if (T == 0 || n_heads == 0 || n_rot == 0) return LMP_OK;
    if (!x || !inv_freq) return FAIL(be, LMP_EINVAL, "rope_table: x or inv_freq is NULL");
    const int64_t half = n_rot / 2, dim = n_heads * head_dim;
    double *cs = be->host->alloc(be->hctx, (size_t)half * 2 * sizeof *cs); /* [half] cos, sin */
    if (!cs) return FAIL(be, LMP_ENOMEM, "rope_table: out of memory");
    for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < half; i++) {
            const double ang = (double)((float)(pos0 + t) * inv_freq[i]);
            cs[2 * i] = cos(ang) * mscale;
            cs[2 * i + 1] = sin(ang) * mscale;
        }
        for (int64_t h = 0; h < n_heads; h++) {
            float *xh = x + t * dim + h * head_dim;
            for (int64_t i = 0; i < half; i++) {
                const double c = cs[2 * i], s = cs[2 * i + 1], x0 = xh[2 * i], x1 = xh[2 * i + 1];
                xh[2 * i] = (float)(x0 * c - x1 * s);
                xh[2 * i + 1] = (float)(x0 * s + x1 * c);
            }
        }
    }
    be->host->free(be->hctx, cs);
    return LMP_OK;
}

/* In place softmax of S[0..n) with the max subtracted first; the sum is kept in double. */
static void softmax_row(float *S, int64_t n)
{
    float mx = S[0];
    for (int64_t j = 1; j < n; j++)
        if (S[j] > mx) mx = S[j];
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        S[j] = expf(S[j] - mx);
        sum += S[j];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < n; j++) S[j] *= inv;
}

/* Query rows per block: the score block is ATT_BLOCK x T floats. */
#define ATT_BLOCK 64

typedef struct attention_args {
    int64_t T, hd, qdim, kvdim, group, bs;
    int64_t window;       /* attention_window: query t reads keys after t - window; 0: all */
    float softcap;        /* attention_window: scores through softcap * tanh(s / softcap); 0: none */
    const float *slopes;  /* attention_alibi: head h's score of key j for query t + slopes[h] (j - t); NULL: none */
    float scale;
    const float *q, *k, *v;
    float *out, *S; /* S: one [bs, T] score block per part */
} attention_args;

/* Heads [h0, h1): per block of query rows [t0, t0 + m), S = scale * Q K^T over keys [0, t0 + m)
 * (sgemm), causal mask + softmax row by row, then O = P V (sgemm).  Only the upper triangle of
 * the diagonal block is computed and thrown away. */
static int attention_heads(void *p, int part, int64_t h0, int64_t h1)
{
    const attention_args *a = p;
    const int64_t T = a->T, hd = a->hd, qdim = a->qdim, kvdim = a->kvdim, bs = a->bs;
    float *S = a->S + (int64_t)part * bs * T; /* [bs, T] */
    for (int64_t h = h0; h < h1; h++) {
        const float *qh = a->q + h * hd, *kh = a->k + (h / a->group) * hd, *vh = a->v + (h / a->group) * hd;
        float *oh = a->out + h * hd;
        for (int64_t t0 = 0; t0 < T; t0 += bs) {
            int64_t m = T - t0 < bs ? T - t0 : bs, nk = t0 + m; /* rows, visible keys */
            /* S[m, nk] = scale * Q[t0:t0+m, :] K[0:nk, :]^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)nk, (int)hd, a->scale,
                        qh + t0 * qdim, (int)qdim, kh, (int)kvdim, 0.0f, S, (int)nk);
            for (int64_t r = 0; r < m; r++) {
                float *Sr = S + r * nk;
                int64_t nv = t0 + r + 1; /* query t0+r sees keys 0..t0+r */
                const int64_t lo = a->window && nv - a->window > 0 ? nv - a->window : 0; /* ... from lo */
                if (a->softcap > 0)
                    for (int64_t j = lo; j < nv; j++) Sr[j] = a->softcap * tanhf(Sr[j] / a->softcap);
                if (a->slopes) /* ALiBi: the key's distance, times the head's slope */
                    for (int64_t j = lo; j < nv; j++) Sr[j] += a->slopes[h] * (float)(j - (nv - 1));
                softmax_row(Sr + lo, nv - lo);
                for (int64_t j = 0; j < lo; j++) Sr[j] = 0.0f;
                for (int64_t j = nv; j < nk; j++) Sr[j] = 0.0f;
            }
            /* O[t0:t0+m, :] = P[m, nk] V[0:nk, :] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)hd, (int)nk, 1.0f,
                        S, (int)nk, vh, (int)kvdim, 0.0f, oh + t0 * qdim, (int)qdim);
        }
    }
    return 0;
}

/* The checks and shapes both attention ops share: LMP_OK with *a filled, 1 when there is nothing
 * to compute (no tokens or no heads), or the failure, named after op. */
static int attention_shapes(cpu_backend *be, const char *op, int64_t T, int64_t n_heads, int64_t n_kv_heads,
                            int64_t hd, const float *q, const float *k, const float *v, attention_args *a)
{
    if (T < 0 || n_heads < 0 || n_kv_heads <= 0 || hd <= 0 || n_heads % n_kv_heads != 0)
        return FAIL(be, LMP_EINVAL,
                    "%s: bad shape T=%lld heads=%lld kv_heads=%lld hd=%lld (heads must be a multiple of kv_heads)", op,
                    (long long)T, (long long)n_heads, (long long)n_kv_heads, (long long)hd);
    if (T == 0 || n_heads == 0) return 1;
    if (!q || !k || !v) return FAIL(be, LMP_EINVAL, "%s: NULL operand", op);
    *a = (attention_args){.T = T, .hd = hd, .qdim = n_heads * hd, .kvdim = n_kv_heads * hd,
                          .group = n_heads / n_kv_heads, .bs = T < ATT_BLOCK ? T : ATT_BLOCK,
                          .scale = (float)(1.0 / sqrt((double)hd)), .q = q, .k = k, .v = v};
    if (!fits_int(T) || !fits_int(a->qdim)) return FAIL(be, LMP_EINVAL, "%s: shape exceeds the BLAS int range", op);
    return LMP_OK;
}

/* Heads are independent: while each head's products are small enough for one OpenBLAS thread
 * (SMALL_GEMM_MACS), the heads are shared among the backend's threads, each head computed as on
 * one thread; larger products keep OpenBLAS's threads and the heads in turn. */
static int attention_run(cpu_backend *be, const char *op, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                         int64_t window, float softcap, const float *slopes, const float *q, const float *k,
                         const float *v, float *out)
{
    attention_args a;
    int st = attention_shapes(be, op, T, n_heads, n_kv_heads, hd, q, k, v, &a);
    if (st) return st > 0 ? LMP_OK : st;
    if (!out) return FAIL(be, LMP_EINVAL, "%s: NULL operand", op);
    if (window < 0 || !(softcap >= 0))
        return FAIL(be, LMP_EINVAL, "%s: window %lld and softcap %g must not be negative", op, (long long)window,
                    (double)softcap);
    a.out = out;
    a.window = window;
    a.softcap = softcap;
    a.slopes = slopes;
    const double macs = (double)a.bs * (double)T * (double)hd; /* the largest GEMM */
    const int threads = macs < SMALL_GEMM_MACS && n_heads > 1 ? own_threads(be) : 1;
    a.S = be->host->alloc(be->hctx, (size_t)threads * (size_t)a.bs * (size_t)T * sizeof *a.S);
    if (!a.S) return FAIL(be, LMP_ENOMEM, "attention: out of memory for %lld x %lld scores",
                          (long long)a.bs, (long long)T);
    blas_threads_for(be, macs);
    cpu_parallel_for(threads, n_heads, 1, attention_heads, &a);
    be->host->free(be->hctx, a.S);
    jitter(be, out, T, a.qdim, a.qdim, 0);
    return LMP_OK;
}

static int cpu_attention(void *self, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                         const float *q, const float *k, const float *v, float *out)
{
    return attention_run(self, "attention", T, n_heads, n_kv_heads, hd, 0, 0.0f, NULL, q, k, v, out);
}

static int cpu_attention_window(void *self, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                                float softcap, const float *q, const float *k, const float *v, float *out)
{
    return attention_run(self, "attention_window", T, n_heads, n_kv_heads, hd, window, softcap, NULL, q, k, v, out);
}

static int cpu_attention_alibi(void *self, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                               const float *slopes, const float *q, const float *k, const float *v, float *out)
{
    if (!slopes && T > 0 && n_heads > 0) return FAIL((cpu_backend *)self, LMP_EINVAL, "attention_alibi: NULL slopes");
    return attention_run(self, "attention_alibi", T, n_heads, n_kv_heads, hd, window, 0.0f, slopes, q, k, v, out);
}

typedef struct attention_bwd_args {
    attention_args f;   /* the forward's shapes and operands; f.S: [bs, T] probabilities per part */
    const float *dout;
    float *dq, *dk, *dv;
    float *dP;          /* [bs, T] per part */
} attention_bwd_args;

/* KV heads [g0, g1), each with the query heads that read it (so no two parts write the same dk,
 * dv): per block of query rows, P as in the forward, dP = dO V^T, dS = P * (dP - rowsum(P*dP))
 * * scale, then dQ = dS K, dK += dS^T Q, dV += P^T dO (sgemm each). */
static int attention_bwd_kv_heads(void *p, int part, int64_t g0, int64_t g1)
{
    const attention_bwd_args *a = p;
    const int64_t T = a->f.T, hd = a->f.hd, qdim = a->f.qdim, kvdim = a->f.kvdim, bs = a->f.bs;
    float *S = a->f.S + (int64_t)part * bs * T, *dP = a->dP + (int64_t)part * bs * T;
    for (int64_t g = g0; g < g1; g++) {
        const float *kh = a->f.k + g * hd, *vh = a->f.v + g * hd;
        float *dkh = a->dk + g * hd, *dvh = a->dv + g * hd;
        for (int64_t t = 0; t < T; t++)
            for (int64_t d = 0; d < hd; d++) dkh[t * kvdim + d] = dvh[t * kvdim + d] = 0.0f;
        for (int64_t h = g * a->f.group; h < (g + 1) * a->f.group; h++) {
            const float *qh = a->f.q + h * hd, *oh = a->dout + h * hd;
            float *dqh = a->dq + h * hd;
            for (int64_t t0 = 0; t0 < T; t0 += bs) {
                const int64_t m = T - t0 < bs ? T - t0 : bs, nk = t0 + m;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)nk, (int)hd, a->f.scale,
                            qh + t0 * qdim, (int)qdim, kh, (int)kvdim, 0.0f, S, (int)nk);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)nk, (int)hd, 1.0f,
                            oh + t0 * qdim, (int)qdim, vh, (int)kvdim, 0.0f, dP, (int)nk);
                for (int64_t r = 0; r < m; r++) {
                    float *Sr = S + r * nk, *dPr = dP + r * nk;
                    const int64_t nv = t0 + r + 1;
                    softmax_row(Sr, nv);
                    double pdp = 0.0;
                    for (int64_t j = 0; j < nv; j++) pdp += (double)Sr[j] * dPr[j];
                    for (int64_t j = 0; j < nv; j++) dPr[j] = Sr[j] * (dPr[j] - (float)pdp) * a->f.scale;
                    for (int64_t j = nv; j < nk; j++) Sr[j] = dPr[j] = 0.0f;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)hd, (int)nk, 1.0f, dP,
                            (int)nk, kh, (int)kvdim, 0.0f, dqh + t0 * qdim, (int)qdim);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nk, (int)hd, (int)m, 1.0f, dP,
                            (int)nk, qh + t0 * qdim, (int)qdim, 1.0f, dkh, (int)kvdim);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nk, (int)hd, (int)m, 1.0f, S,
                            (int)nk, oh + t0 * qdim, (int)qdim, 1.0f, dvh, (int)kvdim);
            }
        }
    }
    return 0;
}

static int cpu_attention_backward(void *self, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                                  const float *q, const float *k, const float *v, const float *dout, float *dq,
                                  float *dk, float *dv)
{
    cpu_backend *be = self;
    attention_bwd_args a = {.dout = dout, .dq = dq, .dk = dk, .dv = dv};
    int st = attention_shapes(be, "attention_backward", T, n_heads, n_kv_heads, hd, q, k, v, &a.f);
    if (st) return st > 0 ? LMP_OK : st;
    if (!dout || !dq || !dk || !dv) return FAIL(be, LMP_EINVAL, "attention_backward: NULL operand");
    const double macs = (double)a.f.bs * (double)T * (double)hd;
    const int threads = macs < SMALL_GEMM_MACS && n_kv_heads > 1 ? own_threads(be) : 1;
    const size_t per_part = (size_t)a.f.bs * (size_t)T;
    a.f.S = be->host->alloc(be->hctx, 2 * (size_t)threads * per_part * sizeof *a.f.S);
    if (!a.f.S) return FAIL(be, LMP_ENOMEM, "attention_backward: out of memory for %lld x %lld scores",
                            (long long)a.f.bs, (long long)T);
    a.dP = a.f.S + (size_t)threads * per_part;
    blas_threads_for(be, macs);
    cpu_parallel_for(threads, n_kv_heads, 1, attention_bwd_kv_heads, &a);
    be->host->free(be->hctx, a.f.S);
    return LMP_OK;
}

static int cpu_layernorm(void *self, int64_t T, int64_t C, const float *x, const float *w,
                         const float *b, float eps, float *out)
{
    rows_args a = {.C = C, .x = x, .w = w, .b = b, .eps = eps, .out = out};
    return rows_parallel(self, "layernorm", T, C, layernorm_rows, &a);
}

static int cpu_gelu(void *self, int64_t n, const float *x, float *out)
{
    rows_args a = {.C = 1, .x = x, .out = out};
    return rows_parallel(self, "gelu", n, 1, gelu_range, &a);
}

static int cpu_swiglu(void *self, int64_t n, const float *gate, const float *up, float *out)
{
    rows_args a = {.C = 1, .x = gate, .y = up, .out = out};
    return rows_parallel(self, "swiglu", n, 1, swiglu_range, &a);
}

static int cpu_log_softmax(void *self, int64_t rows, int64_t cols, const float *x, float *out)
{
    rows_args a = {.C = cols, .x = x, .out = out};
    return rows_parallel(self, "log_softmax", rows, cols, log_softmax_rows, &a);
}

/* Row-major traversal (the reference walks columns): cache friendly for tall X, and the SUM
 * accumulates in a double scratch row so long columns do not lose precision. */
static int cpu_reduce_cols(void *self, lmp_reduce kind, int64_t n, int64_t c, const float *X,
                           float *out)
{
    cpu_backend *be = self;
    if (kind < LMP_REDUCE_ABSMAX || kind > LMP_REDUCE_SUM)
        return FAIL(be, LMP_EINVAL, "reduce_cols: unknown reduction %d", (int)kind);
    int st = check_mat(be, "reduce_cols", "X", X, n, c, c);
    if (st) return st;
    if (n == 0 || c == 0) return LMP_OK;
    if (!out) return FAIL(be, LMP_EINVAL, "reduce_cols: out is NULL");
    if (kind == LMP_REDUCE_SUM) {
        double *acc = be->host->alloc(be->hctx, (size_t)c * sizeof *acc);
        if (!acc) return FAIL(be, LMP_ENOMEM, "reduce_cols: out of memory");
        for (int64_t j = 0; j < c; j++) acc[j] = out[j];
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < c; j++) acc[j] += X[i * c + j];
        for (int64_t j = 0; j < c; j++) out[j] = (float)acc[j];
        be->host->free(be->hctx, acc);
        return LMP_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        const float *xr = X + i * c;
        for (int64_t j = 0; j < c; j++) {
            float x = kind == LMP_REDUCE_ABSMAX ? fabsf(xr[j]) : xr[j];
            if (kind == LMP_REDUCE_MIN ? x < out[j] : x > out[j]) out[j] = x; /* NaN never wins */
        }
    }
    return LMP_OK;
}

/* ---- quantization: the reference kernels, so every backend is compared to exactly these --- */

/* The checks of both weight-grid ops, each with its message; the reference kernels then assume
 * a good spec. */
static int check_wgrid(cpu_backend *be, const char *op, const lmp_wspec *spec, int64_t rows,
                       int64_t cols, const float *W, const float *scales, const float *zeros)
{
    if (!spec) return FAIL(be, LMP_EINVAL, "%s: spec is NULL", op);
    if (!lmp_wformat_name(spec->format))
        return FAIL(be, LMP_EINVAL, "%s: unknown weight format %d", op, (int)spec->format);
    if (spec->format == LMP_WFORMAT_NVFP4 && !(spec->global_scale > 0.0f && spec->global_scale < INFINITY))
        return FAIL(be, LMP_EINVAL, "%s: format nvfp4 needs the tensor's global scale (> 0, lmp_nvfp4_global_scale); "
                    "the spec has %g", op, (double)spec->global_scale);
    if (spec->gran == LMP_GRAN_BLOCK && spec->format != LMP_WFORMAT_FP8_E4M3 && spec->format != LMP_WFORMAT_FP8_E5M2)
        return FAIL(be, LMP_EINVAL, "%s: granularity block (a scale per tile) takes the fp8_e4m3 and fp8_e5m2 formats "
                    "only, not %s", op, lmp_wformat_name(spec->format));
    if ((spec->format == LMP_WFORMAT_FP8_E4M3 || spec->format == LMP_WFORMAT_FP8_E5M2) && !lmp_wspec_format_ok(spec))
        return FAIL(be, LMP_EINVAL, "%s: format %s is 8 bits, symmetric (sym 1), with a scale type and no global "
                    "scale; the spec says bits %d, sym %d, scale type %d, global scale %g", op,
                    lmp_wformat_name(spec->format), spec->bits, spec->sym, (int)spec->scale_type,
                    (double)spec->global_scale);
    if (!lmp_wspec_format_ok(spec))
        return FAIL(be, LMP_EINVAL,
                    "%s: format %s is %d bits, %s, in groups of %lld inputs%s (lmp_wspec_for_format); the "
                    "spec says bits %d, sym %d, granularity %d, group %lld, clip %g", op,
                    lmp_wformat_name(spec->format), lmp_wspec_for_format(spec->format, 1.0f).bits,
                    lmp_wspec_for_format(spec->format, 1.0f).sym ? "symmetric" : "with a min",
                    (long long)lmp_wspec_for_format(spec->format, 1.0f).group,
                    lmp_wformat_is_k(spec->format) ? ", clip 1" : "", spec->bits, spec->sym, (int)spec->gran,
                    (long long)spec->group, spec->clip);
    const int64_t span = lmp_wformat_span(spec->format);
    if (cols > 0 && cols % span)
        return FAIL(be, LMP_EINVAL,
                    "%s: format %s stores rows in blocks of %lld inputs; this weight's rows have %lld, not a "
                    "multiple of %lld", op, lmp_wformat_name(spec->format), (long long)span, (long long)cols,
                    (long long)span);
    if ((spec->bits < 2 && spec->format != LMP_WFORMAT_GGUF_Q1_0) || spec->bits > 8)
        return FAIL(be, LMP_EINVAL, "%s: bits = %d is outside 2..8", op, spec->bits);
    if (spec->gran != LMP_GRAN_TENSOR && spec->gran != LMP_GRAN_CHANNEL && spec->gran != LMP_GRAN_GROUP &&
        spec->gran != LMP_GRAN_BLOCK)
        return FAIL(be, LMP_EINVAL, "%s: unknown granularity %d", op, (int)spec->gran);
    if ((spec->gran == LMP_GRAN_GROUP || spec->gran == LMP_GRAN_BLOCK) && spec->group <= 0)
        return FAIL(be, LMP_EINVAL, "%s: group = %lld must be > 0", op, (long long)spec->group);
    if (spec->rounding != LMP_ROUND_HALF_EVEN && spec->rounding != LMP_ROUND_HALF_AWAY)
        return FAIL(be, LMP_EINVAL, "%s: unknown rounding %d", op, (int)spec->rounding);
    if (!(spec->clip >= 0.0f && spec->clip <= 1.0f))
        return FAIL(be, LMP_EINVAL, "%s: clip = %g is outside (0, 1] (0 means 1)", op, (double)spec->clip);
    if (rows < 0 || cols < 0)
        return FAIL(be, LMP_EINVAL, "%s: negative shape %lld x %lld", op, (long long)rows, (long long)cols);
    if (rows == 0 || cols == 0) return LMP_OK;
    if (!W) return FAIL(be, LMP_EINVAL, "%s: W is NULL", op);
    if (!scales) return FAIL(be, LMP_EINVAL, "%s: scales is NULL", op);
    if (!spec->sym && !zeros) return FAIL(be, LMP_EINVAL, "%s: zeros is NULL for an asymmetric grid", op);
    return LMP_OK;
}

static int cpu_choose_weight_grid(void *self, const lmp_wspec *spec, int64_t rows, int64_t cols,
                                  const float *W, float *scales, float *zeros)
{
    cpu_backend *be = self;
    int st = check_wgrid(be, "choose_weight_grid", spec, rows, cols, W, scales, zeros);
    if (st) return st;
    return ref_status(be, "choose_weight_grid",
                      lmp_ref_choose_weight_grid(spec, rows, cols, W, scales, zeros));
}

static int cpu_apply_weight_grid(void *self, const lmp_wspec *spec, int64_t rows, int64_t cols,
                                 float *W, const float *scales, const float *zeros, int32_t *codes)
{
    cpu_backend *be = self;
    int st = check_wgrid(be, "apply_weight_grid", spec, rows, cols, W, scales, zeros);
    if (st) return st;
    return ref_status(be, "apply_weight_grid",
                      lmp_ref_apply_weight_grid(spec, rows, cols, W, scales, zeros, codes));
}

static int cpu_quantize_act(void *self, const lmp_aspec *spec, int64_t T, int64_t C, float *X)
{
    cpu_backend *be = self;
    if (!spec) return FAIL(be, LMP_EINVAL, "quantize_act: spec is NULL");
    const int fp = spec->mode >= LMP_ACT_FP8_STATIC_TENSOR && spec->mode <= LMP_ACT_MXFP4;
    if ((spec->mode == LMP_ACT_FP8_STATIC_TENSOR || spec->mode == LMP_ACT_NVFP4) &&
        !(spec->scale > 0.0f && isfinite(spec->scale)))
        return FAIL(be, LMP_EINVAL, "quantize_act: %s scale %g must be finite and > 0",
                    spec->mode == LMP_ACT_NVFP4 ? "nvfp4's global" : "fp8's static", (double)spec->scale);
    if (fp && C % (spec->mode == LMP_ACT_NVFP4 ? 16 : spec->mode == LMP_ACT_MXFP4 ? 32 : 1))
        return FAIL(be, LMP_EINVAL, "quantize_act: %s activations take groups of %d inputs; this input has %lld",
                    spec->mode == LMP_ACT_NVFP4 ? "nvfp4" : "mxfp4", spec->mode == LMP_ACT_NVFP4 ? 16 : 32, (long long)C);
    if (!fp && spec->mode != LMP_ACT_NONE && (spec->bits < 2 || spec->bits > 16))
        return FAIL(be, LMP_EINVAL, "quantize_act: bits = %d is outside 2..16", spec->bits);
    if (spec->mode == LMP_ACT_STATIC_TENSOR && !(spec->scale > 0.0f && isfinite(spec->scale)))
        return FAIL(be, LMP_EINVAL, "quantize_act: static scale %g must be finite and > 0",
                    (double)spec->scale);
    return ref_status(be, "quantize_act", lmp_ref_quantize_act(spec, T, C, X));
}

/* The fast Walsh-Hadamard transform: log2(n) butterfly passes over each row, in f32, then the
 * 1/sqrt(n) (lmp_ref_hadamard is the O(n^2) product it is held to). */
static int cpu_hadamard(void *self, int64_t rows, int64_t n, float *x)
{
    cpu_backend *be = self;
    if (rows < 0 || n < 1 || (n & (n - 1)) != 0)
        return FAIL(be, LMP_EINVAL, "hadamard: n = %lld is not a power of 2 (rows %lld)", (long long)n, (long long)rows);
    if (rows > 0 && !x) return FAIL(be, LMP_EINVAL, "hadamard: x is NULL");
    const float norm = (float)(1.0 / sqrt((double)n));
    for (int64_t r = 0; r < rows; r++) {
        float *row = x + r * n;
        for (int64_t h = 1; h < n; h *= 2)
            for (int64_t i = 0; i < n; i += 2 * h)
                for (int64_t k = i; k < i + h; k++) {
                    const float u = row[k], v = row[k + h];
                    row[k] = u + v;
                    row[k + h] = u - v;
                }
        for (int64_t j = 0; j < n; j++) row[j] *= norm;
    }
    return LMP_OK;
}

/* ---- descriptor --------------------------------------------------------------------------- */

static const lmp_backend_i cpu_vtable = {
    .struct_size = sizeof(lmp_backend_i),
    .create = cpu_create,
    .destroy = cpu_destroy,
    .gemm = cpu_gemm,
    .xtx_accum = cpu_xtx_accum,
    .cholesky = cpu_cholesky,
    .chol_inverse = cpu_chol_inverse,
    .trsm_lower = cpu_trsm_lower,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .log_softmax = cpu_log_softmax,
    .reduce_cols = cpu_reduce_cols,
    .choose_weight_grid = cpu_choose_weight_grid,
    .apply_weight_grid = cpu_apply_weight_grid,
    .quantize_act = cpu_quantize_act,
    .layernorm = cpu_layernorm,
    .gelu = cpu_gelu,
    .attention_backward = cpu_attention_backward,
    .rope_table = cpu_rope_table,
    .attention_window = cpu_attention_window,
    .hadamard = cpu_hadamard,
    .attention_alibi = cpu_attention_alibi,
};

static const char *const compute_choices[] = {"f32", "bf16", NULL};

static const lmp_param_spec cpu_params[] = {
    {
        .name = "threads",
        .type = LMP_PARAM_INT,
        .help = "OpenBLAS threads for GEMM, SYRK, Cholesky and the triangular solves; "
                "0 keeps OpenBLAS's default (OPENBLAS_NUM_THREADS or all cores). "
                "Process-wide: the last backend created wins.",
        .def_num = 0,
        .min = 0,
        .max = 256,
    },
    {
        .name = "jitter",
        .type = LMP_PARAM_FLOAT,
        .help = "diagnostic: multiply every result of gemm, xtx_accum, cholesky, chol_inverse, "
                "trsm_lower and attention by 1 + jitter*r, r uniform in [-1, 1), to see how far "
                "the results move when only the rounding changes (1e-6 is about what another "
                "BLAS or a GPU changes); 0 = off",
        .def_num = 0,
        .min = 0,
        .max = 1e-3,
    },
    {
        .name = "jitter_seed",
        .type = LMP_PARAM_INT,
        .help = "seed of the jitter's random stream",
        .def_num = 1,
        .min = 0,
        .max = 2147483647,
    },
    {
        .name = "compute",
        .type = LMP_PARAM_ENUM,
        .help = "precision of gemm: \"f32\", or \"bf16\" (both operands rounded to bf16, f32 sums, "
                "through oneDNN: AMX or AVX-512-BF16).  The core uses it for compression's forward "
                "linears only; norms, softmax, the Hessians and the solvers stay f32, and evaluation "
                "stays f32 unless eval.compute = \"backend\".  Where the CPU has no bf16 "
                "instructions the GEMMs run in f32, with a message (`lmpress plugins cpu` says which)",
        .def_num = 0,
        .choices = compute_choices,
    },
};

/* Not const: the summary says whether compute = "bf16" runs here (`lmpress plugins`), which only
 * the loaded process can tell; written by lmp_plugin_entry before the registry reads it. */
static char cpu_summary[512];

static lmp_plugin_desc cpu_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_BACKEND,
    .name = "cpu",
    .version = "0.1.0",
    .summary = cpu_summary,
    .params = cpu_params,
    .n_params = sizeof cpu_params / sizeof cpu_params[0],
    .vtable = &cpu_vtable,
    .probe = NULL,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void)
{
    char why[200], what[128];
    const int bf16 = lmp_bf16_available(why, sizeof why);
    lmp_bf16_describe(what, sizeof what);
    snprintf(cpu_summary, sizeof cpu_summary,
             "CPU reference backend: OpenBLAS/LAPACKE for GEMM, X^T X, Cholesky and solves; plain C for "
             "the rest; compute = \"bf16\" %s%s", bf16 ? "runs here: " : "runs f32 here: ", bf16 ? what : why);
    return &cpu_desc;
}
