/* ernie4_5.c — ERNIE 4.5 dense (Ernie4_5ForCausalLM, baidu/ERNIE-4.5-0.3B-PT; llama.cpp's
 * "ernie4_5"): the Llama block with RoPE over interleaved pairs on the whole head (transformers'
 * "glm rope style (with full dim)"), which is the adjacent-pair rotation lmpress runs, so the q/k
 * rows are used as stored in both forms (llama.cpp's converter does not permute them: NORM rope),
 * and a head_dim of its own (0.3B: 16 heads of 128 on 1024).
 *
 * use_bias puts a bias on every linear; it is false in the released models and the rule here
 * reads no bias, so a checkpoint with use_bias true carries bias tensors, which the loader refuses
 * by name (an unread tensor) rather than running without them. */
#include "arch/arch.h"

static const char *const ernie4_5_keys[] = {"use_bias", NULL};

const lmp_arch_desc lmp_arch_ernie4_5 = {
    .name = "ernie4_5", .family = LMP_FAMILY_LLAMA, .hf_class = "Ernie4_5ForCausalLM", .hf_model_type = "ernie4_5",
    .hf_tied_default = 1, .hf_default_ctx = 131072,
    .bias = LMP_BIAS_CONFIG, .sliding = LMP_SLIDING_NONE, .flags = LMP_ARCH_HEAD_DIM, .gguf_arch = "ernie4_5",
    .hf_rope_adjacent = 1, .hf_extra_keys = ernie4_5_keys};
