/* awq.c — AWQ, activation-aware weight scaling, as llm-compressor's AWQModifier does it
 * (docs/algorithms.md §3.10): per input channel j of a group of "balance" linears sharing an
 * input, a scale s_j is multiplied into their columns and divided out of the op before them
 * (the "smooth" op: a norm, v_proj, up_proj), so the function is unchanged in float while the
 * weights a later quantizing stage (rtn, gptq) rounds are the scaled ones.  s is searched on a
 * grid of n_grid ratios r = 0, 1/n_grid, ...:
 *   duo scaling: s = max(x̄^r / (w̄^(1-r) + 1e-4), 1e-4), else s = max(x̄^r, 1e-4);
 *   s <- s / sqrt(max s * min s), a non-finite s_j <- 1;
 * x̄ the mean |x| of each input channel over the calibration sample, w̄ the mean over the
 * balance linears' rows of |W| divided by its quantization group's abs-max (+1e-6).  Each
 * ratio's loss is the mean squared difference between X W^T and X (Q(W diag s) diag(s)^-1)^T,
 * Q llm-compressor's _pseudo_quantize_tensor; the least loss wins (the first on a tie).
 *
 * The mappings come from the architecture layer through the block: every norm that feeds
 * linears (input_layernorm -> q,k,v; post_attention_layernorm or Gemma's pre-feedforward norm
 * -> gate,up; GPT-2's ln_1 -> c_attn, ln_2 -> c_fc), then v -> o where v's outputs are o's
 * inputs (not with grouped-query attention, which llm-compressor skips the same way), then
 * up -> down where the MLP is gated (act(gate) * up is linear in up; GPT-2's gelu(c_fc) is not,
 * so that block has no up -> down mapping).
 *
 * Difference from llm-compressor, by necessity of the plugin interface: a mapping's loss is
 * measured on the balance linears' own outputs.  llm-compressor measures v -> o and up -> down
 * there too (their parent module is the balance linear), but norm -> q,k,v and norm -> gate,up
 * on the attention's and the MLP's outputs, which a plugin cannot run.
 *
 * With clip_search, AutoAWQ's weight-clipping search follows (llm-compressor has none): for each
 * targeted linear but q and k, each (row, group) is clipped to ±max where max is the best of
 * (1 - i/20) * abs-max, i < 20 * max_shrink, by the squared error of the group's partial dot
 * products on clip_tokens tokens of the (scaled) input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lmpress/plugin.h"

enum { P_BITS, P_GROUP, P_SYM, P_DUO, P_NGRID, P_SAMPLE, P_CLIP, P_SHRINK, P_CLIP_TOKENS, P_COUNT };

static const lmp_param_spec awq_params[P_COUNT] = {
    [P_BITS] = {"bits", LMP_PARAM_INT, "bits of the grid the search quantizes onto (the later stage's)", 4, NULL, 2, 8,
                NULL, 0},
    [P_GROUP] = {"group", LMP_PARAM_INT,
                 "input columns per quantization group of the search's grid (0: one group per row); a "
                 "linear's width must be a multiple of it",
                 128, NULL, 0, 1 << 20, NULL, 0},
    [P_SYM] = {"symmetric", LMP_PARAM_BOOL,
               "search grid: symmetric abs-max (levels -2^(b-1)..2^(b-1)-1), else min-max with a zero point", 0,
               NULL, 0, 1, NULL, 0},
    [P_DUO] = {"duo_scaling", LMP_PARAM_BOOL, "s = x^r / w^(1-r) (true) or x^r (false)", 1, NULL, 0, 1, NULL, 0},
    [P_NGRID] = {"n_grid", LMP_PARAM_INT, "ratios searched: r = i / n_grid, i < n_grid", 20, NULL, 1, 1000, NULL, 0},
    [P_SAMPLE] = {"sample_tokens", LMP_PARAM_INT,
                  "calibration tokens (evenly spaced) the mean |x| and the losses are taken on; more than "
                  "there are: all of them",
                  4096, NULL, 16, 1 << 24, NULL, 0},
    [P_CLIP] = {"clip_search", LMP_PARAM_BOOL, "then AutoAWQ's weight-clipping search (not on q, k)", 0, NULL, 0, 1,
                NULL, 0},
    [P_SHRINK] = {"max_shrink", LMP_PARAM_FLOAT, "clip search: clip ratios 1 - i/20 down to 1 - max_shrink", 0.5,
                  NULL, 0.05, 1, NULL, 0},
    [P_CLIP_TOKENS] = {"clip_tokens", LMP_PARAM_INT, "clip search: tokens of the sample it uses (every k-th)", 512,
                       NULL, 1, 1 << 24, NULL, 0},
};

typedef struct awq_grid {
    int bits, sym;
    int64_t group; /* 0: the row */
} awq_grid;

