/* model_gguf.c — models from llama.cpp GGUF files, for the architectures core/arch has a
 * descriptor for (llama, qwen2, qwen3, gemma, gemma2, gemma3, phi3, chatglm, glm4, ernie4_5, gpt2, and
 * issue 40's gptneox, phi2, stablelm, olmo, starcoder2: LayerNorm biases (attn_norm.bias,
 * ffn_norm.bias, output_norm.bias), a head bias (output.bias), use_parallel_residual (gptneox; a
 * stablelm block without ffn_norm is parallel, as llama.cpp builds it), olmo's norms without
 * tensors), bloom (token_embd_norm, ALiBi) and falcon (tensor_data_layout "jploski"; attn_norm_2
 * for Falcon-40B's ln_attn, its attn_norm then being ln_mlp), the mixtures of experts (llama with
 * expert_count as Mixtral, qwen2moe, qwen3moe, gpt-oss) and deepseek2 (DeepSeek-V2/V3: MLA with
 * attn_k_b / attn_v_b recombined into kv_b, read_deepseek2 / read_mla / read_mla_rope).
 *
 * Metadata: general.architecture, and under its prefix block_count, embedding_length,
 * feed_forward_length, attention.head_count(_kv), attention.key_length (the head size),
 * context_length, rope.freq_base, rope.dimension_count, rope.scaling.* (none, linear, yarn),
 * attention.layer_norm_rms_epsilon, attention.sliding_window (the sliding layers' window),
 * attention.sliding_window_pattern (Gemma 2/3: which layers slide), soft-caps.  Any other key of
 * the architecture, or of a namespace but general., tokenizer., quantize. and lmpress., is
 * refused by name.  Tensors (ne[0] fastest, so a PyTorch [out, in] weight has ne = {in, out}):
 * token_embd, output_norm, output (absent: tied to token_embd), rope_freqs (Llama 3's per-pair
 * divisors), and per block N blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
 * ffn_gate, ffn_up, ffn_down}, attn_q_norm / attn_k_norm (Qwen3), and a linear's blk.N.<name>.bias
 * where the file has one; any other tensor is refused by name.
 * llama.cpp's converter permutes the rows of attn_q / attn_k for RoPE on adjacent pairs for
 * "llama" only; the other architectures keep rotate-half order and are permuted here, as a
 * Hugging Face folder is.
 * Weights stay in the mapping in their GGUF type; a block is dequantized when it is copied.
 * The embeddings are dequantized once (the head needs them in f32 anyway when tied). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "formats/gguf.h"
#include "model/tensor_names.h"
#include "model/model.h"

/* The block's names are model/tensor_names.h's (shared with the writer and the importance-matrix
 * reader). */
static const char *gguf_linear(const lmp_arch *a, lmp_role role) { return lmp_gguf_linear_stem(a->family, role); }
static const char *gguf_norm(const lmp_arch *a, int i)
{
    const char *n = lmp_gguf_norm_name(a, i);
    return n ? n : "?";
}

/* The tensor `name`, which must be 2-D [rows, cols] (ne = {cols, rows}) or 1-D [cols] (rows 0),
 * of a type lmpress can dequantize. */
static int find_tensor(const lmp_model *m, const char *name, int64_t rows, int64_t cols,
                       const lmp_gguf_tensor **out)
{
    const lmp_gguf *g = m->src_data;
    const lmp_gguf_tensor *t = lmp_gguf_find_tensor(g, name);
    if (!t) return lmp_fail(LMP_EINVAL, "%s: tensor '%s' is missing", m->path, name);
    int ok = rows ? t->n_dims == 2 && t->ne[0] == cols && t->ne[1] == rows
                  : t->n_dims == 1 && t->ne[0] == cols;
    if (!ok)
        return lmp_fail(LMP_EINVAL, "%s: tensor '%s' has shape ne=[%lld, %lld] (%d dims), expected ne=[%lld, %lld]",
                        m->path, name, (long long)t->ne[0], (long long)(t->n_dims > 1 ? t->ne[1] : 1),
                        t->n_dims, (long long)cols, (long long)(rows ? rows : 1));
    int st = lmp_gguf_check_dequantize(t); /* "tensor 'X': dequantizing T is not supported" */
    if (st) return lmp_fail_prefix(st, "%s", m->path);
    *out = t;
    return 0;
}

/* A new f32 array with the tensor's values (checked to be [rows, cols]). */
static int load_f32(const lmp_model *m, const char *name, int64_t rows, int64_t cols, float **out)
{
    const lmp_gguf_tensor *t = NULL;
    int st = find_tensor(m, name, rows, cols, &t);
    if (st) return st;
    int64_t n = (rows ? rows : 1) * cols;
    *out = malloc((size_t)n * sizeof **out);
    if (!*out) return lmp_fail(LMP_ENOMEM, "%s: out of memory for '%s'", m->path, name);
    if ((st = lmp_gguf_dequantize(t, 0, n, *out))) {
        free(*out);
        *out = NULL;
        return lmp_fail_prefix(st, "%s", m->path); /* the message names the tensor */
    }
    return 0;
}

/* The tensor stem holding linear l and where: rows [r0, r0 + l->out) of a tensor of `rows` rows
 * (gate and up in one ffn_up of twice the width: GLM, Phi-3; q, k, v in one attn_qkv: Phi-3,
 * GPT-2). */
static const char *linear_source(const lmp_arch *a, const lmp_linear *l, int64_t *r0, int64_t *rows)
{
    /* a sparse layer's: llama.cpp's names, the routed experts' in one 3-D tensor each */
    const char *moe = lmp_gguf_moe_stem(l);
    *r0 = 0;
    *rows = l->out;
    if (moe) return moe;
    const int fused = lmp_fused_rows(a, l, a->desc->gguf_fused_qkv, a->desc->gguf_fused_gate_up, r0, rows);
    return fused == LMP_FUSED_NONE ? gguf_linear(a, l->role) : lmp_gguf_fused_stem(fused);
}

/* Routed expert l's [out, in] slice of the 3-D tensor `name` (ne = {in, out, n_experts}). */
static int find_experts(const lmp_model *m, const char *name, const lmp_linear *l, const lmp_gguf_tensor **out)
{
    const lmp_gguf_tensor *t = lmp_gguf_find_tensor(m->src_data, name);
    if (!t) return lmp_fail(LMP_EINVAL, "%s: tensor '%s' is missing", m->path, name);
    if (t->n_dims != 3 || t->ne[0] != l->in || t->ne[1] != l->out || t->ne[2] != m->arch.n_experts)
        return lmp_fail(LMP_EINVAL, "%s: tensor '%s' has shape ne=[%lld, %lld, %lld] (%d dims), expected ne=[%lld, %lld, "
                        "%lld] (the experts' weights, one after the other)", m->path, name, (long long)t->ne[0],
                        (long long)(t->n_dims > 1 ? t->ne[1] : 1), (long long)(t->n_dims > 2 ? t->ne[2] : 1), t->n_dims,
                        (long long)l->in, (long long)l->out, (long long)m->arch.n_experts);
    int st = lmp_gguf_check_dequantize(t);
    if (st) return lmp_fail_prefix(st, "%s", m->path);
    *out = t;
    return 0;
}

/* The experts' biases of the 3-D tensor `name`.weight: `name`.bias, ne = {out, n_experts}, when the
 * file has it (gpt-oss); NULL t when not. */
static int find_expert_bias(const lmp_model *m, const char *stem_name, const lmp_linear *l, const lmp_gguf_tensor **t)
{
    *t = lmp_gguf_find_tensor(m->src_data, stem_name);
    if (!*t) return 0;
    if ((*t)->n_dims != 2 || (*t)->ne[0] != l->out || (*t)->ne[1] != m->arch.n_experts)
        return lmp_fail(LMP_EINVAL, "%s: tensor '%s' is not ne=[%lld, %lld] (the experts' biases)", m->path, stem_name,
                        (long long)l->out, (long long)m->arch.n_experts);
    int st = lmp_gguf_check_dequantize(*t);
    return st ? lmp_fail_prefix(st, "%s", m->path) : 0;
}

