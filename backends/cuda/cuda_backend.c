/* cuda_backend.c — the CUDA backend plugin ("cuda"): cuBLAS and cuSOLVER for the linear
 * algebra, CUDA C kernels (cuda_kernels.cu) for the rest.
 *
 * Same structure as the opencl backend: every call stages its host f32 operands into device
 * buffers (strided host rows packed by cudaMemcpy2DAsync, so host padding is never written),
 * runs on the instance's one stream, and copies the results back before returning.  One
 * cuBLAS and one cuSOLVER handle and the device buffers live as long as the instance; the
 * buffers grow and are reused, never allocated per call.
 *
 * Row-major on column-major libraries: a row-major M x N array read as column-major is its
 * transpose, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T (cublasSgemm with the
 * operands swapped), a row-major lower triangle is cuBLAS/cuSOLVER's upper one (syrk, potrf,
 * potri with CUBLAS_FILL_MODE_UPPER), and L X = B is X^T L^T = B^T (trsm from the right).
 *
 *   gemm cublasSgemm   xtx_accum cublasSsyrk   cholesky cusolverDnSpotrf
 *   chol_inverse cusolverDnSpotri   trsm_lower cublasStrsm   the rest: cuda_kernels.cu
 *   attention with head_dim > 256 and anything past int indexing: LMP_EUNSUPPORTED (CPU).
 *
 * The probe answers 0 with the runtime's reason where there is no usable device ("no CUDA
 * device (cudaGetDeviceCount: ...)"), so a build with the toolkit but no GPU loads cleanly.
 * Nothing here exits, aborts or prints. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#define DEVBE_NAME "cuda"
#include "cuda_kernels.h"
#include "devbe.h"
#include "lmpress/plugin.h"

enum { N_SLOTS = 5, ROPE_SLOT = 4 };

typedef struct cu_buf {
    float *p;
    size_t cap; /* bytes */
} cu_buf;

typedef struct cu_backend {
    const lmp_host *host;
    void *hctx;
    devbe_err err;
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cusolverDnHandle_t solver;
    cu_buf buf[N_SLOTS];
    int *dinfo; /* cuSOLVER's devInfo */
    devbe_rope rope; /* RoPE's cos/sin table, in slot ROPE_SLOT on the device */
    char devname[256];
} cu_backend;

#define FAIL(be, st, ...) DEVBE_FAIL(&(be)->err, st, __VA_ARGS__)

#define CU_CHECK(be, call, what)                                                               \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess)                                                                 \
            return FAIL(be, e_ == cudaErrorMemoryAllocation ? LMP_ENOMEM : LMP_EIO, "%s: %s",  \
                        what, cudaGetErrorString(e_));                                         \
    } while (0)

#define BLAS_CHECK(be, call, what)                                                             \
    do {                                                                                       \
        cublasStatus_t s_ = (call);                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                       \
            return FAIL(be, LMP_EIO, "%s: %s", what, cublasGetStatusString(s_));               \
    } while (0)

#define SOLVER_CHECK(be, call, what)                                                           \
    do {                                                                                       \
        cusolverStatus_t s_ = (call);                                                          \
        if (s_ != CUSOLVER_STATUS_SUCCESS)                                                     \
            return FAIL(be, LMP_EIO, "%s: cuSOLVER status %d", what, (int)s_);                 \
    } while (0)

static int launched(cu_backend *be, int rc, const char *kernel)
{
    if (rc == 0) return LMP_OK;
    return FAIL(be, LMP_EIO, "kernel %s: %s", kernel, cudaGetErrorString((cudaError_t)rc));
}

/* ---- device buffers ---------------------------------------------------------------------------- */

static int slot(cu_backend *be, int i, size_t bytes, float **out)
{
    cu_buf *b = &be->buf[i];
    if (bytes == 0) bytes = 4;
    if (b->cap < bytes) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < bytes) cap *= 2;
        if (b->p) cudaFree(b->p);
        b->p = NULL;
        b->cap = 0;
        CU_CHECK(be, cudaMalloc((void **)&b->p, cap), "cudaMalloc");
        b->cap = cap;
    }
    *out = b->p;
    return LMP_OK;
}

