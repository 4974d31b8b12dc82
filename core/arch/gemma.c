/* gemma.c — Gemma (1): the Llama block with a GELU-gated MLP (gelu_tanh(gate) * up), embeddings
 * scaled by sqrt(hidden), RMSNorm gains stored as w for 1 + w, a head_dim of its own (Gemma 7B:
 * 16 heads of 256 on 3072), tied head. */
#include "arch/arch.h"

static const char *const gemma_keys[] = {"hidden_activation", "use_bidirectional_attention", NULL};

const lmp_arch_desc lmp_arch_gemma = {
    .name = "gemma", .family = LMP_FAMILY_LLAMA, .hf_class = "GemmaForCausalLM", .hf_model_type = "gemma",
    .hf_tied_default = 1, .hf_default_ctx = 8192,
    .bias = LMP_BIAS_CONFIG, .sliding = LMP_SLIDING_NONE,
    .flags = LMP_ARCH_GEGLU | LMP_ARCH_EMBED_SCALE | LMP_ARCH_NORM_PLUS_ONE | LMP_ARCH_HEAD_DIM,
    .gguf_arch = "gemma", .gguf_rope_halves = 1, .hf_extra_keys = gemma_keys};