static int load_expert(const lmp_model *m, const char *name, const char *bias_name, lmp_linear *l)
{
    const lmp_gguf_tensor *t, *bt;
    int st = find_experts(m, name, l, &t);
    if (!st) st = find_expert_bias(m, bias_name, l, &bt);
    if (st) return st;
    const int64_t n = l->out * l->in;
    if (!(l->w = malloc((size_t)n * sizeof *l->w))) return lmp_fail(LMP_ENOMEM, "%s: out of memory for '%s'", m->path, name);
    if ((st = lmp_gguf_dequantize(t, (int64_t)l->expert * n, n, l->w))) return lmp_fail_prefix(st, "%s", m->path);
    if (!bt) return 0;
    if (!(l->b = malloc((size_t)l->out * sizeof *l->b))) return lmp_fail(LMP_ENOMEM, "%s: out of memory", m->path);
    if ((st = lmp_gguf_dequantize(bt, (int64_t)l->expert * l->out, l->out, l->b))) return lmp_fail_prefix(st, "%s", m->path);
    return 0;
}

/* MLA's kv_b [H (nope + v), kv_lora] as llama.cpp's converter splits it for its absorbed
 * attention: blk.N.attn_k_b, ne = {nope, kv_lora, H} (each head's k rows, transposed), and
 * blk.N.attn_v_b, ne = {kv_lora, v, H}; found, checked and dequantizable.  (A file with one
 * attn_kv_b, as older converters wrote, is read as any linear.) */
static int find_kv_b_split(const lmp_model *m, int64_t b, const lmp_gguf_tensor **kt, const lmp_gguf_tensor **vt)
{
    const lmp_arch *a = &m->arch;
    char kn[64], vn[64];
    snprintf(kn, sizeof kn, "blk.%lld.attn_k_b.weight", (long long)b);
    snprintf(vn, sizeof vn, "blk.%lld.attn_v_b.weight", (long long)b);
    const int64_t want[2][3] = {{a->mla_nope, a->mla_kv_lora, a->n_heads}, {a->mla_kv_lora, a->head_dim, a->n_heads}};
    const lmp_gguf_tensor *t[2] = {lmp_gguf_find_tensor(m->src_data, kn), lmp_gguf_find_tensor(m->src_data, vn)};
    for (int i = 0; i < 2; i++) {
        const char *name = i ? vn : kn;
        if (!t[i]) return lmp_fail(LMP_EINVAL, "%s: tensor '%s' is missing (MLA's kv_b, split by llama.cpp's converter)",
                                   m->path, name);
        if (t[i]->n_dims != 3 || t[i]->ne[0] != want[i][0] || t[i]->ne[1] != want[i][1] || t[i]->ne[2] != want[i][2])
            return lmp_fail(LMP_EINVAL, "%s: tensor '%s' has shape ne=[%lld, %lld, %lld] (%d dims), expected ne=[%lld, "
                            "%lld, %lld]", m->path, name, (long long)t[i]->ne[0],
                            (long long)(t[i]->n_dims > 1 ? t[i]->ne[1] : 1), (long long)(t[i]->n_dims > 2 ? t[i]->ne[2] : 1),
                            t[i]->n_dims, (long long)want[i][0], (long long)want[i][1], (long long)want[i][2]);
        int st = lmp_gguf_check_dequantize(t[i]);
        if (st) return lmp_fail_prefix(st, "%s", m->path);
    }
    *kt = t[0];
    *vt = t[1];
    return 0;
}

/* kv_b's rows from the split: row h (nope + v) + j is k_b[h][., j] for j < nope, then v_b[h][j - nope][.] */
static int load_kv_b(const lmp_model *m, int64_t b, lmp_linear *l)
{
    const lmp_arch *a = &m->arch;
    char name[64];
    snprintf(name, sizeof name, "blk.%lld.attn_kv_b.weight", (long long)b);
    if (lmp_gguf_find_tensor(m->src_data, name)) return load_f32(m, name, l->out, l->in, &l->w);
    const lmp_gguf_tensor *kt, *vt;
    int st = find_kv_b_split(m, b, &kt, &vt);
    if (st) return st;
    const int64_t H = a->n_heads, nope = a->mla_nope, v = a->head_dim, kv = a->mla_kv_lora;
    const int64_t nk = H * kv * nope, nv = H * v * kv;
    float *tmp = malloc((size_t)(nk > nv ? nk : nv) * sizeof *tmp);
    l->w = malloc((size_t)(l->out * l->in) * sizeof *l->w);
    if (!tmp || !l->w) {
        free(tmp);
        return lmp_fail(LMP_ENOMEM, "%s: out of memory for block %lld's kv_b", m->path, (long long)b);
    }
    if (!(st = lmp_gguf_dequantize(kt, 0, nk, tmp)))
        for (int64_t h = 0; h < H; h++)
            for (int64_t c = 0; c < kv; c++)
                for (int64_t j = 0; j < nope; j++) l->w[(h * (nope + v) + j) * kv + c] = tmp[(h * kv + c) * nope + j];
    if (!st && !(st = lmp_gguf_dequantize(vt, 0, nv, tmp)))
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < v; j++)
                memcpy(l->w + (h * (nope + v) + nope + j) * kv, tmp + (h * v + j) * kv, (size_t)kv * sizeof *tmp);
    free(tmp);
    return st ? lmp_fail_prefix(st, "%s", m->path) : 0;
}

/* DeepSeek-V3's selection bias blk.N.exp_probs_b.bias [E] (the router's b here, which only the
 * choice reads), when the file has one */
static int find_probs_bias(const lmp_model *m, int64_t b, const lmp_gguf_tensor **t)
{
    char name[64];
    snprintf(name, sizeof name, "blk.%lld.exp_probs_b.bias", (long long)b);
    *t = lmp_gguf_find_tensor(m->src_data, name);
    return *t ? find_tensor(m, name, 0, m->arch.n_experts, t) : 0;
}

static int gguf_block_copy(const lmp_model *m, int64_t b, lmp_block *out)
{
    const lmp_arch *a = &m->arch;
    const int halves = a->desc->gguf_rope_halves; /* q/k rows in rotate-half order (see arch.h) */
    int st = lmp_block_init(out, (int)b, &m->arch);
    char name[96];
    for (int i = 0; i < out->n_linears && !st; i++) {
        lmp_linear *l = &out->linears[i];
        int64_t r0, rows;
        const char *stem = linear_source(a, l, &r0, &rows);
        snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)b, stem);
        if (l->role == LMP_ROLE_KV_B) {
            st = load_kv_b(m, b, l);
            continue;
        }
        if (l->role == LMP_ROLE_ROUTER && a->route == LMP_ROUTE_SIGMOID_BIAS) {
            const lmp_gguf_tensor *bt;
            st = load_f32(m, name, l->out, l->in, &l->w);
            if (!st && !(st = find_probs_bias(m, b, &bt)) && bt) {
                snprintf(name, sizeof name, "blk.%lld.exp_probs_b.bias", (long long)b);
                st = load_f32(m, name, 0, l->out, &l->b);
            }
            continue;
        }
        if (l->expert_kind == LMP_EXPERT_ROUTED) {
            char bias[96];
            snprintf(bias, sizeof bias, "blk.%lld.%s.bias", (long long)b, stem);
            st = load_expert(m, name, bias, l);
            continue;
        }
        st = load_f32(m, name, rows, l->in, &l->w);
        /* optional biases (Qwen2's q, k, v; what lmpress's exporter writes for a linear with one) */
        snprintf(name, sizeof name, "blk.%lld.%s.bias", (long long)b, stem);
        if (!st && lmp_gguf_find_tensor(m->src_data, name)) st = load_f32(m, name, 0, rows, &l->b);
        if (!st && rows != l->out) { /* keep rows [r0, r0 + out) of the fused tensor */
            memmove(l->w, l->w + r0 * l->in, (size_t)(l->out * l->in) * sizeof *l->w);
            if (l->b) memmove(l->b, l->b + r0, (size_t)l->out * sizeof *l->b);
        }
        if (!st && halves && (l->role == LMP_ROLE_Q || l->role == LMP_ROLE_K)) {
            st = lmp_rope_permute_rows(l->w, l->out, l->in, a->head_dim, a->rope.n_rot);
            if (!st && l->b) st = lmp_rope_permute_rows(l->b, l->out, 1, a->head_dim, a->rope.n_rot);
        }
    }
    for (int i = 0; i < out->n_norms && !st; i++) {
        if (a->desc->flags & LMP_ARCH_NORM_NO_PARAMS) { /* OLMo: no tensors */
            st = lmp_norm_identity(out->norms[i].dim, &out->norms[i].w, &out->norms[i].b);
            continue;
        }
        snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)b, gguf_norm(&m->arch, i));
        st = load_f32(m, name, 0, out->norms[i].dim, &out->norms[i].w);
        snprintf(name, sizeof name, "blk.%lld.%s.bias", (long long)b, gguf_norm(&m->arch, i));
        if (!st && (a->desc->flags & LMP_ARCH_NORM_NO_BIAS)) { /* command-r: none, 0 */
            if (!(out->norms[i].b = calloc((size_t)out->norms[i].dim, sizeof *out->norms[i].b)))
                st = lmp_fail(LMP_ENOMEM, "out of memory");
        } else if (!st && (a->family == LMP_FAMILY_GPT2 || a->layer_norm)) { /* LayerNorm's bias */
            st = load_f32(m, name, 0, out->norms[i].dim, &out->norms[i].b);
        }
        const int qk_norm = i == lmp_norm_index(a, LMP_NORM_Q) || i == lmp_norm_index(a, LMP_NORM_K);
        if (!st && halves && qk_norm) /* (per head, or OLMo 2's over all heads) */
            st = lmp_rope_permute_rows(out->norms[i].w, out->norms[i].dim, 1, a->head_dim, a->rope.n_rot);
    }
    if (st) lmp_block_free(out);
    return st;
}

