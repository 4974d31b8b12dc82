/* gguf_kquants.h — one row of a linear on a k-quant grid (Q2_K .. Q6_K) as ggml's super-blocks.
 *
 * The recorded grid holds each sub-block's scale (and min) as the exact product of the
 * super-block's fp16 d (dmin) and a small integer (plugin_kquants.h); the file holds d and the
 * integers.  They are recovered from the products: d from the sub-block of largest magnitude,
 * trying its integer from the end of the format's range inwards, kept when it is an fp16 value
 * and every other product is d times an integer of the range, exactly.  Any such split gives
 * the same products, so the weights ggml dequantizes are the recorded ones whichever is found.
 * Layouts: ggml-common.h's block_q2_K .. block_q6_K, and the packing of ggml-quants.c's
 * quantize_row_q*_K_ref. */
#ifndef LMP_CORE_GGUF_KQUANTS_H
#define LMP_CORE_GGUF_KQUANTS_H

#include <stdint.h>

#include "lmpress/plugin.h"

/* Bytes of one super-block of 256 weights of format f (a k-quant), 0 for any other format. */
int lmp_gguf_kblock_bytes(lmp_wformat f);

/* Row r of l (whose grid is a k-quant, rows a multiple of 256 wide) from its codes[in]
 * (lmp_grid_codes_row's) into out[in / 256 * lmp_gguf_kblock_bytes].  0, or an error naming the
 * linear, the row and the super-block whose scales are not one fp16 times integers. */
int lmp_gguf_pack_k_row(const lmp_linear *l, int64_t r, const int32_t *codes, unsigned char *out);

#endif
