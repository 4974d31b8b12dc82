/* calib_stats.c — see calib_stats.h. */
#include "compress/calib_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "model/block_device.h"
#include "model/block_steps.h"
#include "model/forward.h"

typedef struct collector {
    const lmp_backend *be;
    const lmp_block *blk;
    lmp_block_stats *bs;
    int64_t n_windows, T;
    lmp_block_plan plan; /* the block's steps: which input group each linear reads */
    int last_group;      /* the last input group anything is asked of */
} collector;

static int alloc_filled(float **p, int64_t n, float init)
{
    if (*p) return 0;
    if (!(*p = malloc((size_t)n * sizeof **p))) return lmp_fail(LMP_ENOMEM, "out of memory for statistics");
    for (int64_t i = 0; i < n; i++) (*p)[i] = init;
    return 0;
}

static void fold_min(float *acc, const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) acc[i] = fminf(acc[i], v[i]);
}

static void fold_max(float *acc, const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) acc[i] = fmaxf(acc[i], v[i]);
}

/* Rows of x[T, C] that are sample rows: row i of the sample is global token floor(i*N/S). */
static void take_sample(lmp_stats *s, int64_t S, int64_t N, int64_t first, const float *x,
                        int64_t T, int64_t C)
{
    while (s->n_sample < S) {
        int64_t g = s->n_sample * N / S;
        if (g >= first + T) break;
        memcpy(s->sample + s->n_sample * C, x + (g - first) * C, (size_t)C * sizeof *x);
        s->n_sample++;
    }
}

/* H += 2/n_windows * S^T S for the stacked rows S of linear i's input. */
static int flush_hessian(const lmp_backend *be, lmp_block_stats *bs, int i, int64_t C, int64_t n_windows)
{
    int st = 0;
    if (bs->h_rows[i] > 0)
        st = lmp_be_xtx_accum(be, bs->h_rows[i], C, bs->h_stage[i], 2.0f / (float)n_windows, bs->stats[i].hessian);
    bs->h_rows[i] = 0;
    return st;
}

/* One statistic each, on x[T, C], the input of window w of W; each returns 0 or the first
 * failure, with nothing after it done. */
static int observe_absmax(const collector *c, lmp_stats *s, const float *x, int64_t T, int64_t C)
{
    int st = alloc_filled(&s->absmax, C, 0.0f);
    if (st) return st;
    return lmp_be_reduce_cols(c->be, LMP_REDUCE_ABSMAX, T, C, x, s->absmax);
}

/* With windows, the window's min/max rows are reduced and then folded into the totals. */
static int observe_minmax(const collector *c, lmp_stats *s, int windows, int64_t w, const float *x,
                          int64_t T, int64_t C)
{
    const int64_t W = c->n_windows;
    int st = alloc_filled(&s->min, C, INFINITY);
    if (st) return st;
    st = alloc_filled(&s->max, C, -INFINITY);
    if (st) return st;
    if (windows) {
        st = alloc_filled(&s->win_min, W * C, INFINITY);
        if (st) return st;
        st = alloc_filled(&s->win_max, W * C, -INFINITY);
        if (st) return st;
    }
    float *mn = windows ? s->win_min + w * C : s->min, *mx = windows ? s->win_max + w * C : s->max;
    st = lmp_be_reduce_cols(c->be, LMP_REDUCE_MIN, T, C, x, mn);
    if (st) return st;
    st = lmp_be_reduce_cols(c->be, LMP_REDUCE_MAX, T, C, x, mx);
    if (st) return st;
    if (windows) {
        fold_min(s->min, mn, C);
        fold_max(s->max, mx, C);
    }
    return 0;
}

/* Sums here, divided once all windows are seen (lmp_block_stats_collect). */
static int observe_mean(const collector *c, lmp_stats *s, int windows, int64_t w, const float *x,
                        int64_t T, int64_t C)
{
    int st = alloc_filled(&s->mean, C, 0.0f);
    if (st) return st;
    if (windows) {
        st = alloc_filled(&s->win_mean, c->n_windows * C, 0.0f);
        if (st) return st;
    }
    float *sum = windows ? s->win_mean + w * C : s->mean;
    st = lmp_be_reduce_cols(c->be, LMP_REDUCE_SUM, T, C, x, sum);
    if (st) return st;
    if (windows)
        for (int64_t j = 0; j < C; j++) s->mean[j] += sum[j];
    return 0;
}

