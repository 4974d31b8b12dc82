/* cpu_ref.h — plain reference kernels for every operation of lmp_backend_i.
 *
 * These are the "obviously correct" versions every backend (the CPU one included) is tested
 * against: simple loops, double accumulation for sums and dot products, no BLAS, no threads.
 * Each lmp_ref_<op> takes the arguments of the vtable entry minus `self` and returns LMP_OK,
 * LMP_EINVAL (bad shape or argument), LMP_ENOMEM (scratch malloc failed) or, for cholesky,
 * LMP_ENOTSPD.  They set no error text: callers that own a host say what went wrong.
 *
 * Rules shared by all kernels:
 *   - every matrix is f32, row-major; a dimension of 0 is a no-op, a negative one is EINVAL;
 *   - outputs must not overlap inputs unless the comment says "may alias";
 *   - quantization follows plugin.h / docs/algorithms.md §1 to the bit: every grid step is done in
 *     f32 (division, not multiplication by a reciprocal), so another f32 implementation of the
 *     same formulas (numpy, a GPU kernel without fast-math) gets identical values.
 *
 * The symbols are hidden: a plugin linking this static library exports only its entry point. */
#ifndef LMP_CPU_REF_H
#define LMP_CPU_REF_H

#include <stdint.h>

#include "lmpress/plugin.h"

#if defined(__GNUC__)
#define LMP_REF_API __attribute__((visibility("hidden")))
#else
#define LMP_REF_API
#endif

/* C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C.
 * A is [M,K] (lda >= K), or [K,M] (lda >= M) when ta; B is [K,N] (ldb >= N), or [N,K]
 * (ldb >= K) when tb; ldc >= N.  BLAS semantics: beta == 0 does not read C, alpha == 0 does
 * not read A or B. */
LMP_REF_API int lmp_ref_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t lda, const float *B, int64_t ldb,
                             float beta, float *C, int64_t ldc);

/* H[c,c] += alpha * X^T X for X[n,c]; every entry of H is updated (both triangles). */
LMP_REF_API int lmp_ref_xtx_accum(int64_t n, int64_t c, const float *X, float alpha, float *H);

/* In place A[n,n] = L L^T, reading only the lower triangle; the strict upper triangle is
 * zeroed.  A pivot that is not > 0 (or NaN) returns LMP_ENOTSPD with *bad_pivot = its 0-based
 * column; A's contents are then unspecified. */
LMP_REF_API int lmp_ref_cholesky(int64_t n, float *A, int64_t *bad_pivot);

/* L[n,n] lower Cholesky factor (upper triangle ignored) -> (L L^T)^-1, full and symmetric.
 * A zero diagonal entry returns LMP_ENOTSPD (the matrix is singular). */
LMP_REF_API int lmp_ref_chol_inverse(int64_t n, float *L);

/* B[n,nrhs] <- L^-1 B (trans == 0) or L^-T B (trans != 0); L[n,n] lower, upper ignored. */
LMP_REF_API int lmp_ref_trsm_lower(int trans, int64_t n, int64_t nrhs, const float *L, float *B);

/* out[T,C] = x / sqrt(mean(x^2) + eps) * w[C], per row.  out may alias x. */
/* out[T,C] = (x - mean)/sqrt(var + eps) * w + b per row, biased variance; b may be NULL. */
LMP_REF_API int lmp_ref_layernorm(int64_t T, int64_t C, const float *x, const float *w,
                                  const float *b, float eps, float *out);
/* out[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's GELU. */
LMP_REF_API int lmp_ref_gelu(int64_t n, const float *x, float *out);
LMP_REF_API int lmp_ref_rmsnorm(int64_t T, int64_t C, const float *x, const float *w, float eps,
                                float *out);

/* x[T, n_heads*head_dim] rotated in place: row t is at position pos0 + t, and the pair
 * (2i, 2i+1) of every head turns by pos * theta^(-2i/head_dim) (llama2.c convention).
 * head_dim must be even. */
LMP_REF_API int lmp_ref_rope(int64_t T, int64_t n_heads, int64_t head_dim, int64_t pos0,
                             float theta, float *x);
/* Attention with a sliding window and soft-capped scores (plugin.h's attention_window), in
 * double like lmp_ref_attention. */