static void gguf_close(lmp_model *m) { lmp_gguf_close(m->src_data); }
static void gguf_release_pages(const lmp_model *m) { lmp_gguf_release_pages(m->src_data); }

/* The tensor's bytes as ggml lays them out (blocks of codes with their fp16 scales), per weight. */
static double gguf_linear_bits(const lmp_model *m, int64_t b, const lmp_linear *l)
{
    char name[96];
    int64_t r0, rows;
    snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)b, linear_source(&m->arch, l, &r0, &rows));
    const lmp_gguf_tensor *t = lmp_gguf_find_tensor(m->src_data, name), *kt, *vt;
    if (l->expert_kind == LMP_EXPERT_ROUTED) rows *= m->arch.n_experts; /* one tensor holds them all */
    if (!t && l->role == LMP_ROLE_KV_B && !find_kv_b_split(m, b, &kt, &vt)) /* MLA's split kv_b */
        return 8.0 * (double)(kt->nbytes + vt->nbytes) / (double)(l->out * l->in);
    return t && rows * l->in > 0 ? 8.0 * (double)t->nbytes / (double)(rows * l->in) : 32.0;
}

static const lmp_model_source gguf_source = {
    .block_copy = gguf_block_copy, .close = gguf_close, .linear_bits = gguf_linear_bits,
    .release_pages = gguf_release_pages};

/* <arch>.<key> as an integer; def < 0 means required. */
static int arch_int(const lmp_gguf *g, const char *arch, const char *key, int64_t def, int64_t *out)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (!lmp_gguf_find_kv(g, full)) {
        if (def >= 0) {
            *out = def;
            return 0;
        }
        return lmp_fail(LMP_EINVAL, "%s: metadata '%s' is missing", g->path, full);
    }
    int st = lmp_gguf_get_int(g, full, out);
    if (!st && (*out <= 0 || *out > (1 << 24)))
        return lmp_fail(LMP_EINVAL, "%s: metadata '%s' = %lld is out of range", g->path, full, (long long)*out);
    return st;
}

static int arch_float(const lmp_gguf *g, const char *arch, const char *key, double def, float *out)
{
    char full[128];
    double v = def;
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (lmp_gguf_find_kv(g, full)) {
        int st = lmp_gguf_get_float(g, full, &v);
        if (st) return st;
    }
    *out = (float)v;
    return 0;
}

/* ---- which metadata and tensors the file may hold ---------------------------------------- */
/* The llama.* keys this loader reads, and those that do not change the forward (vocab_size is
 * checked against the embedding; rope.scaling.finetuned is a note).  Any other llama.* key is
 * refused by name: it may change the numbers.  Keys of other namespaces than general.,
 * tokenizer., quantize. and llama. (an adapter's, a vision tower's) are refused too. */
static const char *const read_keys[] = {
    "block_count", "embedding_length", "feed_forward_length", "attention.head_count", "attention.head_count_kv",
    "context_length", "rope.freq_base", "attention.layer_norm_rms_epsilon", "rope.dimension_count",
    "attention.key_length", "attention.value_length", "rope.scaling.type", "rope.scaling.factor",
    "rope.scaling.original_context_length", "rope.scaling.finetuned", "attention.sliding_window", "vocab_size",
    "rope.freq_base_swa", "attn_logit_softcapping", "final_logit_softcapping", "rope.scaling.attn_factor",
    "attention.layer_norm_epsilon", "attention.sliding_window_pattern",
    "expert_count", "expert_used_count", "expert_feed_forward_length", "expert_shared_feed_forward_length",
    "use_parallel_residual", "rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow",
    "tensor_data_layout", "logit_scale", NULL};

/* llama.cpp's deepseek2 keys (DeepSeek-V2/V3, read by read_deepseek2 for LMP_ARCH_MLA only) */
static const char *const mla_keys[] = {
    "leading_dense_block_count", "attention.q_lora_rank", "attention.kv_lora_rank", "attention.key_length_mla",
    "attention.value_length_mla", "expert_shared_count", "expert_weights_scale", "expert_weights_norm",
    "expert_gating_func", "expert_group_count", "expert_group_used_count", "rope.scaling.yarn_log_multiplier", NULL};

static int check_keys(const lmp_gguf *g, const char *prefix)
{
    const size_t plen = strlen(prefix);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const char *k = g->kv[i].key;
        if (!strncmp(k, "general.", 8) || !strncmp(k, "tokenizer.", 10) || !strncmp(k, "quantize.", 9) ||
            !strncmp(k, "lmpress.", 8)) /* provenance lmpress writes */
            continue;
        int ok = 0;
        if (!strncmp(k, prefix, plen) && k[plen] == '.')
            for (int r = 0; read_keys[r] && !ok; r++) ok = !strcmp(k + plen + 1, read_keys[r]);
        if (ok && !strcmp(k + plen + 1, "attention.sliding_window_pattern") && !lmp_arch_by_gguf(prefix, plen)->gguf_swa_pattern)
            ok = 0; /* read for Gemma 2 and 3 only */
        if (ok && !strcmp(k + plen + 1, "use_parallel_residual") &&
            !(lmp_arch_by_gguf(prefix, plen)->flags & (LMP_ARCH_PARALLEL | LMP_ARCH_SHARED_NORM)))
            ok = 0; /* read for GPT-NeoX and StableLM only */
        if (ok && !strcmp(k + plen + 1, "tensor_data_layout") && !lmp_arch_by_gguf(prefix, plen)->hf_falcon)
            ok = 0; /* Falcon's "jploski" (checked at load) */
        if (ok && !strcmp(k + plen + 1, "logit_scale") && !lmp_arch_by_gguf(prefix, plen)->hf_logit_scale_default)
            ok = 0; /* read for command-r only */
        if (!ok && !strncmp(k, prefix, plen) && k[plen] == '.' && (lmp_arch_by_gguf(prefix, plen)->flags & LMP_ARCH_MLA))
            for (int r = 0; mla_keys[r] && !ok; r++) ok = !strcmp(k + plen + 1, mla_keys[r]);
        if (!ok)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: metadata '%s' is not read by lmpress; it may change the model's "
                            "numbers, so the file is refused rather than run without it", g->path, k);
    }
    return 0;
}

/* Every tensor of the file must be one the model reads: an unknown one (an attention norm of a
 * newer family, an expert tensor) would otherwise be dropped without a word. */
