/* stablelm.c — StableLM 2 / StableLM-3B-4E1T (StableLmForCausalLM): the Llama block (SwiGLU, GQA)
 * with LayerNorms with biases, RoPE on the first partial_rotary_factor (0.25) of each head in
 * rotate-half order, q/k/v biases when use_qkv_bias, and with use_parallel_residual true one
 * LayerNorm feeding attention and the MLP in parallel (no post_attention_layernorm).
 * qk_layernorm true (StableLM 2 12B's per-head LayerNorms) is refused by name. */
#include "arch/arch.h"

static const char *const stablelm_key_names[][2] = {{"rms_norm_eps", "layer_norm_eps"},
                                                    {"attention_bias", "use_qkv_bias"},
                                                    {NULL, NULL}};
static const char *const stablelm_keys[] = {"qk_layernorm", "use_parallel_residual", NULL};

const lmp_arch_desc lmp_arch_stablelm = {
    .name = "stablelm", .family = LMP_FAMILY_LLAMA, .hf_class = "StableLmForCausalLM", .hf_model_type = "stablelm",
    .hf_default_ctx = 4096, .bias = LMP_BIAS_QKV_CONFIG, .sliding = LMP_SLIDING_NONE,
    .flags = LMP_ARCH_LAYER_NORM | LMP_ARCH_SHARED_NORM, .hf_key_names = stablelm_key_names,
    .hf_extra_keys = stablelm_keys, .hf_partial_rotary_default = 0.25, .gguf_arch = "stablelm", .gguf_rope_halves = 1};
