/* analyze.c — see analyze.h.  In stages: prepare the run as compare does; compress the variant
 * once, watching it (float states, proxy); cache the baseline's block boundaries; evaluate each
 * unit; rank; then the skip answer (--skip-top / --target) and the curves. */
#include "analyze/analyze.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "compare/compare.h"
#include "compress/pipeline.h"
#include "config/config_write.h"
#include "distrib/distrib.h"
#include "model/block_store.h"
#include "model/forward.h"
#include "plugin/host_services.h"
#include "model/tensor_names.h"

static const char *const mode_names[] = {"restore-one", "quantize-one", NULL};
static const char *const gran_names[] = {"linear", "block", "role", NULL};
static const char *const metric_names[] = {"kld", "ppl", "top1", "lambada", NULL};

static int by_name(const char *const *names, const char *s)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], s) == 0) return i;
    return -1;
}

const char *lmp_an_mode_name(lmp_an_mode m) { return mode_names[m]; }
const char *lmp_an_gran_name(lmp_an_gran g) { return gran_names[g]; }
const char *lmp_an_metric_name(lmp_an_metric m) { return metric_names[m]; }
int lmp_an_mode_by_name(const char *s) { return by_name(mode_names, s); }
int lmp_an_gran_by_name(const char *s) { return by_name(gran_names, s); }
int lmp_an_metric_by_name(const char *s) { return by_name(metric_names, s); }

double lmp_an_value(lmp_an_metric m, const lmp_bcache_result *r)
{
    switch (m) {
    case LMP_AN_KLD: return lmp_score_kld(&r->score);
    case LMP_AN_PPL: return lmp_score_ppl(&r->score);
    case LMP_AN_TOP1: return lmp_score_top1(&r->score);
    case LMP_AN_LAMBADA: return lmp_lambada_acc(&r->lambada);
    }
    return NAN;
}

int lmp_an_lower_better(lmp_an_metric m) { return m == LMP_AN_KLD || m == LMP_AN_PPL; }

/* "How bad": the metric with its sign turned so that larger is always worse. */
static double harm(lmp_an_metric m, const lmp_bcache_result *r)
{
    double v = lmp_an_value(m, r);
    return lmp_an_lower_better(m) ? v : -v;
}

/* ---- watching the compression ------------------------------------------------------------- */

/* A linear counts as compressed once a stage lowered its weight bits, quantized its input or
 * pruned it; function-preserving edits (smoothing, shifting) do not count. */
static int is_compressed(const lmp_linear *l)
{
    return l->weight_bits < 32 || l->act.mode != LMP_ACT_NONE || l->mask != NULL;
}

static void *dup_mem(const void *p, size_t n, int *oom)
{
    if (!p) return NULL;
    void *q = malloc(n ? n : 1);
    if (!q) *oom = 1;
    else memcpy(q, p, n);
    return q;
}

/* A deep copy of what the forward reads (no grid, params or stats). */
static int linear_dup(const lmp_linear *s, lmp_linear *d)
{
    int oom = 0;
    *d = *s;
    d->params = NULL;
    d->stats = NULL;
    d->grid = NULL;
    d->w = dup_mem(s->w, (size_t)(s->out * s->in) * sizeof *s->w, &oom);
    d->b = dup_mem(s->b, (size_t)s->out * sizeof *s->b, &oom);
    d->in_shift = dup_mem(s->in_shift, (size_t)s->in * sizeof *s->in_shift, &oom);
    d->in_scale = dup_mem(s->in_scale, (size_t)s->in * sizeof *s->in_scale, &oom);
    d->mask = dup_mem(s->mask, (size_t)(s->out * s->in), &oom);
    d->shift_bias = dup_mem(s->shift_bias, (size_t)s->out * sizeof *s->shift_bias, &oom);
    return oom ? lmp_fail(LMP_ENOMEM, "out of memory for the float state of %s", s->name) : 0;
}

static void linear_release(lmp_linear *l)
{
    free(l->w);
    free(l->b);
    free(l->in_shift);
    free(l->in_scale);
    free(l->mask);
    free(l->shift_bias);
    memset(l, 0, sizeof *l);
}

typedef struct watch_state {
    lmp_analysis *a;
    const lmp_backend *be;
    const lmp_variant *v;
    lmp_block pending;         /* the block before the current stage */
    int have_pending;
    lmp_linear *fl;            /* [n_total] float states */
    uint8_t *has_fl;           /* [n_total] */
    const lmp_block *cur;      /* the variant's block being finished */
    double *err, *norm;        /* [n_total] proxy sums */
    lmp_block_store *Q, *F;    /* the finished blocks: as compressed, and with the float states */
} watch_state;

static int before_stage(void *ud, int s, const lmp_block *blk)
{
    watch_state *w = ud;
    (void)s;
    int missing = 0;
    for (int i = 0; i < blk->n_linears; i++) missing |= !w->has_fl[blk->index * w->a->n_lin + i];
    if (!missing) return 0;
    if (w->have_pending) lmp_block_free(&w->pending);
    w->have_pending = 0;
    int st = lmp_block_clone(blk, &w->pending);
    if (!st) w->have_pending = 1;
    return st;
}

static int after_stage(void *ud, int s, const lmp_block *blk)
{
    watch_state *w = ud;
    w->cur = blk;
    for (int i = 0; i < blk->n_linears; i++) {
        const int g = blk->index * w->a->n_lin + i;
        const lmp_linear *l = &blk->linears[i];
        if (!w->has_fl[g] && w->have_pending && is_compressed(l) && !is_compressed(&w->pending.linears[i])) {
            int st = linear_dup(&w->pending.linears[i], &w->fl[g]);
            if (st) return st;
            w->has_fl[g] = 1;
        }
        if (w->has_fl[g] && lmp_stage_params_for(&w->v->stages[s], l->name)) w->a->stage_mask[g] |= 1u << s;
    }
    if (w->have_pending) lmp_block_free(&w->pending);
    w->have_pending = 0;
    return 0;
}

