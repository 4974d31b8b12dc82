/* gptneox.c — GPT-NeoX / Pythia (GPTNeoXForCausalLM): LayerNorms with biases, a parallel residual
 * with a norm for each branch (use_parallel_residual false: sequential), RoPE on the first
 * rotary_pct of each head in rotate-half order, q, k, v fused per head in query_key_value, a
 * gate-less MLP with the erf GELU, biases on every linear (attention_bias for the attention's),
 * an untied head embed_out. */
#include "arch/arch.h"

#include "lmpress/plugin.h"

static const char *const neox_linears[LMP_ROLE_COUNT] = {
    [LMP_ROLE_Q] = "attention.query_key_value.q", [LMP_ROLE_K] = "attention.query_key_value.k",
    [LMP_ROLE_V] = "attention.query_key_value.v", [LMP_ROLE_O] = "attention.dense",
    [LMP_ROLE_UP] = "mlp.dense_h_to_4h",          [LMP_ROLE_DOWN] = "mlp.dense_4h_to_h"};

/* transformers 4's and the Pythia checkpoints' names (transformers 5 writes rope_parameters) */
static const char *const neox_key_names[][2] = {{"rms_norm_eps", "layer_norm_eps"},
                                                {"rope_theta", "rotary_emb_base"},
                                                {"partial_rotary_factor", "rotary_pct"},
                                                {NULL, NULL}};

static const char *const neox_keys[] = {"use_parallel_residual", "classifier_dropout", NULL};

const lmp_arch_desc lmp_arch_gptneox = {
    .name = "gptneox", .family = LMP_FAMILY_LLAMA, .hf_class = "GPTNeoXForCausalLM", .hf_model_type = "gpt_neox",
    .hf_default_ctx = 2048, .bias = LMP_BIAS_NEOX, .sliding = LMP_SLIDING_NONE,
    .flags = LMP_ARCH_LAYER_NORM | LMP_ARCH_PARALLEL | LMP_ARCH_PLAIN_MLP,
    .hf_block_prefix = "gpt_neox.layers", .hf_linears = neox_linears, .hf_embed = "gpt_neox.embed_in",
    .hf_final_norm = "gpt_neox.final_layer_norm", .hf_head = "embed_out",
    .hf_fused_qkv = "attention.query_key_value", .hf_fused_qkv_per_head = 1, .hf_key_names = neox_key_names,
    .hf_extra_keys = neox_keys, .hf_partial_rotary_default = 0.25, .hf_act_default = "gelu",
    .gguf_arch = "gptneox", .gguf_rope_halves = 1, .gguf_fused_qkv = 1, .gguf_gelu_erf = 1, .gguf_no_kv_heads = 1};
