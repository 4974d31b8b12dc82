/* model.c — what every model format shares: recognising the file, block tables, f32 copies. */
#include "model/model.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/input_file.h"
#include "model/block_steps.h"
#include "model/tensor_names.h"

/* ---- block tables ------------------------------------------------------------------------ */
static char *fmt_name(const char *prefix, int layer, const char *leaf)
{
    char buf[320];
    snprintf(buf, sizeof buf, "%s.%d.%s", prefix, layer, leaf);
    return strdup(buf);
}

int lmp_arch_attn_roles(const lmp_arch *a, lmp_role roles[5])
{
    int n = 0;
    if (!a->mla) {
        roles[n++] = LMP_ROLE_Q, roles[n++] = LMP_ROLE_K, roles[n++] = LMP_ROLE_V;
    } else { /* DeepSeek's multi-head latent attention */
        if (a->mla_q_lora) roles[n++] = LMP_ROLE_Q_A, roles[n++] = LMP_ROLE_Q_B;
        else roles[n++] = LMP_ROLE_Q;
        roles[n++] = LMP_ROLE_KV_A, roles[n++] = LMP_ROLE_KV_B;
    }
    roles[n++] = LMP_ROLE_O;
    return n;
}

/* The HF names of a sparse layer's linears after "model.layers.N.": attention, the router, the
 * shared gate, the shared expert's gate/up/down, then each routed expert's gate/up/down. */
static int moe_layout(lmp_block *b, int index, const lmp_arch *a)
{
    const lmp_moe_desc *md = a->desc->moe;
    const int shared = a->shared_hidden > 0, shared_gate = shared && md->hf_shared_gate;
    const int E = (int)a->n_experts;
    lmp_role attn[5];
    const int n_attn = lmp_arch_attn_roles(a, attn);
    b->n_experts = E;
    b->n_experts_used = (int)a->n_experts_used;
    b->n_linears = n_attn + 1 + shared_gate + 3 * shared + 3 * E;
    b->linears = calloc((size_t)b->n_linears, sizeof *b->linears);
    if (!b->linears) return lmp_fail(LMP_ENOMEM, "out of memory");
    int k = 0;
    for (int i = 0; i < n_attn; i++) {
        b->linears[k].role = attn[i];
        b->linears[k++].name = fmt_name("model.layers", index, lmp_hf_linear_leaf(a->family, attn[i]));
    }
    b->linears[k].role = LMP_ROLE_ROUTER;
    b->linears[k++].name = fmt_name("model.layers", index, md->hf_router);
    if (shared_gate) {
        b->linears[k].role = LMP_ROLE_SHARED_GATE;
        b->linears[k++].name = fmt_name("model.layers", index, md->hf_shared_gate);
    }
    static const lmp_role mlp_roles[3] = {LMP_ROLE_GATE, LMP_ROLE_UP, LMP_ROLE_DOWN};
    static const char *const shared_leaf[3] = {"gate_proj", "up_proj", "down_proj"};
    char leaf[160];
    for (int r = 0; shared && r < 3; r++) {
        snprintf(leaf, sizeof leaf, "%s.%s", md->hf_shared, shared_leaf[r]);
        b->linears[k] = (lmp_linear){.role = mlp_roles[r], .expert_kind = LMP_EXPERT_SHARED,
                                     .name = fmt_name("model.layers", index, leaf)};
        k++;
    }
    for (int e = 0; e < E; e++)
        for (int r = 0; r < 3; r++) {
            snprintf(leaf, sizeof leaf, "%s.%d.%s", md->hf_experts, e, md->hf_expert_leaf[r]);
            b->linears[k] = (lmp_linear){.role = mlp_roles[r], .expert_kind = LMP_EXPERT_ROUTED, .expert = e,
                                         .name = fmt_name("model.layers", index, leaf)};
            k++;
        }
    return 0;
}

