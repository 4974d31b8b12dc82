/* bloom.c — BLOOM (BloomForCausalLM), a seed model of the document lmpress grew from: no rotary
 * positions but ALiBi (each head's scores biased by slope_h times the key's distance), a LayerNorm
 * on the embeddings (word_embeddings_layernorm), LayerNorms with biases, q, k, v fused per head in
 * query_key_value ([heads][q, k, v][head_dim] rows, as GPT-NeoX), a gate-less MLP of 4 x hidden
 * with the tanh GELU (bloom_gelu), biases on every linear, a head tied to the embeddings.
 * apply_residual_connection_post_layernorm true (the residual taken after the norm) is refused by
 * name.  bigscience's files, saved from BloomModel, name the tensors without "transformer.". */
#include "arch/arch.h"

#include "lmpress/plugin.h"

static const char *const bloom_linears[LMP_ROLE_COUNT] = {
    [LMP_ROLE_Q] = "self_attention.query_key_value.q", [LMP_ROLE_K] = "self_attention.query_key_value.k",
    [LMP_ROLE_V] = "self_attention.query_key_value.v", [LMP_ROLE_O] = "self_attention.dense",
    [LMP_ROLE_UP] = "mlp.dense_h_to_4h",               [LMP_ROLE_DOWN] = "mlp.dense_4h_to_h"};
static const char *const bloom_key_names[][2] = {{"rms_norm_eps", "layer_norm_epsilon"},
                                                 {"num_hidden_layers", "n_layer"},
                                                 {"num_attention_heads", "n_head"},
                                                 {NULL, NULL}};
/* slow_but_exact only chooses how a tensor-parallel run sums (pretraining_tp 1: not at all); the
 * published checkpoints' Megatron keys after it are read by no line of transformers' modeling_bloom
 * (its softmax is always f32, its MLP always 4 x hidden, its ALiBi always from position 0) */
static const char *const bloom_keys[] = {"apply_residual_connection_post_layernorm", "slow_but_exact",
                                         "attention_softmax_in_fp32", "bias_dropout_fusion", "masked_softmax_fusion",
                                         "offset_alibi", "skip_bias_add", "skip_bias_add_qkv", "n_inner",
                                         "seq_length", "unk_token_id", NULL};

const lmp_arch_desc lmp_arch_bloom = {
    .name = "bloom", .family = LMP_FAMILY_LLAMA, .hf_class = "BloomForCausalLM", .hf_model_type = "bloom",
    .hf_default_ctx = 2048, .hf_tied_default = 1, .bias = LMP_BIAS_ALL, .sliding = LMP_SLIDING_NONE,
    .flags = LMP_ARCH_LAYER_NORM | LMP_ARCH_PLAIN_MLP | LMP_ARCH_ALIBI | LMP_ARCH_EMBED_NORM,
    .hf_block_prefix = "transformer.h", .hf_base_prefix = "transformer.", .hf_linears = bloom_linears, .hf_embed = "transformer.word_embeddings",
    .hf_embed_norm = "transformer.word_embeddings_layernorm", .hf_final_norm = "transformer.ln_f",
    .hf_fused_qkv = "self_attention.query_key_value", .hf_fused_qkv_per_head = 1,
    .hf_key_names = bloom_key_names, .hf_extra_keys = bloom_keys, .hf_act_default = "gelu_new",
    .gguf_arch = "bloom", .gguf_fused_qkv = 1};
