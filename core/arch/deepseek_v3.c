/* deepseek_v3.c — DeepSeek-V3 / R1: DeepSeek-V2's multi-head latent attention (q_lora_rank set,
 * rope_interleave: the rotary key in adjacent pairs), dense first layers, then routed experts
 * chosen by sigmoid scores plus a selection bias (e_score_correction_bias, the router linear's b
 * here) within the topk_group best of n_group groups (noaux_tc), weighted by the scores without
 * the bias, renormalized with norm_topk_prob, times routed_scaling_factor; one shared expert.  As
 * transformers 5.24's modeling_deepseek_v3.  Its GGUF is llama.cpp's deepseek2 with
 * expert_gating_func 2 (sigmoid; exp_probs_b the selection bias), read by model_gguf.c and
 * written by gguf_write.c. */
#include "arch/arch.h"

static const lmp_moe_desc deepseek_v3_moe = {
    .hf_router = "mlp.gate", .hf_experts = "mlp.experts", .hf_expert_leaf = {"gate_proj", "up_proj", "down_proj"},
    .hf_shared = "mlp.shared_experts", .norm_topk = -1, .hf_deepseek = 1, .route = LMP_ROUTE_SIGMOID_BIAS};

/* deepseek_v2.c's, with rope_interleave (true only) and the multi-token-prediction modules'
 * count (num_nextn_predict_layers, transformers 5's num_mtp_layers), which the causal LM's
 * forward does not run (their tensors, layers past num_hidden_layers, are refused by name) */
static const char *const deepseek_v3_keys[] = {
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "qk_head_dim",
    "n_routed_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
    "first_k_dense_replace", "moe_layer_freq", "n_group", "topk_group", "routed_scaling_factor", "norm_topk_prob",
    "scoring_func", "topk_method", "output_router_logits", "aux_loss_alpha", "seq_aux", "ep_size",
    "rope_interleave", "num_nextn_predict_layers", "num_mtp_layers", NULL};

const lmp_arch_desc lmp_arch_deepseek_v3 = {
    .name = "deepseek3", .family = LMP_FAMILY_LLAMA, .hf_class = "DeepseekV3ForCausalLM",
    .hf_model_type = "deepseek_v3", .hf_default_ctx = 4096, .bias = LMP_BIAS_CONFIG, .sliding = LMP_SLIDING_NONE,
    .flags = LMP_ARCH_MLA, .hf_rope_adjacent = 1, .gguf_arch = "deepseek2", .hf_extra_keys = deepseek_v3_keys, .moe = &deepseek_v3_moe};
