/* opencl_backend.c — the OpenCL backend plugin ("opencl"): CLBlast for BLAS, OpenCL C kernels
 * (opencl_kernels.cl) for the rest.
 *
 * Every call works on host f32 memory (plugin.h).  Its host half is ../common/devbe.c, shared
 * with the cuda backend: the checks, and the staging of the inputs into device buffers that grow
 * and are reused between calls (never allocated per call).  What is here is the device half: the
 * work is enqueued on the one in-order queue and the results are read back with a blocking read,
 * so a call returns with its output in host memory.  Strided host operands (lda > cols) are
 * packed on the way in and unpacked on the way out by rectangle copies, so the padding of a host
 * matrix is never written.
 *
 * One context and queue per instance, created in create() for the platform/device the params
 * name; the program is built once there, from source embedded at build time.
 *
 *   gemm           CLBlastSgemm            xtx_accum   CLBlastSsyrk (lower) + host mirror
 *   trsm_lower     CLBlastStrsm            cholesky, chol_inverse: not offered (NULL): CLBlast
 *                                          has no factorizations, and the core runs them on the
 *                                          CPU backend (backend.h's fallback rule)
 *   everything else: kernels of opencl_kernels.cl.  choose_weight_grid / apply_weight_grid /
 *   quantize_act match the CPU grid bit for bit only with correctly rounded f32 division; a device without it
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
#include <stdint.h>
#include <stdio.h>

#include "devbe.h"
#include "lmpress/plugin.h"

#include "opencl_kernels.inc" /* static const char lmp_ocl_source[]: opencl_kernels.cl */

enum { K_RMSNORM, K_LAYERNORM, K_ROPE, K_ATTENTION, K_ATTENTION_SEQ, K_SWIGLU, K_GELU,
       K_LOG_SOFTMAX, K_REDUCE, K_QUANTIZE,
       K_BLK_ADD_BIAS, K_BLK_ADD, K_BLK_MUL, K_BLK_SCALE, K_BLK_ROPE, K_BLK_ATTENTION, K_BLK_SQSUM, K_COUNT };
static const char *const kernel_names[K_COUNT] = {"rmsnorm", "layernorm", "rope", "attention",
                                                  "attention_seq", "swiglu", "gelu", "log_softmax",
                                                  "reduce_cols", "quantize",
                                                  "blk_add_bias", "blk_add", "blk_mul", "blk_scale",
                                                  "blk_rope", "blk_attention", "blk_sqsum"};

typedef struct ocl_backend {
    devbe base; /* first: the vtable's self */
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    cl_program prog;
    cl_kernel k[K_COUNT];
    size_t wg;        /* work-group size of the row kernels (the program's WG) */
    int att_item;     /* attention by the one-item-per-query kernel (CPU devices by default) */
    char devname[128];
} ocl_backend;

static ocl_backend *ocl(devbe *d) { return (ocl_backend *)d; }

#define FAIL(d, st, ...) DEVBE_FAIL(&(d)->err, st, __VA_ARGS__)

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

#define CL_CHECK(d, call, what)                                                                \
    do {                                                                                       \
        cl_int e_ = (call);                                                                    \
        if (e_ != CL_SUCCESS)                                                                  \
            return FAIL(d, LMP_EIO, "%s: %s (%d)", what, cl_err_name(e_), (int)e_);            \
    } while (0)

/* ---- device buffers ---------------------------------------------------------------------- */

static int ocl_alloc(devbe *d, size_t bytes, devbe_mem *out)
{
    cl_int e;
    *out = clCreateBuffer(ocl(d)->ctx, CL_MEM_READ_WRITE, bytes, NULL, &e);
    if (e != CL_SUCCESS)
        return FAIL(d, e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_RESOURCES
                           ? LMP_ENOMEM : LMP_EIO,
                    "clCreateBuffer(%zu bytes): %s (%d)", bytes, cl_err_name(e), (int)e);
    return LMP_OK;
}

static void ocl_release(devbe *d, devbe_mem m) { clReleaseMemObject(m); }

