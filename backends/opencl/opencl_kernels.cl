/* opencl_kernels.cl — the OpenCL C kernels of the opencl backend (OpenCL C 1.2).
 *
 * Embedded into the plugin as a C string at build time and compiled once per instance in
 * create(), with -DWG=<work-group size> and, where the device offers it,
 * -cl-fp32-correctly-rounded-divide-sqrt.  Never with -cl-fast-relaxed-math: the fake
 * quantization below must reproduce cpu_ref.c bit for bit, so it does the same f32 operations in
 * the same order (a division, not a multiplication by a reciprocal; rint/round; the same clamp),
 * and FP_CONTRACT is off so no a*b+c becomes an fma.
 *
 * Row-wise kernels (norms, softmax, quantization slices) run one work-group of exactly WG items
 * per row or slice and reduce in local memory; elementwise ones one item per element. */
#pragma OPENCL FP_CONTRACT OFF

#ifndef WG
#define WG 64
#endif
#define MAXHD 256 /* attention head size limit: larger heads fall back to the CPU */

#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
/* The CPU backend's norms and activations are cpu_ref.c's, which work in double: where the
 * device has fp64, these kernels do too, so their outputs are the same correctly rounded f32
 * values (not just close ones), and an activation quantized after them lands on the same grid
 * point (see docs/backends.md, end-to-end tolerances). */
typedef double real;
#else
typedef float real;
#endif

/* ---- work-group reductions: every item gets the result ---------------------------------- */