/* S sample rows out of the N = W * T calibration tokens. */
static int observe_sample(const collector *c, lmp_stats *s, int64_t S, const float *x, int64_t T,
                          int64_t C)
{
    const int64_t N = c->n_windows * T;
    if (S > N) S = N;
    if (!s->sample) {
        s->sample = malloc((size_t)(S * C) * sizeof *s->sample);
        if (!s->sample) return lmp_fail(LMP_ENOMEM, "out of memory for a sample of %lld tokens", (long long)S);
    }
    take_sample(s, S, N, s->n_tokens, x, T, C);
    return 0;
}

/* GPTQ's H = 2/n_seq sum x x^T: the windows are stacked into linear i's h_stage and flushed
 * into H whenever another would not fit. */
static int observe_hessian(const collector *c, lmp_stats *s, int i, const float *x, int64_t T, int64_t C)
{
    lmp_block_stats *bs = c->bs;
    const int64_t cap = lmp_hessian_stack_rows(T);
    if (!s->hessian) s->hessian = calloc((size_t)(C * C), sizeof *s->hessian);
    if (s->hessian && !bs->h_stage[i]) bs->h_stage[i] = malloc((size_t)(cap * C) * sizeof(float));
    if (!s->hessian || !bs->h_stage[i])
        return lmp_fail(LMP_ENOMEM, "out of memory for a %lld x %lld Hessian", (long long)C, (long long)C);
    memcpy(bs->h_stage[i] + bs->h_rows[i] * C, x, (size_t)(T * C) * sizeof *x);
    bs->h_rows[i] += T;
    if (bs->h_rows[i] + T > cap) return flush_hessian(c->be, bs, i, C, c->n_windows);
    return 0;
}

/* One window in double, then added into the f32 totals. */
static int observe_sqsum(lmp_stats *s, const float *x, int64_t T, int64_t C)
{
    int st = alloc_filled(&s->sqsum, C, 0.0f);
    if (st) return st;
    double *acc = calloc((size_t)C, sizeof *acc);
    if (!acc) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < C; j++) acc[j] += (double)x[t * C + j] * (double)x[t * C + j];
    for (int64_t j = 0; j < C; j++) s->sqsum[j] += (float)acc[j];
    free(acc);
    return 0;
}

/* Every statistic of need on this input, in a fixed order, up to the first failure. */
static int observe_all(const collector *c, lmp_stats *s, uint32_t need, int64_t S, int lin0,
                       const float *x, int64_t T, int64_t C)
{
    const int windows = (need & LMP_STAT_WINDOWS) != 0;
    const int64_t w = s->n_tokens / T;
    int st;
    if (need & LMP_STAT_ABSMAX) {
        st = observe_absmax(c, s, x, T, C);
        if (st) return st;
    }
    if (need & LMP_STAT_MINMAX) {
        st = observe_minmax(c, s, windows, w, x, T, C);
        if (st) return st;
    }
    if (need & LMP_STAT_MEAN) {
        st = observe_mean(c, s, windows, w, x, T, C);
        if (st) return st;
    }
    if ((need & LMP_STAT_SAMPLE) && S > 0) {
        st = observe_sample(c, s, S, x, T, C);
        if (st) return st;
    }
    if (need & LMP_STAT_HESSIAN) {
        st = observe_hessian(c, s, lin0, x, T, C);
        if (st) return st;
    }
    if (need & LMP_STAT_SQSUM) return observe_sqsum(s, x, T, C);
    return 0;
}

