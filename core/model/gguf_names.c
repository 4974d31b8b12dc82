/* gguf_names.c — see gguf_names.h.  The names are llama.cpp's (src/llama-arch.cpp, LLM_TENSOR_*;
 * the PyPI gguf package's constants.py TENSOR_NAMES say the same). */
#include "model/gguf_names.h"

#include <stdio.h>

static const char *const llama_stem[LMP_ROLE_COUNT] = {
    [LMP_ROLE_Q] = "attn_q",      [LMP_ROLE_K] = "attn_k",      [LMP_ROLE_V] = "attn_v",
    [LMP_ROLE_O] = "attn_output", [LMP_ROLE_GATE] = "ffn_gate", [LMP_ROLE_UP] = "ffn_up",
    [LMP_ROLE_DOWN] = "ffn_down"};

/* GPT-2 in llama.cpp: attn_qkv (the fused c_attn), attn_output, ffn_up (c_fc), ffn_down (c_proj);
 * no gate. */
static const char *const gpt2_stem[LMP_ROLE_COUNT] = {
    [LMP_ROLE_Q] = "attn_qkv", [LMP_ROLE_K] = "attn_qkv", [LMP_ROLE_V] = "attn_qkv",
    [LMP_ROLE_O] = "attn_output", [LMP_ROLE_UP] = "ffn_up", [LMP_ROLE_DOWN] = "ffn_down"};

const char *lmp_gguf_linear_stem(lmp_family family, lmp_role role)
{
    if ((int)role < 0 || role >= LMP_ROLE_COUNT) return NULL;
    return family == LMP_FAMILY_GPT2 ? gpt2_stem[role] : family == LMP_FAMILY_LLAMA ? llama_stem[role] : NULL;
}

int lmp_gguf_linear_name(lmp_family family, int64_t block, lmp_role role, const char *suffix, char *buf, size_t n)
{
    const char *stem = lmp_gguf_linear_stem(family, role);
    if (n) buf[0] = 0;
    if (!stem) return -1;
    const int k = snprintf(buf, n, "blk.%lld.%s.%s", (long long)block, stem, suffix);
    return k < 0 || (size_t)k >= n ? -1 : 0;
}
