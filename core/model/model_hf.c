/* model_hf.c — Hugging Face checkpoints: config.json + safetensors (one model.safetensors, or
 * model.safetensors.index.json and its shards).  m->path is the folder, or a *.safetensors file
 * with config.json beside it.
 *
 * config.json "architectures"[0] picks the family's descriptor (core/arch: Llama, Mistral, Qwen2,
 * Qwen3, Gemma, Phi-3, GPT-2, GPT-NeoX, Phi-2, GPT-J, StableLM, OLMo, StarCoder2, Bloom, Falcon,
 * OPT...;
 * docs/architectures.md).  Every key of config.json must be one this reader uses or one that
 * cannot change an f32 forward (harmless_keys); any other is refused by name.  A family whose
 * checkpoint is not laid out as Llama's names its modules and its spelling of Llama's keys in its
 * descriptor (arch.h: hf_block_prefix, hf_linears, hf_key_names: GPT-NeoX's "gpt_neox.layers",
 * "layer_norm_eps"); LayerNorm families read the norms' biases, Phi-2 and GPT-J the head's.
 * The Llama block's families read:
 *       hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
 *       num_key_value_heads (default: the heads), vocab_size, max_position_embeddings (default
 *       transformers' per class), rms_norm_eps (default 1e-6), head_dim (Qwen3 and Gemma may
 *       differ from hidden/heads), RoPE as core/arch/rope.c reads it (rope_theta + rope_scaling,
 *       or rope_parameters; partial_rotary_factor), hidden_act / hidden_activation (SiLU, or
 *       Gemma's tanh GELU), tie_word_embeddings (default false; an absent lm_head.weight also
 *       means tied).  Biases per the descriptor: Qwen2 always q/k/v; Llama q/k/v/o when
 *       attention_bias and gate/up/down when mlp_bias; a bias tensor the config does not announce
 *       is an error rather than silently dropped.  Sliding windows (Mistral; Qwen2/3 with
 *       use_sliding_window; layer_types' sliding_attention) cap the model's context
 *       (arch.seq_len) at sliding_window: within that window sliding-window attention is plain
 *       causal attention, so results stay exact.
 *   GPT2LMHeadModel -> LMP_FAMILY_GPT2
 *       n_embd, n_layer, n_head, vocab_size, n_positions (else n_ctx, else 1024),
 *       layer_norm_epsilon (1e-5), n_inner (null: 4*n_embd), activation_function "gelu_new" or
 *       "gelu_pytorch_tanh" (both the tanh GELU the forward computes), tie_word_embeddings
 *       (default true, as GPT2Config).  scale_attn_weights false and
 *       scale_attn_by_inverse_layer_idx true are refused (the forward always scales by
 *       1/sqrt(head_dim)).
 *
 * A config.json with a "quantization_config" (Llama family only) is a compressed-tensors
 * checkpoint (llm-compressor): the modules it quantizes hold codes, scales and zero-points
 * (model_hf_quant.h says which and how), dequantized to f32 when a block is copied; the others,
 * and the embedding and head unless the config quantizes them, are dense as below.
 *
 * Tensor layout conversions, done when a block is copied (F32, F16 and BF16 go through
 * lmp_st_to_f32; any other dtype of a dense weight is refused at open):
 *   - RoPE.  Hugging Face's Llama-family code rotates "half" pairs (i, i + hd/2) of each head;
 *     our forward rotates ADJACENT pairs (2i, 2i+1) (llama2.c and GGUF's layout) with the same
 *     frequency theta^(-2i/hd) for pair i.  So the ROWS of q_proj and k_proj (and of their
 *     biases, Qwen2) are permuted within each head: new row 2i = old row i, new row 2i+1 = old
 *     row i + hd/2 — what llama.cpp's converter does.  q and k get the same permutation, so every
 *     attention score q.k is unchanged; v and o are untouched.
 *   - GPT-2's Conv1D stores W as [in, out] (y = x W + b); ours is [out, in], so it is transposed.
 *     The fused c_attn [d, 3d] gives q = output columns [0, d), k = [d, 2d), v = [2d, 3d) and
 *     c_attn.bias is split likewise.  Tensor names may carry the "transformer." prefix
 *     (GPT2LMHeadModel.state_dict()) or not (the published "gpt2" model.safetensors); the
 *     attn.bias / attn.masked_bias mask buffers are ignored.  The head is tied to wte.
 * The embeddings, positions, final norm and head are converted to f32 once at open.  Every
 * tensor of every block is checked for presence, shape and dtype at open, so a broken checkpoint
 * fails before any work, with a message naming the file and the tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/input_file.h"
#include "base/textfile.h"
#include "formats/json.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "model/expert_pager.h"
#include "model/model_hf_quant.h"
#include "model/rotate.h"
#include "model/tensor_names.h"


typedef struct hf_state {
    lmp_safetensors *st;
    char *where;          /* the checkpoint file named in "missing tensor" messages */
    const lmp_arch_desc *desc; /* the family of config.json's class (core/arch) */
    const char *prefix;   /* GPT-2 tensor names: "transformer." or "" */
    unsigned bias_roles;  /* LLAMA family: bit r set when the linear of role r has a bias */
    lmp_ct *ct;           /* a compressed-tensors quantization_config, or NULL */
    /* A mixture of experts whose routed experts are stored fused, as transformers 5 holds them in
     * memory: <experts>.gate_up_proj [E, 2 f, d] (gate's rows, then up's, of each expert) and
     * <experts>.down_proj [E, d, f] per sparse layer, rather than one linear per expert. */
    int fused_experts;
} hf_state;

/* ---- tensors ----------------------------------------------------------------------------- */
static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* The tensor `name`, checked to exist with shape [d0] (d1 == 0) or [d0, d1] and a dtype that
 * converts to f32. */
static int find(const hf_state *s, const char *name, int64_t d0, int64_t d1, const lmp_st_tensor **out)
{
    const lmp_st_tensor *t = lmp_st_find(s->st, name);
    if (!t) return lmp_fail(LMP_EINVAL, "%s: tensor %s is missing", s->where, name);
    const int nd = d1 ? 2 : 1;
    const int64_t want[2] = {d0, d1};
    if (t->ndim != nd || t->shape[0] != d0 || (nd == 2 && t->shape[1] != d1)) {
        char have[160], exp[64];
        fmt_shape(have, sizeof have, t->ndim, t->shape);
        fmt_shape(exp, sizeof exp, nd, want);
        return lmp_fail(LMP_EINVAL, "%s: %s has shape %s, expected %s", t->file, name, have, exp);
    }
    if (t->dtype != LMP_ST_F32 && t->dtype != LMP_ST_F16 && t->dtype != LMP_ST_BF16)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s has dtype %s (only F32, F16 and BF16 weights are supported)",
                        t->file, name, lmp_st_dtype_name(t->dtype));
    *out = t;
    return 0;
}

/* A new f32 array with the values of tensor `name` (checked as in find). */
static int load(const hf_state *s, const char *name, int64_t d0, int64_t d1, float **out)
{
    const lmp_st_tensor *t;
    *out = NULL;
    int st = find(s, name, d0, d1, &t);
    if (st) return st;
    float *buf = malloc((size_t)t->numel * sizeof *buf);
    if (!buf) return lmp_fail(LMP_ENOMEM, "%s: out of memory for %s", t->file, name);
    if ((st = lmp_st_to_f32(t, 0, t->numel, buf))) {
        free(buf);
        return st;
    }
    *out = buf;
    return 0;
}

/* A dense X.weight is missing: say so, and whether quantized tensors stand in its place, which
 * means the checkpoint's quantization_config does not cover the module. */
static int dense_missing(const hf_state *s, const char *module)
{
    const char *leaves[] = {"weight_packed", "weight_scale"};
    for (int i = 0; i < 2; i++) {
        char name[400];
        snprintf(name, sizeof name, "%s.%s", module, leaves[i]);
        const lmp_st_tensor *t = lmp_st_find(s->st, name);
        if (t)
            return lmp_fail(LMP_EINVAL, "%s: tensor %s.weight is missing; %s holds %s, but %s quantizes no such module "
                            "(ignored, or matched by no target of quantization_config)", s->where, module, t->file, name,
                            s->ct ? "config.json's" : "config.json, without a quantization_config,");
    }
    return lmp_fail(LMP_EINVAL, "%s: tensor %s.weight is missing", s->where, module);
}

/* The storage of module `module` (class cls) with weight [d0, d1]: *q says whether it is
 * quantized (compressed-tensors) and how its input is; a dense weight is checked like find(). */
static int weight_find(const hf_state *s, const char *module, const char *cls, int64_t d0, int64_t d1, lmp_ct_weight *q)
{
    memset(q, 0, sizeof *q);
    int st = s->ct ? lmp_ct_find(s->ct, s->st, s->where, module, cls, d0, d1, q) : 0;
    if (st || q->quantized) return st;
    char name[400];
    snprintf(name, sizeof name, "%s.weight", module);
    const lmp_st_tensor *t;
    return lmp_st_find(s->st, name) ? find(s, name, d0, d1, &t) : dense_missing(s, module);
}

/* A new f32 array with module `module`'s weight [d0, d1], dequantized when the checkpoint holds
 * it quantized; act (may be NULL) gets its input's simulated quantization. */
static int load_weight(const hf_state *s, const char *module, const char *cls, int64_t d0, int64_t d1, float **out,
                       lmp_aspec *act)
{
    lmp_ct_weight q;
    *out = NULL;
    int st = weight_find(s, module, cls, d0, d1, &q);
    if (st) return st;
    if (act) *act = q.act;
    if (!q.quantized) {
        char name[400];
        snprintf(name, sizeof name, "%s.weight", module);
        return load(s, name, d0, d1, out);
    }
    float *w = malloc((size_t)(d0 * d1) * sizeof *w);
    if (!w) return lmp_fail(LMP_ENOMEM, "out of memory for %s", module);
    if ((st = lmp_ct_dequantize(&q, w))) {
        free(w);
        return st;
    }
    *out = w;
    return 0;
}

/* out[n, rows] = columns [c0, c0+n) of src[rows, cols], transposed (Conv1D [in, out] -> [out, in]). */
static float *transpose_cols(const float *src, int64_t rows, int64_t cols, int64_t c0, int64_t n)
{
    float *out = malloc((size_t)(n * rows) * sizeof *out);
    if (!out) return lmp_fail(LMP_ENOMEM, "out of memory transposing a Conv1D weight"), NULL;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t o = 0; o < n; o++) out[o * rows + i] = src[i * cols + c0 + o];
    return out;
}

static float *dup_range(const float *src, int64_t n)
{
    float *p = malloc((size_t)n * sizeof *p);
    if (!p) return lmp_fail(LMP_ENOMEM, "out of memory"), NULL;
    memcpy(p, src, (size_t)n * sizeof *p);
    return p;
}

/* ---- blocks ------------------------------------------------------------------------------ */
/* Where linear l of block b is stored: its own module (rows = l->out, r0 = 0), or rows
 * [r0, r0 + l->out) of a fused module of `rows` rows (Phi-3's qkv_proj and gate_up_proj). */
static void linear_source(const hf_state *s, const lmp_arch *a, int64_t b, const lmp_linear *l, char *module, size_t n,
                          int64_t *r0, int64_t *rows)
{
    const lmp_arch_desc *d = s->desc;
    const char *prefix = lmp_hf_arch_block_prefix(a);
    switch (lmp_fused_rows(a, l, d->hf_fused_qkv != NULL, d->hf_fused_gate_up != NULL, r0, rows)) {
    case LMP_FUSED_QKV: snprintf(module, n, "%s.%lld.%s", prefix, (long long)b, d->hf_fused_qkv); break;
    case LMP_FUSED_GATE_UP: snprintf(module, n, "%s.%lld.%s", prefix, (long long)b, d->hf_fused_gate_up); break;
    default: snprintf(module, n, "%s", l->name);
    }
}

/* Routed expert l's fused tensor (fused_experts): its name into name[n], its 3-D shape checked,
 * and where l's [out, in] weight starts in it (elements). */
static int fused_expert(const hf_state *s, int64_t b, const lmp_linear *l, char *name, size_t n,
                        const lmp_st_tensor **out, int64_t *first)
{
    const int down = l->role == LMP_ROLE_DOWN;
    snprintf(name, n, "model.layers.%lld.%s.%s", (long long)b, s->desc->moe->hf_experts,
             down ? "down_proj" : "gate_up_proj");
    const lmp_st_tensor *t = lmp_st_find(s->st, name);
    if (!t) return lmp_fail(LMP_EINVAL, "%s: tensor %s is missing (the experts of the other layers are fused)",
                            s->where, name);
    /* gpt-oss keeps them transposed, [E, in, out] with gate and up interleaved by column */
    const int in_out = s->desc->moe->hf_gpt_oss;
    const int64_t rows = down ? l->out : 2 * l->out, E = t->shape[0];
    const int64_t d1 = in_out ? l->in : rows, d2 = in_out ? rows : l->in;
    if (t->ndim != 3 || t->shape[1] != d1 || t->shape[2] != d2 || E <= l->expert)
        return lmp_fail(LMP_EINVAL, "%s: %s is not [experts, %lld, %lld]", t->file, name, (long long)d1,
                        (long long)d2);
    if (t->dtype != LMP_ST_F32 && t->dtype != LMP_ST_F16 && t->dtype != LMP_ST_BF16)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s has dtype %s (only F32, F16 and BF16 weights are supported)",
                        t->file, name, lmp_st_dtype_name(t->dtype));
    *out = t;
    *first = in_out ? (int64_t)l->expert * rows * l->in
                    : ((int64_t)l->expert * rows + (l->role == LMP_ROLE_UP ? l->out : 0)) * l->in;
    return 0;
}

