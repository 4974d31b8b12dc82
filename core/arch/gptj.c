/* gptj.c — GPT-J (GPTJForCausalLM): one LayerNorm feeding attention and the MLP in parallel,
 * RoPE on the first rotary_dim dims of each head over interleaved pairs (the adjacent-pair
 * rotation lmpress runs: the rows are used as stored), no attention biases, a gate-less MLP
 * fc_in/fc_out with biases and the tanh GELU, a head with a bias.  config.json spells its keys
 * as GPT-2 does.  llama.cpp's converter has no GPT-J: Hugging Face folders only. */
#include "arch/arch.h"

#include "lmpress/plugin.h"

static const char *const gptj_linears[LMP_ROLE_COUNT] = {
    [LMP_ROLE_Q] = "attn.q_proj",  [LMP_ROLE_K] = "attn.k_proj", [LMP_ROLE_V] = "attn.v_proj",
    [LMP_ROLE_O] = "attn.out_proj", [LMP_ROLE_UP] = "mlp.fc_in", [LMP_ROLE_DOWN] = "mlp.fc_out"};
static const char *const gptj_norms[6] = {"ln_1"};
static const char *const gptj_key_names[][2] = {
    {"hidden_size", "n_embd"},           {"num_hidden_layers", "n_layer"}, {"num_attention_heads", "n_head"},
    {"max_position_embeddings", "n_positions"}, {"intermediate_size", "n_inner"},
    {"rms_norm_eps", "layer_norm_epsilon"}, {"hidden_act", "activation_function"}, {NULL, NULL}};
static const char *const gptj_keys[] = {"rotary_dim", NULL};

const lmp_arch_desc lmp_arch_gptj = {
    .name = "gptj", .family = LMP_FAMILY_LLAMA, .hf_class = "GPTJForCausalLM", .hf_model_type = "gptj",
    .hf_default_ctx = 2048, .bias = LMP_BIAS_MLP, .sliding = LMP_SLIDING_NONE,
    .flags = LMP_ARCH_LAYER_NORM | LMP_ARCH_PARALLEL | LMP_ARCH_SHARED_NORM | LMP_ARCH_PLAIN_MLP | LMP_ARCH_HEAD_BIAS,
    .hf_block_prefix = "transformer.h", .hf_linears = gptj_linears, .hf_norms = gptj_norms,
    .hf_embed = "transformer.wte", .hf_final_norm = "transformer.ln_f", .hf_key_names = gptj_key_names,
    .hf_extra_keys = gptj_keys, .hf_rotary_dim = 1, .hf_rope_adjacent = 1, .hf_act_default = "gelu_new"};
