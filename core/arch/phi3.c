/* phi3.c — Phi-3 / Phi-3.5 (Phi3ForCausalLM): the Llama block with q, k, v fused in qkv_proj and
 * gate, up fused in gate_up_proj, and LongRoPE (GGUF: rope_factors_long / _short and
 * rope.scaling.attn_factor). */
#include "arch/arch.h"

const lmp_arch_desc lmp_arch_phi3 = {
    .name = "phi3", .family = LMP_FAMILY_LLAMA, .hf_class = "Phi3ForCausalLM", .hf_model_type = "phi3", .hf_default_ctx = 4096,
    .bias = LMP_BIAS_CONFIG, .sliding = LMP_SLIDING_ALWAYS, .hf_fused_qkv = "self_attn.qkv_proj",
    .hf_fused_gate_up = "mlp.gate_up_proj", .gguf_arch = "phi3", .gguf_rope_halves = 1, .gguf_fused_qkv = 1,
    .gguf_fused_gate_up = 1};