/* Block b is finished (its proxy sums taken): it goes into the store Q as compressed, and into F
 * with each compressed linear's float state in its place; the float states are freed, so memory
 * holds one block's. */
static int block_done(void *ud, int64_t b, const lmp_block *blk)
{
    watch_state *w = ud;
    w->cur = NULL;
    int st = lmp_block_store_put(w->Q, blk);
    lmp_linear *lin = malloc((size_t)blk->n_linears * sizeof *lin + 1);
    if (!st && !lin) st = lmp_fail(LMP_ENOMEM, "out of memory");
    if (!st) {
        lmp_block f = *blk;
        f.linears = lin;
        for (int i = 0; i < blk->n_linears; i++) {
            const int64_t g = b * w->a->n_lin + i;
            lin[i] = w->has_fl[g] ? w->fl[g] : blk->linears[i];
            lin[i].name = blk->linears[i].name; /* the float state's was its stage's copy's */
        }
        st = lmp_block_store_put(w->F, &f);
    }
    free(lin);
    for (int i = 0; i < blk->n_linears; i++) linear_release(&w->fl[b * w->a->n_lin + i]);
    return st;
}

/* The proxy's sums for every compressed linear fed by x[T, C]. */
static int observe(void *ud, const int *lins, int n, const float *x, int64_t T, int64_t C)
{
    watch_state *w = ud;
    if (!w->cur) return 0;
    int st = 0;
    for (int k = 0; k < n && !st; k++) {
        const int i = lins[k], g = w->cur->index * w->a->n_lin + i;
        if (!w->has_fl[g]) continue;
        const lmp_linear *q = &w->cur->linears[i], *f = &w->fl[g];
        const int64_t O = q->out;
        float *xq = malloc((size_t)(T * C) * sizeof *xq), *y = malloc((size_t)(T * O) * sizeof *y),
              *yq = malloc((size_t)(T * O) * sizeof *yq);
        st = xq && y && yq ? 0 : lmp_fail(LMP_ENOMEM, "out of memory for the proxy of %s", q->name);
        if (!st) st = lmp_be_linear(w->be, T, C, O, x, f->w, NULL, y);
        if (!st) {
            memcpy(xq, x, (size_t)(T * C) * sizeof *xq);
            if (q->act.mode != LMP_ACT_NONE) st = lmp_be_quantize_act(w->be, &q->act, T, C, xq);
        }
        if (!st) st = lmp_be_linear(w->be, T, C, O, xq, q->w, NULL, yq);
        for (int64_t j = 0; j < T * O && !st; j++) {
            const double e = (double)y[j] - (double)yq[j];
            w->err[g] += e * e;
            w->norm[g] += (double)y[j] * (double)y[j];
        }
        free(xq);
        free(y);
        free(yq);
    }
    return st;
}

/* ---- block sets ------------------------------------------------------------------------------ */

/* Where a linear of a set comes from: the variant as compressed, its float state before the
 * stage that compressed it, or the variant compressed with --keep-params. */
enum { PICK_Q = 0, PICK_F = 1, PICK_H = 2 };

typedef struct sets {
    int64_t NL;
    int n_lin, n_total;
    const uint8_t *has_fl;     /* [n_total]: compressed (else F is Q) */
    lmp_block_store *Q, *F, *H; /* H NULL without keep_params */
    uint8_t base;              /* the cache's baseline: PICK_Q (restore-one) or PICK_F */
    uint8_t *pick;             /* [n_total]: the set being evaluated */
} sets;

/* What linear g picked as c is: a linear no stage compressed is the same in every set. */
static int choice(const sets *s, int64_t g, int c) { return s->has_fl[g] ? c : PICK_Q; }

/* The first block in which s->pick differs from the baseline (NL: none). */
static int64_t first_changed(const sets *s)
{
    for (int64_t g = 0; g < s->n_total; g++)
        if (choice(s, g, s->pick[g]) != choice(s, g, s->base)) return g / s->n_lin;
    return s->NL;
}

/* Block b of the set s->pick: the variant's block from Q, each linear picked otherwise swapped
 * in from F's or H's block b (a block source's get: the caller frees *out). */
static int sets_get(const void *self, int64_t b, lmp_block *out)
{
    const sets *s = self;
    const lmp_block_source q = lmp_block_store_source(s->Q);
    int st = q.get(q.self, b, out);
    if (st) return st;
    for (int alt = PICK_F; alt <= PICK_H && !st; alt++) {
        int any = 0;
        for (int i = 0; i < s->n_lin; i++) any |= choice(s, b * s->n_lin + i, s->pick[b * s->n_lin + i]) == alt;
        if (!any) continue;
        const lmp_block_source from = lmp_block_store_source(alt == PICK_F ? s->F : s->H);
        lmp_block other;
        if ((st = from.get(from.self, b, &other))) break;
        for (int i = 0; i < s->n_lin; i++)
            if (choice(s, b * s->n_lin + i, s->pick[b * s->n_lin + i]) == alt) {
                const lmp_linear t = out->linears[i];
                out->linears[i] = other.linears[i];
                other.linears[i] = t;
            }
        lmp_block_free(&other);
    }
    if (st) lmp_block_free(out);
    return st;
}

/* pick <- the baseline with units[0..k) taken as alt. */
static void pick_units(sets *s, const lmp_analysis *a, const int *units, int k, int alt)
{
    memset(s->pick, s->base, (size_t)s->n_total);
    for (int u = 0; u < k; u++)
        for (int j = 0; j < a->units[units[u]].n_lins; j++) s->pick[a->units[units[u]].lins[j]] = (uint8_t)alt;
}

