/* cuda_kernels.cu — the CUDA C kernels of the cuda backend and their C launchers.
 *
 * Ports of backends/opencl/opencl_kernels.cl (same algorithms, same rules): row-wise kernels run
 * one block of WG threads per row or slice and reduce in shared memory; elementwise ones one
 * thread per element.  Built with --fmad=false and without --use_fast_math (division and sqrt
 * stay IEEE round-to-nearest, nvcc's default), so the fake quantization does the same f32
 * operations as cpu_ref.c and matches it bit for bit.
 *
 * Every launcher takes the stream and device pointers and returns a cudaError_t as int
 * (cudaGetLastError after the launch). */
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_kernels.h"

#define WG 128     /* threads per block of the row kernels */
#define MAXHD 256  /* attention head size limit (the host falls back to the CPU above it) */

/* ---- block reductions: every thread gets the result -------------------------------------- */

__device__ float blk_sum(float *red, float v)
{
    int l = threadIdx.x;
    red[l] = v;
    __syncthreads();
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (l < s) red[l] += red[l + s];
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

/* "replace when strictly better": exact, and a NaN never wins over a number */
__device__ float blk_max(float *red, float v)
{
    int l = threadIdx.x;
    red[l] = v;
    __syncthreads();
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (l < s && red[l + s] > red[l]) red[l] = red[l + s];
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

__device__ float blk_min(float *red, float v)
{
    int l = threadIdx.x;
    red[l] = v;
    __syncthreads();
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (l < s && red[l + s] < red[l]) red[l] = red[l + s];
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

static int launched(void) { return (int)cudaGetLastError(); }

/* ---- probe ----------------------------------------------------------------------------------- */

__global__ void k_probe(float *x) { x[threadIdx.x] = x[threadIdx.x] * 2.0f + 1.0f; }

extern "C" int lmp_cu_probe(float *x4)
{
    k_probe<<<1, 4>>>(x4);
    return launched();
}

/* ---- norms ------------------------------------------------------------------------------------ */

__device__ double blk_sum_d(double *red, double v)
{
    int l = threadIdx.x;
    red[l] = v;
    __syncthreads();
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (l < s) red[l] += red[l + s];
        __syncthreads();
    }
    double r = red[0];
    __syncthreads();
    return r;
}

/* Norms and activations in double, as cpu_ref.c (the CPU backend's) computes them: the outputs
 * are the same correctly rounded f32 values, so a quantizer after them sees the CPU's inputs. */
__global__ void k_rmsnorm(const float *x, const float *w, float eps, int C, float *out)
{
    __shared__ double red[WG];
    size_t row = (size_t)blockIdx.x * C;
    double ss = 0.0;
    for (int i = threadIdx.x; i < C; i += WG) ss += (double)x[row + i] * x[row + i];
    ss = blk_sum_d(red, ss);
    double inv = 1.0 / sqrt(ss / (double)C + (double)eps);
    for (int i = threadIdx.x; i < C; i += WG) out[row + i] = (float)((double)x[row + i] * inv * w[i]);
}

extern "C" int lmp_cu_rmsnorm(cudaStream_t s, int T, int C, const float *x, const float *w,
                              float eps, float *out)
{
    k_rmsnorm<<<T, WG, 0, s>>>(x, w, eps, C, out);
    return launched();
}

__global__ void k_layernorm(const float *x, const float *w, const float *b, float eps, int C,
                            float *out)
{
    __shared__ double red[WG];
    size_t row = (size_t)blockIdx.x * C;
    double sum = 0.0;
    for (int i = threadIdx.x; i < C; i += WG) sum += x[row + i];
    double mean = blk_sum_d(red, sum) / (double)C;
    double v = 0.0;
    for (int i = threadIdx.x; i < C; i += WG) {
        double d = (double)x[row + i] - mean;
        v += d * d;
    }
    double inv = 1.0 / sqrt(blk_sum_d(red, v) / (double)C + (double)eps);
    for (int i = threadIdx.x; i < C; i += WG)
        out[row + i] = (float)(((double)x[row + i] - mean) * inv * w[i] + (b ? (double)b[i] : 0.0));
}

extern "C" int lmp_cu_layernorm(cudaStream_t s, int T, int C, const float *x, const float *w,
                                const float *b, float eps, float *out)
{
    k_layernorm<<<T, WG, 0, s>>>(x, w, b, eps, C, out);
    return launched();
}

/* ---- RoPE and attention ------------------------------------------------------------------------ */

/* cs[T, head_dim/2, 2]: cos and sin computed on the host as the CPU backend does (devbe.h). */
__global__ void k_rope(float *x, const float *cs, size_t n_pairs, int n_heads, int head_dim)
{
    size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gid >= n_pairs) return;
    int npair = head_dim / 2;
    int i = (int)(gid % npair);
    size_t th = gid / npair, t = th / n_heads;
    float c = cs[(t * npair + i) * 2], sn = cs[(t * npair + i) * 2 + 1];
    float *xh = x + th * head_dim;
    float x0 = xh[2 * i], x1 = xh[2 * i + 1];
    xh[2 * i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
    xh[2 * i + 1] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c));
}