/* llm-compressor's _pseudo_quantize_tensor on one group g[0..n), in f32 as torch does it. */
static void pseudo_quantize(const awq_grid *q, float *g, int64_t n)
{
    if (!q->sym) {
        float mx = g[0], mn = g[0];
        for (int64_t i = 1; i < n; i++) {
            mx = g[i] > mx ? g[i] : mx;
            mn = g[i] < mn ? g[i] : mn;
        }
        const float max_int = (float)((1 << q->bits) - 1);
        float range = mx - mn;
        if (range < 1e-5f) range = 1e-5f;
        const float scale = range / max_int;
        float zero = -nearbyintf(mn / scale);
        zero = zero < 0 ? 0 : (zero > max_int ? max_int : zero);
        for (int64_t i = 0; i < n; i++) {
            float c = nearbyintf(g[i] / scale) + zero;
            c = c < 0 ? 0 : (c > max_int ? max_int : c);
            g[i] = (c - zero) * scale;
        }
    } else {
        float amax = 0;
        for (int64_t i = 0; i < n; i++) amax = fabsf(g[i]) > amax ? fabsf(g[i]) : amax;
        if (amax < 1e-5f) amax = 1e-5f;
        const float max_int = (float)((1 << (q->bits - 1)) - 1), min_int = -(float)(1 << (q->bits - 1));
        const float scale = amax / max_int;
        for (int64_t i = 0; i < n; i++) {
            float c = nearbyintf(g[i] / scale);
            c = c < min_int ? min_int : (c > max_int ? max_int : c);
            g[i] = c * scale;
        }
    }
}

static int64_t group_of(const awq_grid *q, int64_t C) { return q->group > 0 ? q->group : C; }

/* One mapping: the balance linears (sharing input x[S, C]) and the op their scale divides out
 * of: norm >= 0, or the linear `smooth` (its rows, and bias, by s). */
typedef struct mapping {
    const char *name;
    int norm, smooth;
    int bal[8], n_bal;       /* q, k, v (and a parallel block's shared norm: gate, up) */
} mapping;

typedef struct work {
    const lmp_host *host;
    void *hctx;
    const lmp_backend_i *be;
    void *be_self;
} work;

/* Rows of every balance linear, stacked: W[O, C]. */
static float *stack_rows(const lmp_block *blk, const mapping *m, int64_t *O)
{
    const int64_t C = blk->linears[m->bal[0]].in;
    *O = 0;
    for (int i = 0; i < m->n_bal; i++) *O += blk->linears[m->bal[i]].out;
    float *W = malloc((size_t)(*O * C) * sizeof *W), *p = W;
    for (int i = 0; W && i < m->n_bal; i++) {
        const lmp_linear *l = &blk->linears[m->bal[i]];
        memcpy(p, l->w, (size_t)(l->out * C) * sizeof *p);
        p += l->out * C;
    }
    return W;
}