/* pick <- the variant (Q) with units[0..k) skipped (F, or H with keep_params): a skip list. */
static void pick_skip(sets *s, const lmp_analysis *a, const int *units, int k)
{
    memset(s->pick, PICK_Q, (size_t)s->n_total);
    for (int u = 0; u < k; u++)
        for (int j = 0; j < a->units[units[u]].n_lins; j++)
            s->pick[a->units[units[u]].lins[j]] = s->H ? PICK_H : PICK_F;
}

static lmp_block_source sets_source(const sets *s) { return (lmp_block_source){.n = s->NL, .get = sets_get, .self = s}; }

static int eval_pick(lmp_bcache *bc, sets *s, const char *what, lmp_bcache_result *out)
{
    const lmp_block_source src = sets_source(s);
    return lmp_bcache_eval(bc, &src, first_changed(s), what, out);
}

/* ---- units ------------------------------------------------------------------------------------ */

static int make_units(lmp_analysis *a, const lmp_block *shape, const uint8_t *has_fl)
{
    const int NL = (int)a->n_layers, n_lin = a->n_lin;
    int max_units = a->o.gran == LMP_AN_LINEAR ? NL * n_lin : a->o.gran == LMP_AN_BLOCK ? NL : LMP_ROLE_COUNT;
    a->units = calloc((size_t)max_units + 1, sizeof *a->units);
    if (!a->units) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int u = 0; u < max_units; u++) {
        lmp_an_unit *un = &a->units[a->n_units];
        un->lins = malloc((size_t)(NL * n_lin) * sizeof *un->lins);
        if (!un->lins) return lmp_fail(LMP_ENOMEM, "out of memory");
        un->first = NL;
        un->block = -1;
        for (int g = 0; g < NL * n_lin; g++) {
            const int b = g / n_lin, i = g % n_lin;
            const lmp_linear *l = &shape[b].linears[i];
            int in = a->o.gran == LMP_AN_LINEAR ? g == u : a->o.gran == LMP_AN_BLOCK ? b == u : (int)l->role == u;
            if (!in || !has_fl[g]) continue; /* a linear no stage compressed changes nothing */
            un->lins[un->n_lins++] = g;
            if (b < un->first) un->first = b;
        }
        if (!un->n_lins) {
            free(un->lins);
            un->lins = NULL;
            continue;
        }
        const lmp_linear *l0 = &shape[un->lins[0] / n_lin].linears[un->lins[0] % n_lin];
        if (a->o.gran == LMP_AN_LINEAR) {
            snprintf(un->name, sizeof un->name, "%s", a->lin_names[un->lins[0]]);
            un->role = lmp_role_name(l0->role);
            un->block = un->first;
        } else if (a->o.gran == LMP_AN_BLOCK) {
            snprintf(un->name, sizeof un->name, "block %d", u);
            un->role = "all";
            un->block = u;
        } else {
            snprintf(un->name, sizeof un->name, "%s (all blocks)", lmp_role_name(u));
            un->role = lmp_role_name(u);
        }
        a->n_units++;
    }
    if (!a->n_units)
        return lmp_fail(LMP_EINVAL, "variant '%s': no stage compresses any linear: nothing to analyze", a->v->name);
    return 0;
}

/* Ranks of x[n] (1 = largest), ties sharing their mean rank: for Spearman's rho. */
static void ranks_of(const double *x, int n, double *r)
{
    for (int i = 0; i < n; i++) {
        int above = 0, equal = 0;
        for (int j = 0; j < n; j++) {
            above += x[j] > x[i];
            equal += x[j] == x[i];
        }
        r[i] = above + (equal + 1) / 2.0;
    }
}

static double spearman(const double *x, const double *y, int n)
{
    if (n < 2) return NAN;
    double *rx = malloc((size_t)n * sizeof *rx), *ry = malloc((size_t)n * sizeof *ry);
    double rho = NAN;
    if (rx && ry) {
        ranks_of(x, n, rx);
        ranks_of(y, n, ry);
        double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
        for (int i = 0; i < n; i++) mx += rx[i] / n, my += ry[i] / n;
        for (int i = 0; i < n; i++) {
            sxy += (rx[i] - mx) * (ry[i] - my);
            sxx += (rx[i] - mx) * (rx[i] - mx);
            syy += (ry[i] - my) * (ry[i] - my);
        }
        rho = sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
    }
    free(rx);
    free(ry);
    return rho;
}

/* order[n] <- unit indices sorted by key descending (model order among equals: a stable
 * insertion sort; n is a few hundred). */
static void sort_desc(const double *key, int n, int *order)
{
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) {
        int u = order[i], j = i;
        double k = isnan(key[u]) ? -INFINITY : key[u];
        while (j > 0 && (isnan(key[order[j - 1]]) ? -INFINITY : key[order[j - 1]]) < k) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = u;
    }
}

/* ---- keep_params: the variant compressed with those parameters on every compressed linear ---- */

/* Every finished block into the store ud. */
static int put_block(void *ud, int64_t b, const lmp_block *blk)
{
    (void)b;
    return lmp_block_store_put(ud, blk);
}

/* Writes a one-variant config, the analyzed variant named `name` with extra[s] (may be NULL)
 * first among stage s's overrides, loads it (so what it sets is checked against the plugins'
 * schemas like any config) and compresses it into the store `into`, a block at a time.  The
 * file is temporary. */