/* Host rows x cols (stride ld) into slot i, packed. */
static int put(cu_backend *be, int i, const float *host, int64_t rows, int64_t cols, int64_t ld,
               float **out)
{
    int st = slot(be, i, (size_t)rows * (size_t)cols * sizeof(float), out);
    if (st || rows == 0 || cols == 0) return st;
    CU_CHECK(be, cudaMemcpy2DAsync(*out, (size_t)cols * sizeof(float), host, (size_t)ld * sizeof(float),
                                   (size_t)cols * sizeof(float), (size_t)rows,
                                   cudaMemcpyHostToDevice, be->stream),
             "cudaMemcpy2DAsync (to the device)");
    return LMP_OK;
}

/* Packed device rows x cols back to host rows with stride ld, then wait: the call's end. */
static int get(cu_backend *be, const float *dev, float *host, int64_t rows, int64_t cols, int64_t ld)
{
    if (rows == 0 || cols == 0) return LMP_OK;
    CU_CHECK(be, cudaMemcpy2DAsync(host, (size_t)ld * sizeof(float), dev, (size_t)cols * sizeof(float),
                                   (size_t)cols * sizeof(float), (size_t)rows,
                                   cudaMemcpyDeviceToHost, be->stream),
             "cudaMemcpy2DAsync (to the host)");
    CU_CHECK(be, cudaStreamSynchronize(be->stream), "cudaStreamSynchronize");
    return LMP_OK;
}

/* ---- lifecycle --------------------------------------------------------------------------------- */

static void cu_destroy(void *self)
{
    cu_backend *be = self;
    if (!be) return;
    if (be->stream) cudaStreamSynchronize(be->stream);
    for (int i = 0; i < N_SLOTS; i++)
        if (be->buf[i].p) cudaFree(be->buf[i].p);
    if (be->dinfo) cudaFree(be->dinfo);
    if (be->solver) cusolverDnDestroy(be->solver);
    if (be->blas) cublasDestroy(be->blas);
    if (be->stream) cudaStreamDestroy(be->stream);
    devbe_rope_free(&be->err, &be->rope);
    be->host->free(be->hctx, be);
}

