/* opencl_backend.c — the OpenCL backend plugin ("opencl"): CLBlast for BLAS, OpenCL C kernels
 * (opencl_kernels.cl) for the rest.
 *
 * Every call works on host f32 memory (plugin.h): the inputs are staged into device buffers,
 * the work is enqueued on the one in-order queue, and the results are read back with a blocking
 * read, so a call returns with its output in host memory.  Strided host operands (lda > cols)
 * are packed on the way in and unpacked on the way out by rectangle copies, so the padding of a
 * host matrix is never written.
 *
 * One context and queue per instance, created in create() for the platform/device the params
 * name; the program is built once there, from source embedded at build time; device buffers
 * live in a few slots that grow and are reused between calls, never allocated per call.
 *
 *   gemm           CLBlastSgemm            xtx_accum   CLBlastSsyrk (lower) + host mirror
 *   trsm_lower     CLBlastStrsm            cholesky, chol_inverse: not offered (NULL): CLBlast
 *                                          has no factorizations, and the core runs them on the
 *                                          CPU backend (backend.h's fallback rule)
 *   everything else: kernels of opencl_kernels.cl.  quantize_weight / quantize_act match the CPU
 *   grid bit for bit only with correctly rounded f32 division; a device without it
 *   (CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) answers LMP_EUNSUPPORTED for them, and they too run
 *   on the CPU.  So does anything larger than the kernels' int indexing (2^31 elements) and
 *   attention with head_dim > 256.
 *
 * Nothing here exits, aborts or prints: errors go through host->set_error. */
#define CL_TARGET_OPENCL_VERSION 120
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <clblast_c.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define DEVBE_NAME "opencl"
#include "devbe.h"
#include "lmpress/plugin.h"

#include "opencl_kernels.inc" /* static const char lmp_ocl_source[]: opencl_kernels.cl */

enum { K_RMSNORM, K_LAYERNORM, K_ROPE, K_ATTENTION, K_ATTENTION_SEQ, K_SWIGLU, K_GELU,
       K_LOG_SOFTMAX, K_REDUCE, K_QUANTIZE, K_COUNT };
static const char *const kernel_names[K_COUNT] = {"rmsnorm", "layernorm", "rope", "attention",
                                                  "attention_seq", "swiglu", "gelu", "log_softmax",
                                                  "reduce_cols", "quantize"};

enum { N_SLOTS = 5, ROPE_SLOT = 4 };

typedef struct ocl_buf {
    cl_mem mem;
    size_t cap; /* bytes */
} ocl_buf;

typedef struct ocl_backend {
    const lmp_host *host;
    void *hctx;
    devbe_err err;
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    cl_program prog;
    cl_kernel k[K_COUNT];
    ocl_buf buf[N_SLOTS];
    size_t wg;        /* work-group size of the row kernels (the program's WG) */
    int exact_div;    /* correctly rounded f32 division: quantization can match the CPU */
    int att_item;     /* attention by the one-item-per-query kernel (CPU devices by default) */
    devbe_rope rope;  /* RoPE's cos/sin table, in slot ROPE_SLOT on the device */
    char devname[128];
} ocl_backend;

#define FAIL(be, st, ...) DEVBE_FAIL(&(be)->err, st, __VA_ARGS__)

static const char *cl_err_name(cl_int e)
{
    switch (e) {
    case CL_SUCCESS: return "CL_SUCCESS";
    case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
    case CL_DEVICE_NOT_AVAILABLE: return "CL_DEVICE_NOT_AVAILABLE";
    case CL_COMPILER_NOT_AVAILABLE: return "CL_COMPILER_NOT_AVAILABLE";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
    case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    case CL_INVALID_PLATFORM: return "CL_INVALID_PLATFORM";
    case CL_INVALID_DEVICE: return "CL_INVALID_DEVICE";
    case CL_INVALID_CONTEXT: return "CL_INVALID_CONTEXT";
    case CL_INVALID_COMMAND_QUEUE: return "CL_INVALID_COMMAND_QUEUE";
    case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
    case CL_INVALID_BUILD_OPTIONS: return "CL_INVALID_BUILD_OPTIONS";
    case CL_INVALID_PROGRAM_EXECUTABLE: return "CL_INVALID_PROGRAM_EXECUTABLE";
    case CL_INVALID_KERNEL_NAME: return "CL_INVALID_KERNEL_NAME";
    case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_ARG_INDEX: return "CL_INVALID_ARG_INDEX";
    case CL_INVALID_ARG_VALUE: return "CL_INVALID_ARG_VALUE";
    case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_WORK_DIMENSION: return "CL_INVALID_WORK_DIMENSION";
    case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_WORK_ITEM_SIZE: return "CL_INVALID_WORK_ITEM_SIZE";
    case CL_INVALID_GLOBAL_WORK_SIZE: return "CL_INVALID_GLOBAL_WORK_SIZE";
    case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR (no OpenCL driver installed)";
    default: return "OpenCL error";
    }
}