LMP_REF_API int lmp_ref_attention_window(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                                         float softcap, const float *q, const float *k, const float *v, float *out);
/* Attention with ALiBi (plugin.h's attention_alibi): attention_window's scores without soft-cap,
 * plus slopes[h] * (j - t), in double. */
LMP_REF_API int lmp_ref_attention_alibi(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                                        const float *slopes, const float *q, const float *k, const float *v,
                                        float *out);
/* RoPE from a table (plugin.h's rope_table): pairs (2i, 2i+1), i < n_rot/2, of each head turned
 * by (f32)(pos * inv_freq[i]) and scaled by mscale; cos and sin in double. */
LMP_REF_API int lmp_ref_rope_table(int64_t T, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos0,
                                   const float *inv_freq, float mscale, float *x);

/* The Walsh-Hadamard transform (plugin.h's hadamard) as a plain matrix product: each row of
 * x[rows, n] <- row H / sqrt(n), entry (i, j) of H (-1)^popcount(i & j), in double; n a power of 2. */
LMP_REF_API int lmp_ref_hadamard(int64_t rows, int64_t n, float *x);

/* Causal attention.  q[T, nh*hd], k,v[T, nkv*hd] -> out[T, nh*hd]; query head h reads kv head
 * h / (nh/nkv) (nh % nkv == 0); scores scaled by 1/sqrt(hd); softmax over keys 0..t. */
LMP_REF_API int lmp_ref_attention(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                                  const float *q, const float *k, const float *v, float *out);

/* The gradients of lmp_ref_attention for dout[T, nh*hd]: dq[T, nh*hd], dk, dv[T, nkv*hd]
 * overwritten.  Per query t of head h: p = softmax(scale q_t K^T) over keys 0..t,
 * dp_j = dout_t . v_j, ds_j = p_j (dp_j - sum_i p_i dp_i), dq_t = scale sum_j ds_j k_j,
 * dk_j += scale ds_j q_t, dv_j += p_j dout_t; everything in double. */
LMP_REF_API int lmp_ref_attention_backward(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd,
                                           const float *q, const float *k, const float *v, const float *dout,
                                           float *dq, float *dk, float *dv);

/* out[n] = silu(gate) * up, silu(g) = g / (1 + exp(-g)).  out may alias gate or up. */
LMP_REF_API int lmp_ref_swiglu(int64_t n, const float *gate, const float *up, float *out);

/* out[rows,cols] = log_softmax of each row of x[rows,cols].  out may alias x. */
LMP_REF_API int lmp_ref_log_softmax(int64_t rows, int64_t cols, const float *x, float *out);

/* Accumulating column reduction of X[n,c] into out[c] (the caller initialises out):
 * ABSMAX out = max(out, max|x|), MIN/MAX fold, SUM out += sum of the column.  NaNs in X are
 * skipped by the folds. */
LMP_REF_API int lmp_ref_reduce_cols(lmp_reduce kind, int64_t n, int64_t c, const float *X,
                                    float *out);

/* The weight grid of plugin.h (bits 2..8, clip in [0, 1], format INT), in two steps.  Slices in
 * storage order: [1] per tensor, [rows] per channel, [rows, ceil(cols/group)] per group.
 * choose: scales (and zeros when !sym; zeros may be NULL when sym) of every slice of W, which
 * is only read.  apply: W <- the dequantized values on the given grid; codes (may be NULL) the
 * integer codes.  Choose then apply is RTN, the fused quantize_weight of ABI 2. */
LMP_REF_API int lmp_ref_choose_weight_grid(const lmp_wspec *spec, int64_t rows, int64_t cols,
                                           const float *W, float *scales, float *zeros);
LMP_REF_API int lmp_ref_apply_weight_grid(const lmp_wspec *spec, int64_t rows, int64_t cols,
                                          float *W, const float *scales, const float *zeros,
                                          int32_t *codes);

/* Fake-quantize activations X[T,C] in place (bits 2..16).  LMP_ACT_NONE is a no-op; a STATIC
 * scale must be finite and > 0. */
LMP_REF_API int lmp_ref_quantize_act(const lmp_aspec *spec, int64_t T, int64_t C, float *X);

/* The rounding of spec->rounding: half to even (nearbyintf, default FP mode) or half away from
 * zero (roundf).  Exposed so other kernels round the same way. */
LMP_REF_API float lmp_ref_round(float x, lmp_rounding r);

#endif /* LMP_CPU_REF_H */
