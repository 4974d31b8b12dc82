/* falcon.c — Falcon (FalconForCausalLM) in its two block layouts.
 *
 * falcon: Falcon-7B's block (new_decoder_architecture false): one LayerNorm (input_layernorm)
 * feeding attention and the MLP in parallel (parallel_attn; false: sequential, with
 * post_attention_layernorm), multi-query attention (multi_query: one k and one v head; false: as
 * many as the heads), q, k, v fused in query_key_value by kv group ([q heads of the group, k, v]),
 * full-head rotate-half RoPE, a gate-less MLP with the erf GELU (activation "gelu"), biases on
 * every linear when bias (default false), a head tied to the embeddings.
 *
 * falcon_nda: Falcon-40B/180B's (new_decoder_architecture true, num_ln_in_parallel_attn 2 or
 * unset): two LayerNorms ln_attn and ln_mlp, always parallel, num_kv_heads kv groups (GQA).  The
 * loaders switch to it from config.json's key, or a GGUF's blk.0.attn_norm_2 (llama.cpp's name
 * for ln_attn; its attn_norm is ln_mlp, which feeds the MLP).
 *
 * Refused by name: alibi true (Falcon-RW's ALiBi, scaled otherwise than Bloom's, without
 * rotary), apply_residual_connection_post_layernorm true, new_decoder_architecture with
 * num_ln_in_parallel_attn 1. */
#include "arch/arch.h"

#include "lmpress/plugin.h"

static const char *const falcon_linears[LMP_ROLE_COUNT] = {
    [LMP_ROLE_Q] = "self_attention.query_key_value.q", [LMP_ROLE_K] = "self_attention.query_key_value.k",
    [LMP_ROLE_V] = "self_attention.query_key_value.v", [LMP_ROLE_O] = "self_attention.dense",
    [LMP_ROLE_UP] = "mlp.dense_h_to_4h",               [LMP_ROLE_DOWN] = "mlp.dense_4h_to_h"};
static const char *const falcon_key_names[][2] = {{"rms_norm_eps", "layer_norm_epsilon"},
                                                  {"intermediate_size", "ffn_hidden_size"},
                                                  {"hidden_act", "activation"},
                                                  {"attention_bias", "bias"},
                                                  {NULL, NULL}};
/* read by model_hf.c's Falcon rules (the kv heads, the layout, the parallel block) */
static const char *const falcon_keys[] = {"multi_query", "new_decoder_architecture", "parallel_attn", "alibi",
                                          "num_kv_heads", "num_ln_in_parallel_attn",
                                          "apply_residual_connection_post_layernorm", NULL};
static const char *const falcon_nda_norms[6] = {"ln_attn", "ln_mlp"};

#define FALCON_COMMON                                                                                                   \
    .family = LMP_FAMILY_LLAMA, .hf_class = "FalconForCausalLM", .hf_model_type = "falcon", .hf_default_ctx = 2048,     \
    .hf_tied_default = 1, .bias = LMP_BIAS_ALL_FLAG, .sliding = LMP_SLIDING_NONE, .hf_block_prefix = "transformer.h",   \
    .hf_linears = falcon_linears, .hf_embed = "transformer.word_embeddings", .hf_final_norm = "transformer.ln_f",       \
    .hf_fused_qkv = "self_attention.query_key_value", .hf_fused_qkv_per_head = 1, .hf_key_names = falcon_key_names,    \
    .hf_extra_keys = falcon_keys, .hf_act_default = "gelu", .hf_falcon = 1, .gguf_arch = "falcon",                     \
    .gguf_rope_halves = 1, .gguf_fused_qkv = 1, .gguf_gelu_erf = 1

const lmp_arch_desc lmp_arch_falcon = {
    .name = "falcon", FALCON_COMMON,
    .flags = LMP_ARCH_LAYER_NORM | LMP_ARCH_PARALLEL | LMP_ARCH_SHARED_NORM | LMP_ARCH_PLAIN_MLP};

const lmp_arch_desc lmp_arch_falcon_nda = {
    .name = "falcon_nda", FALCON_COMMON, .flags = LMP_ARCH_LAYER_NORM | LMP_ARCH_PARALLEL | LMP_ARCH_PLAIN_MLP,
    .hf_norms = falcon_nda_norms, .gguf_attn_norm = "attn_norm_2", .gguf_mlp_norm = "attn_norm"};