static int check_no_unread_tensors(const lmp_model *m, const lmp_block *probes)
{
    const lmp_gguf *g = m->src_data;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const char *name = g->tensors[i].name;
        const int gpt2 = m->arch.family == LMP_FAMILY_GPT2,
                  layer_norm = gpt2 || (m->arch.layer_norm && !(m->arch.desc->flags & LMP_ARCH_NORM_NO_BIAS));
        int ok = !strcmp(name, "token_embd.weight") || !strcmp(name, "output_norm.weight") ||
                 !strcmp(name, "output.weight") || !strcmp(name, "rope_freqs.weight") ||
                 !strcmp(name, "rope_factors_long.weight") || !strcmp(name, "rope_factors_short.weight") ||
                 (gpt2 && !strcmp(name, "position_embd.weight")) || (layer_norm && !strcmp(name, "output_norm.bias")) ||
                 ((m->arch.desc->flags & LMP_ARCH_HEAD_BIAS) && !strcmp(name, "output.bias")) ||
                 ((m->arch.desc->flags & LMP_ARCH_EMBED_NORM) &&
                  (!strcmp(name, "token_embd_norm.weight") || !strcmp(name, "token_embd_norm.bias")));
        long long b;
        int at = 0;
        if (!ok && sscanf(name, "blk.%lld.%n", &b, &at) == 1 && at > 0 && b >= 0 && b < m->arch.n_layers) {
            const lmp_block *probe = &probes[b];
            const char *leaf = name + at;
            char want[64];
            for (int k = 0; k < probe->n_norms && !ok; k++) {
                snprintf(want, sizeof want, "%s.weight", gguf_norm(&m->arch, k));
                ok = !strcmp(leaf, want);
                snprintf(want, sizeof want, "%s.bias", gguf_norm(&m->arch, k));
                ok = ok || (layer_norm && !strcmp(leaf, want));
            }
            for (int k = 0; k < probe->n_linears && !ok; k++) {
                int64_t r0, rows;
                const lmp_role role = probe->linears[k].role;
                const char *stem = linear_source(&m->arch, &probe->linears[k], &r0, &rows);
                const size_t n = strlen(stem);
                /* deepseek2 has no biases: its router's exp_probs_b is the selection bias */
                ok = !strncmp(leaf, stem, n) && (!strcmp(leaf + n, ".weight") || (!m->arch.mla && !strcmp(leaf + n, ".bias")));
                ok = ok || (role == LMP_ROLE_KV_B && (!strcmp(leaf, "attn_k_b.weight") || !strcmp(leaf, "attn_v_b.weight")));
                ok = ok || (role == LMP_ROLE_ROUTER && m->arch.route == LMP_ROUTE_SIGMOID_BIAS &&
                            !strcmp(leaf, "exp_probs_b.bias"));
            }
        }
        if (!ok)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: tensor '%s' is not read by lmpress (the file's model has a part the "
                            "%s architecture here lacks), so the file is refused rather than run without it",
                            m->path, name, m->arch.desc->gguf_arch);
    }
    return 0;
}

/* <arch>.<key> as an integer that may be 0 (def when absent). */
static int arch_count(const lmp_gguf *g, const char *arch, const char *key, int64_t def, int64_t *out)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    *out = def;
    if (!lmp_gguf_find_kv(g, full)) return 0;
    int st = lmp_gguf_get_int(g, full, out);
    if (!st && (*out < 0 || *out > (1 << 24)))
        return lmp_fail(LMP_EINVAL, "%s: metadata '%s' = %lld is out of range", g->path, full, (long long)*out);
    return st;
}

/* <arch>.<key> as a bool (def when absent). */
static int arch_bool(const lmp_gguf *g, const char *arch, const char *key, int def, int *out)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    const lmp_gguf_kv *kv = lmp_gguf_find_kv(g, full);
    *out = def;
    if (!kv) return 0;
    if (kv->type != LMP_GGUF_BOOL) return lmp_fail(LMP_EINVAL, "%s: metadata '%s' must be a bool", g->path, full);
    *out = *(const unsigned char *)kv->data != 0;
    return 0;
}

/* llama.cpp's deepseek2 (DeepSeek-V2/V3) mixture of experts as its llama_model_deepseek2 and
 * build_moe_ffn read it: expert_gating_func 1 (softmax; also when absent, as llama.cpp assumes
 * for older files) reads as DeepSeek-V2, 2 (sigmoid) as DeepSeek-V3 with exp_probs_b its
 * selection bias; the first leading_dense_block_count layers dense (feed_forward_length), the
 * others expert_count experts of expert_feed_forward_length, expert_used_count a token, plus
 * expert_shared_count shared ones (one MLP, no gate); the weights renormalized when
 * expert_weights_norm, times expert_weights_scale; with expert_group_count > 1 only the
 * expert_group_used_count groups of the largest sum of their two best scores compete.  What
 * lmpress's routings do not compute is refused by name: a softmax with groups (llama.cpp's
 * two-best rule is not DeepSeek-V2's group_limited_greedy), renormalized, or with a selection bias. */
static int read_deepseek2(lmp_model *m)
{
    const lmp_gguf *g = m->src_data;
    lmp_arch *a = &m->arch;
    const char *P = a->desc->gguf_arch;
    int64_t gating, n_layers, dense, shared, groups, groups_used;
    int norm, st;
    if ((st = arch_count(g, P, "expert_gating_func", 1, &gating))) return st;
    if (gating != 1 && gating != 2)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s.expert_gating_func = %lld is not supported (1, softmax: DeepSeek-V2; 2, "
                        "sigmoid: DeepSeek-V3)", m->path, P, (long long)gating);
    a->desc = lmp_arch_by_name(gating == 2 ? "deepseek3" : "deepseek2");
    if (!a->desc || !a->desc->moe) return lmp_fail(LMP_EINVAL, "%s: no DeepSeek descriptor", m->path);
    if ((st = arch_int(g, P, "expert_count", -1, &a->n_experts)) ||
        (st = arch_int(g, P, "expert_used_count", -1, &a->n_experts_used)) ||
        (st = arch_int(g, P, "expert_feed_forward_length", -1, &a->expert_hidden)) ||
        (st = arch_int(g, P, "block_count", -1, &n_layers)) ||
        (st = arch_count(g, P, "leading_dense_block_count", 0, &dense)) ||
        (st = arch_count(g, P, "expert_shared_count", 0, &shared)) ||
        (st = arch_count(g, P, "expert_group_count", 0, &groups)) ||
        (st = arch_count(g, P, "expert_group_used_count", 0, &groups_used)) ||
        (st = arch_float(g, P, "expert_weights_scale", 0, &a->routed_scale)) ||
        (st = arch_bool(g, P, "expert_weights_norm", 0, &norm)))
        return st;
    if (a->n_experts_used > a->n_experts || dense > n_layers || n_layers > LMP_MAX_LAYERS || !(a->routed_scale >= 0))
        return lmp_fail(LMP_EINVAL, "%s: inconsistent %s experts: expert_used_count %lld of %lld, "
                        "leading_dense_block_count %lld of %lld layers (at most %d), expert_weights_scale %g", m->path, P,
                        (long long)a->n_experts_used, (long long)a->n_experts, (long long)dense, (long long)n_layers,
                        LMP_MAX_LAYERS, (double)a->routed_scale);
    if (gating == 1 && norm)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s.expert_weights_norm true with softmax gating is not supported "
                        "(DeepSeek-V2's routing never renormalizes)", m->path, P);
    if (groups > 1 && gating == 1)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s.expert_group_count %lld with softmax gating is not supported: llama.cpp "
                        "ranks a group by the sum of its two best scores, DeepSeek-V2's group_limited_greedy (lmpress's "
                        "softmax routing) by its best", m->path, P, (long long)groups);
    if (groups > 1 && (groups_used < 1 || groups_used >= groups || a->n_experts % groups || a->n_experts / groups < 2 ||
                       a->n_experts_used > groups_used * (a->n_experts / groups)))
        return lmp_fail(LMP_EINVAL, "%s: %s.expert_group_count %lld, expert_group_used_count %lld: the groups must divide "
                        "the %lld experts, 2 or more each, and hold expert_used_count %lld (llama.cpp's checks)", m->path,
                        P, (long long)groups, (long long)groups_used, (long long)a->n_experts,
                        (long long)a->n_experts_used);
    for (uint64_t i = 0; gating == 1 && i < g->n_tensors; i++)
        if (strstr(g->tensors[i].name, ".exp_probs_b."))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: tensor '%s' (a selection bias) with softmax gating is not supported "
                            "(only DeepSeek-V3's sigmoid routing has one)", m->path, g->tensors[i].name);
    a->route = a->desc->moe->route;
    a->norm_topk = norm;
    a->n_group = groups > 1 ? groups : 0;
    a->topk_group = groups > 1 ? groups_used : 0;
    a->shared_hidden = shared * a->expert_hidden;
    for (int64_t l = 0; l < n_layers; l++) a->dense_layer[l] = l < dense;
    return 0;
}