#define CL_CHECK(be, call, what)                                                               \
    do {                                                                                       \
        cl_int e_ = (call);                                                                    \
        if (e_ != CL_SUCCESS)                                                                  \
            return FAIL(be, LMP_EIO, "%s: %s (%d)", what, cl_err_name(e_), (int)e_);           \
    } while (0)

/* ---- device buffers: N_SLOTS that grow, reused between calls ---------------------------- */

static int slot(ocl_backend *be, int i, size_t bytes, cl_mem *out)
{
    ocl_buf *b = &be->buf[i];
    if (bytes == 0) bytes = 4;
    if (b->cap < bytes) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < bytes) cap *= 2;
        if (b->mem) clReleaseMemObject(b->mem);
        b->mem = NULL;
        b->cap = 0;
        cl_int e;
        b->mem = clCreateBuffer(be->ctx, CL_MEM_READ_WRITE, cap, NULL, &e);
        if (e != CL_SUCCESS)
            return FAIL(be, e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_RESOURCES
                                ? LMP_ENOMEM : LMP_EIO,
                        "clCreateBuffer(%zu bytes): %s (%d)", cap, cl_err_name(e), (int)e);
        b->cap = cap;
    }
    *out = b->mem;
    return LMP_OK;
}

/* Stage host rows x cols (row stride ld floats) into slot i, packed (row stride cols). */
static int put(ocl_backend *be, int i, const float *host, int64_t rows, int64_t cols, int64_t ld,
               cl_mem *out)
{
    size_t bytes = (size_t)rows * (size_t)cols * sizeof(float);
    int st = slot(be, i, bytes, out);
    if (st || bytes == 0) return st;
    if (ld == cols || rows == 1) {
        CL_CHECK(be, clEnqueueWriteBuffer(be->q, *out, CL_FALSE, 0, bytes, host, 0, NULL, NULL),
                 "clEnqueueWriteBuffer");
    } else {
        size_t origin[3] = {0, 0, 0}, region[3] = {(size_t)cols * sizeof(float), (size_t)rows, 1};
        CL_CHECK(be, clEnqueueWriteBufferRect(be->q, *out, CL_FALSE, origin, origin, region,
                                              (size_t)cols * sizeof(float), 0,
                                              (size_t)ld * sizeof(float), 0, host, 0, NULL, NULL),
                 "clEnqueueWriteBufferRect");
    }
    return LMP_OK;
}

/* Read packed rows x cols back into host rows with stride ld; blocking: the call's end. */
static int get(ocl_backend *be, cl_mem m, float *host, int64_t rows, int64_t cols, int64_t ld)
{
    size_t bytes = (size_t)rows * (size_t)cols * sizeof(float);
    if (bytes == 0) return LMP_OK;
    if (ld == cols || rows == 1) {
        CL_CHECK(be, clEnqueueReadBuffer(be->q, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL),
                 "clEnqueueReadBuffer");
    } else {
        size_t origin[3] = {0, 0, 0}, region[3] = {(size_t)cols * sizeof(float), (size_t)rows, 1};
        CL_CHECK(be, clEnqueueReadBufferRect(be->q, m, CL_TRUE, origin, origin, region,
                                             (size_t)cols * sizeof(float), 0,
                                             (size_t)ld * sizeof(float), 0, host, 0, NULL, NULL),
                 "clEnqueueReadBufferRect");
    }
    return LMP_OK;
}

/* Set the kernel's arguments: n (size, pointer) pairs. */
static int args(ocl_backend *be, int k, int n, ...)
{
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        size_t sz = va_arg(ap, size_t);
        const void *p = va_arg(ap, const void *);
        cl_int e = clSetKernelArg(be->k[k], (cl_uint)i, sz, p);
        if (e != CL_SUCCESS) {
            va_end(ap);
            return FAIL(be, LMP_EIO, "clSetKernelArg(%s, %d): %s (%d)", kernel_names[k], i,
                        cl_err_name(e), (int)e);
        }
    }
    va_end(ap);
    return LMP_OK;
}
#define A_MEM(m) sizeof(cl_mem), (const void *)&(m)
#define A_INT(v) sizeof(cl_int), (const void *)&(cl_int){(cl_int)(v)}
#define A_LONG(v) sizeof(cl_long), (const void *)&(cl_long){(cl_long)(v)}
#define A_FLT(v) sizeof(cl_float), (const void *)&(cl_float){(cl_float)(v)}