/* A fused query_key_value laid out by kv group: group g of the n_kv_heads holds the rows of its
 * G = heads / kv heads q heads, then its k head, then its v head, hd rows each (GPT-NeoX and Bloom:
 * G = 1, [heads][q, k, v][hd]; Falcon: its multi-query [q heads, k, v] is one group, its
 * new_decoder_architecture any number).  q, k or v (l->role) gathered in place into the first
 * l->out rows of w, and of bias likewise. */
static int per_head_rows(const lmp_arch *a, const lmp_linear *l, float *w, float *bias)
{
    const int64_t hd = a->head_dim, H = a->n_heads, KV = a->n_kv_heads;
    if (KV <= 0 || H % KV) return lmp_fail(LMP_EINVAL, "%s: %lld heads in %lld kv groups", l->name, (long long)H, (long long)KV);
    const int64_t G = H / KV, n = l->role == LMP_ROLE_Q ? H : KV;
    for (int64_t h = 0; h < n; h++) { /* row block h moves down from its source (never overwrites a later one) */
        const int64_t g = l->role == LMP_ROLE_Q ? h / G : h;
        const int64_t src = g * (G + 2) + (l->role == LMP_ROLE_Q ? h % G : l->role == LMP_ROLE_K ? G : G + 1);
        memmove(w + h * hd * l->in, w + src * hd * l->in, (size_t)(hd * l->in) * sizeof *w);
        if (bias) memmove(bias + h * hd, bias + src * hd, (size_t)hd * sizeof *bias);
    }
    return 0;
}

/* gpt-oss's routed expert l (fused_expert's [E, in, cols] tensor t, its expert's slab at `first`):
 * w[o, i] = slab[i, o] for down, slab[i, 2 o] for gate, slab[i, 2 o + 1] for up (transformers'
 * gate_up[..., ::2] and [..., 1::2]); b likewise from <name>_bias [E, cols]. */
static int load_gpt_oss_expert(const hf_state *s, lmp_linear *l, const char *name, const lmp_st_tensor *t,
                               int64_t first)
{
    const int64_t cols = t->shape[2], stride = l->role == LMP_ROLE_DOWN ? 1 : 2;
    const int64_t off = l->role == LMP_ROLE_UP ? 1 : 0;
    char bname[420];
    snprintf(bname, sizeof bname, "%s_bias", name);
    const lmp_st_tensor *bt;
    int st = find(s, bname, t->shape[0], cols, &bt);
    if (st) return st;
    float *slab = malloc((size_t)((l->in + 1) * cols) * sizeof *slab), *brow = slab ? slab + l->in * cols : NULL;
    l->w = malloc((size_t)(l->out * l->in) * sizeof *l->w);
    l->b = malloc((size_t)l->out * sizeof *l->b);
    if (!slab || !l->w || !l->b) st = lmp_fail(LMP_ENOMEM, "out of memory for %s", l->name);
    if (!st) st = lmp_st_to_f32(t, first, l->in * cols, slab);
    if (!st) st = lmp_st_to_f32(bt, (int64_t)l->expert * cols, cols, brow);
    for (int64_t o = 0; !st && o < l->out; o++) {
        for (int64_t i = 0; i < l->in; i++) l->w[o * l->in + i] = slab[i * cols + o * stride + off];
        l->b[o] = brow[o * stride + off];
    }
    free(slab);
    return st;
}

/* *w (and *bias when the linear has one) of linear l, cut from a fused module where it is one. */
static int load_linear(const hf_state *s, const lmp_arch *a, int64_t b, lmp_linear *l)
{
    if (s->fused_experts && l->expert_kind == LMP_EXPERT_ROUTED) {
        char name[400];
        const lmp_st_tensor *t;
        int64_t first;
        int st = fused_expert(s, b, l, name, sizeof name, &t, &first);
        if (st) return st;
        if (s->desc->moe->hf_gpt_oss) return load_gpt_oss_expert(s, l, name, t, first);
        if (!(l->w = malloc((size_t)(l->out * l->in) * sizeof *l->w))) return lmp_fail(LMP_ENOMEM, "out of memory");
        return lmp_st_to_f32(t, first, l->out * l->in, l->w);
    }
    char module[256], name[300];
    int64_t r0, rows;
    linear_source(s, a, b, l, module, sizeof module, &r0, &rows);
    float *w = NULL, *bias = NULL;
    int st = load_weight(s, module, "Linear", rows, l->in, &w, &l->act);
    if (!st && (s->bias_roles >> l->role & 1u)) {
        snprintf(name, sizeof name, "%s.bias", module);
        st = load(s, name, rows, 0, &bias);
    }
    if (!st && rows != l->out && s->desc->hf_fused_qkv_per_head &&
        (l->role == LMP_ROLE_Q || l->role == LMP_ROLE_K || l->role == LMP_ROLE_V)) {
        st = per_head_rows(a, l, w, bias);
    } else if (!st && rows != l->out) { /* keep rows [r0, r0 + out) */
        memmove(w, w + r0 * l->in, (size_t)(l->out * l->in) * sizeof *w);
        if (bias) memmove(bias, bias + r0, (size_t)l->out * sizeof *bias);
    }
    l->w = w;
    l->b = bias;
    return st;
}

/* The tensor of block norm i: <name>.weight, but gpt-oss's sinks, stored as <name> itself. */
static void norm_tensor(const lmp_arch *a, const lmp_norm *nm, int i, char *buf, size_t n)
{
    snprintf(buf, n, i == lmp_norm_index(a, LMP_NORM_SINKS) ? "%s" : "%s.weight", nm->name);
}

/* The attention module of block b (o_proj's parent, "model.layers.3.self_attn"): where a
 * kv_cache_scheme's k_scale and v_scale live.  "" when the block has no o_proj. */
static void attention_module(const lmp_block *b, char *buf, size_t n)
{
    const int o = lmp_block_find(b, LMP_ROLE_O);
    const char *on = o >= 0 ? b->linears[o].name : "", *dot = strrchr(on, '.');
    snprintf(buf, n, "%.*s", dot ? (int)(dot - on) : 0, on);
}

/* Block b, or with a part (part set) only the linears lmp_block_keep_experts(others, e0, e1)
 * keeps: the tensors of the others are never read. */
static int llama_block_copy_part(const lmp_model *m, int64_t b, int part, int others, int64_t e0, int64_t e1,
                                 lmp_block *out)
{
    const hf_state *s = m->src_data;
    const int64_t hd = m->arch.head_dim, n_rot = m->arch.rope.n_rot;
    const int plus_one = (s->desc->flags & LMP_ARCH_NORM_PLUS_ONE) != 0;
    /* transformers' rotate-half order, but GLM's; nothing to permute without RoPE (Bloom, OPT) */
    const int halves = !s->desc->hf_rope_adjacent && !m->arch.alibi && !m->arch.learned_pos;
    const int no_params = (s->desc->flags & LMP_ARCH_NORM_NO_PARAMS) != 0;
    char name[256];
    int st = lmp_block_init(out, (int)b, &m->arch);
    if (!st && part) st = lmp_block_keep_experts(out, others, e0, e1);
    for (int i = 0; i < out->n_linears && !st; i++) {
        lmp_linear *l = &out->linears[i];
        const int qk = halves && (l->role == LMP_ROLE_Q || l->role == LMP_ROLE_K);
        st = load_linear(s, &m->arch, b, l);
        if (!st && m->arch.route == LMP_ROUTE_SIGMOID_BIAS && l->role == LMP_ROLE_ROUTER) {
            /* DeepSeek-V3's e_score_correction_bias: the router's b, which only the choice reads */
            snprintf(name, sizeof name, "%s.e_score_correction_bias", l->name);
            st = load(s, name, l->out, 0, &l->b);
        }
        if (!st && qk) st = lmp_rope_permute_rows(l->w, l->out, l->in, hd, n_rot);
        if (!st && qk && l->b) st = lmp_rope_permute_rows(l->b, l->out, 1, hd, n_rot);
    }
    for (int i = 0; i < out->n_norms && !st; i++) {
        lmp_norm *nm = &out->norms[i];
        const int qk_norm = i == lmp_norm_index(&m->arch, LMP_NORM_Q) || i == lmp_norm_index(&m->arch, LMP_NORM_K);
        if (no_params) { /* OLMo: LayerNorm without parameters */
            st = lmp_norm_identity(nm->dim, &nm->w, &nm->b);
            continue;
        }
        norm_tensor(&m->arch, nm, i, name, sizeof name);
        st = load(s, name, nm->dim, 0, &nm->w);
        snprintf(name, sizeof name, "%s.bias", nm->name);
        if (!st && m->arch.layer_norm && !qk_norm) { /* LayerNorm's bias (Cohere's: none, 0) */
            if (s->desc->flags & LMP_ARCH_NORM_NO_BIAS) {
                if (!(nm->b = calloc((size_t)nm->dim, sizeof *nm->b))) st = lmp_fail(LMP_ENOMEM, "out of memory");
            } else {
                st = load(s, name, nm->dim, 0, &nm->b);
            }
        }
        for (int64_t j = 0; !st && plus_one && j < nm->dim; j++) nm->w[j] += 1.0f; /* Gemma: 1 + w */
        /* q/k norms act on each head before RoPE: their weights follow the rows' permutation */
        if (!st && halves && qk_norm) st = lmp_rope_permute_rows(nm->w, nm->dim, 1, hd, n_rot); /* (OLMo 2's: all heads) */
    }
    if (!st && s->ct) { /* compressed-tensors' kv_cache_scheme: the attention module's k_scale, v_scale */
        attention_module(out, name, sizeof name);
        st = lmp_ct_kv(s->ct, s->st, s->where, name, m->arch.n_kv_heads, &out->kv);
    }
    if (st) lmp_block_free(out);
    return st;
}

static int llama_block_copy(const lmp_model *m, int64_t b, lmp_block *out)
{
    return llama_block_copy_part(m, b, 0, 1, 0, 0, out);
}

static int llama_block_copy_experts(const lmp_model *m, int64_t b, int others, int64_t e0, int64_t e1, lmp_block *out)
{
    return llama_block_copy_part(m, b, 1, others, e0, e1, out);
}

/* The file's name of a GPT-2 block tensor: <prefix>h.<b>.<leaf>. */
static const char *gpt2_name(const hf_state *s, int64_t b, const char *leaf, char *buf, size_t n)
{
    snprintf(buf, n, "%sh.%lld.%s", s->prefix, (long long)b, leaf);
    return buf;
}

/* The Conv1D `leaf` (weight [in, out], bias [out]) of block b as an [out, in] weight and a bias. */
static int load_conv1d(const hf_state *s, int64_t b, const char *leaf, int64_t in, int64_t out,
                       float **w, float **bias)
{
    char name[256], full[300];
    float *raw;
    snprintf(name, sizeof name, "%s.weight", leaf);
    int st = load(s, gpt2_name(s, b, name, full, sizeof full), in, out, &raw);
    if (st) return st;
    *w = transpose_cols(raw, in, out, 0, out);
    free(raw);
    if (!*w) return LMP_ENOMEM;
    snprintf(name, sizeof name, "%s.bias", leaf);
    return load(s, gpt2_name(s, b, name, full, sizeof full), out, 0, bias);
}