/* llama.cpp's deepseek2 attention (multi-head latent attention), which its converter writes as
 * multi-query attention over the latent (head_count_kv 1, key_length kv_lora_rank + the rotary
 * dims, value_length kv_lora_rank) with the heads' own sizes in key_length_mla (nope + rope) and
 * value_length_mla (v); q_lora_rank when q is low-rank (attn_q_a, attn_q_b), else one attn_q.
 * The latents' norms take the file's RMS epsilon (llama.cpp has one for every norm).  head_dim
 * is the rotary width until RoPE is read (lmp_model_open_gguf then sets v). */
static int read_mla(lmp_model *m, int64_t key_len, int64_t value_len)
{
    const lmp_gguf *g = m->src_data;
    lmp_arch *a = &m->arch;
    const char *P = a->desc->gguf_arch;
    int64_t kmla, vmla, n_rot;
    int st;
    if ((st = arch_count(g, P, "attention.q_lora_rank", 0, &a->mla_q_lora)) ||
        (st = arch_int(g, P, "attention.kv_lora_rank", -1, &a->mla_kv_lora)) ||
        (st = arch_int(g, P, "attention.key_length_mla", -1, &kmla)) ||
        (st = arch_int(g, P, "attention.value_length_mla", -1, &vmla)) ||
        (st = arch_int(g, P, "rope.dimension_count", -1, &n_rot)))
        return st;
    if (n_rot % 2 || n_rot >= kmla || vmla > kmla)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s.rope.dimension_count %lld must be even and below key_length_mla %lld, "
                        "and value_length_mla %lld at most that", m->path, P, (long long)n_rot, (long long)kmla,
                        (long long)vmla);
    if (a->n_kv_heads != 1 || key_len != a->mla_kv_lora + n_rot || value_len != a->mla_kv_lora)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s's attention.head_count_kv %lld, key_length %lld, value_length %lld are "
                        "not llama.cpp's multi-query form of the latent (1, kv_lora_rank %lld + %lld, kv_lora_rank)",
                        m->path, P, (long long)a->n_kv_heads, (long long)key_len, (long long)value_len,
                        (long long)a->mla_kv_lora, (long long)n_rot);
    a->mla = 1;
    a->mla_rope = n_rot;
    a->mla_nope = kmla - n_rot;
    a->n_kv_heads = a->n_heads; /* k and v expanded to every head */
    a->mla_norm_eps = a->norm_eps;
    a->mla_q_scale = 1.0f;
    a->head_dim = n_rot;
    return 0;
}

/* llama.cpp's deepseek2 YaRN (llama_context and its graph, [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]):
 * with rope.scaling.yarn_log_multiplier (its converter's 0.1 mscale_all_dim) llama.cpp takes
 * mscale = mscale_all_dim, so cos and sin are multiplied by 1, else by 0.1 ln(factor) + 1; the
 * scores by the square of that times 0.1 mscale_all_dim ln(factor) + 1.  rope.scaling.attn_factor
 * other than 1 and linear scaling (which llama.cpp's graph scales oddly here) are refused. */
static int read_mla_rope(lmp_model *m)
{
    const lmp_gguf *g = m->src_data;
    lmp_arch *a = &m->arch;
    const char *P = a->desc->gguf_arch;
    float log_mul, attn_factor;
    int64_t vmla;
    int st;
    if ((st = arch_float(g, P, "rope.scaling.yarn_log_multiplier", 0, &log_mul)) ||
        (st = arch_float(g, P, "rope.scaling.attn_factor", 1, &attn_factor)) ||
        (st = arch_int(g, P, "attention.value_length_mla", -1, &vmla)))
        return st;
    a->head_dim = vmla; /* o reads heads x v */
    if (attn_factor != 1.0f)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s.rope.scaling.attn_factor %g is not supported (only 1)", m->path, P,
                        (double)attn_factor);
    if (!strcmp(a->rope.type, "linear"))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s with linear RoPE scaling is not supported (none or yarn)", m->path, P);
    if (strcmp(a->rope.type, "yarn") != 0) return 0;
    const double f = a->rope.factor, m_all = (double)(log_mul / 0.1f); /* as llama.cpp divides */
    const double ratio = m_all != 0 ? 1.0 : (f <= 1 ? 1.0 : 0.1 * log(f) + 1.0);
    const double all = f <= 1 ? 1.0 : 0.1 * m_all * log(f) + 1.0;
    a->rope.mscale = (float)ratio;
    a->mla_q_scale = (float)(ratio * all * ratio * all);
    return 0;
}

/* A mixture of experts: <arch>.expert_count (Mixtral's "llama" file then reads as Mixtral),
 * expert_used_count, the experts' width expert_feed_forward_length (Mixtral: feed_forward_length)
 * and the shared expert's expert_shared_feed_forward_length; every layer sparse, as llama.cpp
 * builds these architectures, the top-k weights renormalized as llama.cpp does for each. */
static int read_experts(lmp_model *m)
{
    const lmp_gguf *g = m->src_data;
    lmp_arch *a = &m->arch;
    const char *P = a->desc->gguf_arch;
    if (a->desc->flags & LMP_ARCH_MLA) return read_deepseek2(m);
    int64_t E = 0;
    int st = arch_int(g, P, "expert_count", 0, &E);
    if (st || E == 0) {
        if (!st && a->desc->moe)
            st = lmp_fail(LMP_EINVAL, "%s: metadata '%s.expert_count' is missing (a %s file is a mixture of experts)",
                          m->path, P, P);
        return st;
    }
    if (!a->desc->moe) {
        const lmp_arch_desc *mixtral = lmp_arch_by_name("mixtral");
        if (strcmp(P, "llama") != 0 || !mixtral)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s.expert_count = %lld: a mixture of experts of architecture %s is not "
                            "supported", m->path, P, (long long)E, P);
        a->desc = mixtral; /* llama.cpp's converter writes Mixtral as "llama" with experts */
    }
    a->n_experts = E;
    if ((st = arch_int(g, P, "expert_used_count", -1, &a->n_experts_used)) ||
        (st = arch_int(g, P, a->desc->moe->hf_sparse_step || a->desc->moe->hf_gpt_oss ? "expert_feed_forward_length"
                                                                                       : "feed_forward_length",
                       -1, &a->expert_hidden)))
        return st;
    if (a->desc->moe->hf_shared &&
        (st = arch_int(g, P, "expert_shared_feed_forward_length", -1, &a->shared_hidden)))
        return st;
    if (a->n_experts_used > E)
        return lmp_fail(LMP_EINVAL, "%s: %s.expert_used_count %lld exceeds expert_count %lld", m->path, P,
                        (long long)a->n_experts_used, (long long)E);
    a->norm_topk = a->desc->moe->gguf_norm_topk;
    if (a->desc->moe->hf_gpt_oss) { /* llama.cpp's gpt-oss: its clamped SwiGLU's constants, no key */
        a->route = LMP_ROUTE_TOPK_SOFTMAX;
        a->swiglu_alpha = 1.702f;
        a->swiglu_limit = 7.0f;
    }
    a->attn_sinks = (a->desc->flags & LMP_ARCH_SINKS) != 0;
    return 0;
}

/* <prefix>.<key> into buf. */
static const char *arch_key(char *buf, size_t n, const lmp_model *m, const char *key)
{
    snprintf(buf, n, "%s.%s", m->arch.desc->gguf_arch, key);
    return buf;
}

