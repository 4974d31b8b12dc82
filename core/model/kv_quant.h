/* kv_quant.h — the KV cache's simulated quantization (plugin.h's lmp_kvspec, issue 38): K and V
 * as attention reads them, quantized per tensor, per KV head or per token and KV head to FP8 E4M3,
 * int8 or int4, with static scales from the calibration or dynamic ones from each window, as compressed-tensors'
 * QuantizedKVCache does with a kv_cache_scheme (llm-compressor's kv_cache_scheme recipes).
 *
 * K and V are [T, n_kv_heads * head_dim], head h the columns [h * head_dim, (h+1) * head_dim):
 * the layout every step of the forward keeps (model/block_steps.h).  The values within a head
 * may be permuted (the forward turns adjacent pairs where a Hugging Face file has halves); a
 * per-tensor or per-head quantization does not see the order. */
#ifndef LMP_CORE_KV_QUANT_H
#define LMP_CORE_KV_QUANT_H

#include <stdint.h>

#include "lmpress/plugin.h"

/* The names a config and a report use: "none", "fp8_e4m3", "int8", "int4" (lmp_kv_type's order). */
extern const char *const lmp_kv_type_names[];

/* The granularities a config names, by lmp_kvspec.per_head's value: "tensor", "head", "token". */
extern const char *const lmp_kv_granularity_names[];

/* One value x on the grid of scale s: e4m3(clamp(x / s, -448, 448)) * s, or
 * clamp(round_half_even(x / s), -128, 127) * s (int4: -8, 7); add_zero: x / s + 0 (a dynamic scale's zero
 * point, which turns -0 into +0). */
float lmp_kv_fake_quant(lmp_kv_type t, float x, float s, int add_zero);

/* The scale of an abs-max: amax / 448 (FP8), amax / 127.5 (int8) or amax / 7.5 (int4), f32's eps
 * for 0. */
float lmp_kv_scale_of(lmp_kv_type t, float amax);

/* amax[h] = max(amax[h], abs-max of head h of x[T, H * hd]) for h < H, or amax[0] of all of x
 * when !per_head. */
void lmp_kv_absmax(const float *x, int64_t T, int64_t H, int64_t hd, int per_head, float *amax);

/* k, v [T, H * hd] in place, as kv says (nothing for LMP_KV_NONE).  LMP_EINVAL (set) when H is
 * beyond LMP_KV_MAX_HEADS with per-head scales, or a static scale is not positive and finite. */
int lmp_kv_quantize(const lmp_kvspec *kv, int64_t T, int64_t H, int64_t hd, float *k, float *v);

/* "fp8_e4m3 per-head static" (or per-tensor, per-token-head; dynamic) into buf[n]; "none" for none. */
const char *lmp_kv_describe(const lmp_kvspec *kv, char *buf, unsigned n);

#endif