static int observe_input(void *ud, const int *lins, int n_lins, const float *x, int64_t T, int64_t C)
{
    collector *c = ud;
    lmp_block_stats *bs = c->bs;
    uint32_t need = 0;
    int64_t S = 0;
    for (int i = 0; i < n_lins; i++) {
        need |= bs->needs[lins[i]];
        if (bs->needs[lins[i]] & LMP_STAT_SAMPLE && bs->n_sample[lins[i]] > S) S = bs->n_sample[lins[i]];
    }
    if (!need) return 0;
    lmp_stats *s = &bs->stats[lins[0]];
    bs->owner[lins[0]] = 1;
    const int64_t w = s->n_tokens / T;
    /* On a failure the caller only frees the statistics, through their owner: the counts and
     * the aliases need not follow. */
    int st = observe_all(c, s, need, S, lins[0], x, T, C);
    if (st) return st;
    s->n_tokens += T;
    if (need & LMP_STAT_WINDOWS) s->n_windows = w + 1;
    for (int i = 1; i < n_lins; i++) bs->stats[lins[i]] = *s; /* shared input, shared numbers */
    if (lmp_block_plan_input_group(&c->plan, c->blk->linears[lins[0]].role) >= c->last_group)
        return LMP_FORWARD_STOP; /* nothing later in the block is needed */
    return 0;
}

/* The statistics the device block path folds (model/block_device.h); a token sample and the
 * per-window ranges are collected op by op. */
#define DEVICE_STATS (LMP_STAT_ABSMAX | LMP_STAT_MINMAX | LMP_STAT_MEAN | LMP_STAT_HESSIAN | LMP_STAT_SQSUM)

/* Every statistic on the device, one block call over all windows up to the last input asked
 * for.  LMP_EUNSUPPORTED (nothing changed but the arrays allocated and initialised, which the
 * per-op collection then fills) when the path does not take this block or these statistics. */
static int collect_on_device(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, const float *X,
                             int64_t n_windows, int64_t T, int last_group, lmp_block_stats *bs)
{
    if (!lmp_block_device_enabled(be)) return LMP_EUNSUPPORTED;
    for (int i = 0; i < blk->n_linears; i++)
        if (bs->needs[i] & ~(uint32_t)DEVICE_STATS)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: a token sample or per-window ranges are collected op by op",
                            blk->linears[i].name);
    lmp_block_plan p;
    lmp_block_plan_make(&p, a, blk->index);
    lmp_bstat want[4];
    lmp_block_watch watch = {{NULL}};
    int groups[4][LMP_STEP_MAX_IO], n_in[4] = {0};
    int st = 0;
    for (int k = 0; k < p.n_steps && !st; k++) {
        const lmp_block_step *s = &p.step[k];
        if (s->kind != LMP_STEP_LINEARS) continue;
        const int g = s->group; /* the input group its linears read */
        if (g < 0 || g > 3 || s->n_out > LMP_STEP_MAX_IO)
            return lmp_fail(LMP_EUNSUPPORTED, "block %d: an input group %d the device path does not know", blk->index, g);
        uint32_t need = 0;
        for (int o = 0; o < s->n_out; o++) {
            const int li = lmp_block_find(blk, s->roles[o]);
            if (li < 0) /* the per-op forward's to judge */
                return lmp_fail(LMP_EUNSUPPORTED, "block %d has no linear of role %d", blk->index, (int)s->roles[o]);
            groups[g][o] = li;
            need |= bs->needs[li];
        }
        if (!need) continue;
        n_in[g] = s->n_out;
        lmp_stats *ls = &bs->stats[groups[g][0]];
        const int64_t C = blk->linears[groups[g][0]].in;
        bs->owner[groups[g][0]] = 1;
        want[g] = (lmp_bstat){.cols = C, .alpha = 2.0f / (float)n_windows};
        if (need & LMP_STAT_ABSMAX && !(st = alloc_filled(&ls->absmax, C, 0.0f))) want[g].absmax = ls->absmax;
        if (!st && need & LMP_STAT_MINMAX && !(st = alloc_filled(&ls->min, C, INFINITY)) &&
            !(st = alloc_filled(&ls->max, C, -INFINITY))) {
            want[g].min = ls->min;
            want[g].max = ls->max;
        }
        if (!st && need & LMP_STAT_MEAN && !(st = alloc_filled(&ls->mean, C, 0.0f))) want[g].sum = ls->mean;
        if (!st && need & LMP_STAT_SQSUM && !(st = alloc_filled(&ls->sqsum, C, 0.0f))) want[g].sqsum = ls->sqsum;
        if (!st && need & LMP_STAT_HESSIAN) {
            if (!ls->hessian && !(ls->hessian = calloc((size_t)(C * C), sizeof *ls->hessian)))
                st = lmp_fail(LMP_ENOMEM, "out of memory for a %lld x %lld Hessian", (long long)C, (long long)C);
            want[g].hessian = ls->hessian;
        }
        watch.want[g] = &want[g];
    }
    if (!st) st = lmp_block_device_forward(be, a, blk, X, n_windows, T, NULL, last_group, &watch);
    if (st) return st;
    for (int g = 0; g < 4; g++) {
        if (!watch.want[g]) continue;
        lmp_stats *ls = &bs->stats[groups[g][0]];
        ls->n_tokens = n_windows * T;
        for (int o = 1; o < n_in[g]; o++) bs->stats[groups[g][o]] = *ls; /* shared input, shared numbers */
    }
    return 0;
}