float wg_sum(local float *red, float v)
{
    int l = get_local_id(0);
    red[l] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (l < s) red[l] += red[l + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* max/min as "replace when strictly better": exact, and a NaN never wins over a number */
float wg_max(local float *red, float v)
{
    int l = get_local_id(0);
    red[l] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (l < s && red[l + s] > red[l]) red[l] = red[l + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

float wg_min(local float *red, float v)
{
    int l = get_local_id(0);
    red[l] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (l < s && red[l + s] < red[l]) red[l] = red[l + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

real wg_sum_r(local real *red, real v)
{
    int l = get_local_id(0);
    red[l] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (l < s) red[l] += red[l + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    real r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* ---- tiny kernel the probe runs -------------------------------------------------------- */

kernel void probe_scale(global float *x)
{
    size_t i = get_global_id(0);
    x[i] = x[i] * 2.0f + 1.0f;
}

/* ---- norms ------------------------------------------------------------------------------- */

/* out[t,:] = x / sqrt(mean(x^2) + eps) * w; one work-group per row.  out may alias x. */
kernel void rmsnorm(global const float *x, global const float *w, float eps, int C,
                    global float *out)
{
    local real red[WG];
    size_t row = get_group_id(0) * (size_t)C;
    int l = get_local_id(0);
    real ss = 0;
    for (int i = l; i < C; i += WG) ss += (real)x[row + i] * x[row + i];
    ss = wg_sum_r(red, ss);
    real inv = 1 / sqrt(ss / (real)C + (real)eps);
    for (int i = l; i < C; i += WG) out[row + i] = (float)((real)x[row + i] * inv * w[i]);
}

/* out[t,:] = (x - mean) / sqrt(var + eps) * w + b (biased variance, two passes). */
kernel void layernorm(global const float *x, global const float *w, global const float *b,
                      int has_b, float eps, int C, global float *out)
{
    local real red[WG];
    size_t row = get_group_id(0) * (size_t)C;
    int l = get_local_id(0);
    real s = 0;
    for (int i = l; i < C; i += WG) s += x[row + i];
    real mean = wg_sum_r(red, s) / (real)C;
    real v = 0;
    for (int i = l; i < C; i += WG) {
        real d = (real)x[row + i] - mean;
        v += d * d;
    }
    real inv = 1 / sqrt(wg_sum_r(red, v) / (real)C + (real)eps);
    for (int i = l; i < C; i += WG)
        out[row + i] = (float)(((real)x[row + i] - mean) * inv * w[i] + (has_b ? (real)b[i] : 0));
}

/* ---- positional and attention ------------------------------------------------------------ */

/* One item per rotated pair: global size T * n_heads * head_dim/2.  cs[T, head_dim/2, 2] holds
 * cos and sin of each position's angles, computed on the host as the CPU backend computes them
 * (devbe.h), so the rotation is the CPU's to the bit. */
kernel void rope(global float *x, global const float *cs, int n_heads, int head_dim)
{
    int npair = head_dim / 2;
    size_t gid = get_global_id(0);
    int i = gid % npair;
    size_t th = gid / npair; /* t * n_heads + h */
    size_t t = th / n_heads;
    float c = cs[(t * npair + i) * 2], s = cs[(t * npair + i) * 2 + 1];
    global float *xh = x + th * head_dim;
    float x0 = xh[2 * i], x1 = xh[2 * i + 1];
    xh[2 * i] = x0 * c - x1 * s;
    xh[2 * i + 1] = x0 * s + x1 * c;
}

/* Causal attention, one work-group per (query t, head h), keys in chunks of WG with an online
 * softmax (running max m and sum, the partial output rescaled when m grows).  Item l scores key
 * j0+l of a chunk, then accumulates output dimensions l, l+WG, ... over the chunk. */
kernel void attention(global const float *q, global const float *k, global const float *v,
                      global float *out, int n_heads, int n_kv_heads, int hd, float scale)
{
    local float qs[MAXHD];
    local float ps[WG];
    local float red[WG];
    int t = get_group_id(0), h = get_group_id(1), l = get_local_id(0);
    int kh = h / (n_heads / n_kv_heads);
    size_t qdim = (size_t)n_heads * hd, kvdim = (size_t)n_kv_heads * hd;
    for (int d = l; d < hd; d += WG) qs[d] = q[t * qdim + h * hd + d];
    barrier(CLK_LOCAL_MEM_FENCE);
    float acc[MAXHD / WG];
    for (int i = 0; i < MAXHD / WG; i++) acc[i] = 0.0f;
    float m = -INFINITY, sum = 0.0f;
    for (int j0 = 0; j0 <= t; j0 += WG) {
        int j = j0 + l;
        float s = -INFINITY;
        if (j <= t) {
            global const float *kj = k + j * kvdim + kh * hd;
            float dot = 0.0f;
            for (int d = 0; d < hd; d++) dot += qs[d] * kj[d];
            s = dot * scale;
        }
        float mnew = fmax(m, wg_max(red, s)); /* key j0 <= t is in every chunk: finite */
        float corr = exp(m - mnew);           /* exp(-inf) = 0 on the first chunk */
        float p = j <= t ? exp(s - mnew) : 0.0f;
        ps[l] = p;
        sum = sum * corr + wg_sum(red, p); /* its barriers publish ps[] too */
        int nj = min(WG, t - j0 + 1);
        for (int i = 0; i < MAXHD / WG; i++) {
            int d = i * WG + l;
            if (d < hd) {
                float a = acc[i] * corr;
                global const float *vj = v + j0 * kvdim + kh * hd + d;
                for (int jj = 0; jj < nj; jj++) a += ps[jj] * vj[jj * kvdim];
                acc[i] = a;
            }
        }
        m = mnew;
        barrier(CLK_LOCAL_MEM_FENCE); /* ps[] is rewritten by the next chunk */
    }
    for (int i = 0; i < MAXHD / WG; i++) {
        int d = i * WG + l;
        if (d < hd) out[t * qdim + h * hd + d] = acc[i] / sum;
    }
}

/* The same attention for CPU devices (PoCL): one work-item per (query t, head h), keys in a
 * plain loop, two passes (the max, then exp and the weighted sum), no barriers.  A CPU OpenCL
 * runtime runs a work-group's barrier regions as loops over its items, which made the
 * work-group kernel above 4x slower than the CPU backend; this one vectorizes across queries. */
kernel void attention_seq(global const float *q, global const float *k, global const float *v,
                          global float *out, int n_heads, int n_kv_heads, int hd, float scale,
                          int T)
{
    int t = get_global_id(0), h = get_global_id(1);
    if (t >= T) return;
    int kh = h / (n_heads / n_kv_heads);
    size_t qdim = (size_t)n_heads * hd, kvdim = (size_t)n_kv_heads * hd;
    global const float *qt = q + t * qdim + h * hd;
    float m = -INFINITY;
    for (int j = 0; j <= t; j++) {
        global const float *kj = k + j * kvdim + kh * hd;
        float dot = 0.0f;
        for (int d = 0; d < hd; d++) dot += qt[d] * kj[d];
        m = fmax(m, dot * scale);
    }
    float acc[MAXHD];
    for (int d = 0; d < hd; d++) acc[d] = 0.0f;
    float sum = 0.0f;
    for (int j = 0; j <= t; j++) {
        global const float *kj = k + j * kvdim + kh * hd, *vj = v + j * kvdim + kh * hd;
        float dot = 0.0f;
        for (int d = 0; d < hd; d++) dot += qt[d] * kj[d];
        float p = exp(dot * scale - m);
        sum += p;
        for (int d = 0; d < hd; d++) acc[d] += p * vj[d];
    }
    global float *ot = out + t * qdim + h * hd;
    for (int d = 0; d < hd; d++) ot[d] = acc[d] / sum;
}

/* ---- elementwise ------------------------------------------------------------------------- */

kernel void swiglu(global const float *gate, global const float *up, global float *out)
{
    size_t i = get_global_id(0);
    real g = gate[i];
    out[i] = (float)(g / (1 + exp(-g)) * up[i]);
}

kernel void gelu(global const float *x, global float *out)
{
    size_t i = get_global_id(0);
    real v = x[i];
    out[i] = (float)((real)0.5 * v * (1 + tanh((real)0.79788456080286535588 * (v + (real)0.044715 * v * v * v))));
}

/* out[r,:] = x - (max + log(sum exp(x - max))); one work-group per row.  out may alias x.
 * The sum of exps is f32 (relative error ~u, a tiny absolute error in the log). */
kernel void log_softmax(global const float *x, int cols, global float *out)
{
    local float red[WG];
    size_t row = get_group_id(0) * (size_t)cols;
    int l = get_local_id(0);
    float mx = -INFINITY;
    for (int j = l; j < cols; j += WG) mx = x[row + j] > mx ? x[row + j] : mx;
    mx = wg_max(red, mx);
    float s = 0.0f;
    for (int j = l; j < cols; j += WG) s += exp(x[row + j] - mx);
    float sum = wg_sum(red, s);
#ifdef cl_khr_fp64
    /* the CPU forms lse and x - lse in double: with logits ~1e4 an f32 lse is ~1e4 u off */
    double lse = (double)mx + log((double)sum);
    for (int j = l; j < cols; j += WG) out[row + j] = (float)((double)x[row + j] - lse);
#else
    float lse = mx + log(sum);
    for (int j = l; j < cols; j += WG) out[row + j] = x[row + j] - lse;
#endif
}

/* Column reduction of X[n,c] folded into out[c], one item per column.  SUM accumulates in
 * double where the device has it, else with Kahan compensation. */
kernel void reduce_cols(int kind, int n, int c, global const float *X, global float *out)
{
    int j = get_global_id(0);
    if (j >= c) return;
    if (kind == 3) {
#ifdef cl_khr_fp64
        double s = out[j];
        for (int i = 0; i < n; i++) s += X[(size_t)i * c + j];
        out[j] = (float)s;
#else
        float s = out[j], comp = 0.0f;
        for (int i = 0; i < n; i++) {
            float y = X[(size_t)i * c + j] - comp;
            float t = s + y;
            comp = (t - s) - y;
            s = t;
        }
        out[j] = s;
#endif
        return;
    }
    float m = out[j];
    for (int i = 0; i < n; i++) {
        float x = X[(size_t)i * c + j];
        if (kind == 0) x = fabs(x);
        if (kind == 1 ? x < m : x > m) m = x;
    }
    out[j] = m;
}

/* ---- fake quantization (plugin.h / docs/algorithms.md §1, bit for bit with cpu_ref.c) ---------- */

float rnd(float x, int rounding) { return rounding ? round(x) : rint(x); } /* half away / even */

float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* One work-group per slice of W[rows, cols]: slices are [nr, nc] blocks, ncs per block row,
 * numbered in the order their scales are stored.  kind: 0 weight symmetric, 1 weight
 * asymmetric, 2 activation with the static scale sscale, 3 activation with the slice's
 * dynamic abs-max scale.  mode (devbe.h): 0 choose the slice's grid and apply it; 1 choose it
 * only, into scales/zeros[slice] (W is not written); 2 apply the grid read from
 * scales/zeros[slice], writing codes[] too when want_codes.  clip scales the weight range
 * (plugin.h's lmp_wgrid_fit, step for step). */
kernel void quantize(global float *W, global float *scales, global float *zeros, global int *codes,
                     int rows, int cols, int nr, int nc, int ncs, int kind, int bits, int rounding,
                     float sscale, float clip, int mode, int want_codes)
{
    local float red[WG];
    int sl = get_group_id(0), l = get_local_id(0);
    int r0 = (sl / ncs) * nr, c0 = (sl % ncs) * nc;
    int ncw = min(nc, cols - c0), nrw = min(nr, rows - r0);
    int n = nrw * ncw;
    float mn = 0.0f, mx = 0.0f, am = 0.0f; /* 0 belongs to every asym range anyway */
    if (kind != 2 && mode != 2) {
        for (int e = l; e < n; e += WG) {
            float w = W[(size_t)(r0 + e / ncw) * cols + c0 + e % ncw];
            if (w < mn) mn = w;
            if (w > mx) mx = w;
            if (fabs(w) > am) am = fabs(w);
        }
        mn = wg_min(red, mn);
        mx = wg_max(red, mx);
        am = wg_max(red, am);
    }
    float scale, zero = 0.0f, lo, hi;
    if (kind == 0) { /* scale = T / qmax, T = clip * abs-max (0 -> 1e-8) */
        float qmax = (float)((1 << (bits - 1)) - 1);
        float t = clip * am;
        scale = mode == 2 ? scales[sl] : (t == 0.0f ? 1e-8f : t) / qmax;
        lo = -qmax - 1.0f;
        hi = qmax;
    } else if (kind == 1) { /* lo = clip * min(0, min), hi = clip * max(0, max); both 0 -> [-1, 1] */
        float maxq = (float)((1 << bits) - 1);
        if (mode == 2) {
            scale = scales[sl];
            zero = zeros[sl];
        } else {
            float a = clip * mn, b = clip * mx;
            if (a == 0.0f && b == 0.0f) {
                a = -1.0f;
                b = 1.0f;
            }
            scale = (b - a) / maxq;
            zero = rnd(-a / scale, rounding);
        }
        lo = 0.0f;
        hi = maxq;
    } else { /* activations: symmetric, clamp to [-qmax, qmax] */
        float qmax = (float)((1 << (bits - 1)) - 1);
        scale = kind == 2 ? sscale : fmax(am, 1e-5f) / qmax;
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
        float q;
        if (kind == 1) {
            q = clampf(rnd(W[i] / scale, rounding) + zero, lo, hi);
            W[i] = scale * (q - zero);
        } else {
            q = clampf(rnd(W[i] / scale, rounding), lo, hi);
            W[i] = q * scale;
        }
        if (want_codes) codes[i] = q == q ? (int)q : 0; /* a NaN weight has no code */
    }
}

/* ---- the block path (devbe_block.c): 64-bit indices, one item per element --------------- */

/* x[r, j] += b[j] over rows x cols */
kernel void blk_add_bias(global float *x, global const float *b, long cols)
{
    long i = get_global_id(0);
    x[i] += b[i % cols];
}

kernel void blk_add(global const float *a, global const float *b, global float *out)
{
    long i = get_global_id(0);
    out[i] = a[i] + b[i];
}

kernel void blk_mul(global float *x, global const float *y)
{
    long i = get_global_id(0);
    x[i] *= y[i];
}

kernel void blk_scale(global float *x, float s)
{
    long i = get_global_id(0);
    x[i] *= s;
}

/* One item per turned pair: global size rows * n_heads * n_rot/2, the rows being windows of T
 * positions; cs[T, n_rot/2, 2] (the core's table: cos and sin of each angle, times the attention
 * factor).  Dims from n_rot on are left. */
kernel void blk_rope(global float *x, global const float *cs, long n_heads, long head_dim, long n_rot, long T)
{
    long npair = n_rot / 2, gid = get_global_id(0);
    long i = gid % npair, th = gid / npair, t = (th / n_heads) % T; /* th: row * n_heads + head */
    float c = cs[(t * npair + i) * 2], s = cs[(t * npair + i) * 2 + 1];
    global float *xh = x + th * head_dim;
    float x0 = xh[2 * i], x1 = xh[2 * i + 1];
    xh[2 * i] = x0 * c - x1 * s;
    xh[2 * i + 1] = x0 * s + x1 * c;
}

/* attention_seq with a sliding window (query t reads keys t - window < j <= t; 0: all) and
 * soft-capped scores (softcap * tanh(s / softcap); 0: none), as cpu_ref.c's attention_window,
 * in each window get_global_id(2) of T rows. */
kernel void blk_attention(global const float *q, global const float *k, global const float *v,
                          global float *out, long n_heads, long n_kv_heads, long hd_l, float scale,
                          long T, long window, float softcap)
{
    /* 64-bit offsets; the loops run over one window's keys and one head's dims, which the host
     * checked fit int (an int loop vectorizes on CPU runtimes, a long one did not: 4x slower) */
    int t = get_global_id(0), h = get_global_id(1), hd = (int)hd_l;
    long b = get_global_id(2);
    if (t >= T) return;
    long kh = h / (n_heads / n_kv_heads);
    long qdim = n_heads * hd_l, kvdim = n_kv_heads * hd_l;
    global const float *qt = q + (b * T + t) * qdim + h * hd_l;
    global const float *kb = k + b * T * kvdim + kh * hd_l, *vb = v + b * T * kvdim + kh * hd_l;
    int lo = window && t - window + 1 > 0 ? (int)(t - window + 1) : 0;
    float m = -INFINITY;
    for (int j = lo; j <= t; j++) {
        global const float *kj = kb + j * kvdim;
        float dot = 0.0f;
        for (int d = 0; d < hd; d++) dot += qt[d] * kj[d];
        float s = dot * scale;
        if (softcap > 0) s = softcap * tanh(s / softcap);
        m = fmax(m, s);
    }
    float acc[MAXHD];
    for (int d = 0; d < hd; d++) acc[d] = 0.0f;
    float sum = 0.0f;
    for (int j = lo; j <= t; j++) {
        global const float *kj = kb + j * kvdim, *vj = vb + j * kvdim;
        float dot = 0.0f;
        for (int d = 0; d < hd; d++) dot += qt[d] * kj[d];
        float s = dot * scale;
        if (softcap > 0) s = softcap * tanh(s / softcap);
        float p = exp(s - m);
        sum += p;
        for (int d = 0; d < hd; d++) acc[d] += p * vj[d];
    }
    global float *ot = out + (b * T + t) * qdim + h * hd_l;
    for (int d = 0; d < hd; d++) ot[d] = acc[d] / sum;
}

/* out[j] += sum over the n rows of X[n, c] of x^2, one item per column (double where the device
 * has it, as the CPU path sums a window in double). */
kernel void blk_sqsum(long n, long c, global const float *X, global float *out)
{
    long j = get_global_id(0);
    if (j >= c) return;
    real s = 0;
    for (long i = 0; i < n; i++) {
        real x = X[i * c + j];
        s += x * x;
    }
    out[j] = (float)((real)out[j] + s);
}
