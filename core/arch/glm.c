/* glm.c — GLM (GlmForCausalLM, GLM-4-9B and the like; llama.cpp's "chatglm"): the Llama block
 * with RoPE on the first half of each head (partial_rotary_factor 0.5) over interleaved pairs,
 * which is the adjacent-pair rotation lmpress runs, biases on q, k and v, and gate and up fused in
 * gate_up_proj (llama.cpp: ffn_up of twice the width). */
#include "arch/arch.h"

const lmp_arch_desc lmp_arch_glm = {
    .name = "glm", .family = LMP_FAMILY_LLAMA, .hf_class = "GlmForCausalLM", .hf_model_type = "glm", .hf_default_ctx = 131072,
    .bias = LMP_BIAS_QKV_CONFIG, .sliding = LMP_SLIDING_NONE, .gguf_arch = "chatglm", .hf_fused_gate_up = "mlp.gate_up_proj",
    .gguf_fused_gate_up = 1, .hf_rope_adjacent = 1};