/* The scales of the ratio r (llm-compressor's formula, in f32 as torch computes it). */
static void ratio_scales(int duo, double ratio, int64_t C, const float *x_mean, const float *w_mean, float *s)
{
    const float r = (float)ratio;
    float mx = -INFINITY, mn = INFINITY;
    for (int64_t j = 0; j < C; j++) {
        float v = duo ? powf(x_mean[j], r) / (powf(w_mean[j], 1.0f - r) + 1e-4f) : powf(x_mean[j], r);
        s[j] = v < 1e-4f ? 1e-4f : v; /* clamp(min=1e-4): a NaN stays NaN */
        mx = s[j] > mx ? s[j] : mx;
        mn = s[j] < mn ? s[j] : mn;
    }
    const float norm = sqrtf(mx * mn);
    for (int64_t j = 0; j < C; j++) {
        s[j] = s[j] / norm;
        if (!isfinite(s[j])) s[j] = 1.0f;
    }
}

/* Search the scales of mapping m on the sample X[S, C] of its input; s[C] gets the best. */
static int search_scales(const work *wk, const lmp_value *p, const lmp_block *blk, const mapping *m, int64_t S,
                         const float *X, float *s, double *best_ratio, double *best_loss)
{
    const lmp_host *host = wk->host;
    const int64_t C = blk->linears[m->bal[0]].in;
    const awq_grid q = {(int)p[P_BITS].num, p[P_SYM].num != 0, (int64_t)p[P_GROUP].num};
    const int64_t G = group_of(&q, C);
    if (C % G)
        return host->set_error(wk->hctx, LMP_EINVAL, "awq: %s: %lld input columns are not a multiple of group %lld",
                               m->name, (long long)C, (long long)G);
    int64_t O;
    float *W = stack_rows(blk, m, &O);
    float *Wq = malloc((size_t)(O * C) * sizeof *Wq), *Y0 = malloc((size_t)(S * O) * sizeof *Y0);
    float *Y = malloc((size_t)(S * O) * sizeof *Y), *x_mean = malloc((size_t)C * sizeof *x_mean);
    float *w_mean = malloc((size_t)C * sizeof *w_mean), *cand = malloc((size_t)C * sizeof *cand);
    double *acc = calloc((size_t)C, sizeof *acc);
    int rc = 0;
    if (!W || !Wq || !Y0 || !Y || !x_mean || !w_mean || !cand || !acc) {
        rc = host->set_error(wk->hctx, LMP_ENOMEM, "awq: %s: out of memory for the search", m->name);
        goto done;
    }
    /* w̄: |W| over its group's abs-max (+1e-6), averaged over the rows */
    for (int64_t o = 0; o < O; o++)
        for (int64_t g0 = 0; g0 < C; g0 += G) {
            float amax = 0;
            for (int64_t j = g0; j < g0 + G; j++) amax = fabsf(W[o * C + j]) > amax ? fabsf(W[o * C + j]) : amax;
            const float den = amax + 1e-6f;
            for (int64_t j = g0; j < g0 + G; j++) acc[j] += fabsf(W[o * C + j]) / den;
        }
    for (int64_t j = 0; j < C; j++) w_mean[j] = (float)(acc[j] / (double)O), acc[j] = 0;
    /* x̄: mean |x| over the sample */
    for (int64_t t = 0; t < S; t++)
        for (int64_t j = 0; j < C; j++) acc[j] += fabs((double)X[t * C + j]);
    for (int64_t j = 0; j < C; j++) x_mean[j] = (float)(acc[j] / (double)S);
    rc = wk->be->gemm(wk->be_self, 0, 1, S, O, C, 1.0f, X, C, W, C, 0.0f, Y0, O);
    if (rc) goto done;
    const int n_grid = (int)p[P_NGRID].num;
    *best_loss = INFINITY;
    *best_ratio = -1;
    for (int i = 0; i < n_grid; i++) {
        const double ratio = (double)i / n_grid;
        ratio_scales(p[P_DUO].num != 0, ratio, C, x_mean, w_mean, cand);
        for (int64_t o = 0; o < O; o++) {
            float *row = Wq + o * C;
            for (int64_t j = 0; j < C; j++) row[j] = W[o * C + j] * cand[j];
            for (int64_t g0 = 0; g0 < C; g0 += G) pseudo_quantize(&q, row + g0, G);
            for (int64_t j = 0; j < C; j++) row[j] = row[j] / cand[j];
        }
        rc = wk->be->gemm(wk->be_self, 0, 1, S, O, C, 1.0f, X, C, Wq, C, 0.0f, Y, O);
        if (rc) goto done;
        double loss = 0;
        for (int64_t k = 0; k < S * O; k++) {
            const double d = (double)Y0[k] - Y[k];
            loss += d * d;
        }
        loss /= (double)(S * O);
        host->log(wk->hctx, LMP_LOG_DEBUG, "awq: %s: ratio %.3f loss %.6g", m->name, ratio, loss);
        if (loss < *best_loss) {
            *best_loss = loss;
            *best_ratio = ratio;
            memcpy(s, cand, (size_t)C * sizeof *s);
        }
    }
    if (*best_ratio < 0)
        rc = host->set_error(wk->hctx, LMP_EINVAL, "awq: %s: no finite loss on the grid (NaN in the weights or the "
                             "calibration inputs)", m->name);
done:
    free(W), free(Wq), free(Y0), free(Y), free(x_mean), free(w_mean), free(cand), free(acc);
    return rc;
}

