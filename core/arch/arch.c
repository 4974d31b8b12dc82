/* arch.c — the table of families (see arch.h).  Each family's descriptor lives in its own file. */
#include "arch/arch.h"

#include <stdio.h>
#include <string.h>

/* Each LMP_ARCH_* flag has a bit of its own: 20 distinct bits 0..19 sum to 2^20 - 1, and two flags
 * on one bit (as two branches once merged) or a gap do not.  A new flag extends the sum. */
_Static_assert(LMP_ARCH_QK_NORM + LMP_ARCH_GEGLU + LMP_ARCH_EMBED_SCALE + LMP_ARCH_NORM_PLUS_ONE + LMP_ARCH_HEAD_DIM +
                       LMP_ARCH_POST_NORMS + LMP_ARCH_LAYER_NORM + LMP_ARCH_NORM_NO_PARAMS + LMP_ARCH_PARALLEL +
                       LMP_ARCH_SHARED_NORM + LMP_ARCH_PLAIN_MLP + LMP_ARCH_HEAD_BIAS + LMP_ARCH_MLA + LMP_ARCH_SINKS +
                       LMP_ARCH_ALIBI + LMP_ARCH_EMBED_NORM + LMP_ARCH_LEARNED_POS + LMP_ARCH_NO_PRE_NORMS +
                       LMP_ARCH_QK_NORM_ALL + LMP_ARCH_NORM_NO_BIAS ==
                   (1u << 20) - 1,
               "two LMP_ARCH_* flags share a bit (arch.h)");

extern const lmp_arch_desc lmp_arch_llama, lmp_arch_mistral, lmp_arch_qwen2, lmp_arch_qwen3, lmp_arch_gemma,
    lmp_arch_gemma2, lmp_arch_gemma3, lmp_arch_phi3, lmp_arch_glm, lmp_arch_glm4, lmp_arch_gpt2,
    lmp_arch_ernie4_5, lmp_arch_mixtral, lmp_arch_qwen2moe, lmp_arch_qwen3moe, lmp_arch_deepseek_v2,
    lmp_arch_deepseek_v3, lmp_arch_gptneox, lmp_arch_phi2, lmp_arch_gptj, lmp_arch_stablelm, lmp_arch_olmo,
    lmp_arch_starcoder2, lmp_arch_gpt_oss, lmp_arch_bloom, lmp_arch_falcon,
    lmp_arch_falcon_nda, lmp_arch_opt, lmp_arch_olmo2, lmp_arch_cohere, lmp_arch_chatglm;

static const lmp_arch_desc *const table[] = {&lmp_arch_llama, &lmp_arch_mistral, &lmp_arch_qwen2, &lmp_arch_qwen3,
                                             &lmp_arch_gemma, &lmp_arch_gemma2, &lmp_arch_gemma3, &lmp_arch_phi3,
                                             &lmp_arch_glm,
                                             &lmp_arch_glm4,
                                             &lmp_arch_gpt2, &lmp_arch_ernie4_5, &lmp_arch_mixtral,
                                             &lmp_arch_qwen2moe, &lmp_arch_qwen3moe, &lmp_arch_deepseek_v2,
                                             &lmp_arch_deepseek_v3, &lmp_arch_gptneox, &lmp_arch_phi2, &lmp_arch_gptj,
                                             &lmp_arch_stablelm, &lmp_arch_olmo, &lmp_arch_starcoder2, &lmp_arch_gpt_oss,
                                             &lmp_arch_bloom, &lmp_arch_falcon, &lmp_arch_opt,
                                             &lmp_arch_olmo2, &lmp_arch_cohere,
                                             /* after glm, which lmp_arch_by_gguf("chatglm") finds
                                              * first: the GGUF loader switches on attn_qkv */
                                             &lmp_arch_chatglm,
                                             /* a layout the loaders switch to, never found first by name */
                                             &lmp_arch_falcon_nda};
enum { N_ARCH = sizeof table / sizeof *table };

const lmp_arch_desc *lmp_arch_by_hf_class(const char *cls)
{
    for (int i = 0; i < N_ARCH; i++)
        if (!strcmp(table[i]->hf_class, cls)) return table[i];
    return NULL;
}

const lmp_arch_desc *lmp_arch_by_gguf(const char *arch, size_t len)
{
    for (int i = 0; i < N_ARCH; i++)
        if (table[i]->gguf_arch && strlen(table[i]->gguf_arch) == len && !memcmp(table[i]->gguf_arch, arch, len))
            return table[i];
    return NULL;
}

const lmp_arch_desc *lmp_arch_by_name(const char *name)
{
    for (int i = 0; i < N_ARCH; i++)
        if (!strcmp(table[i]->name, name)) return table[i];
    return NULL;
}

const char *lmp_arch_list(char *buf, size_t n, int gguf)
{
    size_t k = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < N_ARCH && k < n; i++) {
        const char *s = gguf ? table[i]->gguf_arch : table[i]->hf_class;
        if (!s || (gguf ? lmp_arch_by_gguf(s, strlen(s)) : lmp_arch_by_hf_class(s)) != table[i]) continue; /* once each */
        k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? ", " : "", s);
    }
    return buf;
}

/* Families lmpress knows and refuses: each needs a part of the block the walker does not have
 * yet.  (llama.cpp's deepseek2 GGUF, once here, is read since issue 37: model_gguf.c.) */
static const struct {
    const char *hf_class, *gguf_arch, *why;
} refused[] = {
    /* (issue 40) */
    {"Cohere2ForCausalLM", "cohere2",
     "Cohere2 (Command R7B: sliding layers with RoPE and full layers without any position encoding, "
     "alternating) is not implemented; Cohere / Command-R (CohereForCausalLM, command-r) is"},
};

const char *lmp_arch_refused_hf(const char *cls)
{
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (refused[i].hf_class && !strcmp(refused[i].hf_class, cls)) return refused[i].why;
    return NULL;
}

const char *lmp_arch_refused_gguf(const char *arch, size_t len)
{
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (strlen(refused[i].gguf_arch) == len && !memcmp(refused[i].gguf_arch, arch, len)) return refused[i].why;
    return NULL;
}