static int gpt2_block_copy(const lmp_model *m, int64_t b, lmp_block *out)
{
    const hf_state *s = m->src_data;
    const int64_t d = m->arch.dim, f = m->arch.hidden;
    char name[300];
    float *qkv_w = NULL, *qkv_b = NULL;
    int st = lmp_block_init(out, (int)b, &m->arch);
    if (!st) st = load(s, gpt2_name(s, b, "attn.c_attn.weight", name, sizeof name), d, 3 * d, &qkv_w);
    if (!st) st = load(s, gpt2_name(s, b, "attn.c_attn.bias", name, sizeof name), 3 * d, 0, &qkv_b);
    for (int i = 0; i < out->n_linears && !st; i++) {
        lmp_linear *l = &out->linears[i];
        switch (l->role) {
        case LMP_ROLE_Q: case LMP_ROLE_K: case LMP_ROLE_V: {
            const int64_t c0 = (int64_t)(l->role - LMP_ROLE_Q) * d;
            if (!(l->w = transpose_cols(qkv_w, d, 3 * d, c0, d)) || !(l->b = dup_range(qkv_b + c0, d)))
                st = LMP_ENOMEM;
            break;
        }
        case LMP_ROLE_O: st = load_conv1d(s, b, "attn.c_proj", d, d, &l->w, &l->b); break;
        case LMP_ROLE_UP: st = load_conv1d(s, b, "mlp.c_fc", d, f, &l->w, &l->b); break;
        case LMP_ROLE_DOWN: st = load_conv1d(s, b, "mlp.c_proj", f, d, &l->w, &l->b); break;
        default: st = lmp_fail(LMP_EINVAL, "GPT-2 block has an unexpected linear %s", l->name);
        }
    }
    static const char *const ln[2] = {"ln_1", "ln_2"};
    for (int i = 0; i < 2 && !st; i++) {
        char leaf[32];
        snprintf(leaf, sizeof leaf, "%s.weight", ln[i]);
        st = load(s, gpt2_name(s, b, leaf, name, sizeof name), d, 0, &out->norms[i].w);
        snprintf(leaf, sizeof leaf, "%s.bias", ln[i]);
        if (!st) st = load(s, gpt2_name(s, b, leaf, name, sizeof name), d, 0, &out->norms[i].b);
    }
    /* a kv_cache_scheme's scales on the attention module, as transformers' GPT-2 names it */
    if (!st && s->ct)
        st = lmp_ct_kv(s->ct, s->st, s->where, gpt2_name(s, b, "attn", name, sizeof name), m->arch.n_kv_heads, &out->kv);
    free(qkv_w);
    free(qkv_b);
    if (st) lmp_block_free(out);
    return st;
}

static void hf_release_pages(const lmp_model *m) { lmp_st_release_pages(((const hf_state *)m->src_data)->st); }

static void hf_close(lmp_model *m)
{
    hf_state *s = m->src_data;
    if (!s) return;
    lmp_st_close(s->st);
    lmp_ct_free(s->ct);
    free(s->where);
    free(s);
}

/* A dense weight's dtype, or a compressed-tensors weight's codes, scales and zero-points. */
static double llama_linear_bits(const lmp_model *m, int64_t b, const lmp_linear *l)
{
    const hf_state *s = m->src_data;
    lmp_ct_weight q;
    char module[256], name[400];
    int64_t r0, rows;
    linear_source(s, &m->arch, b, l, module, sizeof module, &r0, &rows);
    if (weight_find(s, module, "Linear", rows, l->in, &q)) return NAN; /* checked at open: not reached */
    if (q.quantized) return q.bits;
    snprintf(name, sizeof name, "%s.weight", module);
    return 8.0 * (double)lmp_st_dtype_size(lmp_st_find(s->st, name)->dtype);
}

static double fused_linear_bits(const lmp_model *m, int64_t b, const lmp_linear *l)
{
    const hf_state *s = m->src_data;
    const lmp_st_tensor *t;
    char name[400];
    int64_t first;
    if (!s->fused_experts || l->expert_kind != LMP_EXPERT_ROUTED) return llama_linear_bits(m, b, l);
    return fused_expert(s, b, l, name, sizeof name, &t, &first) ? NAN : 8.0 * (double)lmp_st_dtype_size(t->dtype);
}

/* GPT-2's q, k and v share the fused c_attn's dtype. */
static double gpt2_linear_bits(const lmp_model *m, int64_t b, const lmp_linear *l)
{
    const hf_state *s = m->src_data;
    const char *leaf = l->role == LMP_ROLE_O ? "attn.c_proj.weight" : l->role == LMP_ROLE_UP ? "mlp.c_fc.weight"
                       : l->role == LMP_ROLE_DOWN ? "mlp.c_proj.weight" : "attn.c_attn.weight";
    char name[300];
    const lmp_st_tensor *t = lmp_st_find(s->st, gpt2_name(s, b, leaf, name, sizeof name));
    return t ? 8.0 * (double)lmp_st_dtype_size(t->dtype) : NAN;
}

static const lmp_model_source llama_source = {
    .block_copy = llama_block_copy, .block_copy_experts = llama_block_copy_experts, .close = hf_close, .linear_bits = fused_linear_bits,
    .release_pages = hf_release_pages};
static const lmp_model_source gpt2_source = {
    .block_copy = gpt2_block_copy, .close = hf_close, .linear_bits = gpt2_linear_bits,
    .release_pages = hf_release_pages};

int lmp_model_is_hf(const lmp_model *m)
{
    const lmp_model_source *s = lmp_model_unrotated_source(m); /* a rotated folder is still one */
    return s == &llama_source || s == &gpt2_source;
}

/* ---- config.json ------------------------------------------------------------------------- */
/* A member that is absent or JSON null counts as not given. */
static const lmp_json *cfg_get(const lmp_json *c, const char *key)
{
    const lmp_json *v = lmp_json_get(c, key);
    return v && v->type != LMP_JSON_NULL ? v : NULL;
}

/* cfg[key] as a positive integer; def < 0 makes it required. */
static int cfg_int(const lmp_json *c, const char *what, const char *key, int64_t def, int64_t *out)
{
    if (!cfg_get(c, key)) {
        if (def >= 0) {
            *out = def;
            return 0;
        }
        return lmp_fail(LMP_EINVAL, "%s: missing key \"%s\"", what, key);
    }
    int st = lmp_json_get_int(c, key, what, out);
    if (!st && (*out <= 0 || *out > ((int64_t)1 << 30)))
        return lmp_fail(LMP_EINVAL, "%s: \"%s\" = %lld is out of range", what, key, (long long)*out);
    return st;
}

static int cfg_float(const lmp_json *c, const char *what, const char *key, double def, float *out)
{
    double v = def;
    if (cfg_get(c, key)) {
        int st = lmp_json_get_number(c, key, what, &v);
        if (st) return st;
        if (!(v > 0)) return lmp_fail(LMP_EINVAL, "%s: \"%s\" = %g must be positive", what, key, v);
    }
    *out = (float)v;
    return 0;
}

/* cfg[key] as a positive number, 0 when absent or null. */
static int cfg_number_or_zero(const lmp_json *c, const char *what, const char *key, double *out)
{
    *out = 0;
    if (!cfg_get(c, key)) return 0;
    int st = lmp_json_get_number(c, key, what, out);
    if (!st && !(*out > 0)) return lmp_fail(LMP_EINVAL, "%s: \"%s\" = %g must be positive", what, key, *out);
    return st;
}

static int cfg_bool(const lmp_json *c, const char *what, const char *key, int def, int *out)
{
    const lmp_json *v = cfg_get(c, key);
    if (v && v->type != LMP_JSON_BOOL) return lmp_fail(LMP_EINVAL, "%s: \"%s\" must be true or false", what, key);
    *out = v ? v->boolean : def;
    return 0;
}

/* cfg[key] as a string, or def when absent/null. */
static int cfg_string(const lmp_json *c, const char *what, const char *key, const char *def, const char **out)
{
    if (!cfg_get(c, key)) {
        *out = def;
        return 0;
    }
    return lmp_json_get_string(c, key, what, out);
}

/* ---- which keys of config.json the model may hold --------------------------------------- */
/* Keys that do not change the forward of an f32 evaluation: bookkeeping, token ids, training
 * knobs (dropout, initialisation), generation defaults, classification heads, and
 * PretrainedConfig's generic attributes.  Every other key must be one the family's reader uses:
 * an unknown key may change the numbers (as transformers 5's rope_parameters did when it was
 * new), so it is refused by name rather than ignored. */
static const char *const harmless_keys[] = {
    "architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "_name_or_path", "auto_map",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "initializer_range", "initializer_factor", "use_cache", "attention_dropout", "hidden_dropout", "dropout",
    "embd_pdrop", "resid_pdrop", "attn_pdrop", "pretraining_tp", "keys_to_ignore_at_inference",
    "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
    "task_specific_params", "id2label", "label2id", "num_labels", "problem_type", "finetuning_task",
    "tokenizer_class", "prefix", "return_dict", "use_return_dict", "output_hidden_states", "output_attentions",
    "torchscript", "use_bfloat16", "tf_legacy_loss", "pruned_heads", "chunk_size_feed_forward",
    "is_encoder_decoder", "is_decoder", "cross_attention_hidden_size", "add_cross_attention",
    "tie_encoder_decoder", "max_length", "min_length", "do_sample", "early_stopping", "num_beams",
    "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens",
    "lmpress", /* the record lmpress's own exports carry (version, variant, pipeline, source) */
    NULL};
/* The keys parse_llama and parse_gpt2 (and the RoPE and compressed-tensors readers) use. */
static const char *const llama_keys[] = {
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
    "partial_rotary_factor", "original_max_position_embeddings", "head_dim", "hidden_act", "attention_bias",
    "mlp_bias", "tie_word_embeddings", "sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
    "quantization_config", NULL};
static const char *const gpt2_keys[] = {
    "n_ctx", "n_embd", "n_layer", "n_head", "vocab_size", "n_positions", "n_inner", "layer_norm_epsilon",
    "activation_function", "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "tie_word_embeddings",
    "reorder_and_upcast_attn", /* upcasts a half-precision attention to f32: the f32 forward already is */
    "quantization_config", NULL};

static int listed(const char *key, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(key, list[i])) return 1;
    return 0;
}

/* The family's spelling of Llama's config.json key (arch.h's hf_key_names: GPT-NeoX's
 * "layer_norm_eps" for "rms_norm_eps"), or the key itself. */
static const char *key_of(const lmp_arch_desc *d, const char *key)
{
    for (int i = 0; d && d->hf_key_names && d->hf_key_names[i][0]; i++)
        if (!strcmp(d->hf_key_names[i][0], key)) return d->hf_key_names[i][1];
    return key;
}

/* The spelling config.json c uses: the family's when c has it, else Llama's (transformers 4.57's
 * GPT-NeoX config writes both rotary_pct and partial_rotary_factor; check_config_keys has refused
 * two spellings of different values). */
static const char *key_in(const lmp_json *c, const lmp_arch_desc *d, const char *key)
{
    const char *alt = key_of(d, key);
    return alt != key && lmp_json_get(c, alt) ? alt : key;
}

/* Whether config.json c's key `key` is one the family's reader takes from list `read` (Llama's
 * names): in the family's spelling, or in Llama's beside the family's (of the same value; alone,
 * the family's class would not read it). */
static int read_key(const lmp_json *c, const lmp_arch_desc *d, const char *key, const char *const *read)
{
    for (int i = 0; d && d->hf_key_names && d->hf_key_names[i][0]; i++) {
        if (!strcmp(d->hf_key_names[i][1], key)) return listed(d->hf_key_names[i][0], read);
        if (!strcmp(d->hf_key_names[i][0], key)) return lmp_json_get(c, d->hf_key_names[i][1]) != NULL;
    }
    return listed(key, read);
}

static int same_json_scalar(const lmp_json *a, const lmp_json *b)
{
    if (a->type != b->type) return 0;
    if (a->type == LMP_JSON_NUMBER) return a->number == b->number;
    if (a->type == LMP_JSON_BOOL) return a->boolean == b->boolean;
    if (a->type == LMP_JSON_STRING) return !strcmp(a->str, b->str);
    return a->type == LMP_JSON_NULL;
}

static int check_config_keys(const lmp_json *c, const char *what, const char *cls, const lmp_arch_desc *d,
                             const char *const *read, const char *const *extra)
{
    for (int i = 0; d && d->hf_key_names && d->hf_key_names[i][0]; i++) {
        const lmp_json *x = lmp_json_get(c, d->hf_key_names[i][0]), *y = lmp_json_get(c, d->hf_key_names[i][1]);
        if (x && y && !same_json_scalar(x, y))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: \"%s\" and \"%s\" (two names of one %s setting) differ", what,
                            d->hf_key_names[i][0], d->hf_key_names[i][1], cls);
    }
    for (size_t k = 0; k < c->n; k++)
        if (!read_key(c, d, c->keys[k], read) && !listed(c->keys[k], harmless_keys) && !(extra && listed(c->keys[k], extra)))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: key \"%s\" is not read by lmpress for %s; it may change the model's "
                            "numbers, so the model is refused rather than run without it", what, c->keys[k], cls);
    return 0;
}

static int check_heads(const char *what, const lmp_arch *a)
{
    if (a->dim % a->n_heads || a->n_heads % a->n_kv_heads || (a->dim / a->n_heads) % 2)
        return lmp_fail(LMP_EINVAL, "%s: inconsistent shape: hidden size %lld, %lld heads, %lld kv heads "
                                    "(the hidden size must split into heads of even size, the heads into kv groups)",
                        what, (long long)a->dim, (long long)a->n_heads, (long long)a->n_kv_heads);
    return 0;
}

/* A mixture of experts' keys (issue 37): the routed experts (num_local_experts or num_experts,
 * num_experts_per_tok, their width moe_intermediate_size or Mixtral's intermediate_size), the
 * shared expert's width, norm_topk_prob, and which layers are sparse (Qwen's mlp_only_layers and
 * decoder_sparse_step; the others keep a dense MLP of intermediate_size). */