/* Fold s into the block: the balance linears' columns times s, the smooth op divided by s. */
static int fold_scales(const work *wk, lmp_block *blk, const mapping *m, const float *s)
{
    if (m->norm >= 0) return wk->host->fold_norm_scale(wk->hctx, blk, m->norm, s);
    lmp_linear *sm = &blk->linears[m->smooth], *b = &blk->linears[m->bal[0]];
    for (int64_t o = 0; o < sm->out; o++) {
        for (int64_t j = 0; j < sm->in; j++) sm->w[o * sm->in + j] /= s[o];
        if (sm->b) sm->b[o] /= s[o];
    }
    for (int64_t o = 0; o < b->out; o++)
        for (int64_t j = 0; j < b->in; j++) b->w[o * b->in + j] *= s[j];
    return 0;
}

/* AutoAWQ's clip search on linear l with its input sample X[S, C] (already divided by the
 * scales folded into l): W's (row, group) slices clipped to ±the best max. */
static int clip_linear(const work *wk, const lmp_value *p, lmp_linear *l, int64_t S, const float *X, const float *in_s)
{
    const awq_grid q = {(int)p[P_BITS].num, p[P_SYM].num != 0, (int64_t)p[P_GROUP].num};
    const int64_t C = l->in, G = group_of(&q, C), NG = C / G;
    const int64_t want = (int64_t)p[P_CLIP_TOKENS].num, step = S / want > 1 ? S / want : 1;
    const int64_t N = (S + step - 1) / step;
    const int n_shrink = (int)(p[P_SHRINK].num * 20);
    float *x = malloc((size_t)(N * C) * sizeof *x), *cw = malloc((size_t)G * sizeof *cw);
    double *org = malloc((size_t)N * sizeof *org);
    if (!x || !cw || !org) {
        free(x), free(cw), free(org);
        return wk->host->set_error(wk->hctx, LMP_ENOMEM, "awq: %s: out of memory for the clip search", l->name);
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < C; j++) x[n * C + j] = X[n * step * C + j] / (in_s ? in_s[j] : 1.0f);
    for (int64_t o = 0; o < l->out; o++)
        for (int64_t g = 0; g < NG; g++) {
            float *w = l->w + o * C + g * G;
            float amax = 0;
            for (int64_t j = 0; j < G; j++) amax = fabsf(w[j]) > amax ? fabsf(w[j]) : amax;
            for (int64_t n = 0; n < N; n++) {
                double d = 0;
                for (int64_t j = 0; j < G; j++) d += (double)x[n * C + g * G + j] * w[j];
                org[n] = d;
            }
            float best = amax;
            double best_err = 1e9;
            for (int i = 0; i < n_shrink; i++) {
                const float mx = amax * (float)(1.0 - (double)i / 20.0);
                for (int64_t j = 0; j < G; j++) cw[j] = w[j] < -mx ? -mx : (w[j] > mx ? mx : w[j]);
                pseudo_quantize(&q, cw, G);
                double err = 0;
                for (int64_t n = 0; n < N; n++) {
                    double d = 0;
                    for (int64_t j = 0; j < G; j++) d += (double)x[n * C + g * G + j] * cw[j];
                    err += (d - org[n]) * (d - org[n]);
                }
                err /= (double)N;
                if (err < best_err) best_err = err, best = mx;
            }
            for (int64_t j = 0; j < G; j++) w[j] = w[j] < -best ? -best : (w[j] > best ? best : w[j]);
        }
    free(x), free(cw), free(org);
    return 0;
}

