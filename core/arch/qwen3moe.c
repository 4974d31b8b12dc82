/* qwen3moe.c — Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): Qwen3's block (q/k norms, its own head_dim)
 * whose MLP is routed experts (softmax, top k, renormalized with norm_topk_prob), no shared
 * expert.  llama.cpp's qwen3moe always renormalizes. */
#include "arch/arch.h"

static const lmp_moe_desc qwen3moe_moe = {
    .hf_router = "mlp.gate", .hf_experts = "mlp.experts", .hf_expert_leaf = {"gate_proj", "up_proj", "down_proj"},
    .norm_topk = -1, .hf_norm_topk_default = 0, .gguf_norm_topk = 1, .hf_sparse_step = 1};

static const char *const qwen3moe_keys[] = {
    "num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step",
    "mlp_only_layers", "router_aux_loss_coef", "output_router_logits", "num_local_experts", NULL};

const lmp_arch_desc lmp_arch_qwen3moe = {
    .name = "qwen3moe", .family = LMP_FAMILY_LLAMA, .hf_class = "Qwen3MoeForCausalLM", .hf_model_type = "qwen3_moe",
    .hf_default_ctx = 32768, .bias = LMP_BIAS_ATTN_CONFIG, .sliding = LMP_SLIDING_FLAG,
    .flags = LMP_ARCH_QK_NORM | LMP_ARCH_HEAD_DIM, .gguf_arch = "qwen3moe", .gguf_rope_halves = 1,
    .hf_extra_keys = qwen3moe_keys, .moe = &qwen3moe_moe};
