/* starcoder2.c — StarCoder2 (Starcoder2ForCausalLM): the RoPE block (GQA, rotate-half RoPE over the
 * whole head) with LayerNorms with biases (norm_epsilon), a gate-less MLP c_fc / c_proj with the
 * tanh GELU, biases on every linear when use_bias, a tied head by default; sliding_window (every
 * layer) caps the context at the window, as for Mistral. */
#include "arch/arch.h"

#include "lmpress/plugin.h"

static const char *const starcoder2_linears[LMP_ROLE_COUNT] = {
    [LMP_ROLE_Q] = "self_attn.q_proj", [LMP_ROLE_K] = "self_attn.k_proj", [LMP_ROLE_V] = "self_attn.v_proj",
    [LMP_ROLE_O] = "self_attn.o_proj", [LMP_ROLE_UP] = "mlp.c_fc",        [LMP_ROLE_DOWN] = "mlp.c_proj"};
static const char *const starcoder2_key_names[][2] = {{"rms_norm_eps", "norm_epsilon"},
                                                      {"attention_bias", "use_bias"},
                                                      {NULL, NULL}};
static const char *const starcoder2_keys[] = {"residual_dropout", "embedding_dropout", NULL};

const lmp_arch_desc lmp_arch_starcoder2 = {
    .name = "starcoder2", .family = LMP_FAMILY_LLAMA, .hf_class = "Starcoder2ForCausalLM",
    .hf_model_type = "starcoder2", .hf_default_ctx = 4096, .hf_tied_default = 1, .bias = LMP_BIAS_ALL_CONFIG,
    .sliding = LMP_SLIDING_ALWAYS, .flags = LMP_ARCH_LAYER_NORM | LMP_ARCH_PLAIN_MLP,
    .hf_linears = starcoder2_linears, .hf_key_names = starcoder2_key_names, .hf_extra_keys = starcoder2_keys,
    .hf_act_default = "gelu_pytorch_tanh", .gguf_arch = "starcoder2", .gguf_rope_halves = 1};