static int parse_moe(const lmp_json *c, const char *what, const lmp_arch_desc *d, lmp_arch *a)
{
    const lmp_moe_desc *md = d->moe;
    const int mixtral = md->hf_sparse_step == 0;
    int st;
    /* Qwen's num_experts; transformers 5 writes Qwen3-MoE's as num_local_experts (an attribute
     * alias), Mixtral's always is */
    const char *n_key = mixtral || !cfg_get(c, "num_experts") ? "num_local_experts" : "num_experts";
    if (!mixtral && cfg_get(c, "num_experts") && cfg_get(c, "num_local_experts"))
        return lmp_fail(LMP_EINVAL, "%s: both num_experts and num_local_experts (one is an alias of the other)", what);
    if ((st = cfg_int(c, what, n_key, -1, &a->n_experts)) ||
        (st = cfg_int(c, what, "num_experts_per_tok", -1, &a->n_experts_used)))
        return st;
    if (mixtral) a->expert_hidden = a->hidden;
    else if ((st = cfg_int(c, what, "moe_intermediate_size", -1, &a->expert_hidden))) return st;
    if (md->hf_shared && (st = cfg_int(c, what, "shared_expert_intermediate_size", -1, &a->shared_hidden))) return st;
    if (a->n_experts_used > a->n_experts)
        return lmp_fail(LMP_EINVAL, "%s: num_experts_per_tok %lld exceeds the %lld experts", what,
                        (long long)a->n_experts_used, (long long)a->n_experts);
    a->norm_topk = md->norm_topk;
    if (md->norm_topk < 0 && (st = cfg_bool(c, what, "norm_topk_prob", md->hf_norm_topk_default, &a->norm_topk)))
        return st;
    if (a->n_layers > LMP_MAX_LAYERS)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: more than %d layers in a mixture of experts", what, LMP_MAX_LAYERS);
    if (mixtral) return 0;
    int64_t step = 1;
    if ((st = cfg_int(c, what, "decoder_sparse_step", 1, &step))) return st;
    for (int64_t l = 0; l < a->n_layers; l++) a->dense_layer[l] = (l + 1) % step != 0;
    const lmp_json *only = cfg_get(c, "mlp_only_layers");
    if (only && only->type != LMP_JSON_ARRAY)
        return lmp_fail(LMP_EINVAL, "%s: mlp_only_layers must be a list of layer numbers", what);
    for (size_t i = 0; only && i < only->n; i++) {
        const lmp_json *v = &only->items[i];
        if (v->type != LMP_JSON_NUMBER || v->number != (double)(int64_t)v->number || v->number < 0 ||
            v->number >= (double)a->n_layers)
            return lmp_fail(LMP_EINVAL, "%s: mlp_only_layers[%zu] is not a layer number below %lld", what, i,
                            (long long)a->n_layers);
        a->dense_layer[(int64_t)v->number] = 1;
    }
    return 0;
}

/* cfg[key] as an integer >= 0 (def when absent or null). */
static int cfg_count(const lmp_json *c, const char *what, const char *key, int64_t def, int64_t *out)
{
    *out = def;
    if (!cfg_get(c, key)) return 0;
    int st = lmp_json_get_int(c, key, what, out);
    if (!st && (*out < 0 || *out > ((int64_t)1 << 30)))
        return lmp_fail(LMP_EINVAL, "%s: \"%s\" = %lld is out of range", what, key, (long long)*out);
    return st;
}

/* A string key that, when given, must be one value (the only one lmpress implements). */
static int cfg_only(const lmp_json *c, const char *what, const char *key, const char *want, const char *cls)
{
    const char *v;
    int st = cfg_string(c, what, key, want, &v);
    if (!st && strcmp(v, want) != 0)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s \"%s\" is not supported for %s (only \"%s\")", what, key, v, cls,
                        want);
    return st;
}

/* DeepSeek-V2/V3's multi-head latent attention keys (transformers 5.24's DeepseekV2Attention /
 * DeepseekV3Attention): q_lora_rank (null: one q_proj), kv_lora_rank, qk_nope_head_dim,
 * qk_rope_head_dim, v_head_dim.  transformers sets head_dim = qk_rope_head_dim (the rotary's
 * width), so a->head_dim is that here for the RoPE reader, and v_head_dim after it. */
static int parse_mla(const lmp_json *c, const char *what, const lmp_arch_desc *d, lmp_arch *a)
{
    int64_t hd = 0, qk = 0;
    int st;
    a->mla = 1;
    a->mla_norm_eps = 1e-6f; /* DeepseekV2/V3RMSNorm(q_lora_rank / kv_lora_rank): the class default */
    if ((st = cfg_count(c, what, "q_lora_rank", 0, &a->mla_q_lora)) ||
        (st = cfg_int(c, what, "kv_lora_rank", -1, &a->mla_kv_lora)) ||
        (st = cfg_int(c, what, "qk_nope_head_dim", -1, &a->mla_nope)) ||
        (st = cfg_int(c, what, "qk_rope_head_dim", -1, &a->mla_rope)) ||
        (st = cfg_int(c, what, "v_head_dim", -1, &a->head_dim)) || (st = cfg_count(c, what, "head_dim", 0, &hd)) ||
        (st = cfg_count(c, what, "qk_head_dim", 0, &qk)))
        return st;
    if (hd && hd != a->mla_rope)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: head_dim %lld differs from qk_rope_head_dim %lld (%s's rotary width "
                        "is head_dim = qk_rope_head_dim)", what, (long long)hd, (long long)a->mla_rope, d->hf_class);
    if (qk && qk != a->mla_nope + a->mla_rope)
        return lmp_fail(LMP_EINVAL, "%s: qk_head_dim %lld is not qk_nope_head_dim + qk_rope_head_dim = %lld", what,
                        (long long)qk, (long long)(a->mla_nope + a->mla_rope));
    if (a->mla_rope % 2)
        return lmp_fail(LMP_EINVAL, "%s: qk_rope_head_dim %lld must be even", what, (long long)a->mla_rope);
    if (a->head_dim > a->mla_nope + a->mla_rope)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: v_head_dim %lld wider than the q/k heads (%lld) is not supported", what,
                        (long long)a->head_dim, (long long)(a->mla_nope + a->mla_rope));
    if (a->n_kv_heads != a->n_heads) /* the eager attention would repeat the expanded keys */
        return lmp_fail(LMP_EUNSUPPORTED, "%s: num_key_value_heads %lld differs from num_attention_heads %lld (%s's "
                        "latent attention expands k and v to every head)", what, (long long)a->n_kv_heads,
                        (long long)a->n_heads, d->hf_class);
    int interleave = 1;
    if ((st = cfg_bool(c, what, "rope_interleave", 1, &interleave))) return st;
    if (!interleave)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: rope_interleave false (rotate-half RoPE on %s's rotary key) is not "
                        "supported", what, d->hf_class);
    return 0;
}

/* DeepSeek's YaRN (transformers' yarn_apply_mscale): besides the rotary table and its attention
 * factor (rope.c), the softmax scale is multiplied by mscale(factor, mscale_all_dim)^2, with
 * mscale(s, m) = 0.1 m ln s + 1 (1 for s <= 1), where the RoPE dict has a mscale_all_dim; the
 * forward takes it on q.  Only the default rotation and YaRN are implemented for MLA. */
static int mla_softmax_scale(const lmp_json *c, const char *what, const lmp_arch_desc *d, lmp_arch *a)
{
    a->mla_q_scale = 1.0f;
    if (!a->rope.type[0] || !strcmp(a->rope.type, "default")) return 0;
    if (strcmp(a->rope.type, "yarn") != 0)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: RoPE type \"%s\" on %s is not supported (only the default rotation "
                        "and yarn)", what, a->rope.type, d->hf_class);
    const lmp_json *rp = cfg_get(c, "rope_parameters") ? cfg_get(c, "rope_parameters") : cfg_get(c, "rope_scaling");
    const lmp_json *all = rp && rp->type == LMP_JSON_OBJECT ? lmp_json_get(rp, "mscale_all_dim") : NULL;
    const lmp_json *factor = rp && rp->type == LMP_JSON_OBJECT ? lmp_json_get(rp, "factor") : NULL;
    if (!all || all->type == LMP_JSON_NULL) return 0;
    if (all->type != LMP_JSON_NUMBER || !factor || factor->type != LMP_JSON_NUMBER)
        return lmp_fail(LMP_EINVAL, "%s: the yarn RoPE's mscale_all_dim and factor must be numbers", what);
    if (all->number == 0) return 0; /* transformers: a zero mscale_all_dim applies nothing */
    const double m = factor->number <= 1 ? 1.0 : 0.1 * all->number * log(factor->number) + 1.0;
    a->mla_q_scale = (float)(m * m);
    return 0;
}

/* DeepSeek's mixture of experts: n_routed_experts, num_experts_per_tok, moe_intermediate_size,
 * n_shared_experts of that width (one MLP of n_shared x width, no gate), the first
 * first_k_dense_replace layers dense (intermediate_size), and the routing: V2's softmax with
 * topk_method greedy or group_limited_greedy (n_group, topk_group), V3's sigmoid with a selection
 * bias and noaux_tc grouped top-k; both times routed_scaling_factor.  Keys of the original
 * checkpoints' remote code are read where they say the same (scoring_func, topk_method,
 * moe_layer_freq); any other value is refused by name. */
static int parse_deepseek_moe(const lmp_json *c, const char *what, const lmp_arch_desc *d, lmp_arch *a)
{
    const int v3 = d->moe->route == LMP_ROUTE_SIGMOID_BIAS;
    int64_t shared = 0, dense = 0, freq = 1;
    int st;
    if (cfg_get(c, "n_routed_experts") && cfg_get(c, "num_local_experts"))
        return lmp_fail(LMP_EINVAL, "%s: both n_routed_experts and num_local_experts (one is an alias of the other)", what);
    if ((st = cfg_int(c, what, cfg_get(c, "num_local_experts") ? "num_local_experts" : "n_routed_experts", -1,
                      &a->n_experts)) ||
        (st = cfg_int(c, what, "num_experts_per_tok", -1, &a->n_experts_used)) ||
        (st = cfg_int(c, what, "moe_intermediate_size", -1, &a->expert_hidden)) ||
        (st = cfg_count(c, what, "n_shared_experts", v3 ? 1 : 2, &shared)) ||
        (st = cfg_count(c, what, "first_k_dense_replace", v3 ? 3 : 0, &dense)) ||
        (st = cfg_count(c, what, "moe_layer_freq", 1, &freq)) ||
        (st = cfg_count(c, what, "n_group", 0, &a->n_group)) ||
        (st = cfg_count(c, what, "topk_group", 0, &a->topk_group)) ||
        (st = cfg_float(c, what, "routed_scaling_factor", v3 ? 2.5 : 1.0, &a->routed_scale)) ||
        (st = cfg_bool(c, what, "norm_topk_prob", v3, &a->norm_topk)) ||
        (st = cfg_only(c, what, "scoring_func", v3 ? "sigmoid" : "softmax", d->hf_class)))
        return st;
    if (freq != 1)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: moe_layer_freq %lld is not supported (every layer from "
                        "first_k_dense_replace on is sparse)", what, (long long)freq);
    const char *method;
    if ((st = cfg_string(c, what, "topk_method", v3 ? "noaux_tc" : "greedy", &method))) return st;
    int grouped = 0;
    if (v3 && strcmp(method, "noaux_tc") != 0)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: topk_method \"%s\" is not supported for %s (only \"noaux_tc\")", what,
                        method, d->hf_class);
    if (v3) grouped = 1;
    else if (!strcmp(method, "group_limited_greedy")) grouped = 1;
    else if (strcmp(method, "greedy") != 0)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: topk_method \"%s\" is not supported for %s (\"greedy\" or "
                        "\"group_limited_greedy\")", what, method, d->hf_class);
    /* transformers' DeepseekV2TopkRouter never renormalizes (the original remote code did when
     * norm_topk_prob): a V2 config saying true would read two ways */
    if (!v3 && a->norm_topk)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: norm_topk_prob true on %s is not supported (transformers' router "
                        "ignores it, DeepSeek's own code renormalizes)", what, d->hf_class);
    if (!grouped) {
        a->n_group = a->topk_group = 0;
    } else if (a->n_group < 1 || a->topk_group < 1 || a->topk_group > a->n_group || a->n_experts % a->n_group ||
               (v3 && a->n_experts / a->n_group < 2) ||
               a->n_experts_used > a->topk_group * (a->n_experts / a->n_group)) {
        return lmp_fail(LMP_EINVAL, "%s: grouped routing needs n_group dividing the %lld experts (%s), 1 <= "
                        "topk_group <= n_group, and num_experts_per_tok %lld within the kept groups (n_group %lld, "
                        "topk_group %lld)", what, (long long)a->n_experts, v3 ? "at least 2 per group" : "",
                        (long long)a->n_experts_used, (long long)a->n_group, (long long)a->topk_group);
    }
    if (a->n_experts_used > a->n_experts)
        return lmp_fail(LMP_EINVAL, "%s: num_experts_per_tok %lld exceeds the %lld experts", what,
                        (long long)a->n_experts_used, (long long)a->n_experts);
    a->route = d->moe->route;
    a->shared_hidden = shared * a->expert_hidden;
    if (a->n_layers > LMP_MAX_LAYERS)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: more than %d layers in a mixture of experts", what, LMP_MAX_LAYERS);
    for (int64_t l = 0; l < a->n_layers; l++) a->dense_layer[l] = l < dense;
    return 0;
}

