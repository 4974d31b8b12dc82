/* reparam.c — see reparam.h.  For a group with input x[N, C]: z[C] the shift, a[C] the abs-max
 * of the (shifted) input, s[C] the smoothing scales; the group's linears W[out, C]. */
#include "reparam.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const lmp_value *find(const lmp_plugin_desc *d, const lmp_value *v, const char *name)
{
    for (uint32_t i = 0; i < d->n_params; i++)
        if (strcmp(d->params[i].name, name) == 0) return &v[i];
    return NULL;
}

static double num(const lmp_plugin_desc *d, const lmp_value *v, const char *name, double def)
{
    const lmp_value *p = find(d, v, name);
    return p ? p->num : def;
}

void reparam_opts_read(const lmp_plugin_desc *d, const lmp_value *v, reparam_opts *o)
{
    const lmp_value *search = find(d, v, "search");
    *o = (reparam_opts){
        .shift = find(d, v, "stat") ? (int)find(d, v, "stat")->num : SHIFT_NONE,
        .ema_beta = num(d, v, "ema_beta", 0.98),
        .smooth = find(d, v, "alpha") != NULL,
        .alpha = num(d, v, "alpha", 0.5),
        .weight_last = (int)num(d, v, "weight_rule", 0) == 1,
        .search = (search && search->num == 1) || num(d, v, "adaptive", 0) != 0,
        .pw = {.k_piece = (int)num(d, v, "k_piece", 3), .search_piece = num(d, v, "search_piece", 1) != 0,
               .alpha_min = num(d, v, "alpha_min", 0.2), .alpha_max = num(d, v, "alpha_max", 0.8),
               .scale_min = num(d, v, "scale_min", 1.0), .scale_max = num(d, v, "scale_max", 5.0)},
        .sample_tokens = (int64_t)num(d, v, "sample_tokens", 512),
        .all_linears = num(d, v, "all_linears", 0) != 0,
        .bitexact = num(d, v, "paddleslim_bitexact", 0) != 0,
    };
    o->pw.carry_s_out = o->bitexact;
}

uint32_t reparam_needs(const reparam_opts *o)
{
    uint32_t need = 0;
    if (o->shift == SHIFT_MIDPOINT) need |= LMP_STAT_MINMAX;
    if (o->shift == SHIFT_PAIRWISE) need |= LMP_STAT_MINMAX | LMP_STAT_WINDOWS;
    if (o->shift == SHIFT_EMA) need |= LMP_STAT_MEAN | LMP_STAT_WINDOWS;
    /* After a shift the abs-max is max(max - z, z - min): the statistics of the shifted input. */
    if (o->smooth) need |= o->shift == SHIFT_NONE ? LMP_STAT_ABSMAX : LMP_STAT_MINMAX;
    if (o->smooth && o->search) need |= LMP_STAT_SAMPLE;
    return need;
}

/* The vtable's needs() and sample_tokens(): the options of this plugin's parameter values.
 * The host asks sample_tokens() only when needs() has LMP_STAT_SAMPLE, so shift, which never
 * smooths and has no "sample_tokens", is never asked. */
static uint32_t reparam_vt_needs(void *self, const lmp_value *v)
{
    (void)self;
    reparam_opts o;
    reparam_opts_read(&reparam_plugin, v, &o);
    return reparam_needs(&o);
}

static int64_t reparam_vt_sample_tokens(void *self, const lmp_value *v)
{
    (void)self;
    reparam_opts o;
    reparam_opts_read(&reparam_plugin, v, &o);
    return o.sample_tokens;
}

/* ---- shift statistics (docs/algorithms.md §3.4) -------------------------------------------------
 * calls: how often PaddleSlim updates the statistic per window (once per fed linear). */