static int compress_with_overrides(lmp_ctx *ctx, lmp_analysis *a, lmp_run_state *run, const char *name,
                                   char *const *extra, const char *why, lmp_block_store *into)
{
    const char *dir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/lmpress-analyze-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) return lmp_fail(LMP_EIO, "%s: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(path);
        return lmp_fail(LMP_EIO, "%s: %s", path, strerror(errno));
    }
    lmp_config_write_head(f, a->c, why);
    fputs("variants = (\n", f);
    lmp_config_write_variant(f, a->c, a->v, name, (const char *const *)extra);
    fputs("\n);\n", f);
    int st = fclose(f) ? lmp_fail(LMP_EIO, "%s: %s", path, strerror(errno)) : 0;
    lmp_run_config *c2 = NULL;
    if (!st) st = lmp_config_load(ctx, path, &c2);
    unlink(path);
    const lmp_compress_watch watch = {.block_done = put_block, .ud = into};
    if (!st) st = lmp_compress_watched(ctx, &run->be_compress, run->m, &c2->variants[0], &run->calib, &watch, NULL);
    lmp_config_free(c2);
    return st;
}

/* The variant with keep_params on every linear its compressing stages touch, into H. */
static int compress_keep(lmp_ctx *ctx, lmp_analysis *a, lmp_run_state *run, lmp_block_store *H)
{
    uint32_t stages = 0;
    for (int g = 0; g < (int)a->n_layers * a->n_lin; g++) stages |= a->stage_mask[g];
    char **extra = calloc((size_t)a->v->n_stages + 1, sizeof *extra);
    int st = extra ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    for (int s = 0; s < a->v->n_stages && !st; s++) {
        if (!(stages >> s & 1u)) continue;
        size_t n = strlen(a->o.keep_params) + 64;
        if (!(extra[s] = malloc(n))) st = lmp_fail(LMP_ENOMEM, "out of memory");
        else snprintf(extra[s], n, "{ match = \"re:.*\"; params = { %s }; }", a->o.keep_params);
    }
    if (!st && (st = compress_with_overrides(ctx, a, run, NULL, extra,
                                             "lmpress analyze: the variant with --keep-params on every linear", H)))
        st = lmp_fail_prefix(st, "--keep-params \"%s\"", a->o.keep_params);
    for (int s = 0; extra && s < a->v->n_stages; s++) free(extra[s]);
    free(extra);
    return st;
}

/* --write-config: does `lmpress compare` give the written skip variant analyze's number?  It
 * does when the other linears' compression cannot depend on the skipped ones: no stage reads
 * calibration statistics, or they are measured on the original inputs.  Otherwise compare
 * re-compresses, and every block after a skipped linear calibrates on its float output where
 * analyze kept the variant's own compression: so the written variant is compressed and
 * evaluated here exactly as compare will, and both numbers are reported. */
static int check_written_config(lmp_ctx *ctx, lmp_analysis *a, lmp_run_state *run, lmp_bcache *bc)
{
    uint32_t observing = 0;
    int st = lmp_compress_observing_stages(ctx, run->m, a->v, &observing);
    if (st) return st;
    a->config_checked = 1;
    a->config_reproduces = !observing || !run->calib.n || a->v->calib_inputs == LMP_CALIB_INPUTS_ORIGINAL;
    if (a->config_reproduces || !a->skip.k) {
        a->config_reproduces = 1; /* no skip list: the written variant is the variant itself */
        return 0;
    }
    char **extra = calloc((size_t)a->v->n_stages + 1, sizeof *extra);
    lmp_block_store *R = NULL;
    st = extra ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    for (int s = 0; s < a->v->n_stages && !st; s++) extra[s] = lmp_analysis_override(a, a->skip_list, a->skip.k, s);
    if (!st) st = lmp_block_store_open(ctx, a->n_layers, "the written config's skip variant", &R);
    if (!st) {
        lmp_progress_context(ctx, "[the written config's skip variant, as compare runs it]");
        st = compress_with_overrides(ctx, a, run, NULL, extra, "lmpress analyze: the written skip variant", R);
    }
    if (!st) {
        const lmp_block_source src = lmp_block_store_source(R);
        st = lmp_bcache_eval(bc, &src, 0, "evaluate the written skip variant", &a->written);
    }
    if (!st) {
        a->have_written = 1;
        a->written_value = lmp_an_value(a->o.have_target ? a->o.target_metric : a->o.metric, &a->written);
    }
    lmp_block_store_free(R);
    for (int s = 0; extra && s < a->v->n_stages; s++) free(extra[s]);
    free(extra);
    return st;
}

/* ---- the skip answer and the curves ---------------------------------------------------------- */

static int reached(const lmp_analyze_opts *o, const lmp_bcache_result *r)
{
    double v = lmp_an_value(o->target_metric, r);
    return lmp_an_lower_better(o->target_metric) ? v <= o->target : v >= o->target;
}

/* The smallest k whose skip list (the first k units in rank order) reaches the target: doubling
 * k until it is reached, then bisecting between the last k that did not and the first that did,
 * so ~2 log2(n) evaluations instead of PaddleSlim's one per k.  This assumes the metric improves
 * with k, as it does when units are skipped in order of sensitivity; where the curve wiggles it
 * finds a k that reaches the target with k-1 not reaching it. */