/* gpt-oss (arch/gpt_oss.c): every layer sparse, num_local_experts (or its alias num_experts) of
 * intermediate_size, num_experts_per_tok per token, routed top-k then softmax; the router and
 * the experts have biases; the clamped SwiGLU's swiglu_alpha and swiglu_limit (transformers'
 * defaults 1.702 and 7.0); attention sinks.  What transformers would fill in by default for the
 * attention (layer_types, sliding_window 128, YaRN factor 32) must be written out: a config
 * without them is refused rather than guessed.  A quantization_config (the Hub's MXFP4
 * experts) is refused by name. */
static int parse_gpt_oss(const lmp_json *c, const char *what, hf_state *s, lmp_arch *a, int layers_given)
{
    int st;
    const lmp_json *qc = cfg_get(c, "quantization_config");
    if (qc) {
        const lmp_json *m = qc->type == LMP_JSON_OBJECT ? lmp_json_get(qc, "quant_method") : NULL;
        return lmp_fail(LMP_EUNSUPPORTED, "%s: a quantized gpt-oss (quantization_config, quant_method \"%s\": the "
                        "Hub's checkpoints hold MXFP4 experts) is not read; load a dequantized (BF16/F32) folder", what,
                        m && m->type == LMP_JSON_STRING ? m->str : "?");
    }
    if (!layers_given || (!cfg_get(c, "rope_parameters") && !cfg_get(c, "rope_scaling")))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: gpt-oss's config.json must give layer_types, sliding_window and its "
                        "rope_parameters (or rope_scaling): transformers' defaults for them are not assumed", what);
    if (cfg_get(c, "num_experts") && cfg_get(c, "num_local_experts"))
        return lmp_fail(LMP_EINVAL, "%s: both num_experts and num_local_experts (one is an alias of the other)", what);
    if ((st = cfg_int(c, what, cfg_get(c, "num_experts") ? "num_experts" : "num_local_experts", -1, &a->n_experts)) ||
        (st = cfg_int(c, what, "num_experts_per_tok", -1, &a->n_experts_used)) ||
        (st = cfg_float(c, what, "swiglu_alpha", 1.702, &a->swiglu_alpha)) ||
        (st = cfg_float(c, what, "swiglu_limit", 7.0, &a->swiglu_limit)))
        return st;
    if (a->n_experts_used < 1 || a->n_experts_used > a->n_experts)
        return lmp_fail(LMP_EINVAL, "%s: num_experts_per_tok %lld is not within the %lld experts", what,
                        (long long)a->n_experts_used, (long long)a->n_experts);
    int64_t per_token; /* openai's duplicate of it, which transformers does not read */
    if ((st = cfg_int(c, what, "experts_per_token", a->n_experts_used, &per_token))) return st;
    if (per_token != a->n_experts_used)
        return lmp_fail(LMP_EINVAL, "%s: experts_per_token %lld differs from num_experts_per_tok %lld (transformers "
                        "routes with the latter)", what, (long long)per_token, (long long)a->n_experts_used);
    if (!(a->swiglu_limit > 0) || !(a->swiglu_alpha > 0))
        return lmp_fail(LMP_EINVAL, "%s: swiglu_limit and swiglu_alpha must be positive", what);
    if (a->n_layers > LMP_MAX_LAYERS)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: more than %d layers in a mixture of experts", what, LMP_MAX_LAYERS);
    a->expert_hidden = a->hidden;
    a->route = LMP_ROUTE_TOPK_SOFTMAX;
    a->norm_topk = 0;
    a->attn_sinks = 1;
    s->bias_roles |= 1u << LMP_ROLE_ROUTER;
    return 0;
}

/* Falcon's block from config.json (core/arch/falcon.c): alibi true is refused; with
 * new_decoder_architecture, num_kv_heads kv groups and a parallel block with ln_attn and ln_mlp
 * (the descriptor lmp_arch_falcon_nda; num_ln_in_parallel_attn 1: one shared input_layernorm);
 * without, multi_query's one kv head (else as many as the heads) and parallel_attn's parallel
 * block with one shared norm (false: sequential, with post_attention_layernorm).  As
 * transformers' FalconAttention, which ignores num_kv_heads for a multi-query model. */
static int parse_falcon(const lmp_json *c, const char *what, hf_state *s, lmp_arch *a)
{
    int alibi = 0, nda = 0, mq = 1, par = 1, st;
    int64_t kv, n_ln;
    if ((st = cfg_bool(c, what, "alibi", 0, &alibi)) || (st = cfg_bool(c, what, "new_decoder_architecture", 0, &nda)) ||
        (st = cfg_bool(c, what, "multi_query", 1, &mq)) || (st = cfg_bool(c, what, "parallel_attn", 1, &par)) ||
        (st = cfg_int(c, what, "num_kv_heads", a->n_heads, &kv)) ||
        (st = cfg_int(c, what, "num_ln_in_parallel_attn", 2, &n_ln)))
        return st;
    if (alibi)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: alibi true (Falcon-RW's ALiBi, scaled with the scores and without "
                        "rotary positions) is not supported for FalconForCausalLM", what);
    if (nda && n_ln != 1 && n_ln != 2)
        return lmp_fail(LMP_EINVAL, "%s: num_ln_in_parallel_attn %lld (1 or 2)", what, (long long)n_ln);
    if (nda && n_ln == 2) s->desc = a->desc = &lmp_arch_falcon_nda; /* ln_attn and ln_mlp */
    a->parallel = nda || par;
    a->shared_norm = a->parallel && (s->desc->flags & LMP_ARCH_SHARED_NORM) != 0;
    a->n_kv_heads = nda ? kv : mq ? 1 : a->n_heads;
    if (a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads)
        return lmp_fail(LMP_EINVAL, "%s: %lld heads do not split into %lld kv heads", what, (long long)a->n_heads,
                        (long long)a->n_kv_heads);
    return 0;
}

/* ChatGLM2/3's switches (core/arch/chatglm.c), as THUDM's modeling_chatglm.py reads them: the
 * RoPE base 10000 x rope_ratio; what the block does not run is refused by its key.  Called once
 * the shapes and the rotation (half of kv_channels, interleaved pairs, base 10000) are read. */
static int parse_chatglm(const lmp_json *c, const char *what, const lmp_arch_desc *d, lmp_arch *a)
{
    /* Llama's keys the remote code never reads: a config carrying one means something lmpress
     * would run and ChatGLM would not */
    static const char *const foreign[] = {"rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor",
                                          "original_max_position_embeddings", "hidden_act", "hidden_activation",
                                          "mlp_bias", "sliding_window", "use_sliding_window", "max_window_layers",
                                          "layer_types"};
    for (size_t i = 0; i < sizeof foreign / sizeof *foreign; i++)
        if (cfg_get(c, foreign[i]))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: key \"%s\" is not read by %s (THUDM's modeling_chatglm.py): "
                            "refused rather than run otherwise than the model's own code", what, foreign[i],
                            d->hf_class);
    int mq = 0, rms = 1, bias_linear = 0, post_ln = 1, tied = 0, st;
    int64_t qbits = 0;
    if ((st = cfg_bool(c, what, "multi_query_attention", 0, &mq)) || (st = cfg_bool(c, what, "rmsnorm", 1, &rms)) ||
        (st = cfg_bool(c, what, "add_bias_linear", 0, &bias_linear)) ||
        (st = cfg_bool(c, what, "post_layer_norm", 1, &post_ln)) ||
        (st = cfg_bool(c, what, "tie_word_embeddings", 0, &tied)) ||
        (st = cfg_count(c, what, "quantization_bit", 0, &qbits)))
        return st;
    const char *why = !mq ? "multi_query_attention false (query_key_value laid out per head, [heads][q, k, v])"
                      : !rms ? "rmsnorm false (LayerNorms in place of the RMSNorms)"
                      : bias_linear ? "add_bias_linear true (biases on dense, dense_h_to_4h and dense_4h_to_h)"
                      : !post_ln ? "post_layer_norm false (no final_layernorm)"
                      : tied ? "tie_word_embeddings true (ChatGLMModel's output_layer is its own)"
                      : qbits ? "quantization_bit (THUDM's int4/int8 weights and kernels)"
                      : cfg_get(c, "pre_seq_len") ? "pre_seq_len (P-tuning v2's prefix encoder)" : NULL;
    if (why) return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is not supported for %s", what, why, d->hf_class);
    float ratio = 1;
    if ((st = cfg_float(c, what, "rope_ratio", 1.0, &ratio))) return st;
    /* RotaryEmbedding(rotary_dim // 2): theta_i = (10000 rope_ratio)^(-2i / (kv_channels / 2)) */
    if (ratio != 1) lmp_rope_default(&a->rope, (float)(10000.0 * (double)ratio), a->rope.n_rot, a->head_dim);
    a->rope_theta = a->rope.theta;
    return 0;
}

