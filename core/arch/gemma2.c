/* gemma2.c — Gemma 2 (Gemma2ForCausalLM): Gemma's block with norms on the attention's and the
 * MLP's outputs, every other layer sliding (layer_types), soft-capped attention scores and logits,
 * and the attention scaled by query_pre_attn_scalar. */
#include "arch/arch.h"

static const char *const gemma2_norms[6] = {"input_layernorm", "pre_feedforward_layernorm", NULL, NULL,
                                            "post_attention_layernorm", "post_feedforward_layernorm"};

static const char *const gemma2_keys[] = {"hidden_activation", "query_pre_attn_scalar", "attn_logit_softcapping",
                                          "final_logit_softcapping", "use_bidirectional_attention", NULL};

const lmp_arch_desc lmp_arch_gemma2 = {
    .name = "gemma2", .family = LMP_FAMILY_LLAMA, .hf_class = "Gemma2ForCausalLM", .hf_model_type = "gemma2",
    .hf_tied_default = 1, .hf_default_ctx = 8192,
    .bias = LMP_BIAS_CONFIG, .sliding = LMP_SLIDING_ALWAYS,
    .flags = LMP_ARCH_GEGLU | LMP_ARCH_EMBED_SCALE | LMP_ARCH_NORM_PLUS_ONE | LMP_ARCH_HEAD_DIM | LMP_ARCH_POST_NORMS,
    .gguf_arch = "gemma2", .gguf_rope_halves = 1, .hf_norms = gemma2_norms, .gguf_swa_pattern = 2,
    .gguf_scale_by_width_layers = 46, .hf_extra_keys = gemma2_keys};
