/* chatglm.c — ChatGLM2 / ChatGLM3 (and GLM-4-9B-chat's original files): THUDM's ChatGLMModel,
 * remote code (modeling_chatglm.py) that transformers has no class for; a seed model of the
 * document lmpress grew from (ChatGLM2-6B).  The block is GLM's (core/arch/glm.c): RMSNorms, RoPE on
 * the first half of each head (rotary_dim // 2 of kv_channels) over interleaved pairs, q, k, v
 * with biases (add_qkv_bias), multi-query attention with multi_query_group_num kv groups, and
 * gate and up fused in dense_h_to_4h (the first half gate); under Megatron's names:
 *
 *   transformer.embedding.word_embeddings, transformer.encoder.layers.N.{input_layernorm,
 *   self_attention.query_key_value ([q heads; k groups; v groups] rows), self_attention.dense,
 *   post_attention_layernorm, mlp.dense_h_to_4h, mlp.dense_4h_to_h}, transformer.encoder.
 *   final_layernorm, transformer.output_layer (untied), and the derived buffer
 *   transformer.rotary_pos_emb.inv_freq, which the loader ignores.
 *
 * config.json: num_layers, hidden_size, ffn_hidden_size, kv_channels, num_attention_heads,
 * multi_query_group_num, padded_vocab_size, layernorm_epsilon, seq_length, add_qkv_bias; the RoPE
 * base 10000 x rope_ratio (ChatGLM3-6B-32k: 50, GLM-4-9B-chat: 500).  Refused by name (model_hf.c's
 * parse_chatglm): multi_query_attention false (its query_key_value is laid out per head),
 * rmsnorm false (LayerNorms), add_bias_linear true, apply_residual_connection_post_layernorm true,
 * post_layer_norm false, pre_seq_len (P-tuning v2's prefix), quantization_bit (THUDM's int4/int8
 * kernels), and Llama's RoPE, activation and window keys, which the remote code does not read.
 *
 * GGUF: llama.cpp's "chatglm", the architecture GlmForCausalLM converts to as well; its converter
 * keeps query_key_value fused as attn_qkv (GLM's q_proj, k_proj, v_proj stay apart), so the GGUF
 * loader switches from lmp_arch_glm to this descriptor when blk.0.attn_qkv.weight is there. */
#include "arch/arch.h"

#include "lmpress/plugin.h"

static const char *const chatglm_linears[LMP_ROLE_COUNT] = {
    [LMP_ROLE_Q] = "self_attention.query_key_value.q", [LMP_ROLE_K] = "self_attention.query_key_value.k",
    [LMP_ROLE_V] = "self_attention.query_key_value.v", [LMP_ROLE_O] = "self_attention.dense",
    [LMP_ROLE_GATE] = "mlp.dense_h_to_4h.gate",        [LMP_ROLE_UP] = "mlp.dense_h_to_4h.up",
    [LMP_ROLE_DOWN] = "mlp.dense_4h_to_h"};
static const char *const chatglm_key_names[][2] = {{"num_hidden_layers", "num_layers"},
                                                   {"intermediate_size", "ffn_hidden_size"},
                                                   {"head_dim", "kv_channels"},
                                                   {"num_key_value_heads", "multi_query_group_num"},
                                                   {"vocab_size", "padded_vocab_size"},
                                                   {"rms_norm_eps", "layernorm_epsilon"},
                                                   {"max_position_embeddings", "seq_length"},
                                                   {"attention_bias", "add_qkv_bias"},
                                                   {NULL, NULL}};
/* read by model_hf.c's parse_chatglm; the rest only choose how a half-precision run rounds
 * (apply_query_key_layer_scaling divides q by the layer number and multiplies the scores back;
 * attention_softmax_in_fp32, fp32_residual_connection) or are dropout and fusion switches of
 * training; original_rope is stored by RotaryEmbedding and read by no line of its forward */
static const char *const chatglm_keys[] = {
    "multi_query_attention", "rmsnorm", "add_bias_linear", "apply_residual_connection_post_layernorm",
    "post_layer_norm", "pre_seq_len", "prefix_projection", "quantization_bit", "rope_ratio", "original_rope",
    "apply_query_key_layer_scaling", "attention_softmax_in_fp32", "fp32_residual_connection",
    "bias_dropout_fusion", "classifier_dropout", NULL};

const lmp_arch_desc lmp_arch_chatglm = {
    .name = "chatglm", .family = LMP_FAMILY_LLAMA, .hf_class = "ChatGLMModel", .hf_model_type = "chatglm",
    .hf_default_ctx = 2048, .bias = LMP_BIAS_QKV_CONFIG, .sliding = LMP_SLIDING_NONE, .flags = LMP_ARCH_HEAD_DIM,
    .hf_block_prefix = "transformer.encoder.layers", .hf_linears = chatglm_linears,
    .hf_embed = "transformer.embedding.word_embeddings", .hf_final_norm = "transformer.encoder.final_layernorm",
    .hf_head = "transformer.output_layer", .hf_fused_qkv = "self_attention.query_key_value",
    .hf_fused_gate_up = "mlp.dense_h_to_4h", .hf_rope_adjacent = 1, .hf_partial_rotary_default = 0.5,
    .hf_key_names = chatglm_key_names, .hf_extra_keys = chatglm_keys, .hf_chatglm = 1,
    .hf_derived_buffer = "transformer.rotary_pos_emb.inv_freq", .gguf_arch = "chatglm", .gguf_fused_qkv = 1,
    .gguf_fused_gate_up = 1};