static int role_index(const lmp_block *blk, lmp_role r)
{
    for (int i = 0; i < blk->n_linears; i++)
        if (blk->linears[i].role == r) return i;
    return -1;
}

/* The first targeted balance linear's parameters (NULL: the mapping is not targeted). */
static const lmp_value *mapping_params(const lmp_block *blk, const mapping *m, const lmp_stats **st)
{
    for (int i = 0; i < m->n_bal; i++)
        if (blk->linears[m->bal[i]].params) {
            *st = blk->linears[m->bal[i]].stats;
            return blk->linears[m->bal[i]].params;
        }
    return NULL;
}

static int awq_apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    (void)self;
    work wk = {.host = host, .hctx = hctx};
    wk.be = host->backend(hctx, &wk.be_self);
    if (!wk.be) return host->set_error(hctx, LMP_EUNSUPPORTED, "awq: no backend");
    for (int i = 0; i < blk->n_linears; i++) {
        const lmp_linear *l = &blk->linears[i];
        if (l->grid || l->in_scale || l->in_shift)
            return host->set_error(hctx, LMP_EINVAL, "awq: %s is already %s: put awq before the stages that quantize "
                                   "or add input affines", l->name, l->grid ? "quantized" : "given an input affine");
    }
    mapping maps[8];
    int n_maps = 0;
    for (int n = 0; n < blk->n_norms && n_maps < 6; n++) { /* norm -> the linears it feeds */
        const lmp_norm *nm = &blk->norms[n];
        if (nm->n_fed == 0) continue;
        if (nm->n_fed > (int)(sizeof maps[0].bal / sizeof *maps[0].bal))
            return host->set_error(hctx, LMP_EUNSUPPORTED, "awq: %s feeds %d linears, more than %d", nm->name, nm->n_fed,
                                   (int)(sizeof maps[0].bal / sizeof *maps[0].bal));
        mapping *m = &maps[n_maps++];
        *m = (mapping){.name = nm->name, .norm = n, .smooth = -1, .n_bal = nm->n_fed};
        memcpy(m->bal, nm->fed, (size_t)nm->n_fed * sizeof *m->bal);
    }
    const int v = role_index(blk, LMP_ROLE_V), o = role_index(blk, LMP_ROLE_O);
    const int gate = role_index(blk, LMP_ROLE_GATE), up = role_index(blk, LMP_ROLE_UP), down = role_index(blk, LMP_ROLE_DOWN);
    if (v >= 0 && o >= 0) {
        if (blk->linears[v].out == blk->linears[o].in)
            maps[n_maps++] = (mapping){.name = blk->linears[v].name, .norm = -1, .smooth = v, .bal = {o}, .n_bal = 1};
        else if (blk->index == 0)
            host->log(hctx, LMP_LOG_INFO, "awq: no v -> o mapping: v has %lld outputs, o %lld inputs (grouped-query "
                      "attention; llm-compressor skips it too)", (long long)blk->linears[v].out, (long long)blk->linears[o].in);
    }
    if (up >= 0 && down >= 0) {
        if (gate >= 0)
            maps[n_maps++] = (mapping){.name = blk->linears[up].name, .norm = -1, .smooth = up, .bal = {down}, .n_bal = 1};
        else if (blk->index == 0)
            host->log(hctx, LMP_LOG_INFO, "awq: no up -> down mapping: the MLP is not gated (gelu(up) does not commute "
                      "with a scale)");
    }
    float *in_s[256] = {0}; /* the scale folded into each linear's input columns, for the clip search */
    if (blk->n_linears > 256) return host->set_error(hctx, LMP_EINVAL, "awq: block %d: too many linears", blk->index);
    int rc = 0;
    for (int k = 0; k < n_maps && !rc; k++) {
        const mapping *m = &maps[k];
        const lmp_stats *st = NULL;
        const lmp_value *p = mapping_params(blk, m, &st);
        if (!p) continue;
        if (!st || !st->sample || st->n_sample == 0) {
            rc = host->set_error(hctx, LMP_EINVAL, "awq: %s: no calibration sample (awq needs calibration)", m->name);
            break;
        }
        const int64_t C = blk->linears[m->bal[0]].in;
        float *s = malloc((size_t)C * sizeof *s);
        if (!s) {
            rc = host->set_error(hctx, LMP_ENOMEM, "awq: out of memory");
            break;
        }
        double ratio = 0, loss = 0;
        rc = search_scales(&wk, p, blk, m, st->n_sample, st->sample, s, &ratio, &loss);
        if (!rc) rc = fold_scales(&wk, blk, m, s);
        if (!rc) {
            host->log(hctx, LMP_LOG_DEBUG, "awq: %s: ratio %.2f, loss %.6g", m->name, ratio, loss);
            for (int i = 0; i < m->n_bal; i++) {
                if (in_s[m->bal[i]]) continue;
                in_s[m->bal[i]] = malloc((size_t)C * sizeof *s);
                if (!in_s[m->bal[i]]) rc = host->set_error(hctx, LMP_ENOMEM, "awq: out of memory");
                else memcpy(in_s[m->bal[i]], s, (size_t)C * sizeof *s);
            }
        }
        free(s);
    }
    for (int i = 0; i < blk->n_linears && !rc; i++) {
        lmp_linear *l = &blk->linears[i];
        if (!l->params || !l->params[P_CLIP].num || l->role == LMP_ROLE_Q || l->role == LMP_ROLE_K) continue;
        if (!l->stats || !l->stats->sample || l->stats->n_sample == 0) {
            rc = host->set_error(hctx, LMP_EINVAL, "awq: %s: no calibration sample for the clip search", l->name);
            break;
        }
        const awq_grid q = {(int)l->params[P_BITS].num, 0, (int64_t)l->params[P_GROUP].num};
        if (l->in % group_of(&q, l->in)) {
            rc = host->set_error(hctx, LMP_EINVAL, "awq: %s: %lld input columns are not a multiple of group %lld",
                                 l->name, (long long)l->in, (long long)q.group);
            break;
        }
        rc = clip_linear(&wk, l->params, l, l->stats->n_sample, l->stats->sample, in_s[i]);
    }
    for (int i = 0; i < blk->n_linears; i++) free(in_s[i]);
    return rc;
}

static uint32_t awq_needs(void *self, const lmp_value *p)
{
    (void)self, (void)p;
    return LMP_STAT_SAMPLE;
}

static int64_t awq_sample_tokens(void *self, const lmp_value *p)
{
    (void)self;
    return (int64_t)p[P_SAMPLE].num;
}

static const lmp_strategy_i awq_strategy = {
    .struct_size = sizeof(lmp_strategy_i),
    .needs = awq_needs,
    .apply = awq_apply,
    .sample_tokens = awq_sample_tokens,
};

static const lmp_plugin_desc awq_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_STRATEGY,
    .name = "awq",
    .version = "0.1.0",
    .summary = "AWQ (llm-compressor's AWQModifier): activation-aware scales searched on a grid, folded into the "
               "previous op; a later stage (rtn, gptq) quantizes",
    .params = awq_params,
    .n_params = P_COUNT,
    .vtable = &awq_strategy,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &awq_desc; }
