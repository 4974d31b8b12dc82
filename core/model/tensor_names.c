/* tensor_names.c — see tensor_names.h.  The GGUF names are llama.cpp's (src/llama-arch.cpp,
 * LLM_TENSOR_*; the PyPI gguf package's constants.py TENSOR_NAMES say the same); the Hugging Face
 * ones are transformers' modeling files'. */
#include "model/tensor_names.h"

#include <stdio.h>
#include <string.h>

#include "arch/arch.h"

static const char *const role_names[LMP_ROLE_COUNT] = {"q", "k", "v", "o", "gate", "up", "down", "router",
                                                       "shared_gate", "q_a", "q_b", "kv_a", "kv_b"};

const char *lmp_role_name(lmp_role r) { return (int)r >= 0 && r < LMP_ROLE_COUNT ? role_names[r] : NULL; }

int lmp_role_by_name(const char *name)
{
    for (int r = 0; name && r < LMP_ROLE_COUNT; r++)
        if (!strcmp(name, role_names[r])) return r;
    return -1;
}

/* One row per role: Hugging Face's leaf, llama.cpp's stem. */
typedef struct linear_names {
    const char *hf, *gguf;
} linear_names;

static const linear_names llama_linears[LMP_ROLE_COUNT] = {
    [LMP_ROLE_Q] = {"self_attn.q_proj", "attn_q"},    [LMP_ROLE_K] = {"self_attn.k_proj", "attn_k"},
    [LMP_ROLE_V] = {"self_attn.v_proj", "attn_v"},    [LMP_ROLE_O] = {"self_attn.o_proj", "attn_output"},
    [LMP_ROLE_GATE] = {"mlp.gate_proj", "ffn_gate"}, [LMP_ROLE_UP] = {"mlp.up_proj", "ffn_up"},
    [LMP_ROLE_DOWN] = {"mlp.down_proj", "ffn_down"},
    /* DeepSeek's multi-head latent attention (llama.cpp's deepseek2 names) */
    [LMP_ROLE_Q_A] = {"self_attn.q_a_proj", "attn_q_a"}, [LMP_ROLE_Q_B] = {"self_attn.q_b_proj", "attn_q_b"},
    [LMP_ROLE_KV_A] = {"self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa"},
    [LMP_ROLE_KV_B] = {"self_attn.kv_b_proj", "attn_kv_b"}};

/* GPT-2: transformers' fused c_attn split three ways (model_hf.c), llama.cpp's attn_qkv;
 * attn_output (c_proj), ffn_up (c_fc), ffn_down (mlp's c_proj); no gate. */
static const linear_names gpt2_linears[LMP_ROLE_COUNT] = {
    [LMP_ROLE_Q] = {"attn.c_attn.q", "attn_qkv"}, [LMP_ROLE_K] = {"attn.c_attn.k", "attn_qkv"},
    [LMP_ROLE_V] = {"attn.c_attn.v", "attn_qkv"}, [LMP_ROLE_O] = {"attn.c_proj", "attn_output"},
    [LMP_ROLE_UP] = {"mlp.c_fc", "ffn_up"},       [LMP_ROLE_DOWN] = {"mlp.c_proj", "ffn_down"}};

/* Norms by kind (LMP_NORM_*): llama.cpp's, Llama's and GPT-2's Hugging Face names. */
static const char *const gguf_norms[LMP_NORM_KINDS] = {"attn_norm",   "ffn_norm",
                                                       "attn_q_norm", "attn_k_norm",
                                                       "post_attention_norm", "post_ffw_norm",
                                                       "attn_q_a_norm", "attn_kv_a_norm",
                                                       "attn_sinks"};
static const char *const llama_hf_norms[LMP_NORM_KINDS] = {
    "input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm", NULL, NULL,
    "self_attn.q_a_layernorm", "self_attn.kv_a_layernorm", "self_attn.sinks"};