static int parse_llama(const lmp_json *c, const char *what, hf_state *s, lmp_arch *a)
{
    const lmp_arch_desc *d = s->desc;
    a->family = LMP_FAMILY_LLAMA;
    a->qk_norm = (d->flags & LMP_ARCH_QK_NORM) != 0;
    a->geglu = (d->flags & LMP_ARCH_GEGLU) != 0;
    a->post_norms = (d->flags & LMP_ARCH_POST_NORMS) != 0;
    a->no_pre_norms = (d->flags & LMP_ARCH_NO_PRE_NORMS) != 0; /* OLMo 2 */
    a->qk_norm_all = (d->flags & LMP_ARCH_QK_NORM_ALL) != 0;
    a->layer_norm = (d->flags & LMP_ARCH_LAYER_NORM) != 0;
    a->plain_mlp = (d->flags & LMP_ARCH_PLAIN_MLP) != 0;
    a->alibi = (d->flags & LMP_ARCH_ALIBI) != 0;
    a->learned_pos = (d->flags & LMP_ARCH_LEARNED_POS) != 0;
    int st;
    /* GPT-NeoX: use_parallel_residual (default true) may make its block sequential */
    a->parallel = (d->flags & LMP_ARCH_PARALLEL) != 0;
    if (d->hf_extra_keys && listed("use_parallel_residual", d->hf_extra_keys) &&
        (st = cfg_bool(c, what, "use_parallel_residual", a->parallel, &a->parallel)))
        return st;
    a->shared_norm = a->parallel && (d->flags & LMP_ARCH_SHARED_NORM) != 0;
    if ((st = cfg_int(c, what, key_in(c, d, "hidden_size"), -1, &a->dim)) ||
        (st = cfg_int(c, what, key_in(c, d, "intermediate_size"), a->plain_mlp ? 4 * a->dim : -1, &a->hidden)) ||
        (st = cfg_int(c, what, key_in(c, d, "num_hidden_layers"), -1, &a->n_layers)) ||
        (st = cfg_int(c, what, key_in(c, d, "num_attention_heads"), -1, &a->n_heads)) ||
        (st = cfg_int(c, what, key_in(c, d, "num_key_value_heads"), a->n_heads, &a->n_kv_heads)) ||
        (st = cfg_int(c, what, key_in(c, d, "vocab_size"), -1, &a->vocab)) ||
        (st = cfg_int(c, what, key_in(c, d, "max_position_embeddings"), d->hf_default_ctx, &a->seq_len)) ||
        (st = cfg_float(c, what, key_in(c, d, "rms_norm_eps"), a->layer_norm ? 1e-5 : 1e-6, &a->norm_eps)))
        return st;
    if (d->hf_falcon && (st = parse_falcon(c, what, s, a))) return st;
    if (d->flags & LMP_ARCH_LEARNED_POS) { /* OPT's variants lmpress does not run, by their keys */
        int pre_norm = 1, drop_final = 0, affine = 1;
        int64_t proj;
        if ((st = cfg_bool(c, what, "do_layer_norm_before", 1, &pre_norm)) ||
            (st = cfg_bool(c, what, "_remove_final_layer_norm", 0, &drop_final)) ||
            (st = cfg_bool(c, what, "layer_norm_elementwise_affine", 1, &affine)) ||
            (st = cfg_int(c, what, "word_embed_proj_dim", a->dim, &proj)))
            return st;
        if (!pre_norm || drop_final || !affine || proj != a->dim)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is not supported for %s", what,
                            !pre_norm ? "do_layer_norm_before false (post-norm blocks, as opt-350m)"
                            : drop_final ? "_remove_final_layer_norm true"
                            : !affine ? "layer_norm_elementwise_affine false"
                                      : "word_embed_proj_dim other than hidden_size (project_in / project_out)",
                            d->hf_class);
    }
    d = s->desc; /* Falcon's new_decoder_architecture has a descriptor of its own */
    /* parts of a family's block lmpress does not run, refused by their key */
    int qk_ln = 0;
    if ((st = cfg_bool(c, what, "qk_layernorm", 0, &qk_ln))) return st;
    if (qk_ln)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: qk_layernorm true (%s's LayerNorm over each head of q and k) is not "
                        "supported", what, d->hf_class);
    int post_ln_residual = 0; /* Bloom, Falcon: the residual taken after the norm */
    if ((st = cfg_bool(c, what, "apply_residual_connection_post_layernorm", 0, &post_ln_residual))) return st;
    if (post_ln_residual)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: apply_residual_connection_post_layernorm true (%s's residual taken "
                        "after the norm) is not supported", what, d->hf_class);
    int use_qk_norm = 0;
    if ((st = cfg_bool(c, what, "use_qk_norm", 0, &use_qk_norm))) return st;
    if (use_qk_norm)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: use_qk_norm true (%s's LayerNorm over each head of q and k) is not "
                        "supported", what, d->hf_class);
    if (d->hf_logit_scale_default) { /* Cohere: the logits times logit_scale */
        if ((st = cfg_float(c, what, "logit_scale", d->hf_logit_scale_default, &a->logit_scale))) return st;
    }
    if (cfg_get(c, "clip_qkv"))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: clip_qkv (%s's clamp of q, k and v) is not supported", what, d->hf_class);
    /* head_dim: config.json's when it has one (Qwen3's q is wider than the hidden size), else
     * hidden / heads; MLA's its own (parse_mla: the rotary width until RoPE is read). */
    if (d->flags & LMP_ARCH_MLA) {
        if ((st = parse_mla(c, what, d, a))) return st;
        a->head_dim = a->mla_rope;
    } else if (!cfg_get(c, key_in(c, d, "head_dim"))) {
        if ((st = check_heads(what, a))) return st;
        a->head_dim = a->dim / a->n_heads;
    } else if ((st = cfg_int(c, what, key_in(c, d, "head_dim"), 0, &a->head_dim))) {
        return st;
    } else if (a->head_dim % 2 || a->n_heads % a->n_kv_heads) {
        return lmp_fail(LMP_EINVAL, "%s: inconsistent shape: head_dim %lld (must be even), %lld heads, %lld kv heads",
                        what, (long long)a->head_dim, (long long)a->n_heads, (long long)a->n_kv_heads);
    } else if (a->head_dim != a->dim / a->n_heads && (d->flags & LMP_ARCH_HEAD_DIM) == 0) {
        /* Llama/Mistral/Qwen2 configs carry head_dim too; their exporters and the other families'
         * checkpoints seen so far keep it at hidden / heads. */
        return lmp_fail(LMP_EUNSUPPORTED, "%s: head_dim %lld differs from hidden_size / num_attention_heads = %lld "
                                          "(not supported for %s)", what, (long long)a->head_dim,
                        (long long)(a->dim / a->n_heads), d->hf_class);
    }
    /* The MLP's activation: SiLU, or Gemma's tanh GELU (hidden_activation, which transformers
     * prefers, else hidden_act: every one given must name it); a gate-less MLP's GELU, the erf one
     * ("gelu": GPT-NeoX) or the tanh one ("gelu_new", "gelu_pytorch_tanh": Phi-2, GPT-J). */
    const char *want = a->geglu ? "gelu_pytorch_tanh" : a->plain_mlp ? "gelu_new" : "silu";
    const char *act_default = d->hf_act_default ? d->hf_act_default : want;
    const char *act_keys[2] = {key_in(c, d, "hidden_act"), "hidden_activation"};
    for (int k = 0; k < 2; k++) {
        const char *act;
        if ((st = cfg_string(c, what, act_keys[k], act_default, &act))) return st;
        if (a->plain_mlp && !strcmp(act, "relu")) { /* OPT */
            a->relu = 1;
        } else if (a->plain_mlp && !strcmp(act, "gelu")) {
            a->gelu_erf = 1;
        } else if (a->plain_mlp && !strcmp(act, "gelu_pytorch_tanh")) {
            a->gelu_erf = 0;
        } else if (strcmp(act, want) != 0) {
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s \"%s\" is not supported for %s (only \"%s\"%s)", what,
                            act_keys[k], act, d->hf_class, want,
                            a->plain_mlp ? ", \"gelu_pytorch_tanh\", \"gelu\" or \"relu\"" : "");
        }
    }
    int bidirectional = 0;
    if ((st = cfg_bool(c, what, "use_bidirectional_attention", 0, &bidirectional))) return st;
    if (bidirectional)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: use_bidirectional_attention is not supported (causal attention only)",
                        what);
    if (d->flags & LMP_ARCH_EMBED_SCALE) a->embed_scale = (float)sqrt((double)a->dim);
    /* rope_theta and rope_scaling (transformers 4) or rope_parameters (5), partial_rotary_factor */
    const lmp_rope_hf_names rope_names = {key_in(c, d, "rope_theta"), key_in(c, d, "partial_rotary_factor"),
                                          d->hf_partial_rotary_default, d->hf_rotary_dim ? "rotary_dim" : NULL};
    if ((st = lmp_rope_from_hf(c, what, a->head_dim, a->seq_len, &rope_names, &a->rope, &a->rope_local, &a->seq_len)))
        return st;
    a->rope_theta = a->rope.theta;
    if (d->hf_chatglm && (st = parse_chatglm(c, what, d, a))) return st;
    if (a->mla) {
        int64_t v_head_dim;
        if ((st = cfg_int(c, what, "v_head_dim", -1, &v_head_dim))) return st;
        a->head_dim = v_head_dim; /* o reads heads x v_head_dim */
        if ((st = mla_softmax_scale(c, what, d, a))) return st;
    }
    /* Gemma's attention scale 1/sqrt(query_pre_attn_scalar), as q times sqrt(head_dim / scalar);
     * soft-capping of the scores or the logits is not implemented: refused. */
    double qpas = 0;
    if ((st = cfg_number_or_zero(c, what, "query_pre_attn_scalar", &qpas))) return st;
    if (qpas && qpas != (double)a->head_dim) a->q_scale = (float)sqrt((double)a->head_dim / qpas);
    /* Gemma 2's soft-capping of the attention scores and of the logits */
    double cap;
    if ((st = cfg_number_or_zero(c, what, "attn_logit_softcapping", &cap))) return st;
    a->attn_softcap = (float)cap;
    if ((st = cfg_number_or_zero(c, what, "final_logit_softcapping", &cap))) return st;
    a->final_softcap = (float)cap;
    /* Sliding-window attention.  Which layers slide: transformers 5's layer_types, else
     * Mistral's all, Qwen2's from max_window_layers on when use_sliding_window. */
    const lmp_json *sw = cfg_get(c, "sliding_window");
    int use_sw = d->sliding == LMP_SLIDING_ALWAYS;
    if (d->sliding == LMP_SLIDING_FLAG && (st = cfg_bool(c, what, "use_sliding_window", 0, &use_sw))) return st;
    const lmp_json *types = cfg_get(c, "layer_types");
    if (types) {
        if (types->type != LMP_JSON_ARRAY || (int64_t)types->n != a->n_layers)
            return lmp_fail(LMP_EINVAL, "%s: layer_types must list num_hidden_layers = %lld entries", what,
                            (long long)a->n_layers);
        use_sw = 0;
        for (size_t i = 0; i < types->n; i++) {
            const lmp_json *t = &types->items[i];
            const int sliding = t->type == LMP_JSON_STRING && !strcmp(t->str, "sliding_attention");
            if (!sliding && !(t->type == LMP_JSON_STRING && !strcmp(t->str, "full_attention")))
                return lmp_fail(LMP_EUNSUPPORTED, "%s: layer_types[%zu] is not \"full_attention\" or "
                                "\"sliding_attention\" (not supported)", what, i);
            if (sliding && d->sliding == LMP_SLIDING_NONE)
                return lmp_fail(LMP_EUNSUPPORTED, "%s: layer_types[%zu] is sliding_attention, which %s does not have",
                                what, i, d->hf_class);
            use_sw |= sliding;
            if (i < LMP_MAX_LAYERS) a->sliding_layer[i] = (unsigned char)sliding;
        }
        if (use_sw && !sw)
            return lmp_fail(LMP_EINVAL, "%s: layer_types has sliding_attention layers but no sliding_window", what);
    }
    if (a->rope_local.n_rot && !types)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: a local RoPE base but no layer_types saying which layers slide", what);
    if (a->rope_local.n_rot && a->n_layers > LMP_MAX_LAYERS)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: more than %d layers with local and global RoPE", what, LMP_MAX_LAYERS);
    if (sw && use_sw) {
        if ((st = cfg_int(c, what, "sliding_window", 0, &a->window))) return st;
        if (a->n_layers > LMP_MAX_LAYERS)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: more than %d layers with sliding windows", what, LMP_MAX_LAYERS);
        int64_t from = 0;
        if (!types && d->sliding == LMP_SLIDING_FLAG && (st = cfg_int(c, what, "max_window_layers", 0, &from))) return st;
        for (int64_t l = from; !types && l < a->n_layers; l++) a->sliding_layer[l] = 1;
    }
    const unsigned qkv = 1u << LMP_ROLE_Q | 1u << LMP_ROLE_K | 1u << LMP_ROLE_V;
    const unsigned mlp = 1u << LMP_ROLE_GATE | 1u << LMP_ROLE_UP | 1u << LMP_ROLE_DOWN;
    if (d->bias == LMP_BIAS_QKV) {
        s->bias_roles = qkv;
    } else if (d->bias == LMP_BIAS_ALL) { /* Phi-2 */
        s->bias_roles = qkv | 1u << LMP_ROLE_O | mlp;
    } else if (d->bias == LMP_BIAS_MLP) { /* GPT-J */
        s->bias_roles = mlp;
    } else if (d->bias == LMP_BIAS_ALL_CONFIG || d->bias == LMP_BIAS_ALL_FLAG) { /* StarCoder2's use_bias, Falcon's bias */
        int all_bias;
        if ((st = cfg_bool(c, what, key_in(c, d, "attention_bias"), d->bias == LMP_BIAS_ALL_CONFIG, &all_bias))) return st;
        s->bias_roles = all_bias ? qkv | 1u << LMP_ROLE_O | mlp : 0;
    } else if (d->bias == LMP_BIAS_NEOX) {
        int attn_bias;
        if ((st = cfg_bool(c, what, "attention_bias", 1, &attn_bias))) return st;
        s->bias_roles = mlp | (attn_bias ? qkv | 1u << LMP_ROLE_O : 0);
    } else if (d->bias == LMP_BIAS_QKV_CONFIG) {
        int attn_bias;
        if ((st = cfg_bool(c, what, key_in(c, d, "attention_bias"), 0, &attn_bias))) return st;
        if (attn_bias) s->bias_roles = qkv;
    } else {
        int attn_bias, mlp_bias;
        if ((st = cfg_bool(c, what, "attention_bias", 0, &attn_bias)) ||
            (st = cfg_bool(c, what, "mlp_bias", 0, &mlp_bias)))
            return st;
        if (mlp_bias && d->bias != LMP_BIAS_CONFIG)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: mlp_bias is not part of %s", what, d->hf_class);
        if (attn_bias) s->bias_roles |= qkv | 1u << LMP_ROLE_O;
        if (mlp_bias) s->bias_roles |= 1u << LMP_ROLE_GATE | 1u << LMP_ROLE_UP | 1u << LMP_ROLE_DOWN;
    }
    int qkv_bias = 1; /* Qwen2-MoE: transformers 5's qkv_bias (true, as its q, k, v always had) */
    if (d->bias == LMP_BIAS_QKV && (st = cfg_bool(c, what, "qkv_bias", 1, &qkv_bias))) return st;
    if (!qkv_bias) s->bias_roles &= ~qkv;
    if (d->moe && (s->bias_roles >> LMP_ROLE_GATE & 1u))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: mlp_bias on the experts of %s is not supported", what, d->hf_class);
    if (a->mla && s->bias_roles)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: attention_bias true on %s's latent attention is not supported", what,
                        d->hf_class);
    if (d->moe && d->moe->hf_deepseek) return parse_deepseek_moe(c, what, d, a);
    if (d->moe && d->moe->hf_gpt_oss) return parse_gpt_oss(c, what, s, a, types != NULL && sw != NULL);
    if (d->moe) return parse_moe(c, what, d, a);
    return 0;
}