extern "C" int lmp_cu_rope(cudaStream_t s, int T, int n_heads, int head_dim, const float *cs,
                           float *x)
{
    size_t n = (size_t)T * n_heads * (head_dim / 2);
    k_rope<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, cs, n, n_heads, head_dim);
    return launched();
}

/* One block per (query t, head h), keys in chunks of WG with an online softmax. */
__global__ void k_attention(const float *q, const float *k, const float *v, float *out,
                            int n_heads, int n_kv_heads, int hd, float scale)
{
    __shared__ float qs[MAXHD];
    __shared__ float ps[WG];
    __shared__ float red[WG];
    int t = blockIdx.x, h = blockIdx.y, l = threadIdx.x;
    int kh = h / (n_heads / n_kv_heads);
    size_t qdim = (size_t)n_heads * hd, kvdim = (size_t)n_kv_heads * hd;
    for (int d = l; d < hd; d += WG) qs[d] = q[t * qdim + h * hd + d];
    __syncthreads();
    float acc[(MAXHD + WG - 1) / WG];
    for (int i = 0; i < (MAXHD + WG - 1) / WG; i++) acc[i] = 0.0f;
    float m = -INFINITY, sum = 0.0f;
    for (int j0 = 0; j0 <= t; j0 += WG) {
        int j = j0 + l;
        float sc = -INFINITY;
        if (j <= t) {
            const float *kj = k + j * kvdim + kh * hd;
            float dot = 0.0f;
            for (int d = 0; d < hd; d++) dot += qs[d] * kj[d];
            sc = dot * scale;
        }
        float mnew = fmaxf(m, blk_max(red, sc));
        float corr = expf(m - mnew);
        float p = j <= t ? expf(sc - mnew) : 0.0f;
        ps[l] = p;
        sum = sum * corr + blk_sum(red, p);
        int nj = min(WG, t - j0 + 1);
        for (int i = 0; i < (MAXHD + WG - 1) / WG; i++) {
            int d = i * WG + l;
            if (d < hd) {
                float a = acc[i] * corr;
                const float *vj = v + j0 * kvdim + kh * hd + d;
                for (int jj = 0; jj < nj; jj++) a += ps[jj] * vj[jj * kvdim];
                acc[i] = a;
            }
        }
        m = mnew;
        __syncthreads();
    }
    for (int i = 0; i < (MAXHD + WG - 1) / WG; i++) {
        int d = i * WG + l;
        if (d < hd) out[t * qdim + h * hd + d] = acc[i] / sum;
    }
}

extern "C" int lmp_cu_attention(cudaStream_t s, int T, int n_heads, int n_kv_heads, int hd,
                                const float *q, const float *k, const float *v, float *out)
{
    dim3 grid((unsigned)T, (unsigned)n_heads);
    float scale = (float)(1.0 / sqrt((double)hd));
    k_attention<<<grid, WG, 0, s>>>(q, k, v, out, n_heads, n_kv_heads, hd, scale);
    return launched();
}

/* ---- elementwise ------------------------------------------------------------------------------ */

__global__ void k_swiglu(size_t n, const float *gate, const float *up, float *out)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double g = gate[i];
    out[i] = (float)(g / (1.0 + exp(-g)) * (double)up[i]);
}

extern "C" int lmp_cu_swiglu(cudaStream_t s, size_t n, const float *gate, const float *up, float *out)
{
    k_swiglu<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(n, gate, up, out);
    return launched();
}