static int zero_point(const lmp_host *host, void *hctx, const reparam_opts *o, const lmp_stats *st,
                      int64_t C, int calls, const char *name, float *z)
{
    if (o->shift == SHIFT_MIDPOINT) {
        for (int64_t j = 0; j < C; j++) z[j] = (float)(0.5 * ((double)st->min[j] + (double)st->max[j]));
        return 0;
    }
    const int64_t w0 = o->bitexact ? 1 : 0, W = st->n_windows;
    if (W <= w0)
        return host->set_error(hctx, LMP_EINVAL, "%s: paddleslim_bitexact skips the first calibration "
                               "window; give calibration.samples >= 2", name);
    const int per = o->bitexact ? calls : 1;
    const double beta = o->ema_beta;
    for (int64_t j = 0; j < C; j++) {
        double zj = 0, v = 0;
        int64_t k = 0; /* EMA updates so far */
        for (int64_t w = w0; w < W; w++) {
            const double mid = 0.5 * ((double)(st->win_min ? st->win_min[w * C + j] : 0) +
                                      (double)(st->win_max ? st->win_max[w * C + j] : 0));
            const double mean = st->win_mean ? st->win_mean[w * C + j] : 0;
            for (int c = 0; c < per; c++) {
                const int first = w == w0 && c == 0;
                if (o->shift == SHIFT_PAIRWISE) {
                    zj = first ? mid : 0.5 * (zj + mid);
                } else if (!o->bitexact) { /* bias-corrected EMA over the windows */
                    v = beta * v + (1 - beta) * mean;
                    zj = v / (1 - pow(beta, (double)(w + 1)));
                } else if (first) {        /* PaddleSlim: the first sample is taken as is ... */
                    zj = mean;
                } else {                   /* ... then EMASampler, corrected by beta^(k-1) */
                    v = beta * v + (1 - beta) * mean;
                    k++;
                    zj = k == 1 ? v : v / (1 - pow(beta, (double)(k - 1)));
                }
            }
        }
        z[j] = (float)zj;
    }
    return 0;
}

/* ---- one group ------------------------------------------------------------------------------ */
typedef struct group {
    int norm;                /* index of the norm, or -1 for a single linear no norm feeds */
    int lins[8], n_lins;     /* q, k, v (and a parallel block's shared norm: gate, up) */
    const char *name;        /* the norm's or the linear's */
} group;

/* The search's weight matrix: the rows of every linear of the group (or the last one). */
static float *group_weights(const lmp_block *blk, const group *g, int last_only, int64_t *O)
{
    const int from = last_only ? g->n_lins - 1 : 0;
    const int64_t C = blk->linears[g->lins[0]].in;
    *O = 0;
    for (int i = from; i < g->n_lins; i++) *O += blk->linears[g->lins[i]].out;
    float *W = malloc((size_t)(*O * C) * sizeof *W), *p = W;
    for (int i = from; W && i < g->n_lins; i++) {
        const lmp_linear *l = &blk->linears[g->lins[i]];
        memcpy(p, l->w, (size_t)(l->out * C) * sizeof *p);
        p += l->out * C;
    }
    return W;
}

static int smoothing_scales(const lmp_host *host, void *hctx, const reparam_opts *o, const lmp_block *blk,
                            const group *g, const lmp_stats *st, const float *z, float *s)
{
    const int64_t C = blk->linears[g->lins[0]].in;
    float *a = malloc((size_t)C * sizeof *a), *wmax = calloc((size_t)C, sizeof *wmax);
    int rc = 0;
    if (!a || !wmax) {
        rc = host->set_error(hctx, LMP_ENOMEM, "%s: out of memory", g->name);
        goto done;
    }
    for (int64_t j = 0; j < C; j++) a[j] = z ? fmaxf(st->max[j] - z[j], z[j] - st->min[j]) : st->absmax[j];
    for (int i = o->weight_last ? g->n_lins - 1 : 0; i < g->n_lins; i++) {
        const lmp_linear *l = &blk->linears[g->lins[i]];
        column_absmax(l->out, C, l->w, wmax);
    }
    if (!o->search) {
        smooth_scales(C, a, wmax, o->alpha, s);
        host->log(hctx, LMP_LOG_DEBUG, "%s: smoothing scales, alpha %.2f", g->name, o->alpha);
        goto done;
    }
    if (!st->sample || st->n_sample == 0) {
        rc = host->set_error(hctx, LMP_EINVAL, "%s: the piecewise search has no token sample", g->name);
        goto done;
    }
    int64_t O, S = st->n_sample;
    float *W = group_weights(blk, g, o->weight_last, &O), *X = malloc((size_t)(S * C) * sizeof *X);
    if (!W || !X) {
        rc = host->set_error(hctx, LMP_ENOMEM, "%s: out of memory for the search", g->name);
    } else {
        for (int64_t t = 0; t < S; t++) /* the sample as the shifted block sees it */
            for (int64_t j = 0; j < C; j++) X[t * C + j] = z ? st->sample[t * C + j] - z[j] : st->sample[t * C + j];
        piecewise_result r;
        rc = piecewise_search(host, hctx, &o->pw, C, O, S, a, W, X, s, &r);
        if (!rc)
            host->log(hctx, LMP_LOG_DEBUG, "%s: piecewise search: %d piece(s), loss %.4g (alpha 0.5: %.4g), "
                      "%d candidates on %lld tokens", g->name, r.pieces, r.loss, r.alpha_loss, r.candidates, (long long)S);
    }
    free(W);
    free(X);
done:
    free(a);
    free(wmax);
    return rc;
}