static int cu_create(const lmp_host *host, void *hctx, const lmp_value *params, void **self)
{
    if (!host || !self) return LMP_EINVAL;
    *self = NULL;
    double dd = params ? params[0].num : 0.0;
    if (!(dd >= 0 && dd <= 63))
        return host->set_error(hctx, LMP_EINVAL, "cuda: device = %g is outside 0..63", dd);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return host->set_error(hctx, LMP_EUNSUPPORTED, "cuda: no CUDA device (cudaGetDeviceCount: %s)",
                               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    if ((int)dd >= count)
        return host->set_error(hctx, LMP_EINVAL, "cuda: device = %d but there are %d CUDA device(s)",
                               (int)dd, count);
    cu_backend *be = host->alloc(hctx, sizeof *be);
    if (!be) return host->set_error(hctx, LMP_ENOMEM, "cuda: out of memory");
    be->host = host;
    be->hctx = hctx;
    be->err = (devbe_err){host, hctx};
    be->device = (int)dd;
    int st = LMP_OK;
    struct cudaDeviceProp prop;
    if ((e = cudaSetDevice(be->device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, be->device)) != cudaSuccess ||
        (e = cudaStreamCreate(&be->stream)) != cudaSuccess ||
        (e = cudaMalloc((void **)&be->dinfo, sizeof(int))) != cudaSuccess) {
        st = FAIL(be, LMP_EIO, "device %d: %s", be->device, cudaGetErrorString(e));
    } else {
        snprintf(be->devname, sizeof be->devname, "%.200s (sm_%d%d, %.1f GiB)", prop.name, prop.major,
                 prop.minor, (double)prop.totalGlobalMem / (1 << 30));
        if (cublasCreate(&be->blas) != CUBLAS_STATUS_SUCCESS)
            st = FAIL(be, LMP_EIO, "cublasCreate failed on %s", be->devname);
        else if (cusolverDnCreate(&be->solver) != CUSOLVER_STATUS_SUCCESS)
            st = FAIL(be, LMP_EIO, "cusolverDnCreate failed on %s", be->devname);
        else if (cublasSetStream(be->blas, be->stream) != CUBLAS_STATUS_SUCCESS ||
                 cusolverDnSetStream(be->solver, be->stream) != CUSOLVER_STATUS_SUCCESS)
            st = FAIL(be, LMP_EIO, "setting the stream of cuBLAS/cuSOLVER failed");
        /* no TF32: the CPU reference is plain f32 */
        else if (cublasSetMathMode(be->blas, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS)
            st = FAIL(be, LMP_EIO, "cublasSetMathMode failed");
    }
    if (st) {
        cu_destroy(be);
        return st;
    }
    host->log(hctx, LMP_LOG_INFO, "cuda: %s", be->devname);
    *self = be;
    return LMP_OK;
}

/* > 0 when a device exists and a tiny kernel runs on it; else 0 and the runtime's reason. */
static int cu_probe(const lmp_host *host, void *hctx)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        host->set_error(hctx, LMP_EUNSUPPORTED, "no CUDA device (cudaGetDeviceCount: %s)",
                        e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    float *d = NULL, x[4] = {1, 2, 3, 4};
    if ((e = cudaMalloc((void **)&d, sizeof x)) == cudaSuccess &&
        (e = cudaMemcpy(d, x, sizeof x, cudaMemcpyHostToDevice)) == cudaSuccess &&
        (e = (cudaError_t)lmp_cu_probe(d)) == cudaSuccess &&
        (e = cudaMemcpy(x, d, sizeof x, cudaMemcpyDeviceToHost)) == cudaSuccess) {
    }
    if (d) cudaFree(d);
    if (e != cudaSuccess) {
        host->set_error(hctx, LMP_EUNSUPPORTED, "the probe kernel failed: %s (built for this GPU's "
                        "architecture? LMP_CUDA_ARCHITECTURES)", cudaGetErrorString(e));
        return 0;
    }
    if (x[0] != 3.0f || x[3] != 9.0f) {
        host->set_error(hctx, LMP_EUNSUPPORTED, "the probe kernel computed a wrong result");
        return 0;
    }
    return 1;
}

/* ---- linear algebra ---------------------------------------------------------------------------- */

static int cu_gemm(void *self, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                   int64_t ldc)
{
    cu_backend *be = self;
    int st;
    if (M < 0 || N < 0 || K < 0)
        return FAIL(be, LMP_EINVAL, "gemm: negative shape M=%lld N=%lld K=%lld", (long long)M,
                    (long long)N, (long long)K);
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    if ((st = devbe_check_mat(&be->err, "gemm", "A", A, ar, ac, lda)) ||
        (st = devbe_check_mat(&be->err, "gemm", "B", B, br, bc, ldb)) ||
        (st = devbe_check_mat(&be->err, "gemm", "C", C, M, N, ldc)))
        return st;
    if (M == 0 || N == 0) return LMP_OK;
    if (K == 0 || alpha == 0.0f) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return LMP_OK;
    }
    float *a, *b, *c;
    if ((st = put(be, 0, A, ar, ac, lda, &a)) || (st = put(be, 1, B, br, bc, ldb, &b))) return st;
    if (beta == 0.0f) { /* cuBLAS does not read C when beta == 0 */
        if ((st = slot(be, 2, (size_t)(M * N) * sizeof(float), &c))) return st;
    } else if ((st = put(be, 2, C, M, N, ldc, &c))) {
        return st;
    }
    /* C^T[N,M] = op(B)^T op(A)^T, column-major, packed leading dimensions */
    BLAS_CHECK(be, cublasSgemm(be->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                               (int)N, (int)M, (int)K, &alpha, b, (int)bc, a, (int)ac, &beta, c, (int)N),
               "cublasSgemm");
    return get(be, c, C, M, N, ldc);
}

static int cu_xtx_accum(void *self, int64_t n, int64_t c, const float *X, float alpha, float *H)
{
    cu_backend *be = self;
    int st;
    if ((st = devbe_check_mat(&be->err, "xtx_accum", "X", X, n, c, c)) ||
        (st = devbe_check_mat(&be->err, "xtx_accum", "H", H, c, c, c)))
        return st;
    if (n == 0 || c == 0) return LMP_OK;
    float *x, *h, one = 1.0f;
    if ((st = put(be, 0, X, n, c, c, &x)) || (st = put(be, 2, H, c, c, c, &h))) return st;
    /* column-major X^T is [c, n]: H += alpha X^T (X^T)^T, row-major lower = column-major upper */
    BLAS_CHECK(be, cublasSsyrk(be->blas, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, (int)c, (int)n, &alpha,
                               x, (int)c, &one, h, (int)c),
               "cublasSsyrk");
    if ((st = get(be, h, H, c, c, c))) return st;
    devbe_mirror_lower(c, H);
    return LMP_OK;
}

static int cu_cholesky(void *self, int64_t n, float *A, int64_t *bad_pivot)
{
    cu_backend *be = self;
    int st = devbe_check_mat(&be->err, "cholesky", "A", A, n, n, n);
    if (st || n == 0) return st;
    float *a, *work;
    int lwork = 0, info = 0;
    if ((st = put(be, 0, A, n, n, n, &a))) return st;
    SOLVER_CHECK(be, cusolverDnSpotrf_bufferSize(be->solver, CUBLAS_FILL_MODE_UPPER, (int)n, a, (int)n, &lwork),
                 "cusolverDnSpotrf_bufferSize");
    if ((st = slot(be, 1, (size_t)lwork * sizeof(float), &work))) return st;
    SOLVER_CHECK(be, cusolverDnSpotrf(be->solver, CUBLAS_FILL_MODE_UPPER, (int)n, a, (int)n, work,
                                      lwork, be->dinfo),
                 "cusolverDnSpotrf");
    CU_CHECK(be, cudaMemcpyAsync(&info, be->dinfo, sizeof info, cudaMemcpyDeviceToHost, be->stream),
             "cudaMemcpyAsync (devInfo)");
    if ((st = get(be, a, A, n, n, n))) return st;
    if (info > 0) {
        if (bad_pivot) *bad_pivot = (int64_t)info - 1;
        return FAIL(be, LMP_ENOTSPD, "cholesky: matrix is not positive definite (pivot %lld of %lld)",
                    (long long)info - 1, (long long)n);
    }
    if (info < 0) return FAIL(be, LMP_EINVAL, "cholesky: cusolverDnSpotrf argument %d", -info);
    for (int64_t i = 0; i < n; i++) memset(A + i * n + i + 1, 0, (size_t)(n - i - 1) * sizeof *A);
    return LMP_OK;
}

static int cu_chol_inverse(void *self, int64_t n, float *L)
{
    cu_backend *be = self;
    int st = devbe_check_mat(&be->err, "chol_inverse", "L", L, n, n, n);
    if (st || n == 0) return st;
    for (int64_t i = 0; i < n; i++)
        if (L[i * n + i] == 0.0f)
            return FAIL(be, LMP_ENOTSPD, "chol_inverse: L[%lld,%lld] is zero, the matrix is singular",
                        (long long)i, (long long)i);
    float *l, *work;
    int lwork = 0, info = 0;
    if ((st = put(be, 0, L, n, n, n, &l))) return st;
    SOLVER_CHECK(be, cusolverDnSpotri_bufferSize(be->solver, CUBLAS_FILL_MODE_UPPER, (int)n, l, (int)n, &lwork),
                 "cusolverDnSpotri_bufferSize");
    if ((st = slot(be, 1, (size_t)lwork * sizeof(float), &work))) return st;
    SOLVER_CHECK(be, cusolverDnSpotri(be->solver, CUBLAS_FILL_MODE_UPPER, (int)n, l, (int)n, work,
                                      lwork, be->dinfo),
                 "cusolverDnSpotri");
    CU_CHECK(be, cudaMemcpyAsync(&info, be->dinfo, sizeof info, cudaMemcpyDeviceToHost, be->stream),
             "cudaMemcpyAsync (devInfo)");
    if ((st = get(be, l, L, n, n, n))) return st;
    if (info != 0) return FAIL(be, info > 0 ? LMP_ENOTSPD : LMP_EINVAL, "chol_inverse: cusolverDnSpotri info %d", info);
    devbe_mirror_lower(n, L);
    return LMP_OK;
}

static int cu_trsm_lower(void *self, int trans, int64_t n, int64_t nrhs, const float *L, float *B)
{
    cu_backend *be = self;
    int st;
    if ((st = devbe_check_mat(&be->err, "trsm_lower", "L", L, n, n, n)) ||
        (st = devbe_check_mat(&be->err, "trsm_lower", "B", B, n, nrhs, nrhs)))
        return st;
    if (n == 0 || nrhs == 0) return LMP_OK;
    float *l, *b, one = 1.0f;
    if ((st = put(be, 0, L, n, n, n, &l)) || (st = put(be, 2, B, n, nrhs, nrhs, &b))) return st;
    /* column-major: B^T [nrhs, n], L^T upper; op(L) X = B  <=>  X^T op(L)^T = B^T */
    BLAS_CHECK(be, cublasStrsm(be->blas, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_UPPER,
                               trans ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, (int)nrhs,
                               (int)n, &one, l, (int)n, b, (int)nrhs),
               "cublasStrsm");
    return get(be, b, B, n, nrhs, nrhs);
}

/* ---- kernels ------------------------------------------------------------------------------------ */

static int cu_rmsnorm(void *self, int64_t T, int64_t C, const float *x, const float *w, float eps,
                      float *out)
{
    cu_backend *be = self;
    int st = devbe_check_rows(&be->err, "rmsnorm", T, C, x, w, out);
    if (st || T == 0 || C == 0) return st;
    float *dx, *dw;
    if ((st = put(be, 0, x, T, C, C, &dx)) || (st = put(be, 1, w, 1, C, C, &dw)) ||
        (st = launched(be, lmp_cu_rmsnorm(be->stream, (int)T, (int)C, dx, dw, eps, dx), "rmsnorm")))
        return st;
    return get(be, dx, out, T, C, C);
}

static int cu_layernorm(void *self, int64_t T, int64_t C, const float *x, const float *w,
                        const float *b, float eps, float *out)
{
    cu_backend *be = self;
    int st = devbe_check_rows(&be->err, "layernorm", T, C, x, w, out);
    if (st || T == 0 || C == 0) return st;
    float *dx, *dw, *db = NULL;
    if ((st = put(be, 0, x, T, C, C, &dx)) || (st = put(be, 1, w, 1, C, C, &dw)) ||
        (b && (st = put(be, 2, b, 1, C, C, &db))) ||
        (st = launched(be, lmp_cu_layernorm(be->stream, (int)T, (int)C, dx, dw, db, eps, dx), "layernorm")))
        return st;
    return get(be, dx, out, T, C, C);
}

static int cu_rope(void *self, int64_t T, int64_t n_heads, int64_t head_dim, int64_t pos0,
                   float theta, float *x)
{
    cu_backend *be = self;
    int st = devbe_check_rope(&be->err, T, n_heads, head_dim);
    if (st || T == 0 || n_heads == 0 || head_dim == 0) return st;
    if (!x) return FAIL(be, LMP_EINVAL, "rope: x is NULL");
    int64_t n = T * n_heads * head_dim, ncs = T * head_dim; /* [T, head_dim/2, 2] */
    float *dx, *dcs;
    int upload;
    if ((st = devbe_rope_prepare(&be->err, &be->rope, T, head_dim, pos0, theta, &upload))) return st;
    if (upload) {
        if ((st = put(be, ROPE_SLOT, be->rope.cs, 1, ncs, ncs, &dcs))) return st;
        be->rope.valid = 1;
    }
    dcs = be->buf[ROPE_SLOT].p;
    if ((st = put(be, 0, x, 1, n, n, &dx)) ||
        (st = launched(be, lmp_cu_rope(be->stream, (int)T, (int)n_heads, (int)head_dim, dcs, dx), "rope")))
        return st;
    return get(be, dx, x, 1, n, n);
}

static int cu_attention(void *self, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                        const float *q, const float *k, const float *v, float *out)
{
    cu_backend *be = self;
    int st = devbe_check_attention(&be->err, T, n_heads, n_kv_heads, hd);
    if (st || T == 0 || n_heads == 0) return st;
    if (!q || !k || !v || !out) return FAIL(be, LMP_EINVAL, "attention: NULL operand");
    if (hd > LMP_CU_MAXHD || T > 65535 * 1024) return LMP_EUNSUPPORTED;
    int64_t nq = T * n_heads * hd, nkv = T * n_kv_heads * hd;
    float *dq, *dk, *dv, *dout;
    if ((st = put(be, 0, q, 1, nq, nq, &dq)) || (st = put(be, 1, k, 1, nkv, nkv, &dk)) ||
        (st = put(be, 2, v, 1, nkv, nkv, &dv)) || (st = slot(be, 3, (size_t)nq * sizeof(float), &dout)) ||
        (st = launched(be, lmp_cu_attention(be->stream, (int)T, (int)n_heads, (int)n_kv_heads, (int)hd,
                                            dq, dk, dv, dout), "attention")))
        return st;
    return get(be, dout, out, 1, nq, nq);
}

static int cu_swiglu(void *self, int64_t n, const float *gate, const float *up, float *out)
{
    cu_backend *be = self;
    int st = devbe_check_rows(&be->err, "swiglu", 1, n, gate, up, out);
    if (st || n == 0) return st;
    float *g, *u;
    if ((st = put(be, 0, gate, 1, n, n, &g)) || (st = put(be, 1, up, 1, n, n, &u)) ||
        (st = launched(be, lmp_cu_swiglu(be->stream, (size_t)n, g, u, g), "swiglu")))
        return st;
    return get(be, g, out, 1, n, n);
}

static int cu_gelu(void *self, int64_t n, const float *x, float *out)
{
    cu_backend *be = self;
    int st = devbe_check_rows(&be->err, "gelu", 1, n, x, x, out);
    if (st || n == 0) return st;
    float *dx;
    if ((st = put(be, 0, x, 1, n, n, &dx)) ||
        (st = launched(be, lmp_cu_gelu(be->stream, (size_t)n, dx, dx), "gelu")))
        return st;
    return get(be, dx, out, 1, n, n);
}

static int cu_log_softmax(void *self, int64_t rows, int64_t cols, const float *x, float *out)
{
    cu_backend *be = self;
    int st = devbe_check_rows(&be->err, "log_softmax", rows, cols, x, x, out);
    if (st || rows == 0 || cols == 0) return st;
    float *dx;
    if ((st = put(be, 0, x, rows, cols, cols, &dx)) ||
        (st = launched(be, lmp_cu_log_softmax(be->stream, (int)rows, (int)cols, dx, dx), "log_softmax")))
        return st;
    return get(be, dx, out, rows, cols, cols);
}

static int cu_reduce_cols(void *self, lmp_reduce kind, int64_t n, int64_t c, const float *X,
                          float *out)
{
    cu_backend *be = self;
    if (kind < LMP_REDUCE_ABSMAX || kind > LMP_REDUCE_SUM)
        return FAIL(be, LMP_EINVAL, "reduce_cols: unknown reduction %d", (int)kind);
    int st = devbe_check_mat(&be->err, "reduce_cols", "X", X, n, c, c);
    if (st || n == 0 || c == 0) return st;
    if (!out) return FAIL(be, LMP_EINVAL, "reduce_cols: out is NULL");
    float *dx, *dout;
    if ((st = put(be, 0, X, n, c, c, &dx)) || (st = put(be, 1, out, 1, c, c, &dout)) ||
        (st = launched(be, lmp_cu_reduce_cols(be->stream, (int)kind, (int)n, (int)c, dx, dout), "reduce_cols")))
        return st;
    return get(be, dout, out, 1, c, c);
}

static int quantize_slices(cu_backend *be, float *W, int64_t rows, int64_t cols, int64_t nr,
                           int64_t nc, int kind, int bits, int rounding, float sscale,
                           float *scales, float *zeros)
{
    int64_t ncs = (cols + nc - 1) / nc, ns = ((rows + nr - 1) / nr) * ncs;
    float *dw = NULL, *ds = NULL, *dz = NULL;
    int st;
    if ((st = put(be, 0, W, rows, cols, cols, &dw)) || (st = slot(be, 1, (size_t)ns * sizeof(float), &ds)) ||
        (st = slot(be, 2, (size_t)ns * sizeof(float), &dz)) ||
        (st = launched(be, lmp_cu_quantize(be->stream, dw, ds, dz, (int)rows, (int)cols, (int)nr, (int)nc,
                                           (int)ncs, (int)ns, kind, bits, rounding, sscale), "quantize")))
        return st;
    if (scales && (st = get(be, ds, scales, 1, ns, ns))) return st;
    if (zeros && kind == 1 && (st = get(be, dz, zeros, 1, ns, ns))) return st;
    return get(be, dw, W, rows, cols, cols);
}

static int cu_quantize_weight(void *self, const lmp_wspec *spec, int64_t rows, int64_t cols,
                              float *W, float *scales, float *zeros)
{
    cu_backend *be = self;
    int st = devbe_check_wspec(&be->err, spec);
    if (!st) st = devbe_check_rows(&be->err, "quantize_weight", rows, cols, W, W, W);
    if (st || rows == 0 || cols == 0) return st;
    int64_t nr, nc, ncs, ns;
    devbe_wslices(spec, rows, cols, &nr, &nc, &ncs, &ns);
    return quantize_slices(be, W, rows, cols, nr, nc, spec->sym ? 0 : 1, spec->bits, spec->rounding,
                           0.0f, scales, zeros);
}

static int cu_quantize_act(void *self, const lmp_aspec *spec, int64_t T, int64_t C, float *X)
{
    cu_backend *be = self;
    int st = devbe_check_aspec(&be->err, spec);
    if (st || spec->mode == LMP_ACT_NONE) return st;
    if ((st = devbe_check_rows(&be->err, "quantize_act", T, C, X, X, X)) || T == 0 || C == 0) return st;
    int whole = spec->mode == LMP_ACT_DYN_TENSOR;
    return quantize_slices(be, X, T, C, whole ? T : 1, C, spec->mode == LMP_ACT_STATIC_TENSOR ? 2 : 3,
                           spec->bits, spec->rounding, spec->scale, NULL, NULL);
}

/* ---- descriptor ---------------------------------------------------------------------------------- */

static const lmp_backend_i cu_vtable = {
    .struct_size = sizeof(lmp_backend_i),
    .create = cu_create,
    .destroy = cu_destroy,
    .gemm = cu_gemm,
    .xtx_accum = cu_xtx_accum,
    .cholesky = cu_cholesky,
    .chol_inverse = cu_chol_inverse,
    .trsm_lower = cu_trsm_lower,
    .rmsnorm = cu_rmsnorm,
    .rope = cu_rope,
    .attention = cu_attention,
    .swiglu = cu_swiglu,
    .log_softmax = cu_log_softmax,
    .reduce_cols = cu_reduce_cols,
    .quantize_weight = cu_quantize_weight,
    .quantize_act = cu_quantize_act,
    .layernorm = cu_layernorm,
    .gelu = cu_gelu,
};

static const lmp_param_spec cu_params[] = {
    {
        .name = "device",
        .type = LMP_PARAM_INT,
        .help = "CUDA device index (nvidia-smi's order unless CUDA_VISIBLE_DEVICES says otherwise)",
        .def_num = 0,
        .min = 0,
        .max = 63,
    },
};

static const lmp_plugin_desc cu_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_BACKEND,
    .name = "cuda",
    .version = "0.1.0",
    .summary = "CUDA backend: cuBLAS for GEMM, X^T X and triangular solves, cuSOLVER for Cholesky "
               "and its inverse, CUDA C kernels for the rest",
    .params = cu_params,
    .n_params = sizeof cu_params / sizeof cu_params[0],
    .vtable = &cu_vtable,
    .probe = cu_probe,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &cu_desc; }