static int search_target(lmp_analysis *a, lmp_bcache *bc, sets *s)
{
    int lo = 0, hi = -1, st = 0;
    lmp_bcache_result r, best;
    char what[96];
    if (reached(&a->o, &a->variant_res)) { /* the variant as it is: no unit needs skipping */
        a->skip = (lmp_an_point){.order = a->o.rank_proxy ? "proxy" : "measured", .k = 0, .res = a->variant_res,
                                 .value = lmp_an_value(a->o.target_metric, &a->variant_res)};
        a->skip_reached = 1;
        return 0;
    }
    for (int k = 1; !st; k = k * 2 > a->n_units ? a->n_units : k * 2) {
        snprintf(what, sizeof what, "analyze: target, %d skipped", k);
        pick_skip(s, a, a->order, k);
        st = eval_pick(bc, s, what, &r);
        a->target_evals++;
        if (st) return st;
        if (reached(&a->o, &r)) {
            hi = k;
            best = r;
            break;
        }
        lo = k;
        if (k == a->n_units) break;
    }
    if (hi < 0) { /* even skipping every unit does not reach it */
        a->skip = (lmp_an_point){.order = a->o.rank_proxy ? "proxy" : "measured", .k = a->n_units, .res = r,
                                 .value = lmp_an_value(a->o.target_metric, &r)};
        a->skip_reached = 0;
        return 0;
    }
    while (hi - lo > 1 && !st) {
        int mid = lo + (hi - lo) / 2;
        snprintf(what, sizeof what, "analyze: target, %d skipped", mid);
        pick_skip(s, a, a->order, mid);
        st = eval_pick(bc, s, what, &r);
        a->target_evals++;
        if (!st && reached(&a->o, &r)) hi = mid, best = r;
        else lo = mid;
    }
    a->skip = (lmp_an_point){.order = a->o.rank_proxy ? "proxy" : "measured", .k = hi, .res = best,
                             .value = lmp_an_value(a->o.target_metric, &best)};
    a->skip_reached = 1;
    return st;
}