/* st: the statistics of the group's input (on its targeted linears). */
static int transform(const lmp_host *host, void *hctx, const reparam_opts *o, lmp_block *blk,
                     const group *g, const lmp_stats *st)
{
    const int64_t C = blk->linears[g->lins[0]].in;
    if (!st) return host->set_error(hctx, LMP_EINVAL, "%s: no calibration statistics", g->name);
    float *z = o->shift != SHIFT_NONE ? malloc((size_t)C * sizeof *z) : NULL;
    float *s = o->smooth ? malloc((size_t)C * sizeof *s) : NULL;
    int rc = 0;
    if ((o->shift != SHIFT_NONE && !z) || (o->smooth && !s))
        rc = host->set_error(hctx, LMP_ENOMEM, "%s: out of memory", g->name);
    if (!rc && z) rc = zero_point(host, hctx, o, st, C, g->n_lins, g->name, z);
    if (!rc && s) rc = smoothing_scales(host, hctx, o, blk, g, st, z, s);
    /* Shift first: b += W z uses W before smoothing (§2.2). */
    if (!rc && g->norm >= 0) {
        if (z) rc = host->fold_norm_shift(hctx, blk, g->norm, z);
        if (!rc && s) rc = host->fold_norm_scale(hctx, blk, g->norm, s);
    } else if (!rc) {
        rc = host->add_input_affine(hctx, blk, g->lins[0], z, s);
    }
    free(z);
    free(s);
    return rc;
}

static int reparam_apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    (void)self;
    const lmp_plugin_desc *d = &reparam_plugin;
    uint8_t fed[256] = {0};
    if (blk->n_experts > 0) /* its norm feeds the router and every expert: groups of 2E + 2 linears */
        return host->set_error(hctx, LMP_EUNSUPPORTED, "%s: block %d is a mixture of experts (%d experts): folding "
                               "into the norm that feeds the router and every expert is not implemented yet",
                               d->name, blk->index, blk->n_experts);
    if (blk->n_linears > 256) return host->set_error(hctx, LMP_EINVAL, "block %d: too many linears", blk->index);
    for (int n = 0; n < blk->n_norms; n++) {
        const lmp_norm *nm = &blk->norms[n];
        group g = {.norm = n, .n_lins = nm->n_fed, .name = nm->name};
        if (nm->n_fed > (int)(sizeof g.lins / sizeof *g.lins))
            return host->set_error(hctx, LMP_EUNSUPPORTED, "%s: %s feeds %d linears, more than %d", d->name, nm->name,
                                   nm->n_fed, (int)(sizeof g.lins / sizeof *g.lins));
        const lmp_linear *first = NULL; /* the first targeted linear: its parameters and statistics */
        for (int f = 0; f < nm->n_fed; f++) {
            g.lins[f] = nm->fed[f];
            fed[nm->fed[f]] = 1;
            if (!first && blk->linears[nm->fed[f]].params) first = &blk->linears[nm->fed[f]];
        }
        if (!first) continue;
        reparam_opts o;
        reparam_opts_read(d, first->params, &o);
        int rc = transform(host, hctx, &o, blk, &g, first->stats);
        if (rc) return rc;
    }
    for (int i = 0; i < blk->n_linears; i++) {
        lmp_linear *l = &blk->linears[i];
        if (fed[i] || !l->params) continue;
        /* q, k, v (gate, up) with no norm before them (OLMo 2's post-norm block): nothing to fold the
         * smoothing into, and one input affine on each would not be the group's shared input */
        if (l->role == LMP_ROLE_Q || l->role == LMP_ROLE_K || l->role == LMP_ROLE_V || l->role == LMP_ROLE_GATE ||
            l->role == LMP_ROLE_UP)
            return host->set_error(hctx, LMP_EUNSUPPORTED, "%s: %s has no norm before it to fold the smoothing "
                                   "into (a post-norm block: OLMo 2's norms are on the branches' outputs); leave "
                                   "its linears out of the stage's targets", d->name, l->name);
        reparam_opts o;
        reparam_opts_read(d, l->params, &o);
        if (!o.all_linears) continue;
        group g = {.norm = -1, .lins = {i}, .n_lins = 1, .name = l->name};
        int rc = transform(host, hctx, &o, blk, &g, l->stats);
        if (rc) return rc;
    }
    return 0;
}

const lmp_strategy_i reparam_strategy = {
    .struct_size = sizeof(lmp_strategy_i),
    .needs = reparam_vt_needs,
    .apply = reparam_apply,
    .sample_tokens = reparam_vt_sample_tokens,
};