/* [out, in] of a linear of architecture a (in a sparse layer for the MLP's). */
static void linear_shape(const lmp_arch *a, lmp_linear *l)
{
    const int64_t kv = a->n_kv_heads * a->head_dim, qd = a->n_heads * a->head_dim;
    const int64_t f = l->expert_kind == LMP_EXPERT_ROUTED ? a->expert_hidden
                      : l->expert_kind == LMP_EXPERT_SHARED ? a->shared_hidden : a->hidden;
    const int64_t mla_qd = a->n_heads * (a->mla_nope + a->mla_rope); /* MLA's q: nope and rope parts */
    switch (l->role) {
    case LMP_ROLE_Q: l->out = a->mla ? mla_qd : qd, l->in = a->dim; break;
    case LMP_ROLE_Q_A: l->out = a->mla_q_lora, l->in = a->dim; break;
    case LMP_ROLE_Q_B: l->out = mla_qd, l->in = a->mla_q_lora; break;
    case LMP_ROLE_KV_A: l->out = a->mla_kv_lora + a->mla_rope, l->in = a->dim; break;
    case LMP_ROLE_KV_B: l->out = a->n_heads * (a->mla_nope + a->head_dim), l->in = a->mla_kv_lora; break;
    case LMP_ROLE_K: case LMP_ROLE_V: l->out = kv, l->in = a->dim; break;
    case LMP_ROLE_O: l->out = a->dim, l->in = qd; break;
    case LMP_ROLE_GATE: case LMP_ROLE_UP: l->out = f, l->in = a->dim; break;
    case LMP_ROLE_DOWN: l->out = a->dim, l->in = f; break;
    case LMP_ROLE_ROUTER: l->out = a->n_experts, l->in = a->dim; break;
    case LMP_ROLE_SHARED_GATE: l->out = 1, l->in = a->dim; break;
    case LMP_ROLE_COUNT: break;
    }
}

int64_t lmp_blocks_linear_count(const lmp_block *blocks, int64_t n)
{
    int64_t total = 0;
    for (int64_t b = 0; b < n; b++) total += blocks[b].n_linears;
    return total;
}

int lmp_blocks_linear_at(const lmp_block *blocks, int64_t n, int64_t g, int64_t *b, int *i)
{
    for (*b = 0; *b < n && g >= 0; (*b)++) {
        if (g < blocks[*b].n_linears) {
            *i = (int)g;
            return 0;
        }
        g -= blocks[*b].n_linears;
    }
    *b = 0;
    *i = 0;
    return -1;
}

int *lmp_fed_dup(const int *fed, int n)
{
    if (!fed || n <= 0) return NULL;
    int *p = malloc((size_t)n * sizeof *p);
    if (p) memcpy(p, fed, (size_t)n * sizeof *p);
    return p;
}