int lmp_block_stats_collect(const lmp_ctx *ctx, const lmp_backend *be, const lmp_arch *a, const lmp_block *blk,
                            const float *X, int64_t n_windows, int64_t T, lmp_calib_states *cs,
                            lmp_block_stats *bs)
{
    collector c = {.be = be, .blk = blk, .bs = bs, .n_windows = n_windows, .T = T};
    lmp_block_plan_make(&c.plan, a, blk->index);
    int first = 4; /* the first input asked for: a pass may start at its segment */
    for (int i = 0; i < blk->n_linears; i++) {
        const int g = lmp_block_plan_input_group(&c.plan, blk->linears[i].role);
        if (bs->needs[i] && g > c.last_group) c.last_group = g;
        if (bs->needs[i] && g < first) first = g;
    }
    int st = collect_on_device(be, a, blk, X, n_windows, T, c.last_group, bs);
    if (!st) {
        bs->forward_share = lmp_block_flops(a, T, c.last_group) / lmp_block_flops(a, T, 4);
    } else if (st == LMP_EUNSUPPORTED) { /* the per-op forward computes everything */
        if (be->ctx && lmp_block_device_enabled(be))
            lmp_log(be->ctx, LMP_LOG_DEBUG, "block %d statistics op by op: %s", blk->index, lmp_last_error());
        st = lmp_calib_pass(ctx, cs, be, a, blk, X, NULL, first, c.last_group, observe_input, &c, n_windows, T,
                            &bs->forward_share);
    }
    /* The rows still stacked, then the stacks: every stack is freed, also after a failure. */
    for (int i = 0; i < blk->n_linears; i++) {
        if (!st && bs->h_stage[i]) st = flush_hessian(be, bs, i, blk->linears[i].in, n_windows);
        free(bs->h_stage[i]);
        bs->h_stage[i] = NULL;
    }
    if (st) return st;
    for (int i = 0; i < blk->n_linears; i++) {
        lmp_stats *s = &bs->stats[i]; /* aliases share the arrays divided here */
        if (!bs->owner[i]) continue;
        for (int64_t j = 0; s->mean && j < blk->linears[i].in; j++) s->mean[j] /= (float)s->n_tokens;
        for (int64_t j = 0; s->win_mean && j < s->n_windows * blk->linears[i].in; j++) s->win_mean[j] /= (float)T;
    }
    return 0;
}

void lmp_block_stats_free(lmp_block_stats *bs, int n_linears)
{
    for (int i = 0; i < n_linears; i++)
        if (bs->owner[i]) {
            lmp_stats *s = &bs->stats[i];
            free(s->absmax);
            free(s->min);
            free(s->max);
            free(s->mean);
            free(s->sample);
            free(s->win_min);
            free(s->win_max);
            free(s->win_mean);
            free(s->hessian);
            free(s->sqsum);
        }
    memset(bs, 0, sizeof *bs);
}
