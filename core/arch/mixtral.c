/* mixtral.c — Mixtral: the Mistral block whose MLP is 8 routed experts, 2 per token: softmax over
 * the router's logits, the top k, renormalized to sum to 1.  llama.cpp's converter writes it as
 * GGUF architecture "llama" with llama.expert_count (the loader switches to this descriptor). */
#include "arch/arch.h"

static const lmp_moe_desc mixtral_moe = {
    .hf_router = "block_sparse_moe.gate", .hf_experts = "block_sparse_moe.experts",
    .hf_expert_leaf = {"w1", "w3", "w2"}, .norm_topk = 1, .gguf_norm_topk = 1};

static const char *const mixtral_keys[] = {"num_local_experts", "num_experts_per_tok", "router_aux_loss_coef",
                                           "output_router_logits", "router_jitter_noise", NULL};

const lmp_arch_desc lmp_arch_mixtral = {
    .name = "mixtral", .family = LMP_FAMILY_LLAMA, .hf_class = "MixtralForCausalLM", .hf_model_type = "mixtral",
    .hf_default_ctx = 131072, .bias = LMP_BIAS_CONFIG, .sliding = LMP_SLIDING_ALWAYS, .gguf_arch = "llama",
    .hf_extra_keys = mixtral_keys, .moe = &mixtral_moe};