/* Not blocking: the in-order queue runs it before the work that reads it. */
static int ocl_write(devbe *d, devbe_mem m, const float *host, int64_t rows, int64_t cols, int64_t ld)
{
    cl_command_queue q = ocl(d)->q;
    if (ld == cols || rows == 1) {
        CL_CHECK(d, clEnqueueWriteBuffer(q, m, CL_FALSE, 0, (size_t)rows * (size_t)cols * sizeof(float),
                                         host, 0, NULL, NULL),
                 "clEnqueueWriteBuffer");
    } else {
        size_t origin[3] = {0, 0, 0}, region[3] = {(size_t)cols * sizeof(float), (size_t)rows, 1};
        CL_CHECK(d, clEnqueueWriteBufferRect(q, m, CL_FALSE, origin, origin, region,
                                             (size_t)cols * sizeof(float), 0,
                                             (size_t)ld * sizeof(float), 0, host, 0, NULL, NULL),
                 "clEnqueueWriteBufferRect");
    }
    return LMP_OK;
}

static int ocl_read(devbe *d, devbe_mem m, float *host, int64_t rows, int64_t cols, int64_t ld)
{
    cl_command_queue q = ocl(d)->q;
    if (ld == cols || rows == 1) {
        CL_CHECK(d, clEnqueueReadBuffer(q, m, CL_TRUE, 0, (size_t)rows * (size_t)cols * sizeof(float),
                                        host, 0, NULL, NULL),
                 "clEnqueueReadBuffer");
    } else {
        size_t origin[3] = {0, 0, 0}, region[3] = {(size_t)cols * sizeof(float), (size_t)rows, 1};
        CL_CHECK(d, clEnqueueReadBufferRect(q, m, CL_TRUE, origin, origin, region,
                                            (size_t)cols * sizeof(float), 0,
                                            (size_t)ld * sizeof(float), 0, host, 0, NULL, NULL),
                 "clEnqueueReadBufferRect");
    }
    return LMP_OK;
}

/* Set the kernel's arguments: n (size, pointer) pairs. */
static int args(devbe *d, int k, int n, ...)
{
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        size_t sz = va_arg(ap, size_t);
        const void *p = va_arg(ap, const void *);
        cl_int e = clSetKernelArg(ocl(d)->k[k], (cl_uint)i, sz, p);
        if (e != CL_SUCCESS) {
            va_end(ap);
            return FAIL(d, LMP_EIO, "clSetKernelArg(%s, %d): %s (%d)", kernel_names[k], i,
                        cl_err_name(e), (int)e);
        }
    }
    va_end(ap);
    return LMP_OK;
}
#define A_MEM(m) sizeof(cl_mem), (const void *)&(cl_mem){(m)}
#define A_INT(v) sizeof(cl_int), (const void *)&(cl_int){(cl_int)(v)}
#define A_LONG(v) sizeof(cl_long), (const void *)&(cl_long){(cl_long)(v)}
#define A_FLT(v) sizeof(cl_float), (const void *)&(cl_float){(cl_float)(v)}

