/* qwen3.c — Qwen3: the Llama block with an RMSNorm over each head of q and k before RoPE, and a
 * head_dim of its own (Qwen3-0.6B: 16 heads of 128 on a hidden size of 1024). */
#include "arch/arch.h"

const lmp_arch_desc lmp_arch_qwen3 = {
    .name = "qwen3", .family = LMP_FAMILY_LLAMA, .hf_class = "Qwen3ForCausalLM", .hf_model_type = "qwen3", .hf_default_ctx = 32768,
    .bias = LMP_BIAS_ATTN_CONFIG, .sliding = LMP_SLIDING_FLAG, .flags = LMP_ARCH_QK_NORM | LMP_ARCH_HEAD_DIM, .gguf_arch = "qwen3",
    .gguf_rope_halves = 1};
