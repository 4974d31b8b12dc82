/* gpt2.c — GPT-2: LayerNorm with bias, learned positions, tanh GELU, a fused c_attn (Conv1D
 * weights stored [in, out]), biases everywhere, tied head. */
#include "arch/arch.h"

const lmp_arch_desc lmp_arch_gpt2 = {
    .name = "gpt2", .family = LMP_FAMILY_GPT2, .hf_class = "GPT2LMHeadModel", .hf_model_type = "gpt2",
    .hf_tied_default = 1, .hf_default_ctx = 1024,
    .bias = LMP_BIAS_ALL, .sliding = LMP_SLIDING_NONE, .gguf_arch = "gpt2", .gguf_fused_qkv = 1};
