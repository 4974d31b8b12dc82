/* qwen2.c — Qwen2 / Qwen2.5: the Llama block with biases on q, k and v. */
#include "arch/arch.h"

const lmp_arch_desc lmp_arch_qwen2 = {
    .name = "qwen2", .family = LMP_FAMILY_LLAMA, .hf_class = "Qwen2ForCausalLM", .hf_model_type = "qwen2", .hf_default_ctx = 32768,
    .bias = LMP_BIAS_QKV, .sliding = LMP_SLIDING_FLAG, .gguf_arch = "qwen2", .gguf_rope_halves = 1};
