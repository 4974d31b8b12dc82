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
 * The attention is the backend operation attention_alibi (plugin ABI 6.1; the CPU backend's, and
 * its plain reference lmp_ref_attention_alibi in backends/cpu/cpu_ref.c; a backend without it
 * runs the CPU backend's, and the device block path refuses ALiBi by name); its gradient is
 * train/attention_grad.h's lmp_attention_alibi_backward, on the host in double. */
#ifndef LMP_CORE_MODEL_ALIBI_H
#define LMP_CORE_MODEL_ALIBI_H

#include <stdint.h>

/* slopes[n_heads], computed in f32 as transformers does (torch.pow on f32). */
void lmp_alibi_slopes(int64_t n_heads, float *slopes);

#endif