static int parse_gpt2(const lmp_json *c, const char *what, lmp_arch *a)
{
    a->family = LMP_FAMILY_GPT2;
    int64_t ctx = 1024;
    int st;
    if ((st = cfg_int(c, what, "n_ctx", ctx, &ctx)) ||
        (st = cfg_int(c, what, "n_embd", -1, &a->dim)) ||
        (st = cfg_int(c, what, "n_layer", -1, &a->n_layers)) ||
        (st = cfg_int(c, what, "n_head", -1, &a->n_heads)) ||
        (st = cfg_int(c, what, "vocab_size", -1, &a->vocab)) ||
        (st = cfg_int(c, what, "n_positions", ctx, &a->seq_len)) ||
        (st = cfg_int(c, what, "n_inner", 4 * a->dim, &a->hidden)) ||
        (st = cfg_float(c, what, "layer_norm_epsilon", 1e-5, &a->norm_eps)))
        return st;
    a->n_kv_heads = a->n_heads;
    if ((st = check_heads(what, a))) return st;
    a->head_dim = a->dim / a->n_heads;
    a->rope_theta = 0; /* learned positions */
    const char *act;
    if ((st = cfg_string(c, what, "activation_function", "gelu_new", &act))) return st;
    if (strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: activation_function \"%s\" is not supported "
                                          "(only the tanh GELU: \"gelu_new\" or \"gelu_pytorch_tanh\")", what, act);
    int scale, by_layer;
    if ((st = cfg_bool(c, what, "scale_attn_weights", 1, &scale)) ||
        (st = cfg_bool(c, what, "scale_attn_by_inverse_layer_idx", 0, &by_layer)))
        return st;
    if (!scale || by_layer)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is not supported (attention is scaled by 1/sqrt(head_dim) only)",
                        what, !scale ? "scale_attn_weights false" : "scale_attn_by_inverse_layer_idx true");
    return 0;
}

/* Reads config.json: the architecture and the shapes. */
static int parse_config(const char *what, hf_state *s, lmp_arch *a, int *tied)
{
    char *text;
    size_t len;
    lmp_json *c = NULL;
    int st = lmp_input_read(what, LMP_INPUT_JSON, &text, &len);
    if (st) {
        char why[512];
        snprintf(why, sizeof why, "%s", lmp_last_error());
        return lmp_fail(st, "%s (a Hugging Face checkpoint needs config.json beside its safetensors)", why);
    }
    st = lmp_json_parse(text, len, what, &c);
    free(text);
    if (st) return st;
    const lmp_json *archs = lmp_json_get(c, "architectures");
    if (!archs || archs->type != LMP_JSON_ARRAY || archs->n < 1 || archs->items[0].type != LMP_JSON_STRING) {
        st = lmp_fail(LMP_EINVAL, "%s: no \"architectures\" list naming the model class", what);
        goto done;
    }
    const char *name = archs->items[0].str;
    s->desc = lmp_arch_by_hf_class(name);
    if (!s->desc && lmp_arch_refused_hf(name)) {
        st = lmp_fail(LMP_EUNSUPPORTED, "%s: %s is not supported: %s", what, name, lmp_arch_refused_hf(name));
        goto done;
    }
    if (!s->desc) {
        char list[512];
        st = lmp_fail(LMP_EUNSUPPORTED, "%s: unknown architecture '%s' (supported: %s)", what, name,
                      lmp_arch_list(list, sizeof list, 0));
        goto done;
    }
    a->desc = s->desc;
    const int gpt2 = s->desc->family == LMP_FAMILY_GPT2;
    st = check_config_keys(c, what, name, gpt2 ? NULL : s->desc, gpt2 ? gpt2_keys : llama_keys,
                           s->desc->hf_extra_keys);
    if (!st) st = gpt2 ? parse_gpt2(c, what, a) : parse_llama(c, what, s, a);
    if (!st) st = cfg_bool(c, what, key_in(c, s->desc, "tie_word_embeddings"), s->desc->hf_tied_default, tied);
    const lmp_json *qc = st ? NULL : cfg_get(c, "quantization_config");
    if (qc && gpt2)
        st = lmp_fail(LMP_EUNSUPPORTED, "%s: quantization_config is read for the Llama family only, not %s", what,
                      s->desc->hf_class);
    else if (qc)
        st = lmp_ct_parse(qc, what, &s->ct);
done:
    lmp_json_free(c);
    return st;
}

/* config.json in the folder, or beside the .safetensors file. */
static char *config_path(const char *path)
{
    struct stat sb;
    size_t n = strlen(path);
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        const char *slash = strrchr(path, '/');
        n = slash ? (size_t)(slash - path) + 1 : 0;
    }
    while (n > 1 && path[n - 1] == '/') n--;
    char *out = malloc(n + sizeof "/config.json");
    if (!out) return NULL;
    memcpy(out, path, n);
    strcpy(out + n, n ? "/config.json" : "config.json");
    return out;
}

/* ---- the model --------------------------------------------------------------------------- */
/* Counts a block linear's parameters under its storage kind, for the format name. */
typedef struct kind_tally {
    char names[16][48];
    const char *ptrs[16];
    int64_t params[16];
    int n;
} kind_tally;

static void tally(kind_tally *k, const char *kind, int64_t params)
{
    int i = 0;
    while (i < k->n && strcmp(k->names[i], kind) != 0) i++;
    if (i == k->n && k->n < 16) {
        snprintf(k->names[i], sizeof k->names[i], "%s", kind);
        k->ptrs[i] = k->names[i];
        k->params[i] = 0;
        k->n++;
    }
    if (i < k->n) k->params[i] += params;
}

/* Checks every block tensor (presence, shape, dtype) and refuses biases the config does not
 * announce or layers beyond n_layers, so a mismatch shows up now rather than mid-run.  A
 * compressed-tensors checkpoint's format name lists its weights' kinds ("compressed-tensors
 * int4-g128/BF16 mix"). */
/* Whether `name` is a tensor the Llama-family loader reads (at the top, or of a block). */
static int read_by_llama(const hf_state *s, const lmp_arch *a, const char *name)
{
    const lmp_arch_desc *d = s->desc;
    char top[160];
    snprintf(top, sizeof top, "%s.weight", d->hf_embed ? d->hf_embed : "model.embed_tokens");
    if (!strcmp(name, top)) return 1;
    snprintf(top, sizeof top, "%s.weight", d->hf_head ? d->hf_head : "lm_head");
    if (!strcmp(name, top)) return 1;
    snprintf(top, sizeof top, "%s.bias", d->hf_head ? d->hf_head : "lm_head");
    if ((d->flags & LMP_ARCH_HEAD_BIAS) && !strcmp(name, top)) return 1;
    for (int k = 0; (d->flags & LMP_ARCH_EMBED_NORM) && k < 2; k++) { /* Bloom's embedding LayerNorm */
        snprintf(top, sizeof top, "%s.%s", d->hf_embed_norm, k ? "bias" : "weight");
        if (!strcmp(name, top)) return 1;
    }
    snprintf(top, sizeof top, "%s.weight", d->hf_pos_embed ? d->hf_pos_embed : "");
    if ((d->flags & LMP_ARCH_LEARNED_POS) && !strcmp(name, top)) return 1; /* OPT's positions */
    if (d->hf_derived_buffer && !strcmp(name, d->hf_derived_buffer)) return 1;
    const char *fn = d->hf_final_norm ? d->hf_final_norm : "model.norm";
    const size_t fl = strlen(fn);
    if (!(d->flags & LMP_ARCH_NORM_NO_PARAMS) && !strncmp(name, fn, fl) &&
        (!strcmp(name + fl, ".weight") || (a->layer_norm && !strcmp(name + fl, ".bias"))))
        return 1;
    const char *prefix = lmp_hf_arch_block_prefix(a);
    const size_t pl = strlen(prefix);
    long long b;
    int at = 0;
    if (strncmp(name, prefix, pl) || name[pl] != '.' || sscanf(name + pl, ".%lld.%n", &b, &at) != 1 || at == 0 ||
        b < 0 || b >= a->n_layers)
        return 0;
    at += (int)pl;
    /* rotary_emb.inv_freq: a buffer older checkpoints saved, derived from the config (ChatGLM's one
     * for the model: hf_derived_buffer, above) */
    if (!strcmp(name + at, "self_attn.rotary_emb.inv_freq") || !strcmp(name + at, "attention.rotary_emb.inv_freq"))
        return 1;
    /* the causal-mask buffers older GPT-NeoX (Pythia) and GPT-J checkpoints saved, as GPT-2's */
    static const char *const mask_buffers[] = {"attention.bias", "attention.masked_bias", "attn.bias", "attn.masked_bias"};
    for (size_t i = 0; d->hf_block_prefix && i < sizeof mask_buffers / sizeof *mask_buffers; i++)
        if (!strcmp(name + at, mask_buffers[i])) return 1;
    lmp_block probe;
    if (lmp_block_init(&probe, (int)b, a)) return 1; /* out of memory: not this check's to report */
    char want[320], module[256];
    int found = 0;
    for (int i = 0; i < probe.n_norms && !found && !(d->flags & LMP_ARCH_NORM_NO_PARAMS); i++) {
        norm_tensor(a, &probe.norms[i], i, want, sizeof want);
        found = !strcmp(name, want);
        snprintf(want, sizeof want, "%s.bias", probe.norms[i].name);
        found = found || (a->layer_norm && !(d->flags & LMP_ARCH_NORM_NO_BIAS) && !strcmp(name, want));
    }
    if (!found && s->fused_experts && probe.n_experts > 0) { /* the layer's two fused expert tensors */
        const int gpt_oss = s->desc->moe->hf_gpt_oss; /* and their biases */
        for (int k = 0; k < 2 + 2 * gpt_oss && !found; k++) {
            snprintf(want, sizeof want, "model.layers.%lld.%s.%s%s", b, s->desc->moe->hf_experts,
                     k % 2 ? "down_proj" : "gate_up_proj", k >= 2 ? "_bias" : "");
            found = !strcmp(name, want);
        }
    }
    for (int i = 0; i < probe.n_linears && !found; i++) {
        int64_t r0, rows;
        if (s->fused_experts && probe.linears[i].expert_kind == LMP_EXPERT_ROUTED) continue;
        linear_source(s, a, b, &probe.linears[i], module, sizeof module, &r0, &rows);
        snprintf(want, sizeof want, "%s.weight", module);
        found = !strcmp(name, want);
        snprintf(want, sizeof want, "%s.bias", module);
        found = found || !strcmp(name, want);
        snprintf(want, sizeof want, "%s.e_score_correction_bias", module); /* DeepSeek-V3's selection bias */
        found = found || (a->route == LMP_ROUTE_SIGMOID_BIAS && probe.linears[i].role == LMP_ROLE_ROUTER &&
                          !strcmp(name, want));
    }
    lmp_block_free_tables(&probe);
    return found;
}

/* Every tensor of a dense checkpoint must be one the loader reads: an unknown one (a norm of a
 * newer variant of the family, an expert) would otherwise be dropped without a word.  (A
 * compressed-tensors checkpoint's modules hold other tensors; its reader checks them.) */
static int check_no_unread_tensors(const hf_state *s, const lmp_arch *a)
{
    for (size_t i = 0; !s->ct && i < s->st->n_tensors; i++) {
        const lmp_st_tensor *t = &s->st->tensors[i];
        if (!read_by_llama(s, a, t->name))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: tensor %s is not read by lmpress for %s (the checkpoint has a part "
                            "this architecture lacks), so it is refused rather than run without it", t->file, t->name,
                            s->desc->hf_class);
    }
    return 0;
}

