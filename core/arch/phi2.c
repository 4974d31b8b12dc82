/* phi2.c — Phi-1/1.5/2 (PhiForCausalLM): one LayerNorm feeding attention and the MLP in parallel,
 * RoPE on the first partial_rotary_factor (0.5) of each head in rotate-half order, a gate-less
 * MLP fc1/fc2 with the tanh GELU (gelu_new), biases on every linear, and a head with a bias.
 * qk_layernorm true is refused by name. */
#include "arch/arch.h"

#include "lmpress/plugin.h"

static const char *const phi2_linears[LMP_ROLE_COUNT] = {
    [LMP_ROLE_Q] = "self_attn.q_proj", [LMP_ROLE_K] = "self_attn.k_proj", [LMP_ROLE_V] = "self_attn.v_proj",
    [LMP_ROLE_O] = "self_attn.dense",  [LMP_ROLE_UP] = "mlp.fc1",         [LMP_ROLE_DOWN] = "mlp.fc2"};
static const char *const phi2_norms[6] = {"input_layernorm"};
static const char *const phi2_key_names[][2] = {{"rms_norm_eps", "layer_norm_eps"}, {NULL, NULL}};
static const char *const phi2_keys[] = {"qk_layernorm", NULL};

const lmp_arch_desc lmp_arch_phi2 = {
    .name = "phi2", .family = LMP_FAMILY_LLAMA, .hf_class = "PhiForCausalLM", .hf_model_type = "phi",
    .hf_default_ctx = 2048, .bias = LMP_BIAS_ALL, .sliding = LMP_SLIDING_NONE,
    .flags = LMP_ARCH_LAYER_NORM | LMP_ARCH_PARALLEL | LMP_ARCH_SHARED_NORM | LMP_ARCH_PLAIN_MLP | LMP_ARCH_HEAD_BIAS,
    .hf_linears = phi2_linears, .hf_norms = phi2_norms, .hf_final_norm = "model.final_layernorm",
    .hf_key_names = phi2_key_names, .hf_extra_keys = phi2_keys, .hf_partial_rotary_default = 0.5,
    .hf_act_default = "gelu_new", .gguf_arch = "phi2", .gguf_rope_halves = 1};