/* LongRoPE as llama.cpp's Phi-3 reads it: rope_factors_short / _long divide the frequencies,
 * the long ones for a window past rope.scaling.original_context_length; cos and sin times
 * rope.scaling.attn_factor. */
static int read_longrope(lmp_model *m, int64_t n_rot, int64_t orig)
{
    const lmp_gguf *g = m->src_data;
    lmp_rope *r = &m->arch.rope;
    float *f[2] = {NULL, NULL}, mscale = 1.0f;
    static const char *const names[2] = {"rope_factors_short.weight", "rope_factors_long.weight"};
    int st = arch_float(g, m->arch.desc->gguf_arch, "rope.scaling.attn_factor", 1.0, &mscale);
    for (int k = 0; k < 2 && !st; k++) st = load_f32(m, names[k], 0, n_rot / 2, &f[k]);
    for (int64_t i = 0; !st && i < n_rot / 2; i++)
        if (!(f[0][i] > 0) || !(f[1][i] > 0))
            st = lmp_fail(LMP_EINVAL, "%s: rope_factors_short/long[%lld] must be positive", m->path, (long long)i);
    if (!st) {
        memcpy(r->inv_freq_long, r->inv_freq, sizeof r->inv_freq);
        for (int64_t i = 0; i < n_rot / 2; i++) {
            r->inv_freq[i] = (float)((double)r->inv_freq[i] / f[0][i]);
            r->inv_freq_long[i] = (float)((double)r->inv_freq_long[i] / f[1][i]);
        }
        snprintf(r->type, sizeof r->type, "longrope");
        r->plain = 0;
        r->long_after = orig;
        r->mscale = mscale;
    }
    free(f[0]);
    free(f[1]);
    return st;
}

/* Which layers slide in llama.cpp's Gemma 2 and 3 (load_swa_pattern): attention.sliding_window_pattern
 * as one bool a layer, or as n (layer l slides unless (l + 1) % n == 0; 0: every layer slides);
 * without it the architecture's n (2 for Gemma 2, 6 for Gemma 3).  Only these architectures read
 * the key (check_keys refuses it for any other, whose llama.cpp model would ignore it). */
static int read_swa_pattern(lmp_model *m)
{
    lmp_arch *a = &m->arch;
    char key[128];
    const lmp_gguf_kv *kv = lmp_gguf_find_kv(m->src_data, arch_key(key, sizeof key, m, "attention.sliding_window_pattern"));
    int64_t n = a->desc->gguf_swa_pattern;
    if (kv && kv->type == LMP_GGUF_ARRAY) {
        if (kv->arr_type != LMP_GGUF_BOOL || kv->n != (uint64_t)a->n_layers)
            return lmp_fail(LMP_EINVAL, "%s: %s must be %lld bools (one a layer) or one integer", m->path, key,
                            (long long)a->n_layers);
        const unsigned char *v = kv->data;
        for (int64_t l = 0; l < a->n_layers; l++) a->sliding_layer[l] = v[l] != 0;
        return 0;
    }
    if (kv) {
        int st = lmp_gguf_get_int(m->src_data, key, &n);
        if (st) return st;
        if (n < 0) return lmp_fail(LMP_EINVAL, "%s: %s = %lld is negative", m->path, key, (long long)n);
    }
    for (int64_t l = 0; l < a->n_layers; l++) a->sliding_layer[l] = n == 0 || (l + 1) % n != 0;
    return 0;
}

/* RoPE from rope.freq_base, rope.dimension_count, rope.scaling.* (linear, YaRN) and
 * rope_freqs.weight (Llama 3's per-pair divisors), LongRoPE's factors; and the sliding window:
 * attention.sliding_window for every layer, or the arch's pattern (Gemma 2/3). */
static int read_rope(lmp_model *m)
{
    const lmp_gguf *g = m->src_data;
    lmp_arch *a = &m->arch;
    const char *P = a->desc->gguf_arch;
    int64_t n_rot, window = 0, orig;
    char key[128];
    int st;
    if ((st = arch_int(g, P, "rope.dimension_count", a->head_dim, &n_rot)) ||
        (st = arch_int(g, P, "rope.scaling.original_context_length", a->seq_len, &orig)))
        return st;
    /* attention.sliding_window: 0 (Phi-3's converter writes it so) means none */
    if (lmp_gguf_find_kv(g, arch_key(key, sizeof key, m, "attention.sliding_window")) &&
        (st = lmp_gguf_get_int(g, key, &window)))
        return st;
    if (window < 0) return lmp_fail(LMP_EINVAL, "%s: %s = %lld is negative", m->path, key, (long long)window);
    if (window == 0) window = a->seq_len;
    if (n_rot > a->head_dim || n_rot % 2 || n_rot / 2 > LMP_ROPE_MAX_PAIRS)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s = %lld (must be even and at most the head size %lld)", m->path,
                        arch_key(key, sizeof key, m, "rope.dimension_count"), (long long)n_rot, (long long)a->head_dim);
    if (window < a->seq_len) { /* every layer slides, unless the arch's pattern says otherwise below */
        a->window = window;
        if (a->n_layers > LMP_MAX_LAYERS)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: more than %d layers with sliding windows", m->path, LMP_MAX_LAYERS);
        for (int64_t l = 0; l < a->n_layers; l++) a->sliding_layer[l] = 1;
    }
    lmp_rope_default(&a->rope, a->rope_theta, n_rot, a->head_dim);
    if (lmp_gguf_find_kv(g, arch_key(key, sizeof key, m, "rope.scaling.type"))) {
        const char *type;
        size_t len;
        double factor = 1;
        if ((st = lmp_gguf_get_string(g, key, &type, &len)) ||
            (!(len == 4 && !memcmp(type, "none", 4)) &&
             (st = lmp_gguf_get_float(g, arch_key(key, sizeof key, m, "rope.scaling.factor"), &factor))))
            return st;
        if (!(factor > 0)) return lmp_fail(LMP_EINVAL, "%s: %s must be positive", m->path, key);
        if (len == 6 && !memcmp(type, "linear", 6)) {
            if (factor != 1) lmp_rope_linear(&a->rope, factor);
        } else if (len == 4 && !memcmp(type, "yarn", 4)) {
            /* llama.cpp's YaRN: beta_fast 32, beta_slow 1 unless the file says (gpt-oss's converter
             * does), its correction range always truncated, cos and sin times attn_factor (1) *
             * (0.1 ln(factor) + 1) */
            float beta_fast, beta_slow;
            if ((st = arch_float(g, P, "rope.scaling.yarn_beta_fast", 32, &beta_fast)) ||
                (st = arch_float(g, P, "rope.scaling.yarn_beta_slow", 1, &beta_slow)))
                return st;
            lmp_rope_yarn(&a->rope, factor, (double)orig, beta_fast, beta_slow, 1);
            a->rope.mscale = (float)lmp_rope_yarn_mscale(factor);
        } else if (!(len == 4 && !memcmp(type, "none", 4))) {
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s.rope.scaling.type '%.*s' is not supported (none, linear and yarn "
                            "are)", m->path, P, (int)len, type);
        }
    }
    const lmp_arch_desc *d = a->desc;
    if (d->gguf_swa_pattern && (st = read_swa_pattern(m))) return st;
    if (d->gguf_swa_base) { /* Gemma 3: the sliding layers' own base */
        float base;
        if ((st = arch_float(g, P, "rope.freq_base_swa", d->gguf_swa_base, &base))) return st;
        lmp_rope_default(&a->rope_local, base, n_rot, a->head_dim);
    }
    if (!d->gguf_swa_base && (d->flags & LMP_ARCH_SINKS) &&
        lmp_gguf_find_kv(g, arch_key(key, sizeof key, m, "rope.freq_base_swa"))) /* llama.cpp's gpt-oss reads it */
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s (a RoPE base of the sliding layers of their own) is not supported for "
                        "%s", m->path, key, P);
    if (d->gguf_scale_by_width_layers && a->n_layers == d->gguf_scale_by_width_layers)
        a->q_scale = (float)sqrt((double)a->head_dim / (double)(a->dim / a->n_heads));
    float cap;
    if ((st = arch_float(g, P, "attn_logit_softcapping", 0, &cap))) return st;
    a->attn_softcap = cap;
    if ((st = arch_float(g, P, "final_logit_softcapping", 0, &cap))) return st;
    a->final_softcap = cap;
    if (d->hf_logit_scale_default) { /* command-r: the logits times logit_scale */
        if ((st = arch_float(g, P, "logit_scale", d->hf_logit_scale_default, &a->logit_scale))) return st;
    }
    if (lmp_gguf_find_tensor(g, "rope_freqs.weight")) {
        float *factors;
        if ((st = load_f32(m, "rope_freqs.weight", 0, n_rot / 2, &factors))) return st;
        st = lmp_rope_with_factors(&a->rope, m->path, factors, n_rot / 2);
        free(factors);
    }
    if (!st && lmp_gguf_find_tensor(g, "rope_factors_short.weight")) return read_longrope(m, n_rot, orig);
    /* llama.cpp multiplies every layer's cos and sin by rope.scaling.attn_factor (its
     * yarn_attn_factor *= rope_attn_factor), whatever the scaling; read only with LongRoPE above */
    float attn_factor;
    if (!st && !(st = arch_float(g, P, "rope.scaling.attn_factor", 1, &attn_factor)) && attn_factor != 1.0f)
        st = lmp_fail(LMP_EUNSUPPORTED, "%s: %s.rope.scaling.attn_factor %g is not supported here (only 1; llama.cpp "
                      "scales cos and sin by it)", m->path, P, (double)attn_factor);
    return st;
}

