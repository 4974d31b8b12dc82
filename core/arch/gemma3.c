/* gemma3.c — Gemma 3 text models (Gemma3ForCausalLM): Gemma's block with per-head q/k norms (1 + w),
 * norms on the attention's and the MLP's outputs, sliding-window layers that turn with their own
 * RoPE base (10000; the global layers 1e6), and the attention scaled by query_pre_attn_scalar. */
#include "arch/arch.h"

static const char *const gemma3_norms[6] = {"input_layernorm",  "pre_feedforward_layernorm",
                                            "self_attn.q_norm", "self_attn.k_norm",
                                            "post_attention_layernorm", "post_feedforward_layernorm"};

static const char *const gemma3_keys[] = {
    "hidden_activation", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
    "use_bidirectional_attention", "rope_local_base_freq",
    "sliding_window_pattern", "_sliding_window_pattern", /* layer_types says it too, and is required */
    NULL};

const lmp_arch_desc lmp_arch_gemma3 = {
    .name = "gemma3", .family = LMP_FAMILY_LLAMA, .hf_class = "Gemma3ForCausalLM", .hf_model_type = "gemma3_text",
    .hf_tied_default = 1, .hf_default_ctx = 131072,
    .bias = LMP_BIAS_CONFIG, .sliding = LMP_SLIDING_ALWAYS,
    .flags = LMP_ARCH_QK_NORM | LMP_ARCH_GEGLU | LMP_ARCH_EMBED_SCALE | LMP_ARCH_NORM_PLUS_ONE | LMP_ARCH_HEAD_DIM |
             LMP_ARCH_POST_NORMS,
    .gguf_arch = "gemma3", .gguf_rope_halves = 1, .hf_norms = gemma3_norms, .gguf_swa_pattern = 6,
    .gguf_swa_base = 10000.0, .gguf_scale_by_width_layers = 62, .hf_extra_keys = gemma3_keys};
