/* olmo2.c — OLMo 2 (Olmo2ForCausalLM): the Llama block (SwiGLU, GQA, rotate-half RoPE) with no norm
 * before attention or the MLP, RMSNorms on their outputs before each residual add
 * (post_attention_layernorm, post_feedforward_layernorm), and q/k RMSNorms over all of q's (k's)
 * heads together, before RoPE; q/k/v/o biases when attention_bias.  llama.cpp's olmo2 keeps the
 * rotate-half order (NEOX rope). */
#include "arch/arch.h"

static const char *const olmo2_norms[6] = {NULL, NULL, "self_attn.q_norm", "self_attn.k_norm",
                                           "post_attention_layernorm", "post_feedforward_layernorm"};

const lmp_arch_desc lmp_arch_olmo2 = {
    .name = "olmo2", .family = LMP_FAMILY_LLAMA, .hf_class = "Olmo2ForCausalLM", .hf_model_type = "olmo2",
    .hf_default_ctx = 2048, .bias = LMP_BIAS_ATTN_CONFIG, .sliding = LMP_SLIDING_NONE,
    .flags = LMP_ARCH_NO_PRE_NORMS | LMP_ARCH_POST_NORMS | LMP_ARCH_QK_NORM | LMP_ARCH_QK_NORM_ALL,
    .hf_norms = olmo2_norms, .gguf_arch = "olmo2", .gguf_rope_halves = 1};