/* Every tensor the model reads present with the right shape and a type lmpress dequantizes,
 * before any work is done on them; appends the linears' storage types to the format name
 * ("GGUF v3 Q4_K/Q6_K mix"), most parameters first. */
static int check_tensors(lmp_model *m)
{
    const lmp_arch *a = &m->arch;
    const lmp_gguf *g = m->src_data;
    const lmp_gguf_tensor *t = NULL;
    int st;
    const int no_params = (a->desc->flags & LMP_ARCH_NORM_NO_PARAMS) != 0; /* OLMo */
    if ((st = find_tensor(m, "token_embd.weight", a->vocab, a->dim, &t)) ||
        (!no_params && (st = find_tensor(m, "output_norm.weight", 0, a->dim, &t))) ||
        (lmp_gguf_find_tensor(g, "output.weight") && (st = find_tensor(m, "output.weight", a->vocab, a->dim, &t))))
        return st;
    lmp_block *probes = calloc((size_t)a->n_layers, sizeof *probes);
    if (!probes) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int64_t b = 0; b < a->n_layers && !st; b++) st = lmp_block_init(&probes[b], (int)b, a);
    enum { MAX_TYPES = 16 };
    const char *type_names[MAX_TYPES];
    lmp_ggml_type types[MAX_TYPES];
    int64_t type_params[MAX_TYPES];
    int n_types = 0;
    for (int64_t b = 0; b < a->n_layers && !st; b++) {
        char name[96];
        const lmp_block probe = probes[b];
        for (int i = 0; i < probe.n_norms && !st && !(a->desc->flags & LMP_ARCH_NORM_NO_PARAMS); i++) {
            snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)b, gguf_norm(&m->arch, i));
            st = find_tensor(m, name, 0, probe.norms[i].dim, &t);
            snprintf(name, sizeof name, "blk.%lld.%s.bias", (long long)b, gguf_norm(&m->arch, i));
            if (!st && a->layer_norm && !(a->desc->flags & LMP_ARCH_NORM_NO_BIAS)) /* (command-r's: none) */
                st = find_tensor(m, name, 0, probe.norms[i].dim, &t);
        }
        for (int i = 0; i < probe.n_linears && !st; i++) {
            const lmp_linear *l = &probe.linears[i];
            int64_t r0, rows;
            const char *stem = linear_source(a, l, &r0, &rows);
            const lmp_gguf_tensor *kt = NULL, *vt = NULL;
            snprintf(name, sizeof name, "blk.%lld.attn_kv_b.weight", (long long)b);
            const int split_kv_b = l->role == LMP_ROLE_KV_B && !lmp_gguf_find_tensor(g, name); /* MLA's, split */
            if (l->role == LMP_ROLE_ROUTER && a->route == LMP_ROUTE_SIGMOID_BIAS && (st = find_probs_bias(m, b, &kt)))
                break;
            snprintf(name, sizeof name, "blk.%lld.%s.bias", (long long)b, stem);
            if (split_kv_b) {
                if ((st = find_kv_b_split(m, b, &kt, &vt))) break;
                t = kt; /* its type: k_b's */
            } else if (l->expert_kind == LMP_EXPERT_ROUTED) {
                const lmp_gguf_tensor *bt;
                if ((st = find_expert_bias(m, name, l, &bt))) break;
            } else if (lmp_gguf_find_tensor(g, name) && (st = find_tensor(m, name, 0, rows, &t))) {
                break;
            }
            snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)b, stem);
            if (!split_kv_b && (l->expert_kind == LMP_EXPERT_ROUTED ? (st = find_experts(m, name, l, &t)) != 0
                                                                     : (st = find_tensor(m, name, rows, l->in, &t)) != 0))
                break;
            int k = 0;
            while (k < n_types && types[k] != t->type) k++;
            if (k == n_types && n_types < MAX_TYPES) {
                types[k] = t->type;
                type_names[k] = lmp_ggml_type_name(t->type);
                type_params[k] = 0;
                n_types++;
            }
            if (k < n_types) type_params[k] += l->out * l->in;
        }
    }
    if (!st) st = check_no_unread_tensors(m, probes);
    for (int64_t b = 0; b < a->n_layers; b++) lmp_block_free_tables(&probes[b]);
    free(probes);
    if (!st) lmp_model_format_types(m->format_buf, sizeof m->format_buf, m->format_buf, n_types, type_names, type_params);
    return st;
}