/* groups0 x groups1 work-groups of local size (local0, 1). */
static int launch(devbe *d, int k, size_t groups0, size_t groups1, size_t local0)
{
    size_t global[2] = {groups0 * local0, groups1}, local[2] = {local0, 1};
    cl_int e = clEnqueueNDRangeKernel(ocl(d)->q, ocl(d)->k[k], 2, NULL, global, local, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return FAIL(d, LMP_EIO, "clEnqueueNDRangeKernel(%s): %s (%d)", kernel_names[k],
                    cl_err_name(e), (int)e);
    return LMP_OK;
}

/* n items, one per element, the local size left to the driver. */
static int launch_1d(devbe *d, int k, size_t n)
{
    cl_int e = clEnqueueNDRangeKernel(ocl(d)->q, ocl(d)->k[k], 1, NULL, &n, NULL, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return FAIL(d, LMP_EIO, "clEnqueueNDRangeKernel(%s): %s (%d)", kernel_names[k],
                    cl_err_name(e), (int)e);
    return LMP_OK;
}

static int clblast_status(devbe *d, const char *fn, CLBlastStatusCode s)
{
    if (s == CLBlastSuccess) return LMP_OK;
    return FAIL(d, LMP_EIO, "%s: CLBlast status %d", fn, (int)s);
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
    CL_CHECK(&be->base, e, "clCreateProgramWithSource");
    char opts[256];
    snprintf(opts, sizeof opts, "-cl-std=CL1.2 -DWG=%zu%s", be->wg,
             be->base.exact_div ? " -cl-fp32-correctly-rounded-divide-sqrt" : "");
    e = clBuildProgram(be->prog, 1, &be->dev, opts, NULL, NULL);
    if (e != CL_SUCCESS) {
        char log[2048] = "";
        clGetProgramBuildInfo(be->prog, be->dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        return FAIL(&be->base, LMP_EIO, "building the kernels for %s: %s (%d): %.1500s", be->devname,
                    cl_err_name(e), (int)e, log);
    }
    for (int i = 0; i < K_COUNT; i++) {
        be->k[i] = clCreateKernel(be->prog, kernel_names[i], &e);
        if (e != CL_SUCCESS)
            return FAIL(&be->base, LMP_EIO, "clCreateKernel(%s): %s (%d)", kernel_names[i], cl_err_name(e),
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
    devbe_fini(&be->base);
    for (int i = 0; i < K_COUNT; i++)
        if (be->k[i]) clReleaseKernel(be->k[i]);
    if (be->prog) clReleaseProgram(be->prog);
    if (be->q) clReleaseCommandQueue(be->q);
    if (be->ctx) clReleaseContext(be->ctx);
    be->base.err.host->free(be->base.err.hctx, be);
}

static const devbe_dev ocl_dev;

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
    devbe_init(&be->base, host, hctx, &ocl_dev);
    be->base.att_max_hd = 256; /* the kernel keeps a head in local memory */
    be->base.att_max_T = INT64_MAX;
    int st = pick_device(&be->base.err, (int)pd, (int)dd, &be->dev);
    if (st) {
        ocl_destroy(be);
        return st;
    }
    clGetDeviceInfo(be->dev, CL_DEVICE_NAME, sizeof be->devname - 1, be->devname, NULL);
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(be->dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    be->base.exact_div = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
    cl_device_type type = 0;
    clGetDeviceInfo(be->dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    int att = params ? (int)params[2].num : 0; /* auto, workgroup, item */
    be->att_item = att == 2 || (att == 0 && (type & CL_DEVICE_TYPE_CPU) != 0);
    const double rows = params ? params[3].num : -1; /* -1: auto */
    be->base.block_rows = rows >= 0 ? (int64_t)rows : (type & CL_DEVICE_TYPE_CPU) ? 0 : 2048; /* devbe.h */
    size_t maxwg = 1;
    clGetDeviceInfo(be->dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof maxwg, &maxwg, NULL);
    be->wg = 64;
    while (be->wg > maxwg) be->wg /= 2;
    cl_int e;
    be->ctx = clCreateContext(NULL, 1, &be->dev, NULL, NULL, &e);
    if (e == CL_SUCCESS) be->q = clCreateCommandQueue(be->ctx, be->dev, 0, &e);
    if (e != CL_SUCCESS) {
        st = FAIL(&be->base, LMP_EIO, "context on %s: %s (%d)", be->devname, cl_err_name(e), (int)e);
        ocl_destroy(be);
        return st;
    }
    if ((st = build_program(be))) {
        ocl_destroy(be);
        return st;
    }
    host->log(hctx, LMP_LOG_INFO, "opencl: %s (work-group %zu, %s attention%s)", be->devname, be->wg,
              be->att_item ? "item-per-query" : "work-group",
              be->base.exact_div ? "" : ", no correctly rounded division: quantization runs on the CPU");
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

/* ---- BLAS through CLBlast, on staged buffers ------------------------------------------------ */

static int ocl_gemm(devbe *d, int ta, int tb, int M, int N, int K, float alpha, devbe_mem a, int lda,
                    devbe_mem b, int ldb, float beta, devbe_mem c)
{
    cl_command_queue q = ocl(d)->q;
    if (beta == 0.0f) { /* C was not staged: zeros, so a NaN in the buffer cannot leak through 0*NaN */
        float zero = 0.0f;
        CL_CHECK(d, clEnqueueFillBuffer(q, c, &zero, sizeof zero, 0, (size_t)M * (size_t)N * sizeof(float),
                                        0, NULL, NULL),
                 "clEnqueueFillBuffer");
    }
    return clblast_status(d, "CLBlastSgemm",
                          CLBlastSgemm(CLBlastLayoutRowMajor, ta ? CLBlastTransposeYes : CLBlastTransposeNo,
                                       tb ? CLBlastTransposeYes : CLBlastTransposeNo, (size_t)M,
                                       (size_t)N, (size_t)K, alpha, a, 0, (size_t)lda, b, 0,
                                       (size_t)ldb, beta, c, 0, (size_t)N, &q, NULL));
}

static int ocl_xtx_accum(devbe *d, int n, int c, float alpha, devbe_mem x, devbe_mem h)
{
    return clblast_status(d, "CLBlastSsyrk",
                          CLBlastSsyrk(CLBlastLayoutRowMajor, CLBlastTriangleLower, CLBlastTransposeYes,
                                       (size_t)c, (size_t)n, alpha, x, 0, (size_t)c, 1.0f, h, 0,
                                       (size_t)c, &ocl(d)->q, NULL));
}

static int ocl_trsm_lower(devbe *d, int trans, int n, int nrhs, devbe_mem l, devbe_mem b)
{
    return clblast_status(d, "CLBlastStrsm",
                          CLBlastStrsm(CLBlastLayoutRowMajor, CLBlastSideLeft, CLBlastTriangleLower,
                                       trans ? CLBlastTransposeYes : CLBlastTransposeNo,
                                       CLBlastDiagonalNonUnit, (size_t)n, (size_t)nrhs, 1.0f, l, 0,
                                       (size_t)n, b, 0, (size_t)nrhs, &ocl(d)->q, NULL));
}

/* ---- kernels on staged buffers ------------------------------------------------------------- */

static int ocl_rmsnorm(devbe *d, int T, int C, devbe_mem x, devbe_mem w, float eps)
{
    int st = args(d, K_RMSNORM, 5, A_MEM(x), A_MEM(w), A_FLT(eps), A_INT(C), A_MEM(x));
    return st ? st : launch(d, K_RMSNORM, (size_t)T, 1, ocl(d)->wg);
}

static int ocl_layernorm(devbe *d, int T, int C, devbe_mem x, devbe_mem w, devbe_mem b, float eps)
{
    /* without a bias the kernel reads none, but its argument must still be a buffer */
    int st = args(d, K_LAYERNORM, 7, A_MEM(x), A_MEM(w), A_MEM(b ? b : w), A_INT(b != NULL),
                  A_FLT(eps), A_INT(C), A_MEM(x));
    return st ? st : launch(d, K_LAYERNORM, (size_t)T, 1, ocl(d)->wg);
}

static int ocl_rope(devbe *d, int T, int n_heads, int head_dim, devbe_mem cs, devbe_mem x)
{
    int st = args(d, K_ROPE, 4, A_MEM(x), A_MEM(cs), A_INT(n_heads), A_INT(head_dim));
    return st ? st : launch_1d(d, K_ROPE, (size_t)T * (size_t)n_heads * (size_t)head_dim / 2);
}

static int ocl_attention(devbe *d, int T, int n_heads, int n_kv_heads, int hd, devbe_mem q,
                         devbe_mem k, devbe_mem v, devbe_mem out)
{
    float scale = (float)(1.0 / sqrt((double)hd)); /* as the CPU backend rounds it */
    int st;
    if (ocl(d)->att_item) { /* one item per (query, head), no barriers */
        size_t global[2] = {(size_t)T, (size_t)n_heads};
        if ((st = args(d, K_ATTENTION_SEQ, 9, A_MEM(q), A_MEM(k), A_MEM(v), A_MEM(out),
                       A_INT(n_heads), A_INT(n_kv_heads), A_INT(hd), A_FLT(scale), A_INT(T))))
            return st;
        cl_int e = clEnqueueNDRangeKernel(ocl(d)->q, ocl(d)->k[K_ATTENTION_SEQ], 2, NULL, global,
                                          NULL, 0, NULL, NULL);
        if (e != CL_SUCCESS)
            return FAIL(d, LMP_EIO, "clEnqueueNDRangeKernel(attention_seq): %s (%d)", cl_err_name(e), (int)e);
        return LMP_OK;
    }
    if ((st = args(d, K_ATTENTION, 8, A_MEM(q), A_MEM(k), A_MEM(v), A_MEM(out), A_INT(n_heads),
                   A_INT(n_kv_heads), A_INT(hd), A_FLT(scale))))
        return st;
    return launch(d, K_ATTENTION, (size_t)T, (size_t)n_heads, ocl(d)->wg);
}

static int ocl_swiglu(devbe *d, int n, devbe_mem gate, devbe_mem up)
{
    int st = args(d, K_SWIGLU, 3, A_MEM(gate), A_MEM(up), A_MEM(gate));
    return st ? st : launch_1d(d, K_SWIGLU, (size_t)n);
}

static int ocl_gelu(devbe *d, int n, devbe_mem x)
{
    int st = args(d, K_GELU, 2, A_MEM(x), A_MEM(x));
    return st ? st : launch_1d(d, K_GELU, (size_t)n);
}

static int ocl_log_softmax(devbe *d, int rows, int cols, devbe_mem x)
{
    int st = args(d, K_LOG_SOFTMAX, 3, A_MEM(x), A_INT(cols), A_MEM(x));
    return st ? st : launch(d, K_LOG_SOFTMAX, (size_t)rows, 1, ocl(d)->wg);
}

static int ocl_reduce_cols(devbe *d, int kind, int n, int c, devbe_mem x, devbe_mem out)
{
    int st = args(d, K_REDUCE, 5, A_INT(kind), A_INT(n), A_INT(c), A_MEM(x), A_MEM(out));
    return st ? st : launch_1d(d, K_REDUCE, (size_t)c);
}

/* One work-group per slice.  A codes buffer the call does not want is passed as NULL, which
 * OpenCL allows for a global pointer argument. */
static int ocl_quantize(devbe *d, const devbe_quant *q, devbe_mem w, devbe_mem scales, devbe_mem zeros,
                        devbe_mem codes)
{
    int st = args(d, K_QUANTIZE, 16, A_MEM(w), A_MEM(scales), A_MEM(zeros), A_MEM(codes),
                  A_INT(q->rows), A_INT(q->cols), A_INT(q->nr), A_INT(q->nc), A_INT(q->ncs),
                  A_INT(q->kind), A_INT(q->bits), A_INT(q->rounding), A_FLT(q->sscale),
                  A_FLT(q->clip), A_INT(q->mode), A_INT(q->want_codes));
    return st ? st : launch(d, K_QUANTIZE, (size_t)q->n_slices, 1, ocl(d)->wg);
}

/* ---- the block path (devbe_block.c): buffers stay on the device ------------------------------ */

static int ocl_copy(devbe *d, devbe_mem dst, int64_t dst_at, devbe_mem src, int64_t n)
{
    if (n == 0) return LMP_OK;
    CL_CHECK(d, clEnqueueCopyBuffer(ocl(d)->q, src, dst, 0, (size_t)dst_at * sizeof(float), (size_t)n * sizeof(float),
                                    0, NULL, NULL),
             "clEnqueueCopyBuffer");
    return LMP_OK;
}

static int ocl_zero(devbe *d, devbe_mem m, int64_t n)
{
    const float zero = 0.0f;
    if (n == 0) return LMP_OK;
    CL_CHECK(d, clEnqueueFillBuffer(ocl(d)->q, m, &zero, sizeof zero, 0, (size_t)n * sizeof(float), 0, NULL, NULL),
             "clEnqueueFillBuffer");
    return LMP_OK;
}

static int ocl_add_bias(devbe *d, int64_t rows, int64_t cols, devbe_mem x, devbe_mem b)
{
    int st = args(d, K_BLK_ADD_BIAS, 3, A_MEM(x), A_MEM(b), A_LONG(cols));
    return st || rows * cols == 0 ? st : launch_1d(d, K_BLK_ADD_BIAS, (size_t)(rows * cols));
}

static int ocl_add(devbe *d, int64_t n, devbe_mem a, devbe_mem b, devbe_mem out)
{
    int st = args(d, K_BLK_ADD, 3, A_MEM(a), A_MEM(b), A_MEM(out));
    return st || n == 0 ? st : launch_1d(d, K_BLK_ADD, (size_t)n);
}

static int ocl_mul(devbe *d, int64_t n, devbe_mem x, devbe_mem y)
{
    int st = args(d, K_BLK_MUL, 2, A_MEM(x), A_MEM(y));
    return st || n == 0 ? st : launch_1d(d, K_BLK_MUL, (size_t)n);
}

static int ocl_scale(devbe *d, int64_t n, devbe_mem x, float s)
{
    int st = args(d, K_BLK_SCALE, 2, A_MEM(x), A_FLT(s));
    return st || n == 0 ? st : launch_1d(d, K_BLK_SCALE, (size_t)n);
}

static int ocl_rope_part(devbe *d, int64_t batch, int64_t T, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                         devbe_mem cs, devbe_mem x)
{
    int st = args(d, K_BLK_ROPE, 6, A_MEM(x), A_MEM(cs), A_LONG(n_heads), A_LONG(head_dim), A_LONG(n_rot), A_LONG(T));
    const int64_t n = batch * T * n_heads * (n_rot / 2);
    return st || n == 0 ? st : launch_1d(d, K_BLK_ROPE, (size_t)n);
}

static int ocl_attention_window(devbe *d, int64_t batch, int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                                int64_t window, float softcap, devbe_mem q, devbe_mem k, devbe_mem v, devbe_mem out)
{
    float scale = (float)(1.0 / sqrt((double)hd));
    int st = args(d, K_BLK_ATTENTION, 11, A_MEM(q), A_MEM(k), A_MEM(v), A_MEM(out), A_LONG(n_heads),
                  A_LONG(n_kv_heads), A_LONG(hd), A_FLT(scale), A_LONG(T), A_LONG(window), A_FLT(softcap));
    if (st || T == 0 || n_heads == 0 || batch == 0) return st;
    size_t global[3] = {(size_t)T, (size_t)n_heads, (size_t)batch};
    cl_int e = clEnqueueNDRangeKernel(ocl(d)->q, ocl(d)->k[K_BLK_ATTENTION], 3, NULL, global, NULL, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return FAIL(d, LMP_EIO, "clEnqueueNDRangeKernel(blk_attention): %s (%d)", cl_err_name(e), (int)e);
    return LMP_OK;
}

static int ocl_sqsum_cols(devbe *d, int64_t n, int64_t c, devbe_mem x, devbe_mem out)
{
    int st = args(d, K_BLK_SQSUM, 4, A_LONG(n), A_LONG(c), A_MEM(x), A_MEM(out));
    return st || c == 0 ? st : launch_1d(d, K_BLK_SQSUM, (size_t)c);
}

static int ocl_sync(devbe *d)
{
    CL_CHECK(d, clFinish(ocl(d)->q), "clFinish");
    return LMP_OK;
}

static const devbe_dev ocl_dev = {
    .alloc = ocl_alloc, .release = ocl_release, .write = ocl_write, .read = ocl_read,
    .gemm = ocl_gemm, .xtx_accum = ocl_xtx_accum, .trsm_lower = ocl_trsm_lower,
    .rmsnorm = ocl_rmsnorm, .layernorm = ocl_layernorm, .rope = ocl_rope,
    .attention = ocl_attention, .swiglu = ocl_swiglu, .gelu = ocl_gelu,
    .log_softmax = ocl_log_softmax, .reduce_cols = ocl_reduce_cols, .quantize = ocl_quantize,
    .copy = ocl_copy, .zero = ocl_zero, .add_bias = ocl_add_bias, .add = ocl_add, .mul = ocl_mul, .scale = ocl_scale,
    .rope_part = ocl_rope_part, .attention_window = ocl_attention_window, .sqsum_cols = ocl_sqsum_cols,
    .sync = ocl_sync,
};

/* ---- descriptor --------------------------------------------------------------------------- */

static const lmp_backend_i ocl_vtable = {
    .struct_size = sizeof(lmp_backend_i),
    .create = ocl_create,
    .destroy = ocl_destroy,
    .cholesky = NULL,     /* CPU fallback: CLBlast has no factorization */
    .chol_inverse = NULL, /* CPU fallback */
    DEVBE_VTABLE_ENTRIES,
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
    {
        .name = "block_rows",
        .type = LMP_PARAM_INT,
        .help = "the device block path's rows per batch of calibration windows: -1 auto (one window at a "
                "time on CPU devices, where CLBlast on PoCL ran 4 windows at once 1.45x slower; 2048 rows on "
                "GPUs, fewer and larger launches), 0 one window, else about this many rows",
        .def_num = -1,
        .min = -1,
        .max = 1 << 20,
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
