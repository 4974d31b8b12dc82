/* cuda_kernels.h — C launchers of the kernels in cuda_kernels.cu (device pointers, one stream).
 * Each returns a cudaError_t as int: 0 when the launch was accepted. */
#ifndef LMP_CUDA_KERNELS_H
#define LMP_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LMP_CU_MAXHD 256 /* attention: larger heads fall back to the CPU */

int lmp_cu_probe(float *x4);
int lmp_cu_rmsnorm(cudaStream_t s, int T, int C, const float *x, const float *w, float eps, float *out);
int lmp_cu_layernorm(cudaStream_t s, int T, int C, const float *x, const float *w, const float *b,
                     float eps, float *out);
/* cs[T, head_dim/2, 2]: cos/sin of every position's angles (devbe_rope_table) */
int lmp_cu_rope(cudaStream_t s, int T, int n_heads, int head_dim, const float *cs, float *x);
int lmp_cu_attention(cudaStream_t s, int T, int n_heads, int n_kv_heads, int hd, const float *q,
                     const float *k, const float *v, float *out);
int lmp_cu_swiglu(cudaStream_t s, size_t n, const float *gate, const float *up, float *out);
int lmp_cu_gelu(cudaStream_t s, size_t n, const float *x, float *out);
int lmp_cu_log_softmax(cudaStream_t s, int rows, int cols, const float *x, float *out);
int lmp_cu_reduce_cols(cudaStream_t s, int kind, int n, int c, const float *X, float *out);
/* kind 0/1 weight sym/asym, 2 static activation (sscale), 3 dynamic activation; mode
 * DEVBE_Q_FUSED/CHOOSE/APPLY (devbe.h): scales/zeros [n_slices] out when choosing, in when
 * applying; codes [rows, cols] written when not NULL; clip the weight range ratio. */
int lmp_cu_quantize(cudaStream_t s, float *W, float *scales, float *zeros, int *codes, int rows,
                    int cols, int nr, int nc, int ncs, int n_slices, int kind, int bits,
                    int rounding, float sscale, float clip, int mode);

/* ---- the block path (devbe_block.c): 64-bit sizes and indices ---- */
int lmp_cu_add_bias(cudaStream_t s, int64_t rows, int64_t cols, float *x, const float *b);
int lmp_cu_add(cudaStream_t s, int64_t n, const float *a, const float *b, float *out);
int lmp_cu_mul(cudaStream_t s, int64_t n, float *x, const float *y);
int lmp_cu_scale(cudaStream_t s, int64_t n, float *x, float v);
/* cs[T, n_rot/2, 2]: the core's table; pairs i < n_rot/2 of each head */
int lmp_cu_rope_part(cudaStream_t s, int64_t batch, int64_t T, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                     const float *cs, float *x);
int lmp_cu_attention_window(cudaStream_t s, int64_t batch, int64_t T, int64_t n_heads, int64_t n_kv_heads,
                            int64_t hd, int64_t window, float softcap, const float *q, const float *k,
                            const float *v, float *out);
int lmp_cu_sqsum_cols(cudaStream_t s, int64_t n, int64_t c, const float *X, float *out);

#ifdef __cplusplus
}
#endif
#endif
