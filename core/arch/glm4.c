/* glm4.c — GLM-4 (Glm4ForCausalLM, GLM-4-0414): GLM's block with RMSNorms on the attention's and
 * the MLP's outputs before each residual add. */
#include "arch/arch.h"

static const char *const glm4_norms[6] = {"input_layernorm", "post_attention_layernorm", NULL, NULL,
                                          "post_self_attn_layernorm", "post_mlp_layernorm"};

const lmp_arch_desc lmp_arch_glm4 = {
    .name = "glm4", .family = LMP_FAMILY_LLAMA, .hf_class = "Glm4ForCausalLM", .hf_model_type = "glm4", .hf_default_ctx = 32768,
    .bias = LMP_BIAS_QKV_CONFIG, .sliding = LMP_SLIDING_NONE, .flags = LMP_ARCH_POST_NORMS, .gguf_arch = "glm4",
    .hf_fused_gate_up = "mlp.gate_up_proj", .gguf_fused_gate_up = 1, .hf_rope_adjacent = 1, .hf_norms = glm4_norms};
