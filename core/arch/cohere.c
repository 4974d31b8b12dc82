/* cohere.c — Cohere / Command-R (CohereForCausalLM; llama.cpp's command-r): one LayerNorm without a
 * bias feeding attention and the SwiGLU MLP in parallel, RoPE over interleaved pairs of the whole
 * head (the adjacent-pair rotation lmpress runs: the rows are used as stored, by llama.cpp too),
 * the logits times logit_scale, a tied head.  use_qk_norm true (Command R+'s per-head LayerNorms)
 * is refused by name; Cohere2 (Command R7B) is refused in arch.c. */
#include "arch/arch.h"

static const char *const cohere_key_names[][2] = {{"rms_norm_eps", "layer_norm_eps"}, {NULL, NULL}};
static const char *const cohere_keys[] = {"logit_scale", "use_qk_norm", NULL};

const lmp_arch_desc lmp_arch_cohere = {
    .name = "cohere", .family = LMP_FAMILY_LLAMA, .hf_class = "CohereForCausalLM", .hf_model_type = "cohere",
    .hf_default_ctx = 8192, .hf_tied_default = 1, .bias = LMP_BIAS_ATTN_CONFIG, .sliding = LMP_SLIDING_NONE,
    .flags = LMP_ARCH_LAYER_NORM | LMP_ARCH_NORM_NO_BIAS | LMP_ARCH_PARALLEL | LMP_ARCH_SHARED_NORM,
    .hf_key_names = cohere_key_names, .hf_extra_keys = cohere_keys, .hf_rope_adjacent = 1,
    .hf_logit_scale_default = 0.0625, .gguf_arch = "command-r"};
