/* olmo.c — OLMo 1 (OlmoForCausalLM): the Llama block (SwiGLU) with LayerNorms that have no weight
 * and no bias (eps 1e-5, no config key), q/k/v/o biases when attention_bias.  clip_qkv (the
 * clamp of q, k and v) is refused by name; llama.cpp's converter permutes q/k for adjacent RoPE
 * pairs as for "llama". */
#include "arch/arch.h"

static const char *const olmo_keys[] = {"clip_qkv", NULL};

const lmp_arch_desc lmp_arch_olmo = {
    .name = "olmo", .family = LMP_FAMILY_LLAMA, .hf_class = "OlmoForCausalLM", .hf_model_type = "olmo",
    .hf_default_ctx = 2048, .bias = LMP_BIAS_ATTN_CONFIG, .sliding = LMP_SLIDING_NONE,
    .flags = LMP_ARCH_LAYER_NORM | LMP_ARCH_NORM_NO_PARAMS, .hf_extra_keys = olmo_keys, .gguf_arch = "olmo"};
