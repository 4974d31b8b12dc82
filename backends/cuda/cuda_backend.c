/* cuda_backend.c — the CUDA backend plugin ("cuda"): cuBLAS and cuSOLVER for the linear
 * algebra, CUDA C kernels (cuda_kernels.cu) for the rest.
 *
 * The host half of each op is ../common/devbe.c, shared with the opencl backend: it checks the
 * arguments, stages the host f32 operands into device buffers that grow and are reused (never
 * allocated per call), and copies the results back before returning.  What is here is the
 * device half: the copies (strided host rows packed by cudaMemcpy2DAsync, so host padding is
 * never written), the library calls and kernel launches on the instance's one stream, and the
 * factorizations, which only this backend offers.  One cuBLAS and one cuSOLVER handle live as
 * long as the instance.
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

#include <stdio.h>
#include <string.h>

#include "cuda_kernels.h"
#include "devbe.h"
#include "lmpress/plugin.h"

typedef struct cu_backend {
    devbe base; /* first: the vtable's self */
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cusolverDnHandle_t solver;
    int *dinfo; /* cuSOLVER's devInfo */
    char devname[256];
} cu_backend;

static cu_backend *cu(devbe *d) { return (cu_backend *)d; }

#define FAIL(d, st, ...) DEVBE_FAIL(&(d)->err, st, __VA_ARGS__)

#define CU_CHECK(d, call, what)                                                                \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess)                                                                 \
            return FAIL(d, e_ == cudaErrorMemoryAllocation ? LMP_ENOMEM : LMP_EIO, "%s: %s",   \
                        what, cudaGetErrorString(e_));                                         \
    } while (0)

#define BLAS_CHECK(d, call, what)                                                              \
    do {                                                                                       \
        cublasStatus_t s_ = (call);                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                       \
            return FAIL(d, LMP_EIO, "%s: %s", what, cublasGetStatusString(s_));                \
    } while (0)

#define SOLVER_CHECK(d, call, what)                                                            \
    do {                                                                                       \
        cusolverStatus_t s_ = (call);                                                          \
        if (s_ != CUSOLVER_STATUS_SUCCESS)                                                     \
            return FAIL(d, LMP_EIO, "%s: cuSOLVER status %d", what, (int)s_);                  \
    } while (0)

static int launched(devbe *d, int rc, const char *kernel)
{
    if (rc == 0) return LMP_OK;
    return FAIL(d, LMP_EIO, "kernel %s: %s", kernel, cudaGetErrorString((cudaError_t)rc));
}

/* ---- device buffers ---------------------------------------------------------------------------- */

static int cu_alloc(devbe *d, size_t bytes, devbe_mem *out)
{
    CU_CHECK(d, cudaMalloc(out, bytes), "cudaMalloc");
    return LMP_OK;
}

static void cu_release(devbe *d, devbe_mem m) { cudaFree(m); }

/* Strided host rows are packed by cudaMemcpy2DAsync, so host padding is never written. */
static int cu_write(devbe *d, devbe_mem m, const float *host, int64_t rows, int64_t cols, int64_t ld)
{
    CU_CHECK(d, cudaMemcpy2DAsync(m, (size_t)cols * sizeof(float), host, (size_t)ld * sizeof(float),
                                  (size_t)cols * sizeof(float), (size_t)rows,
                                  cudaMemcpyHostToDevice, cu(d)->stream),
             "cudaMemcpy2DAsync (to the device)");
    return LMP_OK;
}

static int cu_read(devbe *d, devbe_mem m, float *host, int64_t rows, int64_t cols, int64_t ld)
{
    CU_CHECK(d, cudaMemcpy2DAsync(host, (size_t)ld * sizeof(float), m, (size_t)cols * sizeof(float),
                                  (size_t)cols * sizeof(float), (size_t)rows,
                                  cudaMemcpyDeviceToHost, cu(d)->stream),
             "cudaMemcpy2DAsync (to the host)");
    CU_CHECK(d, cudaStreamSynchronize(cu(d)->stream), "cudaStreamSynchronize");
    return LMP_OK;
}