static int run_curves(lmp_ctx *ctx, lmp_analysis *a, lmp_bcache *bc, sets *s)
{
    const int n_orders = 2 + a->o.curve_seeds;
    a->curve = calloc((size_t)(n_orders * a->o.n_curve) + 1, sizeof *a->curve);
    int *perm = malloc((size_t)a->n_units * sizeof *perm);
    char **names = calloc((size_t)n_orders + 1, sizeof *names);
    int st = a->curve && perm && names ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    const lmp_host *h = lmp_host_services();
    for (int o = a->o.rank_proxy ? 1 : 0; o < n_orders && !st; o++) { /* by proxy: its order is the ranking */
        const int *order = o == 0 ? a->order : o == 1 ? a->proxy_order : perm;
        if (o >= 2) { /* a random order: Fisher-Yates on the run's RNG, seeded per curve */
            lmp_host_seed(ctx, a->c->seed + (uint64_t)(o - 1));
            for (int i = 0; i < a->n_units; i++) perm[i] = i;
            for (int i = a->n_units - 1; i > 0; i--) {
                int j = (int)(h->rng_u64(ctx) % (uint64_t)(i + 1)), t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
        }
        char name[32];
        snprintf(name, sizeof name, o == 0 ? "measured" : o == 1 ? "proxy" : "random-%d", o - 1);
        if (!(names[o] = strdup(name))) st = lmp_fail(LMP_ENOMEM, "out of memory");
        for (int p = 0; p < a->o.n_curve && !st; p++) {
            int k = a->o.curve[p] > a->n_units ? a->n_units : a->o.curve[p];
            lmp_an_point *pt = &a->curve[a->n_curve++];
            char what[96];
            snprintf(what, sizeof what, "analyze: curve %s, %d skipped", name, k);
            pick_skip(s, a, order, k);
            st = eval_pick(bc, s, what, &pt->res);
            pt->order = names[o];
            pt->k = k;
            pt->value = lmp_an_value(a->o.metric, &pt->res);
        }
    }
    free(perm);
    if (st) {
        for (int o = 0; names && o < n_orders; o++) free(names[o]);
        free(names);
        return st;
    }
    a->curve_names = names; /* the points' order names: freed with the analysis */
    a->n_curve_names = n_orders;
    return 0;
}

/* ---- the run ------------------------------------------------------------------------------------ */

static void unit_eta(lmp_ctx *ctx, int k, int n, double spent)
{
    char line[160];
    if (k > 0) {
        double left = spent / k * (n - k);
        snprintf(line, sizeof line, "[unit %d/%d, ~%.0f %s left]", k + 1, n, left >= 90 ? left / 60 : left,
                 left >= 90 ? "min" : "s");
    } else snprintf(line, sizeof line, "[unit 1/%d]", n);
    lmp_progress_context(ctx, line);
}

/* The per-unit evaluations as jobs (distrib.h): spread over the ranks of an MPI run, run in
 * order in one process.  A result travels as the unit's numbers plus the block forwards its
 * evaluation cost, so rank 0's counters end as a single process's would. */
typedef struct unit_jobs {
    lmp_ctx *ctx;
    lmp_analysis *a;
    const int *todo;           /* job j evaluates unit todo[j]: those --resume did not give */
    int n_todo;
    lmp_bcache *bc;
    sets *s;
    int alt;
    double t0;
    uint8_t *back;             /* rank 0: [n_units], the units whose numbers came back */
    int64_t forwards, naive_forwards, evals; /* rank 0: what the other ranks' units cost */
} unit_jobs;

typedef struct unit_wire {
    lmp_bcache_result res;
    int64_t forwards, naive_forwards, evals;
} unit_wire;

static int unit_run(void *ud, int j, void **out, size_t *bytes)
{
    unit_jobs *uj = ud;
    int u = uj->todo[j];
    lmp_an_unit *un = &uj->a->units[u];
    unit_eta(uj->ctx, j, uj->n_todo, lmp_now_s() - uj->t0);
    char what[256];
    snprintf(what, sizeof what, "analyze %s", un->name);
    pick_units(uj->s, uj->a, &u, 1, uj->alt);
    const lmp_bcache *bc = uj->bc;
    const int64_t forwards = bc->forwards, naive = bc->naive_forwards, evals = bc->evals;
    int st = eval_pick(uj->bc, uj->s, what, &un->res);
    if (st || lmp_dist_rank(lmp_host_dist(uj->ctx)) == 0) return st; /* rank 0's own: in place */
    unit_wire *w = malloc(sizeof *w);
    if (!w) return lmp_fail(LMP_ENOMEM, "out of memory");
    *w = (unit_wire){un->res, bc->forwards - forwards, bc->naive_forwards - naive, bc->evals - evals};
    *out = w;
    *bytes = sizeof *w;
    return 0;
}

/* Rank 0 (under the scheduler's lock, maybe on its answering thread): a unit's numbers from
 * another rank; its cost is added to the cache's counters after the jobs, not while rank 0's
 * own evaluation updates them. */
static int unit_take(void *ud, int j, int rank, int st, const char *msg, const void *in, size_t bytes)
{
    unit_jobs *uj = ud;
    const int u = uj->todo[j];
    lmp_analysis *a = uj->a;
    if (st) return 0; /* the scheduler keeps the first failure */
    if (uj->back[u]++) return lmp_fail(LMP_EINVAL, "MPI: unit %s came back twice (now from rank %d)", a->units[u].name, rank);
    if (rank != 0) {
        if (bytes != sizeof(unit_wire))
            return lmp_fail(LMP_EIO, "MPI: unit %s: a result of %zu bytes from rank %d", a->units[u].name, bytes, rank);
        unit_wire w;
        memcpy(&w, in, sizeof w);
        a->units[u].res = w.res;
        uj->forwards += w.forwards;
        uj->naive_forwards += w.naive_forwards;
        uj->evals += w.evals;
    }
    /* in: kept by the caller at once (an interrupted scan keeps it) */
    a->unit_finished[u] = 1;
    a->n_finished++;
    return a->o.unit_done ? a->o.unit_done(a, a->o.ud) : 0;
}

int lmp_analyze(lmp_ctx *ctx, const lmp_run_config *c, const lmp_analyze_opts *opts, lmp_analysis **out)
{
    *out = NULL;
    if (!c->has_eval)
        return lmp_fail(LMP_EINVAL, "%s: analyze measures each unit on the eval texts: the config has no eval section",
                        c->path);
    double t_start = lmp_now_s();
    lmp_analysis *a = calloc(1, sizeof *a);
    lmp_report *r = calloc(1, sizeof *r);
    lmp_run_state run = {.ctx = ctx, .c = c};
    if (!a || !r) {
        free(a);
        free(r);
        return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    a->c = c;
    a->o = *opts;
    a->v = &c->variants[opts->variant];
    lmp_run_fingerprint(c, (char[17]){0}, a->fingerprint);
    r->cfg = c;
    r->n_texts = c->n_eval_texts;
    r->texts = calloc((size_t)c->n_eval_texts + 1, sizeof *r->texts);
    run.text_ids = calloc((size_t)c->n_eval_texts + 1, sizeof *run.text_ids);
    run.ref = calloc((size_t)c->n_eval_texts + 1, sizeof *run.ref);
    int st = r->texts && run.text_ids && run.ref ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    for (int t = 0; t < c->n_eval_texts && run.ref; t++) run.ref[t].store.fd = -1;
    if (!st && a->v->model_path)
        st = lmp_fail(LMP_EINVAL, "variant '%s' is another tool's file (model = ...): analyze needs a pipeline "
                      "it can compress and take apart", a->v->name);
    if (!st && !a->v->n_stages)
        st = lmp_fail(LMP_EINVAL, "variant '%s' has no pipeline: it is the unmodified model, nothing to analyze",
                      a->v->name);
    /* analyze takes a variant apart linear by linear: where the KV quantization would go in
     * such a mix is not defined yet, so it is refused rather than dropped */
    if (!st && a->v->kv.type != LMP_KV_NONE)
        st = lmp_fail(LMP_EUNSUPPORTED, "variant '%s' quantizes the KV cache (kv_cache): analyze does not take it "
                      "apart yet; drop kv_cache to analyze its weights", a->v->name);
    if (!st && opts->have_target) st = lmp_an_check_target(opts->target_metric, opts->target);
    if (!st && a->v->n_stages > 32)
        st = lmp_fail(LMP_EINVAL, "variant '%s': more than 32 stages", a->v->name);
    if (!st && (opts->metric == LMP_AN_LAMBADA || (opts->have_target && opts->target_metric == LMP_AN_LAMBADA)) &&
        !c->lambada)
        st = lmp_fail(LMP_EINVAL, "%s: the LAMBADA metric needs eval.lambada in the config", c->path);
    if (!st && opts->rank_proxy && opts->resume)
        st = lmp_fail(LMP_EINVAL, "--rank proxy evaluates no unit: there is nothing to resume");
    lmp_host_seed(ctx, c->seed);
    if (!st) st = lmp_run_prepare(&run, r);
    if (!st && opts->rank_proxy && !run.calib.n)
        st = lmp_fail(LMP_EINVAL, "%s: --rank proxy ranks by each linear's output error on the calibration windows: "
                      "the config needs calibration.text", c->path);
    /* the unmodified model's log-probabilities, its blocks read one at a time */
    st = lmp_dist_agree(lmp_host_dist(ctx), st);
    if (!st) lmp_progress_context(ctx, "[reference]");
    if (!st) st = lmp_run_share_reference(&run, r);

    watch_state w = {.a = a, .be = &run.be, .v = a->v};
    sets s = {0};
    lmp_bcache bc = {0};
    bc.h.fd = -1;
    if (!st) {
        a->n_layers = run.m->arch.n_layers;
        a->n_lin = run.shape[0].n_linears;
        if (run.m->arch.n_experts > 0) /* its tables are per (block, linear) of blocks alike */
            st = lmp_fail(LMP_EUNSUPPORTED, "analyze: %s is a mixture of experts (%lld experts): ranking its linears and "
                          "experts is not implemented yet", run.m->path, (long long)run.m->arch.n_experts);
    }
    if (!st) {
        const int n_total = (int)a->n_layers * a->n_lin;
        a->stage_mask = calloc((size_t)n_total, sizeof *a->stage_mask);
        a->lin_names = calloc((size_t)n_total, sizeof *a->lin_names);
        w.fl = calloc((size_t)n_total, sizeof *w.fl);
        w.has_fl = calloc((size_t)n_total, 1);
        w.err = calloc((size_t)n_total, sizeof *w.err);
        w.norm = calloc((size_t)n_total, sizeof *w.norm);
        s = (sets){.NL = a->n_layers, .n_lin = a->n_lin, .n_total = n_total, .has_fl = w.has_fl,
                   .base = opts->mode == LMP_AN_RESTORE_ONE ? PICK_Q : PICK_F};
        s.pick = calloc((size_t)n_total, sizeof *s.pick);
        if (!a->stage_mask || !a->lin_names || !w.fl || !w.has_fl || !w.err || !w.norm || !s.pick)
            st = lmp_fail(LMP_ENOMEM, "out of memory");
        for (int g = 0; g < n_total && !st; g++)
            if (!(a->lin_names[g] = strdup(run.shape[g / a->n_lin].linears[g % a->n_lin].name)))
                st = lmp_fail(LMP_ENOMEM, "out of memory");
        if (!st) st = lmp_block_store_open(ctx, a->n_layers, "the variant's blocks", &s.Q);
        if (!st) st = lmp_block_store_open(ctx, a->n_layers, "the variant's float states", &s.F);
        if (!st && opts->keep_params) st = lmp_block_store_open(ctx, a->n_layers, "the --keep-params blocks", &s.H);
        w.Q = s.Q;
        w.F = s.F;
    }
    /* 1. compress once, watching; each finished block goes to the stores */
    double t0 = lmp_now_s();
    if (!st) {
        lmp_progress_context(ctx, "[compress]");
        lmp_compress_watch watch = {.before_stage = before_stage, .after_stage = after_stage, .observe = observe,
                                    .block_done = block_done, .ud = &w};
        st = lmp_compress_watched(ctx, &run.be, run.m, a->v, &run.calib, &watch, NULL);
    }
    if (!st && opts->keep_params) {
        lmp_progress_context(ctx, "[compress with --keep-params]");
        st = compress_keep(ctx, a, &run, s.H);
    }
    a->compress_s = lmp_now_s() - t0;
    if (!st) st = make_units(a, run.shape, w.has_fl);
    /* 2. the baseline, once, with every block boundary kept */
    t0 = lmp_now_s();
    if (!st) {
        lmp_progress_context(ctx, "[baseline]");
        memset(s.pick, s.base, (size_t)s.n_total);
        const lmp_block_source base = sets_source(&s);
        st = lmp_bcache_build(&bc, ctx, &run.be, run.m, &base, c->n_eval_texts, run.text_ids, run.n_windows,
                              c->eval_seq_len, run.ref, run.have_lambada ? &run.lambada : NULL);
    }
    a->build_s = lmp_now_s() - t0;
    if (!st) {
        a->base = bc.base;
        /* the other end: every unit perturbed at once (F for restore-one, Q for quantize-one) */
        lmp_progress_context(ctx, "[other end]");
        memset(s.pick, opts->mode == LMP_AN_RESTORE_ONE ? PICK_F : PICK_Q, (size_t)s.n_total);
        lmp_bcache_result other;
        st = eval_pick(&bc, &s, "analyze: every unit", &other);
        a->variant_res = opts->mode == LMP_AN_RESTORE_ONE ? bc.base : other;
        a->float_res = opts->mode == LMP_AN_RESTORE_ONE ? other : bc.base;
    }
    /* 3. every unit: jobs, spread over the ranks of an MPI run (each rank did 1 and 2 itself) */
    t0 = lmp_now_s();
    lmp_dist *dist = lmp_host_dist(ctx);
    unit_jobs uj = {.ctx = ctx, .a = a, .bc = &bc, .s = &s, .alt = opts->mode == LMP_AN_RESTORE_ONE ? PICK_F : PICK_Q,
                    .t0 = t0};
    int *todo = NULL;
    if (!st && !(uj.back = calloc((size_t)a->n_units + 1, 1))) st = lmp_fail(LMP_ENOMEM, "out of memory");
    if (!st && !(a->unit_finished = calloc((size_t)a->n_units + 1, 1))) st = lmp_fail(LMP_ENOMEM, "out of memory");
    if (!st && !(todo = malloc(((size_t)a->n_units + 1) * sizeof *todo))) st = lmp_fail(LMP_ENOMEM, "out of memory");
    /* --resume: rank 0 reads the earlier file; every rank learns which units are left */
    if (!st && opts->resume && lmp_dist_rank(dist) == 0) st = lmp_analysis_resume(a, opts->resume, opts->resume_path);
    st = lmp_dist_agree(dist, st);
    if (!st && dist) st = lmp_dist_bcast(dist, a->unit_finished, a->n_units);
    for (int u = 0; u < a->n_units && !st; u++) {
        if (opts->rank_proxy) a->unit_finished[u] = 1; /* nothing to evaluate: ranked by the proxy */
        if (!a->unit_finished[u]) todo[uj.n_todo++] = u;
    }
    uj.todo = todo;
    if (!st && a->n_resumed)
        lmp_log(ctx, LMP_LOG_INFO, "analyze: %d of %d units taken from %s, %d to evaluate", a->n_resumed, a->n_units,
                opts->resume_path, uj.n_todo);
    if (!st) st = lmp_dist_run_jobs(dist, &(lmp_dist_jobs){.n = uj.n_todo, .run = unit_run, .take = unit_take, .ud = &uj});
    bc.forwards += uj.forwards;
    bc.naive_forwards += uj.naive_forwards;
    bc.evals += uj.evals;
    /* the rest (ranks, skip search, curves) is rank 0's */
    const int stop_here = lmp_dist_rank(dist) > 0;
    for (int u = 0; u < a->n_units && !st && !stop_here; u++)
        if (!a->unit_finished[u]) st = lmp_fail(LMP_EINVAL, "MPI: unit %s never came back", a->units[u].name);
    free(uj.back);
    free(todo);
    for (int u = 0; u < a->n_units && !st && !stop_here; u++) {
        lmp_an_unit *un = &a->units[u];
        un->value = opts->rank_proxy ? NAN : lmp_an_value(opts->metric, &un->res);
        un->gain = opts->rank_proxy ? NAN
                   : opts->mode == LMP_AN_RESTORE_ONE ? harm(opts->metric, &a->base) - harm(opts->metric, &un->res)
                                                      : harm(opts->metric, &un->res) - harm(opts->metric, &a->base);
        un->proxy = 0;
        for (int j = 0; j < un->n_lins; j++) {
            const int g = un->lins[j];
            un->proxy += w.norm[g] > 0 ? w.err[g] / w.norm[g] : NAN;
        }
        if (!run.calib.n) un->proxy = NAN;
    }
    a->units_s = lmp_now_s() - t0;
    a->rank_forwards = bc.forwards;
    a->rank_naive_forwards = bc.naive_forwards;
    /* 4. ranks, proxy ranks, Spearman */
    if (!st && stop_here) goto done;
    if (!st) {
        a->order = malloc((size_t)a->n_units * sizeof *a->order);
        a->proxy_order = malloc((size_t)a->n_units * sizeof *a->proxy_order);
        double *gain = malloc((size_t)a->n_units * sizeof *gain), *proxy = malloc((size_t)a->n_units * sizeof *proxy);
        if (!a->order || !a->proxy_order || !gain || !proxy) st = lmp_fail(LMP_ENOMEM, "out of memory");
        int n_prox = 0;
        for (int u = 0; u < a->n_units && !st; u++) gain[u] = a->units[u].gain, proxy[u] = a->units[u].proxy;
        if (!st) {
            sort_desc(opts->rank_proxy ? proxy : gain, a->n_units, a->order);
            sort_desc(proxy, a->n_units, a->proxy_order);
            for (int k = 0; k < a->n_units; k++) {
                a->units[a->order[k]].rank = k + 1;
                a->units[a->proxy_order[k]].proxy_rank = k + 1;
            }
            for (int u = 0; u < a->n_units; u++)
                if (isfinite(proxy[u])) gain[n_prox] = gain[u], proxy[n_prox++] = proxy[u];
            a->spearman = opts->rank_proxy ? NAN : spearman(gain, proxy, n_prox);
        }
        free(gain);
        free(proxy);
    }
    /* 5. the skip answer, 6. the curves */
    t0 = lmp_now_s();
    if (!st && opts->have_target) {
        lmp_progress_context(ctx, "[target search]");
        st = search_target(a, &bc, &s);
    } else if (!st && opts->skip_top > 0) {
        lmp_progress_context(ctx, "[skip top]");
        int k = opts->skip_top > a->n_units ? a->n_units : opts->skip_top;
        pick_skip(&s, a, a->order, k);
        a->skip = (lmp_an_point){.order = opts->rank_proxy ? "proxy" : "measured", .k = k};
        st = eval_pick(&bc, &s, "analyze: skip top", &a->skip.res);
        a->skip.value = lmp_an_value(opts->metric, &a->skip.res);
    }
    if (!st && (opts->have_target || opts->skip_top > 0)) {
        a->skip_list = malloc((size_t)(a->skip.k + 1) * sizeof *a->skip_list);
        if (!a->skip_list) st = lmp_fail(LMP_ENOMEM, "out of memory");
        else memcpy(a->skip_list, a->order, (size_t)a->skip.k * sizeof *a->skip_list);
    }
    if (!st && opts->check_config && a->skip_list) st = check_written_config(ctx, a, &run, &bc);
    if (!st && opts->n_curve) {
        lmp_progress_context(ctx, "[curves]");
        st = run_curves(ctx, a, &bc, &s);
    }
    a->search_s = lmp_now_s() - t0;
done:
    lmp_progress_context(ctx, NULL);
    a->forwards = bc.forwards;
    a->naive_forwards = bc.naive_forwards;
    a->evals = bc.evals;
    a->total_s = lmp_now_s() - t_start;

    lmp_bcache_free(&bc);
    for (int g = 0; w.fl && g < s.n_total; g++)
        if (w.has_fl[g]) linear_release(&w.fl[g]);
    if (w.have_pending) lmp_block_free(&w.pending);
    free(w.fl);
    free(w.has_fl);
    free(w.err);
    free(w.norm);
    lmp_block_store_free(s.Q);
    lmp_block_store_free(s.F);
    lmp_block_store_free(s.H);
    free(s.pick);
    lmp_run_release(&run);
    lmp_report_free(r);
    if (st) {
        lmp_analysis_free(a);
        return st;
    }
    *out = a;
    return 0;
}

void lmp_analysis_free(lmp_analysis *a)
{
    if (!a) return;
    for (int u = 0; a->units && u < a->n_units; u++) free(a->units[u].lins);
    free(a->units);
    free(a->order);
    free(a->proxy_order);
    free(a->curve);
    for (int o = 0; a->curve_names && o < a->n_curve_names; o++) free(a->curve_names[o]);
    free(a->curve_names);
    free(a->stage_mask);
    for (int64_t g = 0; a->lin_names && g < a->n_layers * a->n_lin; g++) free((char *)a->lin_names[g]);
    free(a->lin_names);
    free(a->skip_list);
    free(a->unit_finished);
    free(a);
}
