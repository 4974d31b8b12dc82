/* deepseek_v2.c — DeepSeek-V2 (and V2-Lite): multi-head latent attention (q through q_proj or the
 * low-rank q_a/q_b, k and v from one kv latent, a rotary key shared by the heads, turned in
 * adjacent pairs), then a dense MLP in the first first_k_dense_replace layers and routed experts
 * after: softmax over the router's logits, greedy or group_limited_greedy top k, times
 * routed_scaling_factor, plus n_shared_experts always-on experts (one MLP, no gate).  As
 * transformers 5.24's modeling_deepseek_v2.  Its GGUF is llama.cpp's deepseek2 with
 * expert_gating_func 1 (softmax), read by model_gguf.c (without expert groups: llama.cpp's rule
 * is not group_limited_greedy) and written by gguf_write.c. */
#include "arch/arch.h"

static const lmp_moe_desc deepseek_v2_moe = {
    .hf_router = "mlp.gate", .hf_experts = "mlp.experts", .hf_expert_leaf = {"gate_proj", "up_proj", "down_proj"},
    .hf_shared = "mlp.shared_experts", .norm_topk = -1, .hf_deepseek = 1, .route = LMP_ROUTE_SOFTMAX_GROUPS};

/* read by parse_mla / parse_deepseek_moe (model_hf.c), or harmless to an f32 forward: the
 * auxiliary losses' (aux_loss_alpha, seq_aux), expert parallelism (ep_size), the router's logits
 * as an output */
static const char *const deepseek_v2_keys[] = {
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "qk_head_dim",
    "n_routed_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
    "first_k_dense_replace", "moe_layer_freq", "n_group", "topk_group", "routed_scaling_factor", "norm_topk_prob",
    "scoring_func", "topk_method", "output_router_logits", "aux_loss_alpha", "seq_aux", "ep_size", NULL};

const lmp_arch_desc lmp_arch_deepseek_v2 = {
    .name = "deepseek2", .family = LMP_FAMILY_LLAMA, .hf_class = "DeepseekV2ForCausalLM",
    .hf_model_type = "deepseek_v2", .hf_default_ctx = 2048, .bias = LMP_BIAS_CONFIG, .sliding = LMP_SLIDING_NONE,
    .flags = LMP_ARCH_MLA, .hf_rope_adjacent = 1, .gguf_arch = "deepseek2", .hf_extra_keys = deepseek_v2_keys, .moe = &deepseek_v2_moe};
