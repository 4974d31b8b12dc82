/* alibi.h — ALiBi (attention with linear biases; Press et al. 2021, as Bloom runs it): no rotation
 * of q and k; head h's score of query t on key j gets slope_h * (j - t) added before the softmax.
 * Transformers' Bloom adds slope_h * j (the key's position); a softmax row does not change when
 * one value is added to all its entries, so the two are the same attention, and j - t keeps the
 * biases small on long windows.
 *
 * The slopes depend on the head count only (transformers' _get_alibi_slopes, llama.cpp's
 * max_alibi_bias 8): for n = 2^k heads, slope_h = 2^(-8 (h + 1) / n); otherwise the 2^k =
 * floor-power-of-2 heads take those of 2^k, and the rest the odd-numbered ones of 2^(k+1).
 *
 * The attention itself is the plain reference kernel (double sums of f32 products, as the CPU
 * backend's attention_window), run on the host whatever the backend: no backend has an ALiBi op
 * yet (the device block path refuses it by name); its gradient is train/attention_grad.h's. */
#ifndef LMP_CORE_MODEL_ALIBI_H
#define LMP_CORE_MODEL_ALIBI_H

#include <stdint.h>

/* slopes[n_heads], computed in f32 as transformers does, held in double. */
void lmp_alibi_slopes(int64_t n_heads, double *slopes);

/* out[T, n_heads * hd] = causal attention of q [T, n_heads * hd] over k, v [T, n_kv_heads * hd]
 * (GQA), keys within `window` of the query (0: all earlier), each score
 * q.k / sqrt(hd) + slopes[h] (j - t) (slopes NULL: none).  0, or LMP_ENOMEM with the message set. */
int lmp_attention_biased(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                         const double *slopes, const float *q, const float *k, const float *v, float *out);

#endif