int lmp_model_open_gguf(lmp_model *m)
{
    lmp_gguf *g;
    int st = lmp_gguf_open(m->path, &g);
    if (st) return st;
    m->src = &gguf_source;
    m->src_data = g;
    snprintf(m->format_buf, sizeof m->format_buf, "GGUF v%u", g->version);
    m->format = m->format_buf;
    const char *arch;
    size_t arch_len;
    if ((st = lmp_gguf_get_string(g, "general.architecture", &arch, &arch_len))) return st;
    lmp_arch *a = &m->arch;
    a->desc = lmp_arch_by_gguf(arch, arch_len);
    if (!a->desc && lmp_arch_refused_gguf(arch, arch_len))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: GGUF architecture '%.*s' is not supported: %s", m->path, (int)arch_len,
                        arch, lmp_arch_refused_gguf(arch, arch_len));
    if (!a->desc) {
        char list[256];
        return lmp_fail(LMP_EUNSUPPORTED, "%s: unknown architecture '%.*s' (supported: %s)", m->path, (int)arch_len,
                        arch, lmp_arch_list(list, sizeof list, 1));
    }
    const char *P = a->desc->gguf_arch;
    if ((st = check_keys(g, P))) return st;
    if (a->desc->hf_falcon) { /* Falcon: attn_qkv as [q; k; v] ("jploski"); ln_mlp as attn_norm_2 (40B, 180B) */
            char lkey[96];
        const char *layout;
        size_t layout_len;
        snprintf(lkey, sizeof lkey, "%s.tensor_data_layout", P);
        if (lmp_gguf_find_kv(g, lkey) && ((st = lmp_gguf_get_string(g, lkey, &layout, &layout_len)) ||
                                          layout_len != 7 || memcmp(layout, "jploski", 7) != 0))
            return st ? st : lmp_fail(LMP_EUNSUPPORTED, "%s: %s '%.*s' is not supported (only \"jploski\": q, k, v "
                                      "one after the other)", m->path, lkey, (int)layout_len, layout);
        if (lmp_gguf_find_tensor(g, "blk.0.attn_norm_2.weight")) a->desc = &lmp_arch_falcon_nda;
    }
    /* llama.cpp's chatglm holds GLM (q, k, v apart) and ChatGLM2/3 (query_key_value kept as attn_qkv) */
    if (!strcmp(P, "chatglm") && lmp_gguf_find_tensor(g, "blk.0.attn_qkv.weight")) a->desc = &lmp_arch_chatglm;
    if ((st = read_experts(m))) return st;
    a->family = a->desc->family;
    a->qk_norm = (a->desc->flags & LMP_ARCH_QK_NORM) != 0;
    a->geglu = (a->desc->flags & LMP_ARCH_GEGLU) != 0;
    a->post_norms = (a->desc->flags & LMP_ARCH_POST_NORMS) != 0;
    a->no_pre_norms = (a->desc->flags & LMP_ARCH_NO_PRE_NORMS) != 0; /* OLMo 2 */
    a->qk_norm_all = (a->desc->flags & LMP_ARCH_QK_NORM_ALL) != 0;
    a->layer_norm = (a->desc->flags & LMP_ARCH_LAYER_NORM) != 0;
    a->plain_mlp = (a->desc->flags & LMP_ARCH_PLAIN_MLP) != 0;
    a->gelu_erf = a->plain_mlp && a->desc->gguf_gelu_erf; /* GPT-NeoX: as transformers defines it (see arch.h) */
    /* Bloom: ALiBi with llama.cpp's max_alibi_bias 8 (its converter writes no key; lmp_alibi_slopes) */
    a->alibi = (a->desc->flags & LMP_ARCH_ALIBI) != 0;
    a->parallel = (a->desc->flags & LMP_ARCH_PARALLEL) != 0;
    char pkey[128];
    snprintf(pkey, sizeof pkey, "%s.use_parallel_residual", P);
    if (a->parallel && lmp_gguf_find_kv(g, pkey)) { /* GPT-NeoX: use_parallel_residual false is sequential */
        const lmp_gguf_kv *kv = lmp_gguf_find_kv(g, pkey);
        if (kv->type != LMP_GGUF_BOOL) return lmp_fail(LMP_EINVAL, "%s: metadata '%s' must be a bool", m->path, pkey);
        a->parallel = *(const unsigned char *)kv->data != 0;
    } else if (a->desc->flags & LMP_ARCH_SHARED_NORM) {
        /* StableLM: llama.cpp runs the parallel block when the blocks have no ffn_norm, whatever the key
         * (which its converter writes true for a config without one) says */
        a->parallel = lmp_gguf_find_tensor(g, "blk.0.ffn_norm.weight") == NULL;
    }
    a->shared_norm = a->parallel && (a->desc->flags & LMP_ARCH_SHARED_NORM) != 0;
    /* (LMP_ARCH_NORM_PLUS_ONE: llama.cpp's converter already stored 1 + w) */
    int64_t key_len, value_len;
    if ((st = arch_int(g, P, "block_count", -1, &a->n_layers)) ||
        (st = arch_int(g, P, "embedding_length", -1, &a->dim)) ||
        (st = arch_int(g, P, "feed_forward_length", -1, &a->hidden)) ||
        (st = arch_int(g, P, "attention.head_count", -1, &a->n_heads)) ||
        (st = arch_int(g, P, "attention.head_count_kv", a->n_heads, &a->n_kv_heads)) ||
        (st = arch_int(g, P, "context_length", 2048, &a->seq_len)) ||
        (st = arch_float(g, P, "rope.freq_base", 10000.0, &a->rope_theta)) ||
        (st = arch_float(g, P, a->family == LMP_FAMILY_GPT2 || a->layer_norm ? "attention.layer_norm_epsilon"
                                                            : "attention.layer_norm_rms_epsilon", 1e-5, &a->norm_eps)) ||
        (st = arch_int(g, P, "attention.key_length", a->dim / a->n_heads, &key_len)) ||
        (st = arch_int(g, P, "attention.value_length", key_len, &value_len)))
        return st;
    if (a->desc->flags & LMP_ARCH_EMBED_SCALE) a->embed_scale = (float)sqrt((double)a->dim);
    /* The head size: key_length (Qwen3's q is wider than the hidden size), else dim / heads;
     * MLA's its own (read_mla). */
    a->head_dim = key_len;
    if (a->desc->flags & LMP_ARCH_MLA) {
        if ((st = read_mla(m, key_len, value_len))) return st;
    } else if (value_len != key_len || key_len % 2 || a->n_heads % a->n_kv_heads ||
        (!(a->desc->flags & LMP_ARCH_HEAD_DIM) && key_len * a->n_heads != a->dim))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: inconsistent or unsupported shape: embedding_length %lld, heads %lld, "
                        "kv heads %lld, key_length %lld, value_length %lld", m->path, (long long)a->dim,
                        (long long)a->n_heads, (long long)a->n_kv_heads, (long long)key_len, (long long)value_len);
    const lmp_gguf_tensor *emb = lmp_gguf_find_tensor(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2) return lmp_fail(LMP_EINVAL, "%s: tensor 'token_embd.weight' is missing or not 2-D", m->path);
    a->vocab = emb->ne[1];
    int64_t vocab_size;
    if ((st = arch_int(g, P, "vocab_size", a->vocab, &vocab_size))) return st;
    if (vocab_size != a->vocab)
        return lmp_fail(LMP_EINVAL, "%s: %s.vocab_size = %lld but token_embd.weight has %lld rows", m->path, P,
                        (long long)vocab_size, (long long)a->vocab);
    /* (MLA: RoPE on the rotary width first, then the block's shapes with v's) */
    if (a->mla ? (st = read_rope(m)) || (st = read_mla_rope(m)) || (st = check_tensors(m))
               : (st = check_tensors(m)) || (st = read_rope(m)))
        return st;
    float *tok = NULL, *head = NULL, *fnorm = NULL;
    if ((st = load_f32(m, "token_embd.weight", a->vocab, a->dim, &tok))) return st;
    m->tok_emb = lmp_model_own(m, tok);
    if (a->desc->flags & LMP_ARCH_EMBED_NORM) { /* Bloom: token_embd_norm, a LayerNorm on the embeddings */
        float *w = NULL, *b = NULL;
        if ((st = load_f32(m, "token_embd_norm.weight", 0, a->dim, &w))) return st;
        m->embed_norm_w = lmp_model_own(m, w);
        if ((st = load_f32(m, "token_embd_norm.bias", 0, a->dim, &b))) return st;
        m->embed_norm_b = lmp_model_own(m, b);
    }
    if (a->desc->flags & LMP_ARCH_NORM_NO_PARAMS) { /* OLMo: weight 1, bias 0 */
        float *w, *b;
        if ((st = lmp_norm_identity(a->dim, &w, &b))) return st;
        m->final_norm_w = lmp_model_own(m, w);
        m->final_norm_b = lmp_model_own(m, b);
    } else {
        if ((st = load_f32(m, "output_norm.weight", 0, a->dim, &fnorm))) return st;
        m->final_norm_w = lmp_model_own(m, fnorm);
    }
    if (!(a->desc->flags & LMP_ARCH_NORM_NO_PARAMS) && (a->family == LMP_FAMILY_GPT2 || a->layer_norm)) {
        float *p = NULL; /* LayerNorm's bias (command-r's: none, 0) */
        if (a->desc->flags & LMP_ARCH_NORM_NO_BIAS) {
            if (!(p = calloc((size_t)a->dim, sizeof *p))) return lmp_fail(LMP_ENOMEM, "out of memory");
        } else if ((st = load_f32(m, "output_norm.bias", 0, a->dim, &p))) {
            return st;
        }
        m->final_norm_b = lmp_model_own(m, p);
    }
    if (a->family == LMP_FAMILY_GPT2) { /* the learned positions */
        float *p = NULL;
        if ((st = load_f32(m, "position_embd.weight", a->seq_len, a->dim, &p))) return st;
        m->pos_emb = lmp_model_own(m, p);
    }
    if (lmp_gguf_find_tensor(g, "output.weight")) {
        if ((st = load_f32(m, "output.weight", a->vocab, a->dim, &head))) return st;
        m->lm_head = lmp_model_own(m, head);
    } else {
        m->lm_head = m->tok_emb; /* tied embeddings */
    }
    if (lmp_gguf_find_tensor(g, "output.bias")) { /* Phi-2: the head's bias */
        float *p = NULL;
        if ((st = load_f32(m, "output.bias", 0, a->vocab, &p))) return st;
        m->lm_head_b = lmp_model_own(m, p);
    }
    return 0;
}
