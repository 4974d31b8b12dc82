/* llama.c — Llama 1-3 (and what shares its block: SmolLM, TinyLlama, llama2.c's stories):
 * RMSNorm, RoPE, GQA, SwiGLU; biases as attention_bias / mlp_bias say.  Mistral is the same
 * block with a sliding window whenever config.json sets one. */
#include "arch/arch.h"

const lmp_arch_desc lmp_arch_llama = {
    .name = "llama", .family = LMP_FAMILY_LLAMA, .hf_class = "LlamaForCausalLM", .hf_model_type = "llama", .hf_default_ctx = 2048,
    .bias = LMP_BIAS_CONFIG, .sliding = LMP_SLIDING_NONE, .gguf_arch = "llama"};

/* llama.cpp converts Mistral to its "llama" architecture (and writes no sliding window). */
const lmp_arch_desc lmp_arch_mistral = {
    .name = "mistral", .family = LMP_FAMILY_LLAMA, .hf_class = "MistralForCausalLM", .hf_model_type = "mistral", .hf_default_ctx = 4096 * 32,
    .bias = LMP_BIAS_CONFIG, .sliding = LMP_SLIDING_ALWAYS, .gguf_arch = "llama"};