static int validate_llama(lmp_model *m, const hf_state *s, const lmp_arch *a)
{
    char name[300];
    int st = 0;
    kind_tally kinds = {.n = 0};
    for (int64_t b = 0; b < a->n_layers && !st; b++) {
        lmp_block probe;
        const lmp_st_tensor *t;
        if ((st = lmp_block_init(&probe, (int)b, a))) return st;
        for (int i = 0; i < probe.n_linears && !st; i++) {
            const lmp_linear *l = &probe.linears[i];
            lmp_ct_weight q;
            char module[256];
            int64_t r0, rows;
            if (s->fused_experts && l->expert_kind == LMP_EXPERT_ROUTED) {
                const lmp_st_tensor *t;
                st = fused_expert(s, b, l, name, sizeof name, &t, &r0);
                if (!st && t->shape[0] != a->n_experts)
                    st = lmp_fail(LMP_EINVAL, "%s: %s holds %lld experts, config.json says %lld", t->file, name,
                                  (long long)t->shape[0], (long long)a->n_experts);
                if (!st) tally(&kinds, lmp_st_dtype_name(t->dtype), l->out * l->in);
                if (!st && s->desc->moe->hf_gpt_oss) { /* gpt-oss: <name>_bias [E, cols] */
                    const lmp_st_tensor *bt;
                    char bname[420];
                    snprintf(bname, sizeof bname, "%s_bias", name);
                    st = find(s, bname, t->shape[0], t->shape[2], &bt);
                }
                continue;
            }
            linear_source(s, a, b, l, module, sizeof module, &r0, &rows);
            st = weight_find(s, module, "Linear", rows, l->in, &q);
            if (!st) {
                snprintf(name, sizeof name, "%s.weight", module);
                tally(&kinds, q.quantized ? q.kind : lmp_st_dtype_name(lmp_st_find(s->st, name)->dtype), l->out * l->in);
            }
            if (!st && a->route == LMP_ROUTE_SIGMOID_BIAS && l->role == LMP_ROLE_ROUTER) {
                snprintf(name, sizeof name, "%s.e_score_correction_bias", module);
                st = find(s, name, a->n_experts, 0, &t);
            }
            snprintf(name, sizeof name, "%s.bias", module);
            if (!st && (s->bias_roles >> l->role & 1u)) st = find(s, name, rows, 0, &t);
            else if (!st && lmp_st_find(s->st, name))
                st = lmp_fail(LMP_EUNSUPPORTED, "%s: unexpected tensor %s (%s with this config.json has no bias there)",
                              lmp_st_find(s->st, name)->file, name, s->desc->hf_class);
        }
        for (int i = 0; i < probe.n_norms && !st && !(s->desc->flags & LMP_ARCH_NORM_NO_PARAMS); i++) {
            norm_tensor(a, &probe.norms[i], i, name, sizeof name);
            st = find(s, name, probe.norms[i].dim, 0, &t);
            snprintf(name, sizeof name, "%s.bias", probe.norms[i].name);
            if (!st && a->layer_norm && !(s->desc->flags & LMP_ARCH_NORM_NO_BIAS) && /* (Cohere's: none) */
                i != lmp_norm_index(a, LMP_NORM_Q) && i != lmp_norm_index(a, LMP_NORM_K))
                st = find(s, name, probe.norms[i].dim, 0, &t);
        }
        lmp_block_free_tables(&probe);
    }
    /* a layer past n_layers: its attention's first linear (every family has one) */
    lmp_linear first = {.role = LMP_ROLE_Q};
    char module[256];
    int64_t r0, rows;
    first.name = name;
    snprintf(name, sizeof name, "%s.%lld.%s", lmp_hf_arch_block_prefix(a), (long long)a->n_layers,
             lmp_hf_arch_linear_leaf(a, LMP_ROLE_Q));
    linear_source(s, a, a->n_layers, &first, module, sizeof module, &r0, &rows);
    snprintf(name, sizeof name, "%s.weight", module);
    char norm0[300];
    snprintf(norm0, sizeof norm0, "%s.%lld.%s.weight", lmp_hf_arch_block_prefix(a), (long long)a->n_layers,
             lmp_hf_norm_leaf(a, LMP_NORM_ATTN) ? lmp_hf_norm_leaf(a, LMP_NORM_ATTN) : "input_layernorm");
    if (!st && !lmp_st_find(s->st, name) && lmp_st_find(s->st, norm0)) snprintf(name, sizeof name, "%s", norm0);
    if (!st && lmp_st_find(s->st, name))
        st = lmp_fail(LMP_EINVAL, "%s: has %s but config.json says num_hidden_layers = %lld", s->where, name,
                      (long long)a->n_layers);
    if (!st) st = check_no_unread_tensors(s, a);
    if (!st && s->ct) {
        lmp_model_format_types(m->format_buf, sizeof m->format_buf, "compressed-tensors", kinds.n, kinds.ptrs,
                               kinds.params);
        m->format = m->format_buf;
    }
    return st;
}

static int validate_gpt2(const hf_state *s, const lmp_arch *a)
{
    const int64_t d = a->dim, f = a->hidden;
    const struct { const char *leaf; int64_t d0, d1; } t[] = {
        {"ln_1.weight", d, 0},        {"ln_1.bias", d, 0},       {"attn.c_attn.weight", d, 3 * d},
        {"attn.c_attn.bias", 3 * d, 0}, {"attn.c_proj.weight", d, d}, {"attn.c_proj.bias", d, 0},
        {"ln_2.weight", d, 0},        {"ln_2.bias", d, 0},       {"mlp.c_fc.weight", d, f},
        {"mlp.c_fc.bias", f, 0},      {"mlp.c_proj.weight", f, d}, {"mlp.c_proj.bias", d, 0}};
    char name[300];
    const lmp_st_tensor *found;
    int st = 0;
    for (int64_t b = 0; b < a->n_layers && !st; b++)
        for (size_t i = 0; i < sizeof t / sizeof *t && !st; i++)
            st = find(s, gpt2_name(s, b, t[i].leaf, name, sizeof name), t[i].d0, t[i].d1, &found);
    if (!st && lmp_st_find(s->st, gpt2_name(s, a->n_layers, "ln_1.weight", name, sizeof name)))
        st = lmp_fail(LMP_EINVAL, "%s: has %s but config.json says n_layer = %lld", s->where, name,
                      (long long)a->n_layers);
    return st;
}

/* Loads f32 copies of the tensors outside the blocks. */
static int load_globals(lmp_model *m, hf_state *s, int tied)
{
    const lmp_arch *a = &m->arch;
    const int gpt2 = a->family == LMP_FAMILY_GPT2;
    char name[64];
    float *p;
    int st;
    if (gpt2) {
        /* GPT2LMHeadModel.state_dict() prefixes "transformer."; the published files do not. */
        s->prefix = lmp_st_find(s->st, "transformer.wte.weight") ? "transformer." : "";
        snprintf(name, sizeof name, "%swte.weight", s->prefix);
    }
    const lmp_arch_desc *d = s->desc;
    const char *embed = d->hf_embed ? d->hf_embed : "model.embed_tokens";
    const char *final_norm = d->hf_final_norm ? d->hf_final_norm : "model.norm";
    const char *head = d->hf_head ? d->hf_head : "lm_head";
    char full[160];
    lmp_aspec act = {0};
    if ((st = gpt2 ? load(s, name, a->vocab, a->dim, &p)
                   : load_weight(s, embed, "Embedding", a->vocab, a->dim, &p, &act)))
        return st;
    m->tok_emb = lmp_model_own(m, p);
    if (act.mode != LMP_ACT_NONE)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: quantization_config quantizes the input of model.embed_tokens "
                        "(token ids: not simulated)", m->path);
    if (!gpt2 && (d->flags & LMP_ARCH_EMBED_NORM)) { /* Bloom: word_embeddings_layernorm */
        snprintf(full, sizeof full, "%s.weight", d->hf_embed_norm);
        if ((st = load(s, full, a->dim, 0, &p))) return st;
        m->embed_norm_w = lmp_model_own(m, p);
        snprintf(full, sizeof full, "%s.bias", d->hf_embed_norm);
        if ((st = load(s, full, a->dim, 0, &p))) return st;
        m->embed_norm_b = lmp_model_own(m, p);
    }
    if (!gpt2 && (d->flags & LMP_ARCH_LEARNED_POS)) { /* OPT: position t is row t + offset */
        snprintf(full, sizeof full, "%s.weight", d->hf_pos_embed);
        if ((st = load(s, full, a->seq_len + d->hf_pos_offset, a->dim, &p))) return st;
        m->pos_emb = (float *)lmp_model_own(m, p) + d->hf_pos_offset * a->dim;
    }
    if (gpt2) {
        snprintf(name, sizeof name, "%swpe.weight", s->prefix);
        if ((st = load(s, name, a->seq_len, a->dim, &p))) return st;
        m->pos_emb = lmp_model_own(m, p);
        snprintf(name, sizeof name, "%sln_f.weight", s->prefix);
        if ((st = load(s, name, a->dim, 0, &p))) return st;
        m->final_norm_w = lmp_model_own(m, p);
        snprintf(name, sizeof name, "%sln_f.bias", s->prefix);
        if ((st = load(s, name, a->dim, 0, &p))) return st;
        m->final_norm_b = lmp_model_own(m, p);
    } else if (d->flags & LMP_ARCH_NORM_NO_PARAMS) { /* OLMo: weight 1, bias 0 */
        float *w, *b;
        if ((st = lmp_norm_identity(a->dim, &w, &b))) return st;
        m->final_norm_w = lmp_model_own(m, w);
        m->final_norm_b = lmp_model_own(m, b);
    } else {
        snprintf(full, sizeof full, "%s.weight", final_norm);
        if ((st = load(s, full, a->dim, 0, &p))) return st;
        if (s->desc->flags & LMP_ARCH_NORM_PLUS_ONE) /* Gemma: 1 + w */
            for (int64_t j = 0; j < a->dim; j++) p[j] += 1.0f;
        m->final_norm_w = lmp_model_own(m, p);
        snprintf(full, sizeof full, "%s.bias", final_norm);
        if (a->layer_norm && (d->flags & LMP_ARCH_NORM_NO_BIAS)) { /* Cohere: no bias, 0 */
            if (!(p = calloc((size_t)a->dim, sizeof *p))) return lmp_fail(LMP_ENOMEM, "out of memory");
        } else if (a->layer_norm && (st = load(s, full, a->dim, 0, &p))) {
            return st;
        }
        if (a->layer_norm) m->final_norm_b = lmp_model_own(m, p);
    }
    /* Tied: Hugging Face ties the head to the embeddings and ignores any stored lm_head. */
    char head_w[160], head_packed[160];
    snprintf(head_w, sizeof head_w, "%s.weight", head);
    snprintf(head_packed, sizeof head_packed, "%s.weight_packed", head);
    if (tied || (!lmp_st_find(s->st, head_w) && !lmp_st_find(s->st, head_packed))) {
        m->lm_head = m->tok_emb;
        if (d->flags & LMP_ARCH_HEAD_BIAS)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: a tied head of %s (its head has a bias of its own) is not supported",
                            m->path, d->hf_class);
    } else {
        if ((st = gpt2 ? load(s, "lm_head.weight", a->vocab, a->dim, &p)
                       : load_weight(s, head, "Linear", a->vocab, a->dim, &p, &act)))
            return st;
        m->lm_head = lmp_model_own(m, p);
        snprintf(full, sizeof full, "%s.bias", head);
        if (!gpt2 && (d->flags & LMP_ARCH_HEAD_BIAS)) { /* Phi-2, GPT-J */
            if ((st = load(s, full, a->vocab, 0, &p))) return st;
            m->lm_head_b = lmp_model_own(m, p);
        }
        if (act.mode != LMP_ACT_NONE)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: quantization_config quantizes the input of lm_head (not simulated: "
                            "add lm_head to its ignore list)", m->path);
    }
    /* transformers 5's fused experts, in the first sparse layer (then in every one) */
    for (int64_t b = 0; !gpt2 && a->n_experts > 0 && b < a->n_layers && !s->fused_experts; b++) {
        if (!lmp_arch_moe_layer(a, b)) continue;
        char fused[300];
        snprintf(fused, sizeof fused, "model.layers.%lld.%s.gate_up_proj", (long long)b, s->desc->moe->hf_experts);
        s->fused_experts = lmp_st_find(s->st, fused) != NULL;
        if (s->fused_experts && s->ct)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: fused experts (%s) in a compressed-tensors checkpoint are not read",
                            s->where, fused);
        break;
    }
    st = gpt2 ? validate_gpt2(s, a) : validate_llama(m, s, a);
    /* a kv_cache_scheme's scales, every layer's, checked at load (the blocks read them again) */
    for (int64_t b = 0; !st && s->ct && b < a->n_layers; b++) {
        char name[300];
        lmp_block shape;
        lmp_kvspec kv;
        if (gpt2) {
            st = lmp_ct_kv(s->ct, s->st, s->where, gpt2_name(s, b, "attn", name, sizeof name), a->n_kv_heads, &kv);
        } else if (!(st = lmp_block_init(&shape, (int)b, a))) {
            attention_module(&shape, name, sizeof name);
            st = lmp_ct_kv(s->ct, s->st, s->where, name, a->n_kv_heads, &kv);
            lmp_block_free_tables(&shape);
        }
    }
    return st;
}

int lmp_model_open_hf(lmp_model *m)
{
    hf_state *s = calloc(1, sizeof *s);
    char *cfg = config_path(m->path);
    if (!s || !cfg) {
        free(s);
        free(cfg);
        return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    m->src_data = s;
    m->src = &llama_source; /* for close() if anything below fails; set properly below */
    m->format = "safetensors";
    int tied = 0;
    int st = parse_config(cfg, s, &m->arch, &tied);
    free(cfg);
    if (st) return st;
    m->src = m->arch.family == LMP_FAMILY_GPT2 ? &gpt2_source : &llama_source;
    if ((st = lmp_st_open(m->path, &s->st))) return st;
    const lmp_arch_desc *d = s->desc;
    if (d->hf_base_prefix && d->hf_embed) { /* a file saved from the base model (Bloom's "h.0...") */
        const size_t pl = strlen(d->hf_base_prefix);
        char full[160];
        snprintf(full, sizeof full, "%s.weight", d->hf_embed);
        if (!lmp_st_find(s->st, full) && !strncmp(full, d->hf_base_prefix, pl) && lmp_st_find(s->st, full + pl) &&
            (st = lmp_st_add_prefix(s->st, d->hf_base_prefix)))
            return st;
    }
    /* "Missing tensor" messages name the one file, or the index of a sharded checkpoint. */
    const char *where = s->st->path;
    char *idx = NULL;
    struct stat sb;
    if (s->st->n_shards == 1) {
        where = s->st->shards[0].path;
    } else if (stat(m->path, &sb) == 0 && S_ISDIR(sb.st_mode) &&
               (idx = malloc(strlen(m->path) + sizeof "/model.safetensors.index.json"))) {
        sprintf(idx, "%s/model.safetensors.index.json", m->path);
        where = idx;
    }
    s->where = idx ? idx : strdup(where);
    if (!s->where) return lmp_fail(LMP_ENOMEM, "out of memory");
    return load_globals(m, s, tied);
}
