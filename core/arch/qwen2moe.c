/* qwen2moe.c — Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2's block (q, k, v biases) whose MLP
 * is routed experts (softmax, top k, renormalized only with norm_topk_prob) plus a shared expert
 * every token goes through, scaled by sigmoid(shared_expert_gate(x)).  Layers in mlp_only_layers,
 * or off the decoder_sparse_step, keep a dense MLP of intermediate_size. */
#include "arch/arch.h"

static const lmp_moe_desc qwen2moe_moe = {
    .hf_router = "mlp.gate", .hf_experts = "mlp.experts", .hf_expert_leaf = {"gate_proj", "up_proj", "down_proj"},
    .hf_shared = "mlp.shared_expert", .hf_shared_gate = "mlp.shared_expert_gate", .norm_topk = -1,
    .hf_norm_topk_default = 0, .gguf_norm_topk = 0, .hf_sparse_step = 1};

static const char *const qwen2moe_keys[] = {
    "num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
    "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers", "router_aux_loss_coef", "output_router_logits",
    "qkv_bias", "num_local_experts", NULL};

const lmp_arch_desc lmp_arch_qwen2moe = {
    .name = "qwen2moe", .family = LMP_FAMILY_LLAMA, .hf_class = "Qwen2MoeForCausalLM", .hf_model_type = "qwen2_moe",
    .hf_default_ctx = 32768, .bias = LMP_BIAS_QKV, .sliding = LMP_SLIDING_FLAG, .gguf_arch = "qwen2moe",
    .gguf_rope_halves = 1, .hf_extra_keys = qwen2moe_keys, .moe = &qwen2moe_moe};