int lmp_block_init(lmp_block *b, int index, const lmp_arch *a)
{
    const int gpt2 = a->family == LMP_FAMILY_GPT2 || a->plain_mlp; /* GPT-2's six linears */
    /* the block's linears in role order (GPT-2 has no gate), named from model/tensor_names.h */
    static const lmp_role llama_roles[] = {LMP_ROLE_Q, LMP_ROLE_K, LMP_ROLE_V, LMP_ROLE_O,
                                           LMP_ROLE_GATE, LMP_ROLE_UP, LMP_ROLE_DOWN};
    static const lmp_role gpt2_roles[] = {LMP_ROLE_Q, LMP_ROLE_K, LMP_ROLE_V, LMP_ROLE_O, LMP_ROLE_UP, LMP_ROLE_DOWN};
    const lmp_role *roles = gpt2 ? gpt2_roles : llama_roles;
    const char *prefix = lmp_hf_arch_block_prefix(a);
    memset(b, 0, sizeof *b);
    b->index = index;
    b->n_blocks = (int)a->n_layers;
    b->n_norms = (a->no_pre_norms ? 0 : 2 - (a->shared_norm != 0)) + 2 * (a->qk_norm != 0) + 2 * (a->post_norms != 0) +
                 (a->mla ? 1 + (a->mla_q_lora > 0) : 0) + (a->attn_sinks != 0);
    b->norms = calloc((size_t)b->n_norms, sizeof *b->norms);
    if (!b->norms) return lmp_fail(LMP_ENOMEM, "out of memory");
    if (lmp_arch_moe_layer(a, index)) {
        int st = moe_layout(b, index, a);
        if (st) return st;
    } else {
        lmp_role mla_roles[8];
        if (a->mla) { /* MLA's attention linears, then the dense MLP's */
            const int n = lmp_arch_attn_roles(a, mla_roles);
            mla_roles[n] = LMP_ROLE_GATE, mla_roles[n + 1] = LMP_ROLE_UP, mla_roles[n + 2] = LMP_ROLE_DOWN;
            roles = mla_roles;
            b->n_linears = n + 3;
        } else {
            b->n_linears = gpt2 ? 6 : 7;
        }
        b->linears = calloc((size_t)b->n_linears, sizeof *b->linears);
        if (!b->linears) return lmp_fail(LMP_ENOMEM, "out of memory");
        for (int i = 0; i < b->n_linears; i++) {
            b->linears[i].role = roles[i];
            b->linears[i].name = fmt_name(prefix, index, lmp_hf_arch_linear_leaf(a, roles[i]));
        }
    }
    for (int i = 0; i < b->n_linears; i++) {
        lmp_linear *l = &b->linears[i];
        l->weight_bits = 32.0;
        l->calib_tokens = -1;
        linear_shape(a, l);
        if (!l->name) return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    for (int k = LMP_NORM_ATTN; k < LMP_NORM_KINDS; k++) {
        const int i = lmp_norm_index(a, k);
        if (i < 0 || (k == LMP_NORM_MLP && a->shared_norm)) continue; /* Phi-2: norm_mlp is norm_attn */
        b->norms[i] = (lmp_norm){.name = fmt_name(prefix, index, lmp_hf_norm_leaf(a, k)),
                                 .dim = k == LMP_NORM_Q && a->qk_norm_all   ? a->n_heads * a->head_dim
                                        : k == LMP_NORM_K && a->qk_norm_all ? a->n_kv_heads * a->head_dim
                                        : k == LMP_NORM_Q || k == LMP_NORM_K ? a->head_dim
                                        : k == LMP_NORM_Q_A                 ? a->mla_q_lora
                                        : k == LMP_NORM_KV_A                ? a->mla_kv_lora
                                        : k == LMP_NORM_SINKS               ? a->n_heads
                                                                            : a->dim};
    }
    for (int i = 0; i < b->n_norms; i++)
        if (!b->norms[i].name) return lmp_fail(LMP_ENOMEM, "out of memory");
    /* which linears each norm feeds: those of the block's steps (model/block_steps.h) that read
     * its output (norm_attn: q, k, v; norm_mlp: gate, up or GPT-2's c_fc, or in a sparse layer the
     * router, the shared gate and every expert's gate and up; q/k and post norms none).  A norm
     * that two steps run (Phi-2's shared norm: before attention and before the MLP) feeds the
     * linears of both: q, k, v and up read the same values. */
    lmp_block_plan p;
    lmp_block_plan_make(&p, a, index);
    for (int i = 0; i < p.n_steps; i++) {
        const lmp_block_step *s = &p.step[i];
        if (s->kind != LMP_STEP_NORM || s->norm < 0 || s->norm >= b->n_norms) continue;
        lmp_norm *nm = &b->norms[s->norm];
        int n = nm->n_fed;
        int *fed = malloc((size_t)(b->n_linears + n) * sizeof *fed);
        if (!fed) return lmp_fail(LMP_ENOMEM, "out of memory");
        if (n) memcpy(fed, nm->fed, (size_t)n * sizeof *fed);
        free(nm->fed);
        nm->fed = NULL;
        for (int j = 0; j < p.n_steps; j++) {
            const lmp_block_step *r = &p.step[j];
            if (r->in[0] != s->out[0]) continue;
            if (r->kind == LMP_STEP_LINEARS)
                for (int o = 0; o < r->n_out; o++) {
                    const int li = lmp_block_find(b, r->roles[o]);
                    if (li >= 0) fed[n++] = li;
                }
            if (r->kind == LMP_STEP_MLA) /* q (or q_a) and kv_a read the attention norm's output */
                for (int li = 0; li < b->n_linears; li++) {
                    const lmp_role ro = b->linears[li].role;
                    if (ro == LMP_ROLE_Q || ro == LMP_ROLE_Q_A || ro == LMP_ROLE_KV_A) fed[n++] = li;
                }
            if (r->kind == LMP_STEP_MOE) /* every linear reading the MoE's input */
                for (int li = 0; li < b->n_linears; li++)
                    if (lmp_block_plan_input_group(&p, b->linears[li].role) == r->group) fed[n++] = li;
        }
        nm->n_fed = n;
        nm->fed = n ? fed : NULL;
        if (!n) free(fed);
    }
    return 0;
}

int lmp_arch_moe_layer(const lmp_arch *a, int64_t layer)
{
    return a->n_experts > 0 && !(layer >= 0 && layer < LMP_MAX_LAYERS && a->dense_layer[layer]);
}

int64_t lmp_arch_window(const lmp_arch *a, int64_t layer)
{
    return layer >= 0 && layer < LMP_MAX_LAYERS && a->sliding_layer[layer] ? a->window : 0;
}

const lmp_rope *lmp_arch_rope(const lmp_arch *a, int64_t layer)
{
    const int local = a->rope_local.n_rot && layer >= 0 && layer < LMP_MAX_LAYERS && a->sliding_layer[layer];
    return local ? &a->rope_local : &a->rope;
}

int lmp_norm_index(const lmp_arch *a, int k)
{
    /* a shared norm: norm_mlp is norm 0; no pre-norms (OLMo 2): the q/k norms come first */
    const int qk = a->qk_norm != 0, base = a->no_pre_norms ? 0 : a->shared_norm ? 1 : 2;
    switch (k) {
    case LMP_NORM_ATTN: return a->no_pre_norms ? -1 : 0;
    case LMP_NORM_MLP: return a->no_pre_norms ? -1 : base - 1;
    case LMP_NORM_Q: return qk ? base : -1;
    case LMP_NORM_K: return qk ? base + 1 : -1;
    case LMP_NORM_POST_ATTN: return a->post_norms ? base + 2 * qk : -1;
    case LMP_NORM_POST_MLP: return a->post_norms ? base + 1 + 2 * qk : -1;
    case LMP_NORM_Q_A: return a->mla && a->mla_q_lora ? base : -1; /* MLA has no q/k or post norms */
    case LMP_NORM_KV_A: return a->mla ? base + (a->mla_q_lora > 0) : -1;
    case LMP_NORM_SINKS: /* last: after every other norm the block has */
        return a->attn_sinks ? base + 2 * qk + 2 * (a->post_norms != 0) + (a->mla ? 1 + (a->mla_q_lora > 0) : 0) : -1;
    default: return -1;
    }
}

int64_t lmp_arch_mid_width(const lmp_arch *a)
{
    const int64_t qd = a->n_heads * a->head_dim, w = a->hidden > a->dim ? a->hidden : a->dim;
    const int64_t mla = a->mla ? a->n_heads * (a->mla_nope + (a->mla_rope > a->head_dim ? a->mla_rope : a->head_dim)) : 0;
    const int64_t m = qd > w ? qd : w;
    return mla > m ? mla : m;
}

/* Rows of w[rows, cols] (rows = heads * hd) from rotate-half to adjacent-pair order, per head,
 * over the n_rot rotated dims (partial rotary leaves the rest in place): new row 2i = old row i,
 * new row 2i+1 = old row i + n_rot/2.  cols = 1 for a bias. */
int lmp_rope_permute_rows(float *w, int64_t rows, int64_t cols, int64_t hd, int64_t n_rot)
{
    float *tmp = malloc((size_t)(n_rot * cols) * sizeof *tmp);
    if (!tmp) return lmp_fail(LMP_ENOMEM, "out of memory permuting q/k rows");
    const size_t row = (size_t)cols * sizeof *w;
    for (int64_t h = 0; h < rows / hd; h++) {
        float *head = w + h * hd * cols;
        for (int64_t i = 0; i < n_rot / 2; i++) {
            memcpy(tmp + (2 * i) * cols, head + i * cols, row);
            memcpy(tmp + (2 * i + 1) * cols, head + (i + n_rot / 2) * cols, row);
        }
        memcpy(head, tmp, (size_t)n_rot * row);
    }
    free(tmp);
    return 0;
}

int64_t lmp_rope_halves_row(int64_t r, int64_t hd, int64_t n_rot)
{
    const int64_t i = r % hd, half = n_rot / 2;
    if (i >= n_rot) return r;
    return r - i + (i < half ? 2 * i : 2 * (i - half) + 1);
}

int lmp_fused_rows(const lmp_arch *a, const lmp_linear *l, int fused_qkv, int fused_gate_up, int64_t *r0,
                   int64_t *rows)
{
    const int64_t qd = a->n_heads * a->head_dim, kv = a->n_kv_heads * a->head_dim;
    *r0 = 0;
    *rows = l->out;
    if (fused_qkv && (l->role == LMP_ROLE_Q || l->role == LMP_ROLE_K || l->role == LMP_ROLE_V)) {
        *rows = qd + 2 * kv;
        *r0 = l->role == LMP_ROLE_Q ? 0 : l->role == LMP_ROLE_K ? qd : qd + kv;
        return LMP_FUSED_QKV;
    }
    if (fused_gate_up && (l->role == LMP_ROLE_GATE || l->role == LMP_ROLE_UP)) {
        *rows = 2 * a->hidden;
        *r0 = l->role == LMP_ROLE_GATE ? 0 : a->hidden;
        return LMP_FUSED_GATE_UP;
    }
    return LMP_FUSED_NONE;
}

int lmp_block_find(const lmp_block *b, lmp_role role)
{
    for (int i = 0; i < b->n_linears; i++)
        if (b->linears[i].role == role && b->linears[i].expert_kind == LMP_EXPERT_NONE) return i;
    return -1;
}

int lmp_block_find_expert(const lmp_block *b, lmp_role role, lmp_expert_kind kind, int e)
{
    for (int i = 0; i < b->n_linears; i++) {
        const lmp_linear *l = &b->linears[i];
        if (l->role == role && l->expert_kind == kind && (kind != LMP_EXPERT_ROUTED || l->expert == e)) return i;
    }
    return -1;
}


void lmp_block_free_tables(lmp_block *b)
{
    for (int i = 0; b->linears && i < b->n_linears; i++) free((char *)b->linears[i].name);
    for (int i = 0; b->norms && i < b->n_norms; i++) {
        free((char *)b->norms[i].name);
        free(b->norms[i].fed);
    }
    free(b->linears);
    free(b->norms);
    memset(b, 0, sizeof *b);
}

static float *dup_floats(const float *src, int64_t n)
{
    if (!src) return NULL;
    float *p = malloc((size_t)n * sizeof *p);
    if (p) memcpy(p, src, (size_t)n * sizeof *p);
    return p;
}

void lmp_wgrid_free(lmp_wgrid *g)
{
    if (!g) return;
    free(g->scales);
    free(g->zeros);
    free(g->g_idx);
    free(g);
}

lmp_wgrid *lmp_wgrid_new(const lmp_wspec *spec, int64_t out, int64_t in, const float *scales, const float *zeros,
                         const int32_t *g_idx)
{
    lmp_wgrid *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->spec = *spec;
    g->n_scales = lmp_wspec_n_scales(spec, out, in);
    g->scales = malloc((size_t)g->n_scales * sizeof *g->scales);
    g->zeros = zeros && !spec->sym ? malloc((size_t)g->n_scales * sizeof *g->zeros) : NULL;
    g->g_idx = g_idx ? malloc((size_t)in * sizeof *g->g_idx) : NULL;
    if (!g->scales || (zeros && !spec->sym && !g->zeros) || (g_idx && !g->g_idx)) {
        lmp_wgrid_free(g);
        return NULL;
    }
    memcpy(g->scales, scales, (size_t)g->n_scales * sizeof *g->scales);
    if (g->zeros) memcpy(g->zeros, zeros, (size_t)g->n_scales * sizeof *g->zeros);
    if (g->g_idx) memcpy(g->g_idx, g_idx, (size_t)in * sizeof *g->g_idx);
    return g;
}

int lmp_block_clone(const lmp_block *src, lmp_block *dst)
{
    *dst = *src;
    dst->linears = calloc((size_t)src->n_linears, sizeof *dst->linears);
    dst->norms = calloc((size_t)src->n_norms, sizeof *dst->norms);
    if (!dst->linears || !dst->norms) goto oom;
    for (int i = 0; i < src->n_linears; i++) {
        const lmp_linear *s = &src->linears[i];
        lmp_linear *d = &dst->linears[i];
        *d = *s;
        d->name = strdup(s->name);
        d->w = dup_floats(s->w, s->out * s->in);
        d->b = dup_floats(s->b, s->out);
        d->in_shift = dup_floats(s->in_shift, s->in);
        d->in_scale = dup_floats(s->in_scale, s->in);
        d->mask = s->mask ? malloc((size_t)(s->out * s->in)) : NULL;
        if (d->mask) memcpy(d->mask, s->mask, (size_t)(s->out * s->in));
        d->shift_bias = s->shift_bias ? malloc((size_t)s->out * sizeof *d->shift_bias) : NULL;
        if (d->shift_bias) memcpy(d->shift_bias, s->shift_bias, (size_t)s->out * sizeof *d->shift_bias);
        d->params = NULL;
        d->stats = NULL;
        d->grid = s->grid ? lmp_wgrid_new(&s->grid->spec, s->out, s->in, s->grid->scales, s->grid->zeros, s->grid->g_idx)
                          : NULL;
        if (!d->name || !d->w || (s->b && !d->b) || (s->in_shift && !d->in_shift) || (s->in_scale && !d->in_scale) ||
            (s->mask && !d->mask) || (s->shift_bias && !d->shift_bias) || (s->grid && !d->grid))
            goto oom;
    }
    for (int i = 0; i < src->n_norms; i++) {
        const lmp_norm *s = &src->norms[i];
        lmp_norm *d = &dst->norms[i];
        *d = *s;
        d->fed = lmp_fed_dup(s->fed, s->n_fed);
        d->name = strdup(s->name);
        d->w = dup_floats(s->w, s->dim);
        d->b = dup_floats(s->b, s->dim);
        if ((s->n_fed && !d->fed) || !d->name || !d->w || (s->b && !d->b)) goto oom;
    }
    return 0;
oom:
    lmp_block_free(dst);
    return lmp_fail(LMP_ENOMEM, "out of memory copying block %d", src->index);
}

void lmp_block_free(lmp_block *b)
{
    for (int i = 0; b->linears && i < b->n_linears; i++) {
        free(b->linears[i].w);
        free(b->linears[i].b);
        free(b->linears[i].in_shift);
        free(b->linears[i].in_scale);
        free(b->linears[i].mask);
        free(b->linears[i].shift_bias);
        lmp_wgrid_free(b->linears[i].grid);
    }
    for (int i = 0; b->norms && i < b->n_norms; i++) {
        free(b->norms[i].w);
        free(b->norms[i].b);
    }
    lmp_block_free_tables(b);
}

/* ---- the model --------------------------------------------------------------------------- */
float *lmp_model_own(lmp_model *m, float *buf)
{
    if (buf && m->n_owned < (int)(sizeof m->owned / sizeof *m->owned)) m->owned[m->n_owned++] = buf;
    return buf;
}

int lmp_norm_identity(int64_t dim, float **w, float **b)
{
    *w = malloc((size_t)dim * sizeof **w);
    *b = calloc((size_t)dim, sizeof **b);
    if (!*w || !*b) {
        free(*w), free(*b);
        *w = *b = NULL;
        return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    for (int64_t j = 0; j < dim; j++) (*w)[j] = 1.0f;
    return 0;
}

/* The first non-finite element of x[n], or -1. */
static int64_t first_nonfinite(const float *x, int64_t n)
{
    for (int64_t i = 0; x && i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

int lmp_block_find_nonfinite(const lmp_block *b, char *name, size_t size, int64_t *at, float *value)
{
    for (int i = 0; i < b->n_linears + b->n_norms; i++) {
        const int lin = i < b->n_linears;
        const lmp_linear *l = lin ? &b->linears[i] : NULL;
        const lmp_norm *nm = lin ? NULL : &b->norms[i - b->n_linears];
        const float *t[2] = {lin ? l->w : nm->w, lin ? l->b : nm->b};
        const int64_t n[2] = {lin ? l->out * l->in : nm->dim, lin ? l->out : nm->dim};
        for (int k = 0; k < 2; k++) {
            int64_t j = first_nonfinite(t[k], n[k]);
            if (j < 0) continue;
            snprintf(name, size, "%s.%s", lin ? l->name : nm->name, k ? "bias" : "weight");
            *at = j;
            *value = t[k][j];
            return 1;
        }
    }
    return 0;
}

/* A NaN or infinity in a weight makes every number computed from it meaningless (a ppl of nan
 * printed as a result), so a model holding one is refused, naming the tensor and the place. */
static int nonfinite_error(const lmp_model *m, const char *name, int64_t at, float value)
{
    return lmp_fail(LMP_EINVAL, "%s: tensor %s holds a non-finite value (%g at element %lld): the model's weights "
                    "must be finite numbers", m->path, name, (double)value, (long long)at);
}

static int check_finite(const lmp_model *m, const float *x, int64_t n, const char *name)
{
    int64_t at = first_nonfinite(x, n);
    return at < 0 ? 0 : nonfinite_error(m, name, at, x[at]);
}

int lmp_model_block_copy(const lmp_model *m, int64_t b, lmp_block *out)
{
    int st = m->src->block_copy(m, b, out);
    if (m->src->release_pages) m->src->release_pages(m);
    char name[512];
    int64_t at;
    float value;
    if (!st && lmp_block_find_nonfinite(out, name, sizeof name, &at, &value)) {
        lmp_block_free(out);
        st = nonfinite_error(m, name, at, value);
    }
    return st;
}

lmp_block *lmp_model_blocks(lmp_model *m)
{
    if (m->blocks) return m->blocks;
    lmp_block *blocks = calloc((size_t)m->arch.n_layers, sizeof *blocks);
    if (!blocks) return lmp_fail(LMP_ENOMEM, "out of memory"), NULL;
    for (int64_t b = 0; b < m->arch.n_layers; b++)
        if (lmp_model_block_copy(m, b, &blocks[b])) {
            for (int64_t i = 0; i < b; i++) lmp_block_free(&blocks[i]);
            free(blocks);
            return NULL;
        }
    m->blocks = blocks;
    m->blocks_owned = 1;
    return blocks;
}

void lmp_model_blocks_release(lmp_model *m)
{
    if (!m->blocks || !m->blocks_owned) return;
    for (int64_t l = 0; l < m->arch.n_layers; l++) lmp_block_free(&m->blocks[l]);
    free(m->blocks);
    m->blocks = NULL;
    m->blocks_owned = 0;
}

double lmp_model_linear_bits(const lmp_model *m, int64_t b, const lmp_linear *l)
{
    return m->src->linear_bits ? m->src->linear_bits(m, b, l) : 32.0;
}

void lmp_model_format_types(char *buf, size_t n, const char *prefix, int k, const char *const *names,
                            const int64_t *params)
{
    char pre[128]; /* prefix may be buf itself */
    snprintf(pre, sizeof pre, "%s", prefix);
    size_t len = (size_t)snprintf(buf, n, "%s", pre);
    int shown = 0;
    unsigned char done[64] = {0};
    for (int round = 0; round < k && round < 64; round++) {
        int best = -1;
        for (int i = 0; i < k && i < 64; i++)
            if (!done[i] && params[i] > 0 && (best < 0 || params[i] > params[best])) best = i;
        if (best < 0) break;
        done[best] = 1;
        if (len < n) len += (size_t)snprintf(buf + len, n - len, "%s%s", shown++ ? "/" : " ", names[best]);
    }
    if (shown > 1 && len < n) snprintf(buf + len, n - len, " mix");
}

int64_t lmp_model_block_linear_params(const lmp_model *m)
{
    /* From the architecture: the blocks may not be converted yet. */
    lmp_block b;
    if (lmp_block_init(&b, 0, &m->arch)) return 0;
    int64_t n = 0;
    for (int i = 0; i < b.n_linears; i++) n += b.linears[i].out * b.linears[i].in;
    lmp_block_free_tables(&b);
    return n * m->arch.n_layers;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

/* The first bytes of a file for a message: "'XGUF' (58 47 55 46)". */
static void magic_words(const unsigned char *m, int n, char *buf, size_t size)
{
    char text[8], hex[16] = "";
    for (int i = 0; i < n; i++) {
        text[i] = m[i] >= 0x20 && m[i] < 0x7f ? (char)m[i] : '.';
        snprintf(hex + strlen(hex), sizeof hex - strlen(hex), "%s%02x", i ? " " : "", m[i]);
    }
    text[n] = 0;
    snprintf(buf, size, "'%s' (%s)", text, hex);
}

int lmp_model_load(const char *path, lmp_model **out)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return lmp_fail(LMP_EIO, "%s: cannot open model: %s", path, strerror(errno));
    int hf = S_ISDIR(sb.st_mode) || ends_with(path, ".safetensors");
    int fd = -1;
    uint64_t size = 0;
    /* A file model is opened through input_file.h: a FIFO or a device is refused without
     * blocking (the format is read from the content; the loaders map regular files only). */
    if (!hf) {
        int st = lmp_input_open_kind(path, LMP_INPUT_MODEL, &fd, &size);
        if (st) return st;
    }
    lmp_model *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        if (fd >= 0) close(fd);
        return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    unsigned char magic[4] = {0};
    int have = !hf && pread(fd, magic, 4, 0) == 4;
    char words[64] = "";
    if (!hf) magic_words(magic, have ? 4 : (int)size, words, sizeof words);
    int st;
    if (hf) {
        st = lmp_model_open_hf(m); /* a Hugging Face folder, or a .safetensors with config.json beside it */
    } else if (have && memcmp(magic, "GGUF", 4) == 0) {
        st = lmp_model_open_gguf(m);
    } else if (have && memcmp(magic, "ak42", 4) == 0) {
        st = lmp_fail(LMP_EINVAL, "%s: llama2.c version-1 exports are not supported (use the v0 format)", path);
    } else if (ends_with(path, ".gguf")) {
        st = lmp_fail(LMP_EINVAL, "%s: not a GGUF file (it starts with %s; a GGUF starts with 'GGUF')", path,
                      have ? words : "fewer than 4 bytes");
    } else {
        st = lmp_model_open_llama2c(m, fd, (size_t)size);
        /* A header that is no llama2.c header at all: the file matched no format; say which
         * were tried.  (A plausible header with the wrong size keeps its own message.) */
        const char *e = lmp_last_error();
        size_t pn = strlen(path);
        if (st && strncmp(e, path, pn) == 0 && strncmp(e + pn, ": ", 2) == 0 &&
            (strstr(e, "not a llama2.c checkpoint: header field") || strstr(e, "too short for a llama2.c header"))) {
            char why[512];
            snprintf(why, sizeof why, "%s", e + pn + 2);
            st = lmp_fail(LMP_EINVAL, "%s: not a model file lmpress can read: not GGUF (it starts with %s, not "
                          "'GGUF'), not safetensors (a .safetensors file or a Hugging Face folder), and %s",
                          path, have ? words : "fewer than 4 bytes", why);
        }
    }
    if (fd >= 0) close(fd);
    /* the tensors outside the blocks (the blocks' own are checked as each is converted) */
    const int64_t d = m->arch.dim;
    if (!st) st = check_finite(m, m->tok_emb, m->arch.vocab * d, "(the token embedding)");
    if (!st) st = check_finite(m, m->pos_emb, m->arch.seq_len * d, "(the position embedding)");
    if (!st) st = check_finite(m, m->final_norm_w, d, "(the final norm's weight)");
    if (!st) st = check_finite(m, m->final_norm_b, d, "(the final norm's bias)");
    if (!st && m->lm_head != m->tok_emb) st = check_finite(m, m->lm_head, m->arch.vocab * d, "(the output head)");
    if (st) {
        lmp_model_free(m);
        return st;
    }
    *out = m;
    return 0;
}

void lmp_model_free(lmp_model *m)
{
    if (!m) return;
    for (int64_t l = 0; m->blocks && l < m->arch.n_layers; l++) {
        if (m->blocks_owned) lmp_block_free(&m->blocks[l]);
        else lmp_block_free_tables(&m->blocks[l]);
    }
    free(m->blocks);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    if (m->src && m->src->close) m->src->close(m);
    free(m->path);
    free(m);
}
