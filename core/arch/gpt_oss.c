/* gpt_oss.c — gpt-oss (GptOssForCausalLM, openai/gpt-oss-20b and -120b), as transformers 5.24's
 * modeling_gpt_oss: a Llama block with q/k/v/o biases, head_dim apart from hidden / heads, a
 * learned sink logit per head in each attention softmax, sliding and full layers alternating
 * (layer_types), YaRN; every MLP routed experts: the router (with a bias) keeps the k largest
 * logits and softmaxes over them, and each expert (gate, up and down with biases, stored fused
 * and transposed) applies the clamped SwiGLU.  Its GGUF (llama.cpp's gpt-oss) is read and written
 * (gguf_write.c); not a checkpoint whose experts are MXFP4 (quantization_config), nor a Hugging
 * Face export (export.c says why). */
#include "arch/arch.h"

static const lmp_moe_desc gpt_oss_moe = {
    .hf_router = "mlp.router", .hf_experts = "mlp.experts", .hf_expert_leaf = {"gate_proj", "up_proj", "down_proj"},
    .norm_topk = 0, .route = LMP_ROUTE_TOPK_SOFTMAX, .hf_gpt_oss = 1};

static const char *const gpt_oss_norms[LMP_NORM_KINDS] = {
    [LMP_NORM_ATTN] = "input_layernorm", [LMP_NORM_MLP] = "post_attention_layernorm",
    [LMP_NORM_SINKS] = "self_attn.sinks"};

/* (openai's own config.json also carries experts_per_token, which must equal num_experts_per_tok,
 * and initial_context_length, which YaRN's original_max_position_embeddings says for the forward) */
static const char *const gpt_oss_keys[] = {"num_local_experts", "num_experts", "num_experts_per_tok", "swiglu_alpha",
                                           "swiglu_limit", "router_aux_loss_coef", "output_router_logits",
                                           "experts_per_token", "initial_context_length", NULL};

const lmp_arch_desc lmp_arch_gpt_oss = {
    .name = "gpt-oss", .family = LMP_FAMILY_LLAMA, .hf_class = "GptOssForCausalLM", .hf_model_type = "gpt_oss",
    .hf_default_ctx = 131072, .bias = LMP_BIAS_ATTN_CONFIG, .sliding = LMP_SLIDING_ALWAYS,
    .flags = LMP_ARCH_HEAD_DIM | LMP_ARCH_SINKS, .hf_norms = gpt_oss_norms, .hf_extra_keys = gpt_oss_keys,
    .gguf_arch = "gpt-oss", .gguf_rope_halves = 1, .gguf_swa_pattern = 2, .gguf_mlp_norm = "post_attention_norm",
    .moe = &gpt_oss_moe};
