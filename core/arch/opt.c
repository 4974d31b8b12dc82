/* opt.c — OPT (OPTForCausalLM): learned positions (model.decoder.embed_positions, position t at
 * row t + 2: OPT's offset) added to the embeddings, no rotary; pre-norm blocks with LayerNorms
 * (self_attn_layer_norm, final_layer_norm), q/k/v/out_proj, a gate-less MLP fc1 / fc2 with ReLU,
 * biases on every linear (enable_bias), a final LayerNorm, a head tied to the embeddings.
 * Refused by name: do_layer_norm_before false (opt-350m's post-norm blocks),
 * _remove_final_layer_norm, word_embed_proj_dim other than hidden_size (project_in / project_out),
 * layer_norm_elementwise_affine false.  llama.cpp's converter has no OPT: Hugging Face only. */
#include "arch/arch.h"

#include "lmpress/plugin.h"

static const char *const opt_linears[LMP_ROLE_COUNT] = {
    [LMP_ROLE_Q] = "self_attn.q_proj", [LMP_ROLE_K] = "self_attn.k_proj", [LMP_ROLE_V] = "self_attn.v_proj",
    [LMP_ROLE_O] = "self_attn.out_proj", [LMP_ROLE_UP] = "fc1",           [LMP_ROLE_DOWN] = "fc2"};
static const char *const opt_norms[6] = {"self_attn_layer_norm", "final_layer_norm"};
static const char *const opt_key_names[][2] = {{"intermediate_size", "ffn_dim"},
                                               {"hidden_act", "activation_function"},
                                               {"attention_bias", "enable_bias"},
                                               {NULL, NULL}};
/* init_std, layerdrop and activation_dropout are training knobs; the others are checked by
 * model_hf.c's OPT rules */
static const char *const opt_keys[] = {"init_std", "layerdrop", "activation_dropout", "do_layer_norm_before",
                                       "_remove_final_layer_norm",
                                       "word_embed_proj_dim", "layer_norm_elementwise_affine", NULL};

const lmp_arch_desc lmp_arch_opt = {
    .name = "opt", .family = LMP_FAMILY_LLAMA, .hf_class = "OPTForCausalLM", .hf_model_type = "opt",
    .hf_default_ctx = 2048, .hf_tied_default = 1, .bias = LMP_BIAS_ALL_CONFIG, .sliding = LMP_SLIDING_NONE,
    .flags = LMP_ARCH_LAYER_NORM | LMP_ARCH_PLAIN_MLP | LMP_ARCH_LEARNED_POS,
    .hf_block_prefix = "model.decoder.layers", .hf_linears = opt_linears, .hf_norms = opt_norms,
    .hf_embed = "model.decoder.embed_tokens", .hf_final_norm = "model.decoder.final_layer_norm",
    .hf_pos_embed = "model.decoder.embed_positions", .hf_pos_offset = 2, .hf_key_names = opt_key_names,
    .hf_extra_keys = opt_keys, .hf_act_default = "relu"};