__global__ void k_gelu(size_t n, const float *x, float *out)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double v = x[i];
    out[i] = (float)(0.5 * v * (1.0 + tanh(0.79788456080286535588 * (v + 0.044715 * v * v * v))));
}

extern "C" int lmp_cu_gelu(cudaStream_t s, size_t n, const float *x, float *out)
{
    k_gelu<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(n, x, out);
    return launched();
}

/* lse and x - lse in double, as the CPU forms them (see the OpenCL kernel). */
__global__ void k_log_softmax(const float *x, int cols, float *out)
{
    __shared__ float red[WG];
    size_t row = (size_t)blockIdx.x * cols;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < cols; j += WG) mx = x[row + j] > mx ? x[row + j] : mx;
    mx = blk_max(red, mx);
    float sm = 0.0f;
    for (int j = threadIdx.x; j < cols; j += WG) sm += expf(x[row + j] - mx);
    double lse = (double)mx + log((double)blk_sum(red, sm));
    for (int j = threadIdx.x; j < cols; j += WG) out[row + j] = (float)((double)x[row + j] - lse);
}

extern "C" int lmp_cu_log_softmax(cudaStream_t s, int rows, int cols, const float *x, float *out)
{
    k_log_softmax<<<rows, WG, 0, s>>>(x, cols, out);
    return launched();
}

/* One thread per column; SUM in double. kind: 0 absmax, 1 min, 2 max, 3 sum. */
__global__ void k_reduce_cols(int kind, int n, int c, const float *X, float *out)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c) return;
    if (kind == 3) {
        double sm = out[j];
        for (int i = 0; i < n; i++) sm += X[(size_t)i * c + j];
        out[j] = (float)sm;
        return;
    }
    float m = out[j];
    for (int i = 0; i < n; i++) {
        float x = X[(size_t)i * c + j];
        if (kind == 0) x = fabsf(x);
        if (kind == 1 ? x < m : x > m) m = x;
    }
    out[j] = m;
}

extern "C" int lmp_cu_reduce_cols(cudaStream_t s, int kind, int n, int c, const float *X, float *out)
{
    k_reduce_cols<<<(c + 127) / 128, 128, 0, s>>>(kind, n, c, X, out);
    return launched();
}

/* ---- fake quantization (bit for bit with cpu_ref.c) -------------------------------------------- */

__device__ float rnd(float x, int rounding) { return rounding ? roundf(x) : rintf(x); }

__device__ float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* One block per slice; kind 0/1 weight sym/asym, 2 static activation, 3 dynamic activation.
 * mode (devbe.h): 0 choose the grid and apply it, 1 choose it only (scales/zeros out, W
 * untouched), 2 apply the grid read from scales/zeros (codes too when given).  clip scales the
 * weight range as plugin.h's lmp_wgrid_fit does, with the same correctly rounded f32 steps. */