/* groups0 x groups1 work-groups of local size (local0, 1). */
static int launch(ocl_backend *be, int k, size_t groups0, size_t groups1, size_t local0)
{
    size_t global[2] = {groups0 * local0, groups1}, local[2] = {local0, 1};
    cl_int e = clEnqueueNDRangeKernel(be->q, be->k[k], 2, NULL, global, local, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return FAIL(be, LMP_EIO, "clEnqueueNDRangeKernel(%s): %s (%d)", kernel_names[k],
                    cl_err_name(e), (int)e);
    return LMP_OK;
}

/* n items, one per element, the local size left to the driver. */
static int launch_1d(ocl_backend *be, int k, size_t n)
{
    cl_int e = clEnqueueNDRangeKernel(be->q, be->k[k], 1, NULL, &n, NULL, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return FAIL(be, LMP_EIO, "clEnqueueNDRangeKernel(%s): %s (%d)", kernel_names[k],
                    cl_err_name(e), (int)e);
    return LMP_OK;
}

static int clblast_status(ocl_backend *be, const char *fn, CLBlastStatusCode s)
{
    if (s == CLBlastSuccess) return LMP_OK;
    return FAIL(be, LMP_EIO, "%s: CLBlast status %d", fn, (int)s);
}

/* ---- device selection and program ------------------------------------------------------- */

/* The device of platform pi, device di (CL_DEVICE_TYPE_ALL order). */
static int pick_device(const devbe_err *e, int pi, int di, cl_device_id *dev)
{
    cl_uint np = 0;
    cl_int rc = clGetPlatformIDs(0, NULL, &np);
    if (rc != CL_SUCCESS || np == 0)
        return DEVBE_FAIL_RAW(e, LMP_EUNSUPPORTED, "no OpenCL platform (clGetPlatformIDs: %s, %u platforms)",
                          cl_err_name(rc), np);
    cl_platform_id plats[16];
    if (np > 16) np = 16;
    clGetPlatformIDs(np, plats, NULL);
    if ((cl_uint)pi >= np)
        return DEVBE_FAIL_RAW(e, LMP_EINVAL, "platform = %d but only %u OpenCL platform(s)", pi, np);
    cl_uint nd = 0;
    rc = clGetDeviceIDs(plats[pi], CL_DEVICE_TYPE_ALL, 0, NULL, &nd);
    if (rc != CL_SUCCESS || nd == 0)
        return DEVBE_FAIL_RAW(e, LMP_EUNSUPPORTED, "OpenCL platform %d has no device (clGetDeviceIDs: %s)",
                          pi, cl_err_name(rc));
    cl_device_id devs[16];
    if (nd > 16) nd = 16;
    clGetDeviceIDs(plats[pi], CL_DEVICE_TYPE_ALL, nd, devs, NULL);
    if ((cl_uint)di >= nd)
        return DEVBE_FAIL_RAW(e, LMP_EINVAL, "device = %d but OpenCL platform %d has %u device(s)", di,
                          pi, nd);
    *dev = devs[di];
    return LMP_OK;
}

static int build_program(ocl_backend *be)
{
    cl_int e;
    const char *src = lmp_ocl_source;
    be->prog = clCreateProgramWithSource(be->ctx, 1, &src, NULL, &e);
    CL_CHECK(be, e, "clCreateProgramWithSource");
    char opts[256];
    snprintf(opts, sizeof opts, "-cl-std=CL1.2 -DWG=%zu%s", be->wg,
             be->exact_div ? " -cl-fp32-correctly-rounded-divide-sqrt" : "");
    e = clBuildProgram(be->prog, 1, &be->dev, opts, NULL, NULL);
    if (e != CL_SUCCESS) {
        char log[2048] = "";
        clGetProgramBuildInfo(be->prog, be->dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        return FAIL(be, LMP_EIO, "building the kernels for %s: %s (%d): %.1500s", be->devname,
                    cl_err_name(e), (int)e, log);
    }
    for (int i = 0; i < K_COUNT; i++) {
        be->k[i] = clCreateKernel(be->prog, kernel_names[i], &e);
        if (e != CL_SUCCESS)
            return FAIL(be, LMP_EIO, "clCreateKernel(%s): %s (%d)", kernel_names[i], cl_err_name(e),
                        (int)e);
    }
    return LMP_OK;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static void ocl_destroy(void *self)
{
    ocl_backend *be = self;
    if (!be) return;
    if (be->q) clFinish(be->q);
    for (int i = 0; i < N_SLOTS; i++)
        if (be->buf[i].mem) clReleaseMemObject(be->buf[i].mem);
    for (int i = 0; i < K_COUNT; i++)
        if (be->k[i]) clReleaseKernel(be->k[i]);
    if (be->prog) clReleaseProgram(be->prog);
    if (be->q) clReleaseCommandQueue(be->q);
    if (be->ctx) clReleaseContext(be->ctx);
    devbe_rope_free(&be->err, &be->rope);
    be->host->free(be->hctx, be);
}

static int ocl_create(const lmp_host *host, void *hctx, const lmp_value *params, void **self)
{
    if (!host || !self) return LMP_EINVAL;
    *self = NULL;
    double pd = params ? params[0].num : 0.0, dd = params ? params[1].num : 0.0;
    if (!(pd >= 0 && pd <= 63) || !(dd >= 0 && dd <= 63))
        return host->set_error(hctx, LMP_EINVAL, "opencl: platform = %g, device = %g: each must be in 0..63",
                               pd, dd);
    ocl_backend *be = host->alloc(hctx, sizeof *be);
    if (!be) return host->set_error(hctx, LMP_ENOMEM, "opencl: out of memory");
    be->host = host;
    be->hctx = hctx;
    be->err = (devbe_err){host, hctx};
    int st = pick_device(&be->err, (int)pd, (int)dd, &be->dev);
    if (st) {
        ocl_destroy(be);
        return st;
    }
    clGetDeviceInfo(be->dev, CL_DEVICE_NAME, sizeof be->devname - 1, be->devname, NULL);
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(be->dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    be->exact_div = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
    cl_device_type type = 0;
    clGetDeviceInfo(be->dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    int att = params ? (int)params[2].num : 0; /* auto, workgroup, item */
    be->att_item = att == 2 || (att == 0 && (type & CL_DEVICE_TYPE_CPU) != 0);
    size_t maxwg = 1;
    clGetDeviceInfo(be->dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof maxwg, &maxwg, NULL);
    be->wg = 64;
    while (be->wg > maxwg) be->wg /= 2;
    cl_int e;
    be->ctx = clCreateContext(NULL, 1, &be->dev, NULL, NULL, &e);
    if (e == CL_SUCCESS) be->q = clCreateCommandQueue(be->ctx, be->dev, 0, &e);
    if (e != CL_SUCCESS) {
        st = FAIL(be, LMP_EIO, "context on %s: %s (%d)", be->devname, cl_err_name(e), (int)e);
        ocl_destroy(be);
        return st;
    }
    if ((st = build_program(be))) {
        ocl_destroy(be);
        return st;
    }
    host->log(hctx, LMP_LOG_INFO, "opencl: %s (work-group %zu, %s attention%s)", be->devname, be->wg,
              be->att_item ? "item-per-query" : "work-group",
              be->exact_div ? "" : ", no correctly rounded division: quantization runs on the CPU");
    *self = be;
    return LMP_OK;
}

/* > 0 when a platform with a device exists and a tiny kernel runs there. */
static int ocl_probe(const lmp_host *host, void *hctx)
{
    devbe_err e = {host, hctx};
    cl_device_id dev;
    if (pick_device(&e, 0, 0, &dev)) return 0;
    cl_int rc;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &rc);
    if (rc != CL_SUCCESS) {
        DEVBE_FAIL_RAW(&e, LMP_EUNSUPPORTED, "clCreateContext: %s (%d)", cl_err_name(rc), (int)rc);
        return 0;
    }
    int ok = 0;
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &rc);
    const char *src = "kernel void twice(global float *x) { x[get_global_id(0)] *= 2.0f; }";
    cl_program prog = rc == CL_SUCCESS ? clCreateProgramWithSource(ctx, 1, &src, NULL, &rc) : NULL;
    if (rc == CL_SUCCESS) rc = clBuildProgram(prog, 1, &dev, "", NULL, NULL);
    cl_kernel k = rc == CL_SUCCESS ? clCreateKernel(prog, "twice", &rc) : NULL;
    float x[4] = {1, 2, 3, 4};
    cl_mem m = rc == CL_SUCCESS ? clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                                 sizeof x, x, &rc) : NULL;
    size_t n = 4;
    if (rc == CL_SUCCESS) rc = clSetKernelArg(k, 0, sizeof m, &m);
    if (rc == CL_SUCCESS) rc = clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, 0, NULL, NULL);
    if (rc == CL_SUCCESS) rc = clEnqueueReadBuffer(q, m, CL_TRUE, 0, sizeof x, x, 0, NULL, NULL);
    if (rc != CL_SUCCESS)
        DEVBE_FAIL_RAW(&e, LMP_EUNSUPPORTED, "the probe kernel failed: %s (%d)", cl_err_name(rc), (int)rc);
    else if (x[0] != 2 || x[3] != 8)
        DEVBE_FAIL_RAW(&e, LMP_EUNSUPPORTED, "the probe kernel computed a wrong result");
    else
        ok = 1;
    if (m) clReleaseMemObject(m);
    if (k) clReleaseKernel(k);
    if (prog) clReleaseProgram(prog);
    if (q) clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return ok;
}

/* ---- BLAS through CLBlast ----------------------------------------------------------------- */

static int ocl_gemm(void *self, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                    float *C, int64_t ldc)
{
    ocl_backend *be = self;
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
    if (K == 0 || alpha == 0.0f) { /* C = beta*C, A and B unread (BLAS semantics) */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return LMP_OK;
    }
    cl_mem a, b, c;
    if ((st = put(be, 0, A, ar, ac, lda, &a)) || (st = put(be, 1, B, br, bc, ldb, &b))) return st;
    if (beta == 0.0f) { /* C is not read: zeros, so a NaN in it cannot leak through 0*NaN */
        if ((st = slot(be, 2, (size_t)(M * N) * sizeof(float), &c))) return st;
        float zero = 0.0f;
        CL_CHECK(be, clEnqueueFillBuffer(be->q, c, &zero, sizeof zero, 0,
                                         (size_t)(M * N) * sizeof(float), 0, NULL, NULL),
                 "clEnqueueFillBuffer");
    } else if ((st = put(be, 2, C, M, N, ldc, &c))) {
        return st;
    }
    st = clblast_status(be, "CLBlastSgemm",
                        CLBlastSgemm(CLBlastLayoutRowMajor, ta ? CLBlastTransposeYes : CLBlastTransposeNo,
                                     tb ? CLBlastTransposeYes : CLBlastTransposeNo, (size_t)M,
                                     (size_t)N, (size_t)K, alpha, a, 0, (size_t)ac, b, 0,
                                     (size_t)bc, beta, c, 0, (size_t)N, &be->q, NULL));
    return st ? st : get(be, c, C, M, N, ldc);
}

static int ocl_xtx_accum(void *self, int64_t n, int64_t c, const float *X, float alpha, float *H)
{
    ocl_backend *be = self;
    int st;
    if ((st = devbe_check_mat(&be->err, "xtx_accum", "X", X, n, c, c)) ||
        (st = devbe_check_mat(&be->err, "xtx_accum", "H", H, c, c, c)))
        return st;
    if (n == 0 || c == 0) return LMP_OK;
    cl_mem x, h;
    if ((st = put(be, 0, X, n, c, c, &x)) || (st = put(be, 2, H, c, c, c, &h))) return st;
    /* H = alpha X^T X + H on the lower triangle (half the FLOPs); the upper is mirrored here. */
    st = clblast_status(be, "CLBlastSsyrk",
                        CLBlastSsyrk(CLBlastLayoutRowMajor, CLBlastTriangleLower, CLBlastTransposeYes,
                                     (size_t)c, (size_t)n, alpha, x, 0, (size_t)c, 1.0f, h, 0,
                                     (size_t)c, &be->q, NULL));
    if (!st) st = get(be, h, H, c, c, c);
    if (!st) devbe_mirror_lower(c, H);
    return st;
}

static int ocl_trsm_lower(void *self, int trans, int64_t n, int64_t nrhs, const float *L, float *B)
{
    ocl_backend *be = self;
    int st;
    if ((st = devbe_check_mat(&be->err, "trsm_lower", "L", L, n, n, n)) ||
        (st = devbe_check_mat(&be->err, "trsm_lower", "B", B, n, nrhs, nrhs)))
        return st;
    if (n == 0 || nrhs == 0) return LMP_OK;
    cl_mem l, b;
    if ((st = put(be, 0, L, n, n, n, &l)) || (st = put(be, 2, B, n, nrhs, nrhs, &b))) return st;
    st = clblast_status(be, "CLBlastStrsm",
                        CLBlastStrsm(CLBlastLayoutRowMajor, CLBlastSideLeft, CLBlastTriangleLower,
                                     trans ? CLBlastTransposeYes : CLBlastTransposeNo,
                                     CLBlastDiagonalNonUnit, (size_t)n, (size_t)nrhs, 1.0f, l, 0,
                                     (size_t)n, b, 0, (size_t)nrhs, &be->q, NULL));
    return st ? st : get(be, b, B, n, nrhs, nrhs);
}

/* ---- transformer pieces ------------------------------------------------------------------- */

static int ocl_rmsnorm(void *self, int64_t T, int64_t C, const float *x, const float *w,
                       float eps, float *out)
{
    ocl_backend *be = self;
    int st = devbe_check_rows(&be->err, "rmsnorm", T, C, x, w, out);
    if (st || T == 0 || C == 0) return st;
    cl_mem dx, dw;
    if ((st = put(be, 0, x, T, C, C, &dx)) || (st = put(be, 1, w, 1, C, C, &dw)) ||
        (st = args(be, K_RMSNORM, 5, A_MEM(dx), A_MEM(dw), A_FLT(eps), A_INT(C), A_MEM(dx))) ||
        (st = launch(be, K_RMSNORM, (size_t)T, 1, be->wg)))
        return st;
    return get(be, dx, out, T, C, C);
}

static int ocl_layernorm(void *self, int64_t T, int64_t C, const float *x, const float *w,
                         const float *b, float eps, float *out)
{
    ocl_backend *be = self;
    int st = devbe_check_rows(&be->err, "layernorm", T, C, x, w, out);
    if (st || T == 0 || C == 0) return st;
    cl_mem dx, dw, db;
    if ((st = put(be, 0, x, T, C, C, &dx)) || (st = put(be, 1, w, 1, C, C, &dw)) ||
        (st = b ? put(be, 2, b, 1, C, C, &db) : (db = dw, LMP_OK)) ||
        (st = args(be, K_LAYERNORM, 7, A_MEM(dx), A_MEM(dw), A_MEM(db), A_INT(b != NULL),
                   A_FLT(eps), A_INT(C), A_MEM(dx))) ||
        (st = launch(be, K_LAYERNORM, (size_t)T, 1, be->wg)))
        return st;
    return get(be, dx, out, T, C, C);
}

static int ocl_rope(void *self, int64_t T, int64_t n_heads, int64_t head_dim, int64_t pos0,
                    float theta, float *x)
{
    ocl_backend *be = self;
    int st = devbe_check_rope(&be->err, T, n_heads, head_dim);
    if (st || T == 0 || n_heads == 0 || head_dim == 0) return st;
    if (!x) return FAIL(be, LMP_EINVAL, "rope: x is NULL");
    int64_t n = T * n_heads * head_dim, ncs = T * head_dim; /* [T, head_dim/2, 2] */
    cl_mem dx, dcs;
    int upload;
    if ((st = devbe_rope_prepare(&be->err, &be->rope, T, head_dim, pos0, theta, &upload))) return st;
    if (upload) {
        if ((st = put(be, ROPE_SLOT, be->rope.cs, 1, ncs, ncs, &dcs))) return st;
        be->rope.valid = 1;
    }
    dcs = be->buf[ROPE_SLOT].mem;
    if ((st = put(be, 0, x, 1, n, n, &dx)) ||
        (st = args(be, K_ROPE, 4, A_MEM(dx), A_MEM(dcs), A_INT(n_heads), A_INT(head_dim))) ||
        (st = launch_1d(be, K_ROPE, (size_t)(n / 2))))
        return st;
    return get(be, dx, x, 1, n, n);
}

static int ocl_attention(void *self, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                         const float *q, const float *k, const float *v, float *out)
{
    ocl_backend *be = self;
    int st = devbe_check_attention(&be->err, T, n_heads, n_kv_heads, hd);
    if (st || T == 0 || n_heads == 0) return st;
    if (!q || !k || !v || !out) return FAIL(be, LMP_EINVAL, "attention: NULL operand");
    if (hd > 256) return LMP_EUNSUPPORTED; /* the kernel keeps a head in local memory */
    int64_t nq = T * n_heads * hd, nkv = T * n_kv_heads * hd;
    float scale = (float)(1.0 / sqrt((double)hd)); /* as the CPU backend rounds it */
    cl_mem dq, dk, dv, dout;
    if ((st = put(be, 0, q, 1, nq, nq, &dq)) || (st = put(be, 1, k, 1, nkv, nkv, &dk)) ||
        (st = put(be, 2, v, 1, nkv, nkv, &dv)) ||
        (st = slot(be, 3, (size_t)nq * sizeof(float), &dout)))
        return st;
    if (be->att_item) { /* one item per (query, head), no barriers */
        size_t global[2] = {(size_t)T, (size_t)n_heads};
        cl_int e;
        if ((st = args(be, K_ATTENTION_SEQ, 9, A_MEM(dq), A_MEM(dk), A_MEM(dv), A_MEM(dout),
                       A_INT(n_heads), A_INT(n_kv_heads), A_INT(hd), A_FLT(scale), A_INT(T))))
            return st;
        e = clEnqueueNDRangeKernel(be->q, be->k[K_ATTENTION_SEQ], 2, NULL, global, NULL, 0, NULL, NULL);
        if (e != CL_SUCCESS)
            return FAIL(be, LMP_EIO, "clEnqueueNDRangeKernel(attention_seq): %s (%d)", cl_err_name(e), (int)e);
    } else if ((st = args(be, K_ATTENTION, 8, A_MEM(dq), A_MEM(dk), A_MEM(dv), A_MEM(dout),
                          A_INT(n_heads), A_INT(n_kv_heads), A_INT(hd), A_FLT(scale))) ||
               (st = launch(be, K_ATTENTION, (size_t)T, (size_t)n_heads, be->wg))) {
        return st;
    }
    return get(be, dout, out, 1, nq, nq);
}

static int ocl_swiglu(void *self, int64_t n, const float *gate, const float *up, float *out)
{
    ocl_backend *be = self;
    int st = devbe_check_rows(&be->err, "swiglu", 1, n, gate, up, out);
    if (st || n == 0) return st;
    cl_mem g, u;
    if ((st = put(be, 0, gate, 1, n, n, &g)) || (st = put(be, 1, up, 1, n, n, &u)) ||
        (st = args(be, K_SWIGLU, 3, A_MEM(g), A_MEM(u), A_MEM(g))) ||
        (st = launch_1d(be, K_SWIGLU, (size_t)n)))
        return st;
    return get(be, g, out, 1, n, n);
}

static int ocl_gelu(void *self, int64_t n, const float *x, float *out)
{
    ocl_backend *be = self;
    int st = devbe_check_rows(&be->err, "gelu", 1, n, x, x, out);
    if (st || n == 0) return st;
    cl_mem dx;
    if ((st = put(be, 0, x, 1, n, n, &dx)) || (st = args(be, K_GELU, 2, A_MEM(dx), A_MEM(dx))) ||
        (st = launch_1d(be, K_GELU, (size_t)n)))
        return st;
    return get(be, dx, out, 1, n, n);
}

static int ocl_log_softmax(void *self, int64_t rows, int64_t cols, const float *x, float *out)
{
    ocl_backend *be = self;
    int st = devbe_check_rows(&be->err, "log_softmax", rows, cols, x, x, out);
    if (st || rows == 0 || cols == 0) return st;
    cl_mem dx;
    if ((st = put(be, 0, x, rows, cols, cols, &dx)) ||
        (st = args(be, K_LOG_SOFTMAX, 3, A_MEM(dx), A_INT(cols), A_MEM(dx))) ||
        (st = launch(be, K_LOG_SOFTMAX, (size_t)rows, 1, be->wg)))
        return st;
    return get(be, dx, out, rows, cols, cols);
}

static int ocl_reduce_cols(void *self, lmp_reduce kind, int64_t n, int64_t c, const float *X,
                           float *out)
{
    ocl_backend *be = self;
    if (kind < LMP_REDUCE_ABSMAX || kind > LMP_REDUCE_SUM)
        return FAIL(be, LMP_EINVAL, "reduce_cols: unknown reduction %d", (int)kind);
    int st = devbe_check_mat(&be->err, "reduce_cols", "X", X, n, c, c);
    if (st || n == 0 || c == 0) return st;
    if (!out) return FAIL(be, LMP_EINVAL, "reduce_cols: out is NULL");
    cl_mem dx, dout;
    if ((st = put(be, 0, X, n, c, c, &dx)) || (st = put(be, 1, out, 1, c, c, &dout)) ||
        (st = args(be, K_REDUCE, 5, A_INT(kind), A_INT(n), A_INT(c), A_MEM(dx), A_MEM(dout))) ||
        (st = launch_1d(be, K_REDUCE, (size_t)c)))
        return st;
    return get(be, dout, out, 1, c, c);
}

/* ---- fake quantization: the kernel "quantize", one work-group per slice ------------------ */

/* kind: 0/1 weight sym/asym, 2 static activation, 3 dynamic activation (see the kernel). */
static int quantize_slices(ocl_backend *be, float *W, int64_t rows, int64_t cols, int64_t nr,
                           int64_t nc, int kind, int bits, int rounding, float sscale,
                           float *scales, float *zeros)
{
    int64_t ncs = (cols + nc - 1) / nc, n_slices = ((rows + nr - 1) / nr) * ncs;
    cl_mem dw = NULL, ds = NULL, dz = NULL;
    int st;
    if ((st = put(be, 0, W, rows, cols, cols, &dw)) ||
        (st = slot(be, 1, (size_t)n_slices * sizeof(float), &ds)) ||
        (st = slot(be, 2, (size_t)n_slices * sizeof(float), &dz)) ||
        (st = args(be, K_QUANTIZE, 13, A_MEM(dw), A_MEM(ds), A_MEM(dz), A_INT(rows), A_INT(cols),
                   A_INT(nr), A_INT(nc), A_INT(ncs), A_INT(kind), A_INT(bits), A_INT(rounding),
                   A_FLT(sscale), A_INT(scales != NULL || zeros != NULL))) ||
        (st = launch(be, K_QUANTIZE, (size_t)n_slices, 1, be->wg)))
        return st;
    if (scales && (st = get(be, ds, scales, 1, n_slices, n_slices))) return st;
    if (zeros && kind == 1 && (st = get(be, dz, zeros, 1, n_slices, n_slices))) return st;
    return get(be, dw, W, rows, cols, cols);
}

static int ocl_quantize_weight(void *self, const lmp_wspec *spec, int64_t rows, int64_t cols,
                               float *W, float *scales, float *zeros)
{
    ocl_backend *be = self;
    int st = devbe_check_wspec(&be->err, spec);
    if (!st) st = devbe_check_rows(&be->err, "quantize_weight", rows, cols, W, W, W);
    if (st || rows == 0 || cols == 0) return st;
    if (!be->exact_div) return LMP_EUNSUPPORTED; /* could not match the CPU grid bit for bit */
    int64_t nr, nc, ncs, ns;
    devbe_wslices(spec, rows, cols, &nr, &nc, &ncs, &ns);
    return quantize_slices(be, W, rows, cols, nr, nc, spec->sym ? 0 : 1, spec->bits,
                           spec->rounding, 0.0f, scales, zeros);
}

static int ocl_quantize_act(void *self, const lmp_aspec *spec, int64_t T, int64_t C, float *X)
{
    ocl_backend *be = self;
    int st = devbe_check_aspec(&be->err, spec);
    if (st || spec->mode == LMP_ACT_NONE) return st;
    if ((st = devbe_check_rows(&be->err, "quantize_act", T, C, X, X, X)) || T == 0 || C == 0) return st;
    if (!be->exact_div) return LMP_EUNSUPPORTED;
    /* static and per-token: one slice per row; per-tensor dynamic: the whole of X */
    int whole = spec->mode == LMP_ACT_DYN_TENSOR;
    return quantize_slices(be, X, T, C, whole ? T : 1, C, spec->mode == LMP_ACT_STATIC_TENSOR ? 2 : 3,
                           spec->bits, spec->rounding, spec->scale, NULL, NULL);
}

/* ---- descriptor --------------------------------------------------------------------------- */

static const lmp_backend_i ocl_vtable = {
    .struct_size = sizeof(lmp_backend_i),
    .create = ocl_create,
    .destroy = ocl_destroy,
    .gemm = ocl_gemm,
    .xtx_accum = ocl_xtx_accum,
    .cholesky = NULL,     /* CPU fallback: CLBlast has no factorization */
    .chol_inverse = NULL, /* CPU fallback */
    .trsm_lower = ocl_trsm_lower,
    .rmsnorm = ocl_rmsnorm,
    .rope = ocl_rope,
    .attention = ocl_attention,
    .swiglu = ocl_swiglu,
    .log_softmax = ocl_log_softmax,
    .reduce_cols = ocl_reduce_cols,
    .quantize_weight = ocl_quantize_weight,
    .quantize_act = ocl_quantize_act,
    .layernorm = ocl_layernorm,
    .gelu = ocl_gelu,
};

static const char *const ocl_attention_choices[] = {"auto", "workgroup", "item", NULL};

static const lmp_param_spec ocl_params[] = {
    {
        .name = "platform",
        .type = LMP_PARAM_INT,
        .help = "OpenCL platform index, in clGetPlatformIDs order (`clinfo -l` lists them)",
        .def_num = 0,
        .min = 0,
        .max = 63,
    },
    {
        .name = "device",
        .type = LMP_PARAM_INT,
        .help = "device index within the platform (all device types, clGetDeviceIDs order)",
        .def_num = 0,
        .min = 0,
        .max = 63,
    },
    {
        .name = "attention",
        .type = LMP_PARAM_ENUM,
        .help = "attention kernel: workgroup (a work-group per query and head, keys in chunks with "
                "an online softmax: GPUs), item (a work-item per query and head, no barriers: CPU "
                "runtimes such as PoCL), auto (item on CPU devices, else workgroup)",
        .def_num = 0,
        .choices = ocl_attention_choices,
    },
};

static const lmp_plugin_desc ocl_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_BACKEND,
    .name = "opencl",
    .version = "0.1.0",
    .summary = "OpenCL backend: CLBlast for GEMM, X^T X and triangular solves; OpenCL C kernels for "
               "norms, RoPE, attention, activations, reductions and fake quantization; Cholesky and "
               "its inverse on the CPU",
    .params = ocl_params,
    .n_params = sizeof ocl_params / sizeof ocl_params[0],
    .vtable = &ocl_vtable,
    .probe = ocl_probe,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &ocl_desc; }