static const char *const gpt2_hf_norms[LMP_NORM_KINDS] = {"ln_1", "ln_2"};

static const linear_names *linear_row(lmp_family family, lmp_role role)
{
    if ((int)role < 0 || role >= LMP_ROLE_COUNT) return NULL;
    return family == LMP_FAMILY_GPT2 ? &gpt2_linears[role] : family == LMP_FAMILY_LLAMA ? &llama_linears[role] : NULL;
}

const char *lmp_gguf_linear_stem(lmp_family family, lmp_role role)
{
    const linear_names *r = linear_row(family, role);
    return r ? r->gguf : NULL;
}

const char *lmp_hf_linear_leaf(lmp_family family, lmp_role role)
{
    const linear_names *r = linear_row(family, role);
    return r ? r->hf : NULL;
}

const char *lmp_gguf_moe_stem(const lmp_linear *l)
{
    static const char *const exps[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    static const char *const shexp[3] = {"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"};
    const int r = l->role == LMP_ROLE_GATE ? 0 : l->role == LMP_ROLE_UP ? 1 : l->role == LMP_ROLE_DOWN ? 2 : -1;
    if (l->role == LMP_ROLE_ROUTER) return "ffn_gate_inp";
    if (l->role == LMP_ROLE_SHARED_GATE) return "ffn_gate_inp_shexp";
    if (r >= 0 && l->expert_kind == LMP_EXPERT_SHARED) return shexp[r];
    if (r >= 0 && l->expert_kind == LMP_EXPERT_ROUTED) return exps[r];
    return NULL;
}

const char *lmp_gguf_fused_stem(int fused)
{
    return fused == LMP_FUSED_QKV ? "attn_qkv" : fused == LMP_FUSED_GATE_UP ? "ffn_up" : NULL;
}

const char *lmp_gguf_norm_name(const lmp_arch *a, int i)
{
    for (int k = 0; k < LMP_NORM_KINDS; k++)
        if (lmp_norm_index(a, k) == i)
        {
            if (k == LMP_NORM_MLP && a->desc && a->desc->gguf_mlp_norm) return a->desc->gguf_mlp_norm;
            if (k == LMP_NORM_ATTN && a->desc && a->desc->gguf_attn_norm) return a->desc->gguf_attn_norm;
            return gguf_norms[k];
        }
    return NULL;
}

const char *lmp_hf_block_prefix(lmp_family family) { return family == LMP_FAMILY_GPT2 ? "transformer.h" : "model.layers"; }

const char *lmp_hf_norm_leaf(const lmp_arch *a, int k)
{
    if (k < 0 || k >= LMP_NORM_KINDS) return NULL;
    if (a->family == LMP_FAMILY_GPT2) return gpt2_hf_norms[k];
    return a->desc && a->desc->hf_norms ? a->desc->hf_norms[k] : llama_hf_norms[k];
}

int lmp_gguf_linear_name(lmp_family family, int64_t block, lmp_role role, const char *suffix, char *buf, size_t n)
{
    const char *stem = lmp_gguf_linear_stem(family, role);
    if (n) buf[0] = 0;
    if (!stem) return -1;
    const int k = snprintf(buf, n, "blk.%lld.%s.%s", (long long)block, stem, suffix);
    return k < 0 || (size_t)k >= n ? -1 : 0;
}

const char *lmp_hf_arch_block_prefix(const lmp_arch *a)
{
    if (a->family == LMP_FAMILY_LLAMA && a->desc && a->desc->hf_block_prefix) return a->desc->hf_block_prefix;
    return lmp_hf_block_prefix(a->family);
}

const char *lmp_hf_arch_linear_leaf(const lmp_arch *a, lmp_role role)
{
    if (a->family == LMP_FAMILY_LLAMA && a->desc && a->desc->hf_linears && (int)role >= 0 && role < LMP_ROLE_COUNT)
        return a->desc->hf_linears[role];
    return lmp_hf_linear_leaf(a->family, role);
}