__global__ void k_quantize(float *W, float *scales, float *zeros, int *codes, int rows, int cols,
                           int nr, int nc, int ncs, int kind, int bits, int rounding, float sscale,
                           float clip, int mode)
{
    __shared__ float red[WG];
    int sl = blockIdx.x, l = threadIdx.x;
    int r0 = (sl / ncs) * nr, c0 = (sl % ncs) * nc;
    int ncw = min(nc, cols - c0), nrw = min(nr, rows - r0);
    int n = nrw * ncw;
    float mn = 0.0f, mx = 0.0f, am = 0.0f;
    if (kind != 2 && mode != 2) {
        for (int e = l; e < n; e += WG) {
            float w = W[(size_t)(r0 + e / ncw) * cols + c0 + e % ncw];
            if (w < mn) mn = w;
            if (w > mx) mx = w;
            if (fabsf(w) > am) am = fabsf(w);
        }
        mn = blk_min(red, mn);
        mx = blk_max(red, mx);
        am = blk_max(red, am);
    }
    float scale, zero = 0.0f, lo, hi;
    if (kind == 0) {
        float qmax = (float)((1 << (bits - 1)) - 1);
        float t = __fmul_rn(clip, am);
        scale = mode == 2 ? scales[sl] : __fdiv_rn(t == 0.0f ? 1e-8f : t, qmax);
        lo = -qmax - 1.0f;
        hi = qmax;
    } else if (kind == 1) {
        float maxq = (float)((1 << bits) - 1);
        if (mode == 2) {
            scale = scales[sl];
            zero = zeros[sl];
        } else {
            float a = __fmul_rn(clip, mn), b = __fmul_rn(clip, mx);
            if (a == 0.0f && b == 0.0f) {
                a = -1.0f;
                b = 1.0f;
            }
            scale = __fdiv_rn(__fsub_rn(b, a), maxq);
            zero = rnd(__fdiv_rn(-a, scale), rounding);
        }
        lo = 0.0f;
        hi = maxq;
    } else {
        float qmax = (float)((1 << (bits - 1)) - 1);
        scale = kind == 2 ? sscale : __fdiv_rn(fmaxf(am, 1e-5f), qmax);
        lo = -qmax;
        hi = qmax;
    }
    if (mode == 1) {
        if (l == 0) {
            scales[sl] = scale;
            if (kind == 1) zeros[sl] = zero;
        }
        return;
    }
    for (int e = l; e < n; e += WG) {
        size_t i = (size_t)(r0 + e / ncw) * cols + c0 + e % ncw;
        float qv;
        if (kind == 1) {
            qv = clampf(__fadd_rn(rnd(__fdiv_rn(W[i], scale), rounding), zero), lo, hi);
            W[i] = __fmul_rn(scale, __fsub_rn(qv, zero));
        } else {
            qv = clampf(rnd(__fdiv_rn(W[i], scale), rounding), lo, hi);
            W[i] = __fmul_rn(qv, scale);
        }
        if (codes) codes[i] = qv == qv ? (int)qv : 0; /* a NaN weight has no code */
    }
}

extern "C" int lmp_cu_quantize(cudaStream_t s, float *W, float *scales, float *zeros, int *codes,
                               int rows, int cols, int nr, int nc, int ncs, int n_slices, int kind,
                               int bits, int rounding, float sscale, float clip, int mode)
{
    k_quantize<<<n_slices, WG, 0, s>>>(W, scales, zeros, codes, rows, cols, nr, nc, ncs, kind, bits,
                                       rounding, sscale, clip, mode);
    return launched();
}

/* ---- the block path (devbe_block.c): 64-bit indices, one thread per element -------------------- */

static unsigned grid_for(int64_t n) { return (unsigned)((n + 255) / 256); }

__global__ void k_add_bias(int64_t n, int64_t cols, float *x, const float *b)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += b[i % cols];
}

extern "C" int lmp_cu_add_bias(cudaStream_t s, int64_t rows, int64_t cols, float *x, const float *b)
{
    const int64_t n = rows * cols;
    if (n == 0) return 0;
    k_add_bias<<<grid_for(n), 256, 0, s>>>(n, cols, x, b);
    return (int)cudaGetLastError();
}

__global__ void k_add(int64_t n, const float *a, const float *b, float *out)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

extern "C" int lmp_cu_add(cudaStream_t s, int64_t n, const float *a, const float *b, float *out)
{
    if (n == 0) return 0;
    k_add<<<grid_for(n), 256, 0, s>>>(n, a, b, out);
    return (int)cudaGetLastError();
}

__global__ void k_mul(int64_t n, float *x, const float *y)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= y[i];
}

extern "C" int lmp_cu_mul(cudaStream_t s, int64_t n, float *x, const float *y)
{
    if (n == 0) return 0;
    k_mul<<<grid_for(n), 256, 0, s>>>(n, x, y);
    return (int)cudaGetLastError();
}

__global__ void k_scale(int64_t n, float *x, float v)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= v;
}

extern "C" int lmp_cu_scale(cudaStream_t s, int64_t n, float *x, float v)
{
    if (n == 0) return 0;
    k_scale<<<grid_for(n), 256, 0, s>>>(n, x, v);
    return (int)cudaGetLastError();
}

