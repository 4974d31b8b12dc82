/* model_hf_quant.h — compressed-tensors checkpoints (what llm-compressor writes) for model_hf.c.
 *
 * config.json's "quantization_config" with "quant_method": "compressed-tensors" says, per
 * "config_groups" entry, which modules ("targets", minus the "ignore" list) hold quantized
 * weights and how.  Read exactly, anything else refused with the key at fault:
 *   format        "int-quantized" or "naive-quantized": X.weight holds int8 codes [out, in];
 *                 "pack-quantized": X.weight_packed int32 [out, ceil(in * bits / 32)], the codes
 *                 of a row as one little-endian bit stream (code j at bit j * bits; 8 codes of 4
 *                 bits or 4 of 8 bits per word, the low bits first), each stored as code +
 *                 2^(bits-1), and X.weight_shape [out, in];  "mixed-precision": each group
 *                 names one of those itself.
 *   weights       type "int", num_bits 4 or 8, symmetric or not, strategy "tensor", "channel"
 *                 or "group" (group_size columns; a ragged last group allowed), not dynamic.
 *                 X.weight_scale [1], [out, 1] or [out, groups], F32/F16/BF16;
 *                 X.weight_zero_point (asymmetric) of the same shape, integer or float, or for
 *                 pack-quantized channel/group grids packed like the codes but down the rows
 *                 (int32 [ceil(out * bits / 32), groups]); X.weight_g_idx [in] (GPTQ's
 *                 activation order): column j's group (all -1: column order).
 *                 w[o, j] = (q[o, j] - zp[o, g]) * scale[o, g], computed in f32: one rounding
 *                 for an F32 scale, as compressed-tensors computes in the scale's dtype; exact
 *                 for an F16/BF16 scale (which compressed-tensors rounds back to that dtype).
 *   input_activations  symmetric int: dynamic per token or per tensor, or static per tensor with
 *                 X.input_scale; simulated with lmpress's activation quantizer (lmp_aspec).
 *   kv_cache_scheme  8 bits, "float" (FP8 E4M3) or "int", symmetric, static, per tensor or per
 *                 KV head ("attn_head"): each attention module's k_scale and v_scale (F32/F16/BF16,
 *                 one value, or [n_kv_heads, 1, 1]), simulated
 *                 by the KV-cache quantization (model/kv_quant.h, lmp_block.kv).  config_groups
 *                 may then be empty (the weights dense).
 * Targets and ignore entries follow compressed-tensors' matching: a module name, "re:" + a
 * Python regex matched from the start of the name, or a class name ("Linear", "Embedding");
 * among several matching targets an exact name wins over a regex over a class, ties by text.
 * A module no target matches, or one ignored, keeps its dense float X.weight. */
#ifndef LMP_CORE_MODEL_HF_QUANT_H
#define LMP_CORE_MODEL_HF_QUANT_H

#include <stdint.h>

#include "formats/json.h"
#include "formats/safetensors.h"
#include "lmpress/plugin.h"

typedef struct lmp_ct lmp_ct;

/* Reads quantization_config (qc) of the config.json `what`. */
int lmp_ct_parse(const lmp_json *qc, const char *what, lmp_ct **out);
void lmp_ct_free(lmp_ct *ct);

/* The KV-cache quantization of the attention module `attn` ("model.layers.3.self_attn"):
 * kv->type LMP_KV_NONE without a kv_cache_scheme, else its static scales read from
 * attn.k_scale / attn.v_scale (an error naming the tensor when one is missing or not a positive
 * finite value). */
int lmp_ct_kv(const lmp_ct *ct, const lmp_safetensors *st, const char *where, const char *attn, int64_t n_kv_heads,
              lmp_kvspec *kv);

/* How one module's weight [out, in] is stored, checked against the file. */
typedef struct lmp_ct_weight {
    int quantized;        /* 0: a dense float X.weight (read as any other checkpoint's) */
    double bits;          /* quantized: storage bits per weight (codes, scales, zero-points, g_idx) */
    lmp_aspec act;        /* the simulated quantization of the module's input (NONE: none) */
    char kind[48];        /* quantized: "int4-g32-asym", "int8-channel-a8" (format names) */
    /* private: what lmp_ct_dequantize reads */
    const void *scheme;
    const lmp_st_tensor *codes, *scale, *zero, *g_idx;
    float global_scale;   /* NVFP4: X.weight_global_scale */
    int zero_packed;
    int64_t out, in;
} lmp_ct_weight;

/* The storage of module `module` (class cls: "Linear" or "Embedding") of shape [out, in]: every
 * tensor present with its shape and dtype, else an error naming the tensor (in `where`'s file)
 * or the config key. */
int lmp_ct_find(const lmp_ct *ct, const lmp_safetensors *st, const char *where, const char *module,
                const char *cls, int64_t out, int64_t in, lmp_ct_weight *w);
/* w[out * in] <- the dequantized weight of a quantized module. */
int lmp_ct_dequantize(const lmp_ct_weight *q, float *w);

#endif