/* ---- lifecycle --------------------------------------------------------------------------------- */

static void cu_destroy(void *self)
{
    cu_backend *be = self;
    if (!be) return;
    if (be->stream) cudaStreamSynchronize(be->stream);
    devbe_fini(&be->base);
    if (be->dinfo) cudaFree(be->dinfo);
    if (be->solver) cusolverDnDestroy(be->solver);
    if (be->blas) cublasDestroy(be->blas);
    if (be->stream) cudaStreamDestroy(be->stream);
    be->base.err.host->free(be->base.err.hctx, be);
}

static const devbe_dev cu_dev;

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
    devbe_init(&be->base, host, hctx, &cu_dev);
    be->base.block_rows = 2048; /* devbe.h: the block path's rows per batch of windows */
    be->base.att_max_hd = LMP_CU_MAXHD;
    be->base.att_max_T = 65535 * 1024;
    be->base.exact_div = 1; /* IEEE division: nvcc's default, never --use_fast_math */
    be->device = (int)dd;
    int st = LMP_OK;
    struct cudaDeviceProp prop;
    if ((e = cudaSetDevice(be->device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, be->device)) != cudaSuccess ||
        (e = cudaStreamCreate(&be->stream)) != cudaSuccess ||
        (e = cudaMalloc((void **)&be->dinfo, sizeof(int))) != cudaSuccess) {
        st = FAIL(&be->base, LMP_EIO, "device %d: %s", be->device, cudaGetErrorString(e));
    } else {
        snprintf(be->devname, sizeof be->devname, "%.200s (sm_%d%d, %.1f GiB)", prop.name, prop.major,
                 prop.minor, (double)prop.totalGlobalMem / (1 << 30));
        if (cublasCreate(&be->blas) != CUBLAS_STATUS_SUCCESS)
            st = FAIL(&be->base, LMP_EIO, "cublasCreate failed on %s", be->devname);
        else if (cusolverDnCreate(&be->solver) != CUSOLVER_STATUS_SUCCESS)
            st = FAIL(&be->base, LMP_EIO, "cusolverDnCreate failed on %s", be->devname);
        else if (cublasSetStream(be->blas, be->stream) != CUBLAS_STATUS_SUCCESS ||
                 cusolverDnSetStream(be->solver, be->stream) != CUSOLVER_STATUS_SUCCESS)
            st = FAIL(&be->base, LMP_EIO, "setting the stream of cuBLAS/cuSOLVER failed");
        /* no TF32: the CPU reference is plain f32 */
        else if (cublasSetMathMode(be->blas, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS)
            st = FAIL(&be->base, LMP_EIO, "cublasSetMathMode failed");
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

/* ---- linear algebra on staged buffers ------------------------------------------------------------ */

static int cu_gemm(devbe *d, int ta, int tb, int M, int N, int K, float alpha, devbe_mem a, int lda,
                   devbe_mem b, int ldb, float beta, devbe_mem c)
{
    /* C^T[N,M] = op(B)^T op(A)^T, column-major; cuBLAS does not read C when beta == 0 */
    BLAS_CHECK(d, cublasSgemm(cu(d)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                              N, M, K, &alpha, b, ldb, a, lda, &beta, c, N),
               "cublasSgemm");
    return LMP_OK;
}

static int cu_xtx_accum(devbe *d, int n, int c, float alpha, devbe_mem x, devbe_mem h)
{
    float one = 1.0f;
    /* column-major X^T is [c, n]: H += alpha X^T (X^T)^T, row-major lower = column-major upper */
    BLAS_CHECK(d, cublasSsyrk(cu(d)->blas, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, c, n, &alpha, x, c,
                              &one, h, c),
               "cublasSsyrk");
    return LMP_OK;
}

static int cu_trsm_lower(devbe *d, int trans, int n, int nrhs, devbe_mem l, devbe_mem b)
{
    float one = 1.0f;
    /* column-major: B^T [nrhs, n], L^T upper; op(L) X = B  <=>  X^T op(L)^T = B^T */
    BLAS_CHECK(d, cublasStrsm(cu(d)->blas, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_UPPER,
                              trans ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, nrhs, n, &one,
                              l, n, b, nrhs),
               "cublasStrsm");
    return LMP_OK;
}

/* The factorizations are cuda's own (OpenCL's CLBlast has none), whole entries of the vtable. */
static int cu_cholesky(void *self, int64_t n, float *A, int64_t *bad_pivot)
{
    cu_backend *be = self;
    devbe *d = &be->base;
    int st = devbe_check_mat(&d->err, "cholesky", "A", A, n, n, n);
    if (st || n == 0) return st;
    devbe_mem a, work;
    int lwork = 0, info = 0;
    if ((st = devbe_put(d, 0, A, n, n, n, &a))) return st;
    SOLVER_CHECK(d, cusolverDnSpotrf_bufferSize(be->solver, CUBLAS_FILL_MODE_UPPER, (int)n, a, (int)n, &lwork),
                 "cusolverDnSpotrf_bufferSize");
    if ((st = devbe_slot(d, 1, (size_t)lwork * sizeof(float), &work))) return st;
    SOLVER_CHECK(d, cusolverDnSpotrf(be->solver, CUBLAS_FILL_MODE_UPPER, (int)n, a, (int)n, work,
                                     lwork, be->dinfo),
                 "cusolverDnSpotrf");
    CU_CHECK(d, cudaMemcpyAsync(&info, be->dinfo, sizeof info, cudaMemcpyDeviceToHost, be->stream),
             "cudaMemcpyAsync (devInfo)");
    if ((st = devbe_get(d, a, A, n, n, n))) return st;
    if (info > 0) {
        if (bad_pivot) *bad_pivot = (int64_t)info - 1;
        return FAIL(d, LMP_ENOTSPD, "cholesky: matrix is not positive definite (pivot %lld of %lld)",
                    (long long)info - 1, (long long)n);
    }
    if (info < 0) return FAIL(d, LMP_EINVAL, "cholesky: cusolverDnSpotrf argument %d", -info);
    for (int64_t i = 0; i < n; i++) memset(A + i * n + i + 1, 0, (size_t)(n - i - 1) * sizeof *A);
    return LMP_OK;
}

static int cu_chol_inverse(void *self, int64_t n, float *L)
{
    cu_backend *be = self;
    devbe *d = &be->base;
    int st = devbe_check_mat(&d->err, "chol_inverse", "L", L, n, n, n);
    if (st || n == 0) return st;
    for (int64_t i = 0; i < n; i++)
        if (L[i * n + i] == 0.0f)
            return FAIL(d, LMP_ENOTSPD, "chol_inverse: L[%lld,%lld] is zero, the matrix is singular",
                        (long long)i, (long long)i);
    devbe_mem l, work;
    int lwork = 0, info = 0;
    if ((st = devbe_put(d, 0, L, n, n, n, &l))) return st;
    SOLVER_CHECK(d, cusolverDnSpotri_bufferSize(be->solver, CUBLAS_FILL_MODE_UPPER, (int)n, l, (int)n, &lwork),
                 "cusolverDnSpotri_bufferSize");
    if ((st = devbe_slot(d, 1, (size_t)lwork * sizeof(float), &work))) return st;
    SOLVER_CHECK(d, cusolverDnSpotri(be->solver, CUBLAS_FILL_MODE_UPPER, (int)n, l, (int)n, work,
                                     lwork, be->dinfo),
                 "cusolverDnSpotri");
    CU_CHECK(d, cudaMemcpyAsync(&info, be->dinfo, sizeof info, cudaMemcpyDeviceToHost, be->stream),
             "cudaMemcpyAsync (devInfo)");
    if ((st = devbe_get(d, l, L, n, n, n))) return st;
    if (info != 0) return FAIL(d, info > 0 ? LMP_ENOTSPD : LMP_EINVAL, "chol_inverse: cusolverDnSpotri info %d", info);
    devbe_mirror_lower(n, L);
    return LMP_OK;
}

/* ---- kernels on staged buffers ------------------------------------------------------------------ */

static int cu_rmsnorm(devbe *d, int T, int C, devbe_mem x, devbe_mem w, float eps)
{
    return launched(d, lmp_cu_rmsnorm(cu(d)->stream, T, C, x, w, eps, x), "rmsnorm");
}

static int cu_layernorm(devbe *d, int T, int C, devbe_mem x, devbe_mem w, devbe_mem b, float eps)
{
    return launched(d, lmp_cu_layernorm(cu(d)->stream, T, C, x, w, b, eps, x), "layernorm");
}

static int cu_rope(devbe *d, int T, int n_heads, int head_dim, devbe_mem cs, devbe_mem x)
{
    return launched(d, lmp_cu_rope(cu(d)->stream, T, n_heads, head_dim, cs, x), "rope");
}

static int cu_attention(devbe *d, int T, int n_heads, int n_kv_heads, int hd, devbe_mem q,
                        devbe_mem k, devbe_mem v, devbe_mem out)
{
    return launched(d, lmp_cu_attention(cu(d)->stream, T, n_heads, n_kv_heads, hd, q, k, v, out),
                    "attention");
}

static int cu_swiglu(devbe *d, int n, devbe_mem gate, devbe_mem up)
{
    return launched(d, lmp_cu_swiglu(cu(d)->stream, (size_t)n, gate, up, gate), "swiglu");
}

static int cu_gelu(devbe *d, int n, devbe_mem x)
{
    return launched(d, lmp_cu_gelu(cu(d)->stream, (size_t)n, x, x), "gelu");
}

static int cu_log_softmax(devbe *d, int rows, int cols, devbe_mem x)
{
    return launched(d, lmp_cu_log_softmax(cu(d)->stream, rows, cols, x, x), "log_softmax");
}

static int cu_reduce_cols(devbe *d, int kind, int n, int c, devbe_mem x, devbe_mem out)
{
    return launched(d, lmp_cu_reduce_cols(cu(d)->stream, kind, n, c, x, out), "reduce_cols");
}

static int cu_quantize(devbe *d, const devbe_quant *q, devbe_mem w, devbe_mem scales, devbe_mem zeros,
                       devbe_mem codes)
{
    return launched(d, lmp_cu_quantize(cu(d)->stream, w, scales, zeros, q->want_codes ? codes : NULL,
                                       q->rows, q->cols, q->nr, q->nc, q->ncs, q->n_slices, q->kind,
                                       q->bits, q->rounding, q->sscale, q->clip, q->mode),
                    "quantize");
}

/* ---- the block path (devbe_block.c): buffers stay on the device ---------------------------------- */

static int cu_copy(devbe *d, devbe_mem dst, int64_t dst_at, devbe_mem src, int64_t n)
{
    CU_CHECK(d, cudaMemcpyAsync((float *)dst + dst_at, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
                                cu(d)->stream),
             "cudaMemcpyAsync (on the device)");
    return LMP_OK;
}

static int cu_zero(devbe *d, devbe_mem m, int64_t n)
{
    CU_CHECK(d, cudaMemsetAsync(m, 0, (size_t)n * sizeof(float), cu(d)->stream), "cudaMemsetAsync");
    return LMP_OK;
}

static int cu_add_bias(devbe *d, int64_t rows, int64_t cols, devbe_mem x, devbe_mem b)
{
    return launched(d, lmp_cu_add_bias(cu(d)->stream, rows, cols, x, b), "add_bias");
}

static int cu_add(devbe *d, int64_t n, devbe_mem a, devbe_mem b, devbe_mem out)
{
    return launched(d, lmp_cu_add(cu(d)->stream, n, a, b, out), "add");
}

static int cu_mul(devbe *d, int64_t n, devbe_mem x, devbe_mem y)
{
    return launched(d, lmp_cu_mul(cu(d)->stream, n, x, y), "mul");
}

static int cu_scale(devbe *d, int64_t n, devbe_mem x, float v)
{
    return launched(d, lmp_cu_scale(cu(d)->stream, n, x, v), "scale");
}

static int cu_rope_part(devbe *d, int64_t batch, int64_t T, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                        devbe_mem cs, devbe_mem x)
{
    return launched(d, lmp_cu_rope_part(cu(d)->stream, batch, T, n_heads, head_dim, n_rot, cs, x), "rope_part");
}

static int cu_attention_window(devbe *d, int64_t batch, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                               int64_t window, float softcap, devbe_mem q, devbe_mem k, devbe_mem v, devbe_mem out)
{
    return launched(d, lmp_cu_attention_window(cu(d)->stream, batch, T, n_heads, n_kv_heads, hd, window, softcap, q, k,
                                               v, out),
                    "attention_window");
}

/* The work-group attention kernel on each window of a batch: device pointers offset by whole
 * windows (int sizes per window: devbe_block.c checked T x columns fits int). */
static int cu_attention_batch(devbe *d, int64_t batch, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                              devbe_mem q, devbe_mem k, devbe_mem v, devbe_mem out)
{
    const int64_t nq = T * n_heads * hd, nkv = T * n_kv_heads * hd;
    for (int64_t b = 0; b < batch; b++) {
        int st = launched(d, lmp_cu_attention(cu(d)->stream, (int)T, (int)n_heads, (int)n_kv_heads, (int)hd,
                                              (const float *)q + b * nq, (const float *)k + b * nkv,
                                              (const float *)v + b * nkv, (float *)out + b * nq),
                          "attention");
        if (st) return st;
    }
    return LMP_OK;
}

static int cu_sqsum_cols(devbe *d, int64_t n, int64_t c, devbe_mem x, devbe_mem out)
{
    return launched(d, lmp_cu_sqsum_cols(cu(d)->stream, n, c, x, out), "sqsum_cols");
}

static int cu_sync(devbe *d)
{
    CU_CHECK(d, cudaStreamSynchronize(cu(d)->stream), "cudaStreamSynchronize");
    return LMP_OK;
}

/* ---- descriptor ---------------------------------------------------------------------------------- */

static const devbe_dev cu_dev = {
    .alloc = cu_alloc, .release = cu_release, .write = cu_write, .read = cu_read,
    .gemm = cu_gemm, .xtx_accum = cu_xtx_accum, .trsm_lower = cu_trsm_lower,
    .rmsnorm = cu_rmsnorm, .layernorm = cu_layernorm, .rope = cu_rope, .attention = cu_attention,
    .swiglu = cu_swiglu, .gelu = cu_gelu, .log_softmax = cu_log_softmax,
    .reduce_cols = cu_reduce_cols, .quantize = cu_quantize,
    .copy = cu_copy, .zero = cu_zero, .add_bias = cu_add_bias, .add = cu_add, .mul = cu_mul, .scale = cu_scale,
    .rope_part = cu_rope_part, .attention_window = cu_attention_window, .sqsum_cols = cu_sqsum_cols,
    .attention_batch = cu_attention_batch, .sync = cu_sync,
};

static const lmp_backend_i cu_vtable = {
    .struct_size = sizeof(lmp_backend_i),
    .create = cu_create,
    .destroy = cu_destroy,
    .cholesky = cu_cholesky,
    .chol_inverse = cu_chol_inverse,
    DEVBE_VTABLE_ENTRIES,
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