__global__ void k_rope_part(int64_t n, float *x, const float *cs, int64_t T, int64_t n_heads, int64_t head_dim,
                            int64_t n_rot)
{
    int64_t gid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gid >= n) return;
    int64_t npair = n_rot / 2, i = gid % npair, th = gid / npair, t = (th / n_heads) % T;
    float c = cs[(t * npair + i) * 2], sn = cs[(t * npair + i) * 2 + 1];
    float *xh = x + th * head_dim;
    float x0 = xh[2 * i], x1 = xh[2 * i + 1];
    xh[2 * i] = x0 * c - x1 * sn;
    xh[2 * i + 1] = x0 * sn + x1 * c;
}

extern "C" int lmp_cu_rope_part(cudaStream_t s, int64_t batch, int64_t T, int64_t n_heads, int64_t head_dim,
                                int64_t n_rot, const float *cs, float *x)
{
    const int64_t n = batch * T * n_heads * (n_rot / 2);
    if (n == 0) return 0;
    k_rope_part<<<grid_for(n), 256, 0, s>>>(n, x, cs, T, n_heads, head_dim, n_rot);
    return (int)cudaGetLastError();
}

/* One thread per (query, head, window), as the OpenCL blk_attention: a sliding window and
 * soft-capped scores (cpu_ref.c's attention_window), two passes over the keys. */
__global__ void k_attention_window(const float *q, const float *k, const float *v, float *out, int64_t T,
                                   int64_t n_heads, int64_t n_kv_heads, int64_t hd, float scale, int64_t window,
                                   float softcap)
{
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, h = blockIdx.y, b = blockIdx.z;
    if (t >= T) return;
    int64_t kh = h / (n_heads / n_kv_heads), qdim = n_heads * hd, kvdim = n_kv_heads * hd;
    q += b * T * qdim;
    out += b * T * qdim;
    k += b * T * kvdim;
    v += b * T * kvdim;
    int64_t lo = window && t - window + 1 > 0 ? t - window + 1 : 0;
    const float *qt = q + t * qdim + h * hd;
    float m = -INFINITY;
    for (int64_t j = lo; j <= t; j++) {
        const float *kj = k + j * kvdim + kh * hd;
        float dot = 0.0f;
        for (int64_t d = 0; d < hd; d++) dot += qt[d] * kj[d];
        float sc = dot * scale;
        if (softcap > 0) sc = softcap * tanhf(sc / softcap);
        m = fmaxf(m, sc);
    }
    float acc[MAXHD];
    for (int64_t d = 0; d < hd; d++) acc[d] = 0.0f;
    float sum = 0.0f;
    for (int64_t j = lo; j <= t; j++) {
        const float *kj = k + j * kvdim + kh * hd, *vj = v + j * kvdim + kh * hd;
        float dot = 0.0f;
        for (int64_t d = 0; d < hd; d++) dot += qt[d] * kj[d];
        float sc = dot * scale;
        if (softcap > 0) sc = softcap * tanhf(sc / softcap);
        float p = expf(sc - m);
        sum += p;
        for (int64_t d = 0; d < hd; d++) acc[d] += p * vj[d];
    }
    float *ot = out + t * qdim + h * hd;
    for (int64_t d = 0; d < hd; d++) ot[d] = acc[d] / sum;
}

extern "C" int lmp_cu_attention_window(cudaStream_t s, int64_t batch, int64_t T, int64_t n_heads, int64_t n_kv_heads,
                                       int64_t hd, int64_t window, float softcap, const float *q, const float *k,
                                       const float *v, float *out)
{
    if (T == 0 || n_heads == 0 || batch == 0) return 0;
    float scale = (float)(1.0 / sqrt((double)hd));
    dim3 grid((unsigned)((T + 127) / 128), (unsigned)n_heads, (unsigned)batch);
    k_attention_window<<<grid, 128, 0, s>>>(q, k, v, out, T, n_heads, n_kv_heads, hd, scale, window, softcap);
    return (int)cudaGetLastError();
}

__global__ void k_sqsum_cols(int64_t n, int64_t c, const float *X, float *out)
{
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c) return;
    double acc = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = X[i * c + j];
        acc += x * x;
    }
    out[j] = (float)((double)out[j] + acc);
}

extern "C" int lmp_cu_sqsum_cols(cudaStream_t s, int64_t n, int64_t c, const float *X, float *out)
{
    if (c == 0) return 0;
    k_sqsum_cols<<<grid_for(c), 256, 0, s>>>(n, c, X, out);
    return (int)cudaGetLastError();
}
