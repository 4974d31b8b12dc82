/* pipeline.c — see pipeline.h. */
#include "compress/pipeline.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ctx.h"
#include "base/error.h"
#include "base/log.h"
#include "compress/calib_cache.h"
#include "compress/calib_states.h"
#include "compress/kv_calib.h"
#include "compress/calib_stats.h"
#include "compress/imatrix_map.h"
#include "model/block_steps.h"
#include "model/block_store.h"
#include "model/expert_pager.h"
#include "model/forward.h"
#include "plugin/host_services.h"
#include "train/learn.h"

int lmp_windows_cut(lmp_ctx *ctx, const int32_t *ids, int64_t n_ids, int64_t samples, int64_t T,
                    int random, const char *what, lmp_windows *out)
{
    memset(out, 0, sizeof *out);
    int64_t avail = n_ids / T;
    if (avail == 0)
        return lmp_fail(LMP_EINVAL, "%s: %lld tokens, fewer than one window of %lld", what,
                        (long long)n_ids, (long long)T);
    int64_t n = samples;
    if (!random && avail < samples) {
        lmp_log(ctx, LMP_LOG_WARN, "%s gives %lld windows of %lld tokens; using %lld (asked for %lld)",
                what, (long long)avail, (long long)T, (long long)avail, (long long)samples);
        n = avail;
    }
    out->tokens = malloc((size_t)(n * T) * sizeof *out->tokens);
    if (!out->tokens) return lmp_fail(LMP_ENOMEM, "out of memory for %lld windows", (long long)n);
    const lmp_host *h = lmp_host_services();
    for (int64_t i = 0; i < n; i++) {
        int64_t start = random ? (int64_t)(h->rng_u64(ctx) % (uint64_t)(n_ids - T + 1)) : i * T;
        memcpy(out->tokens + i * T, ids + start, (size_t)T * sizeof *ids);
    }
    out->n = n;
    out->T = T;
    return 0;
}

void lmp_windows_free(lmp_windows *w)
{
    free(w->tokens);
    memset(w, 0, sizeof *w);
}

void lmp_blocks_free(lmp_block *blocks, int64_t n)
{
    for (int64_t i = 0; blocks && i < n; i++) lmp_block_free(&blocks[i]);
    free(blocks);
}

void lmp_block_bits_accum(const lmp_block *blk, double *bits, double *count)
{
    for (int i = 0; i < blk->n_linears; i++) {
        const lmp_linear *l = &blk->linears[i];
        /* N:M sparse: the kept values, plus ceil(log2 m) index bits per kept value. */
        double w_bits = l->weight_bits;
        if (l->mask && l->sparse_m > 0) {
            int ib = 0;
            while ((1 << ib) < l->sparse_m) ib++;
            w_bits = (l->weight_bits + ib) * l->sparse_n / l->sparse_m;
        }
        *bits += w_bits * (double)(l->out * l->in);
        *count += (double)(l->out * l->in);
    }
}

double lmp_blocks_bits_per_weight(const lmp_block *blocks, int64_t n)
{
    double bits = 0, count = 0;
    for (int64_t b = 0; b < n; b++) lmp_block_bits_accum(&blocks[b], &bits, &count);
    return count > 0 ? bits / count : 0;
}

const lmp_compress_times *lmp_compress_times_get(const lmp_ctx *ctx) { return &ctx->times; }
void lmp_compress_times_reset(lmp_ctx *ctx) { memset(&ctx->times, 0, sizeof ctx->times); }

/* A routed expert's statistics, after the collection: its token count recorded on the linear,
 * and, for a stage that asks for the Hessian, the declared fallback when it saw fewer than the
 * variant's expert_min_tokens (at least 1): its Hessian becomes the identity (GPTQ then rounds
 * each weight to the stage's grid as RTN does, its importance uniform), logged by name.  The
 * other statistics (ranges, means, sums of squares) of a few tokens are used as they are; an
 * expert with no token at all cannot give them: refused by name. */
static int expert_fallback(lmp_ctx *ctx, const lmp_variant *v, const lmp_stage *stage, lmp_block *blk,
                           lmp_block_stats *bs, int i)
{
    lmp_linear *l = &blk->linears[i];
    lmp_stats *s = &bs->stats[i];
    const int64_t least = v->expert_min_tokens > 0 ? v->expert_min_tokens : 1;
    l->calib_tokens = s->n_tokens;
    l->calib_fallback = 0;
    if (s->n_tokens >= least) return 0;
    if (s->n_tokens == 0 && (bs->needs[i] & ~(uint32_t)LMP_STAT_HESSIAN))
        return lmp_fail(LMP_EUNSUPPORTED, "%s (expert %d of block %d) received no calibration token, and strategy '%s' "
                        "needs its activation statistics: use more calibration text, or calibration.experts = \"all\"",
                        l->name, l->expert, blk->index, stage->plugin->desc->name);
    if (!(bs->needs[i] & LMP_STAT_HESSIAN)) return 0; /* a few tokens' ranges: as they are */
    {
        const int64_t C = l->in;
        if (!s->hessian) { /* never observed: arrays of its own */
            if (!(s->hessian = calloc((size_t)(C * C), sizeof *s->hessian))) return lmp_fail(LMP_ENOMEM, "out of memory");
            bs->owner[i] = 1;
        }
        if (bs->owner[i]) { /* an alias (up beside gate) shares the owner's, already set */
            memset(s->hessian, 0, (size_t)(C * C) * sizeof *s->hessian);
            for (int64_t j = 0; j < C; j++) s->hessian[j * C + j] = 1.0f;
        }
    }
    l->calib_fallback = 1;
    if (l->role == LMP_ROLE_UP) return 0; /* it shares gate's input and tokens: said once for both */
    lmp_log(ctx, LMP_LOG_WARN, "block %d: %s (expert %d) saw %lld calibration token%s, fewer than expert_min_tokens = "
            "%lld: fallback, its Hessian is the identity (strategy '%s' rounds it to its grid as RTN would)",
            blk->index, l->name, l->expert, (long long)s->n_tokens, s->n_tokens == 1 ? "" : "s", (long long)least,
            stage->plugin->desc->name);
    return 0;
}

/* Observes (if asked) and applies the stage to the targeted linears whose input group is in
 * `groups` (a bit set); the others are left alone.  The statistics are those of `observed` run
 * over X: blk itself, or the block as it was before the stage (a sequential stage calibrated on
 * the original inputs).  A linear whose stage asks for LMP_STAT_IMATRIX gets its vector of `im`
 * (the variant's importance matrix) beside them; that one is read from the file, not observed. */
static int run_stage_on(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, const lmp_stage *stage, void *self,
                        const lmp_variant *v, lmp_block *blk, const lmp_block *observed, const float *X,
                        const lmp_windows *calib, lmp_calib_states *cs, unsigned groups, int only_routed)
{
    const lmp_imatrix *im = v->imatrix;
    const int v_all_experts = v->calib_experts_all;
    const lmp_strategy_i *vt = stage->plugin->desc->vtable;
    const int has_sample = vt->struct_size > offsetof(lmp_strategy_i, sample_tokens) && vt->sample_tokens;
    const int n = blk->n_linears;
    lmp_block_stats bs;
    const float **imx = calloc((size_t)n + 1, sizeof *imx);
    uint32_t any = 0, targeted = 0, learns = 0;
    int st = imx ? lmp_block_stats_init(&bs, n) : lmp_fail(LMP_ENOMEM, "out of memory");
    if (!imx) memset(&bs, 0, sizeof bs);
    bs.all_experts = v_all_experts;
    lmp_block_plan plan; /* which input group each linear reads */
    lmp_block_plan_make(&plan, &m->arch, blk->index);
    for (int i = 0; i < n && !st; i++) {
        lmp_linear *l = &blk->linears[i];
        /* only_routed: a part of a block whose other linears are compressed apart (expert_pager.h) */
        const int mine = !only_routed || l->expert_kind == LMP_EXPERT_ROUTED;
        l->params = mine && (groups >> lmp_block_plan_input_group(&plan, l->role) & 1u)
                        ? lmp_stage_params_for_linear(stage, l) : NULL;
        l->stats = NULL;
        if (!l->params) continue;
        targeted++;
        const uint32_t need = vt->needs(self, l->params) & ~(uint32_t)LMP_NEED_SEQUENTIAL;
        learns |= need & LMP_NEED_CALIB_INPUTS;
        any |= bs.needs[i] = need & ~(uint32_t)(LMP_STAT_IMATRIX | LMP_NEED_CALIB_INPUTS | LMP_NEED_WHOLE_MODEL);
        if (bs.needs[i] & LMP_STAT_SAMPLE) bs.n_sample[i] = has_sample ? vt->sample_tokens(self, l->params) : 0;
        /* lmp_compress checked every entry before the first block; this only fetches it */
        if (need & LMP_STAT_IMATRIX)
            st = im ? lmp_imatrix_for_linear(im, m->arch.family, blk->index, l, &imx[i])
                    : lmp_fail(LMP_EINVAL, "%s: the stage asks for an importance matrix, and none is set", l->name);
    }
    double t0 = lmp_now_s();
    if (!st && targeted && any && !(st = lmp_block_stats_collect(ctx, be, &m->arch, observed, X, calib->n, calib->T, cs, &bs))) {
        ctx->times.forwards += bs.forward_share;
        for (int i = 0; i < n && !st; i++)
            if (blk->linears[i].params && bs.needs[i] && blk->linears[i].expert_kind == LMP_EXPERT_ROUTED)
                st = expert_fallback(ctx, v, stage, blk, &bs, i);
        for (int i = 0; i < n; i++)
            if (blk->linears[i].params && bs.needs[i]) blk->linears[i].stats = &bs.stats[i];
    }
    /* after the collection, which copies an input's statistics over the linears sharing it */
    for (int i = 0; i < n && !st; i++)
        if (imx[i]) {
            bs.stats[i].imatrix = imx[i];
            blk->linears[i].stats = &bs.stats[i];
        }
    double t1 = lmp_now_s();
    ctx->times.collect += t1 - t0;
    /* a stage that learns gets the block's calibration inputs lent through the context */
    const lmp_learn_inputs lent = {.be = be, .m = m, .X = X, .n = calib->n, .T = calib->T};
    if (!st && targeted) {
        lmp_host_clear_error(ctx);
        ctx->learn = learns ? &lent : NULL;
        st = vt->apply(self, lmp_host_services(), ctx, blk);
        ctx->learn = NULL;
        if (st)
            st = lmp_fail(st, "strategy '%s' on block %d: %s", stage->plugin->desc->name, blk->index,
                          lmp_host_error(ctx));
    }
    ctx->times.apply += lmp_now_s() - t1;
    for (int i = 0; i < n; i++) {
        blk->linears[i].params = NULL;
        blk->linears[i].stats = NULL;
    }
    lmp_block_stats_free(&bs, n);
    free(imx);
    return st;
}

/* Runs one stage on one block: all linears at once, or one input group after the other when
 * the stage asks for LMP_NEED_SEQUENTIAL.  Each group then sees the statistics of the block as
 * the earlier groups left it, or, calibrated on the original inputs, of the block as it was
 * before the stage (a snapshot: the unmodified layers' inputs, still one group at a time). */
static int run_stage(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, const lmp_stage *stage, void *self,
                     const lmp_variant *v, lmp_block *blk, const float *X, const lmp_windows *calib,
                     lmp_calib_states *cs, int only_routed)
{
    const lmp_strategy_i *vt = stage->plugin->desc->vtable;
    int sequential = 0;
    for (int i = 0; i < blk->n_linears && !sequential; i++) {
        const lmp_value *p = lmp_stage_params_for_linear(stage, &blk->linears[i]);
        sequential = p && (vt->needs(self, p) & LMP_NEED_SEQUENTIAL);
    }
    if (!sequential) return run_stage_on(ctx, be, m, stage, self, v, blk, blk, X, calib, cs, 0xFu, only_routed);
    lmp_block before;
    const lmp_block *observed = blk;
    int st = 0;
    if (v->calib_inputs == LMP_CALIB_INPUTS_ORIGINAL && calib->n) {
        if ((st = lmp_block_clone(blk, &before))) return st;
        observed = &before;
    }
    for (int g = 0; g < 4 && !st; g++)
        st = run_stage_on(ctx, be, m, stage, self, v, blk, observed, X, calib, cs, 1u << g, only_routed);
    if (observed != blk) lmp_block_free(&before);
    return st;
}

int lmp_compress(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, const lmp_variant *v,
                 const lmp_windows *calib, lmp_block **out)
{
    return lmp_compress_watched(ctx, be, m, v, calib, NULL, out);
}

/* Whether stage s asks for `flag` on any linear of any block. */
static int stage_asks(const lmp_model *m, const lmp_stage *stage, void *self, uint32_t flag, int *asks)
{
    const lmp_strategy_i *vt = stage->plugin->desc->vtable;
    *asks = 0;
    for (int64_t b = 0; b < m->arch.n_layers && !*asks; b++) {
        lmp_block shape;
        int st = lmp_block_init(&shape, (int)b, &m->arch);
        if (st) return st;
        for (int i = 0; i < shape.n_linears && !*asks; i++) {
            const lmp_value *p = lmp_stage_params_for_linear(stage, &shape.linears[i]);
            *asks = p && (vt->needs(self, p) & flag) != 0;
        }
        lmp_block_free_tables(&shape);
    }
    return 0;
}

/* Whether any stage observes any linear of any block: otherwise calibration is skipped.  The
 * importance matrix is read from its file: asking for it alone observes nothing.  Names come from
 * each block's tables (lmp_block_init), so no weights are read. */
static int any_stage_observes(const lmp_model *m, const lmp_variant *v, void *const *selves, int *observes)
{
    *observes = 0;
    for (int s = 0; s < v->n_stages && !*observes; s++) {
        int st = stage_asks(m, &v->stages[s], selves[s], ~(uint32_t)LMP_STAT_IMATRIX, observes);
        if (st) return st;
    }
    return 0;
}

static int whole_model_stage(const lmp_model *m, const lmp_variant *v, void *const *selves, int *whole);

static int calibration_missing(void)
{
    return lmp_fail(LMP_EINVAL, "a stage needs calibration statistics: set calibration.text in the config");
}

/* Every stage of v created (*selves[n_stages], NULL for a stage without create()), to ask it
 * what it needs; *made: how many were tried, for stages_destroy (also after a failure). */
static int stages_create(lmp_ctx *ctx, const lmp_variant *v, void ***selves, int *made)
{
    *made = 0;
    *selves = calloc((size_t)v->n_stages, sizeof **selves);
    int st = *selves ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    for (; *made < v->n_stages && !st; (*made)++) {
        const lmp_strategy_i *vt = v->stages[*made].plugin->desc->vtable;
        if (!vt->create) continue;
        lmp_host_clear_error(ctx);
        if ((st = vt->create(lmp_host_services(), ctx, v->stages[*made].params, &(*selves)[*made])))
            st = lmp_fail(st, "strategy '%s': %s", v->stages[*made].plugin->desc->name, lmp_host_error(ctx));
    }
    return st;
}

static void stages_destroy(const lmp_variant *v, void **selves, int made)
{
    for (int s = 0; selves && s < made; s++) {
        const lmp_strategy_i *vt = v->stages[s].plugin->desc->vtable;
        if (selves[s] && vt->destroy) vt->destroy(selves[s]);
    }
    free(selves);
}

int lmp_compress_check_variant(lmp_ctx *ctx, const lmp_model *m, const lmp_variant *v, int has_calibration)
{
    if (!v->n_stages) return 0;
    void **selves;
    int made;
    int st = stages_create(ctx, v, &selves, &made);
    int whole = 0, observes = 0;
    if (!st) st = lmp_imatrix_check_stages(m, v, selves);
    if (!st) st = whole_model_stage(m, v, selves, &whole);
    if (!st) st = any_stage_observes(m, v, selves, &observes);
    if (!st && observes && !has_calibration) st = calibration_missing();
    if (!st && v->kv.type != LMP_KV_NONE && !v->kv.dynamic && !has_calibration)
        st = lmp_fail(LMP_EINVAL, "%s (line %d): static scales come from the calibration: set calibration.text "
                      "in the config, or scales = \"dynamic\"", v->kv_at.key, v->kv_at.line);
    if (!st && v->kv.type != LMP_KV_NONE && v->kv.per_head && m->arch.n_kv_heads > LMP_KV_MAX_HEADS)
        st = lmp_fail(LMP_EINVAL, "%s (line %d): per-head scales for %lld KV heads, more than the %d lmpress keeps: "
                      "use granularity = \"tensor\"", v->kv_at.key, v->kv_at.line, (long long)m->arch.n_kv_heads, LMP_KV_MAX_HEADS);
    stages_destroy(v, selves, made);
    return st;
}

int lmp_compress_observing_stages(lmp_ctx *ctx, const lmp_model *m, const lmp_variant *v, uint32_t *stages)
{
    *stages = 0;
    if (!v->n_stages) return 0;
    void **selves;
    int made;
    int st = stages_create(ctx, v, &selves, &made);
    for (int s = 0; s < v->n_stages && s < 32 && !st; s++) {
        int asks = 0;
        st = stage_asks(m, &v->stages[s], selves[s], ~(uint32_t)LMP_STAT_IMATRIX, &asks);
        if (asks) *stages |= 1u << s;
    }
    stages_destroy(v, selves, made);
    return st;
}

/* Whether the variant ends with a stage that works on the whole model (LMP_NEED_WHOLE_MODEL);
 * refused when such a stage is not the last, or has no finish(). */
static int whole_model_stage(const lmp_model *m, const lmp_variant *v, void *const *selves, int *whole)
{
    *whole = 0;
    for (int s = 0; s < v->n_stages; s++) {
        int asks, st = stage_asks(m, &v->stages[s], selves[s], LMP_NEED_WHOLE_MODEL, &asks);
        if (st) return st;
        if (!asks) continue;
        const lmp_strategy_i *vt = v->stages[s].plugin->desc->vtable;
        const char *name = v->stages[s].plugin->desc->name;
        if (s != v->n_stages - 1)
            return lmp_fail(LMP_EINVAL, "variant '%s': strategy '%s' (stage %d of %d) works on the whole model: it must "
                                        "be the variant's last stage",
                            v->name, name, s + 1, v->n_stages);
        if (vt->struct_size < offsetof(lmp_strategy_i, finish) + sizeof vt->finish || !vt->finish)
            return lmp_fail(LMP_EINVAL, "variant '%s': strategy '%s' asks for the whole model but has no finish()",
                            v->name, name);
        *whole = 1;
    }
    return 0;
}

/* The whole-model stage's finish() on every block, with its parameters set and the calibration
 * windows lent (train/learn.h). */
static int finish_whole_model(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, const lmp_variant *v,
                              void *self, const lmp_windows *calib, lmp_block *blocks)
{
    const lmp_stage *stage = &v->stages[v->n_stages - 1];
    const lmp_strategy_i *vt = stage->plugin->desc->vtable;
    const int64_t L = m->arch.n_layers;
    /* the router and the shared gate only where the stage names them, as block by block */
    for (int64_t b = 0; b < L; b++)
        for (int i = 0; i < blocks[b].n_linears; i++)
            blocks[b].linears[i].params = lmp_stage_params_for_linear(stage, &blocks[b].linears[i]);
    const lmp_learn_inputs lent = {.be = be, .m = m, .tokens = calib->tokens, .n = calib->n, .T = calib->T};
    const double t0 = lmp_now_s();
    lmp_host_clear_error(ctx);
    ctx->learn = &lent;
    int st = vt->finish(self, lmp_host_services(), ctx, blocks, (int)L);
    ctx->learn = NULL;
    ctx->times.apply += lmp_now_s() - t0;
    if (st) st = lmp_fail(st, "strategy '%s' on the whole model: %s", stage->plugin->desc->name, lmp_host_error(ctx));
    for (int64_t b = 0; b < L; b++)
        for (int i = 0; i < blocks[b].n_linears; i++) blocks[b].linears[i].params = NULL;
    return st;
}

/* ---- a mixture of experts' block a group of experts at a time (model/expert_pager.h) ------------ */

/* The strategies whose apply rewrites each targeted linear from its own weights and statistics
 * alone, so that a part of a block (the skeleton, a group of experts) gives the numbers the
 * whole block gives.  A strategy that folds a scale into a norm (awq, smoothquant) or learns
 * over the block's output (autoround, qat) needs the whole block. */
static int stage_per_linear(const lmp_stage *stage)
{
    static const char *const ok[] = {"rtn", "rtn_mse", "gptq", NULL};
    for (int i = 0; ok[i]; i++)
        if (!strcmp(stage->plugin->desc->name, ok[i])) return 1;
    return 0;
}

/* Whether a stage of v is sequential on block b (LMP_NEED_SEQUENTIAL) and whether one targets
 * its router, from the block's tables (no weights read). */
static int stages_on_block(const lmp_model *m, const lmp_variant *v, void *const *selves, int64_t b, int *sequential,
                           int *router)
{
    lmp_block shape;
    *sequential = *router = 0;
    int st = lmp_block_init(&shape, (int)b, &m->arch);
    for (int s = 0; s < v->n_stages && !st; s++)
        for (int i = 0; i < shape.n_linears; i++) {
            const lmp_value *p = lmp_stage_params_for_linear(&v->stages[s], &shape.linears[i]);
            if (!p) continue;
            const lmp_strategy_i *vt = v->stages[s].plugin->desc->vtable;
            if (vt->needs(selves[s], p) & LMP_NEED_SEQUENTIAL) *sequential = 1;
            if (shape.linears[i].role == LMP_ROLE_ROUTER) *router = 1;
        }
    if (!st) lmp_block_free_tables(&shape);
    return st;
}

/* Routed experts per group for block b (0: the block is handled whole).  A block above the
 * budget that cannot be streamed is said so in the log, naming why, once per variant. */
static int64_t stream_group_size(lmp_ctx *ctx, const lmp_model *m, const lmp_variant *v, void *const *selves,
                                 const lmp_compress_watch *watch, int keep_all, int64_t b, int *said)
{
    const int64_t per = lmp_expert_group_size(&m->arch, b, ctx->expert_group_bytes);
    if (!per) return 0;
    const char *why = NULL;
    char buf[200];
    int sequential = 0, router = 0;
    if (stages_on_block(m, v, selves, b, &sequential, &router)) return 0; /* the block whole: the next error says why */
    if (!lmp_model_copies_experts(m))
        why = "its file format is read a block at a time (only Hugging Face safetensors are read a group at a time)";
    else if (keep_all) why = "every block is kept (an export of this variant, or a whole-model stage)";
    else if (watch->observe) why = "a watcher observes every forward (analyze)";
    else if (watch->block_done && !watch->block_done_paged) why = "the caller reads each finished block whole (an export keeps every block)";
    else if (v->kv.type != LMP_KV_NONE) why = "the variant quantizes the KV cache";
    else if (v->n_stages > 1) why = "the variant has more than one stage";
    else if (sequential && router) why = "a sequential stage quantizes the router";
    for (int s = 0; s < v->n_stages && !why; s++)
        if (!stage_per_linear(&v->stages[s])) {
            snprintf(buf, sizeof buf, "strategy '%s' needs the whole block (only rtn, rtn_mse and gptq are streamed)",
                     v->stages[s].plugin->desc->name);
            why = buf;
        }
    const double mb = (double)(lmp_expert_f32_bytes(&m->arch) * m->arch.n_experts) / 1048576.0;
    if (why) {
        if (!(*said & 2))
            lmp_log(ctx, LMP_LOG_WARN, "variant %s: block %lld's %lld routed experts (%.0f MB in f32) are held whole, "
                    "above memory.expert_group_mb = %.0f, because %s", v->name, (long long)b,
                    (long long)m->arch.n_experts, mb, (double)ctx->expert_group_bytes / 1048576.0, why);
        *said |= 2;
        return 0;
    }
    if (!(*said & 1))
        lmp_log(ctx, LMP_LOG_INFO, "variant %s: the routed experts of a block (%lld, %.0f MB in f32) are compressed and "
                "evaluated %lld at a time (memory.expert_group_mb = %.0f)", v->name, (long long)m->arch.n_experts, mb,
                (long long)per, (double)ctx->expert_group_bytes / 1048576.0);
    *said |= 1;
    return per;
}

/* v's stages on blk: a whole block (lmp_compress_watched, with the stages' states), a skeleton, or
 * a skeleton with a group of experts whose skeleton linears are left alone (only_routed). */
static int run_stages(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, const lmp_variant *v,
                      void *const *selves, const lmp_compress_watch *watch, lmp_block *blk, const float *X,
                      const lmp_windows *calib, lmp_calib_states *states, int only_routed)
{
    int st = 0;
    for (int s = 0; s < v->n_stages && !st; s++) {
        if (watch->before_stage) st = watch->before_stage(watch->ud, s, blk);
        if (!st) st = run_stage(ctx, be, m, &v->stages[s], selves[s], v, blk, X, calib, states, only_routed);
        if (!st && watch->after_stage) st = watch->after_stage(watch->ud, s, blk);
        /* a stage that leaves a NaN or an infinity (an overflowing importance, a broken solver)
         * fails the variant here rather than giving a ppl of nan */
        char bad[512];
        int64_t at;
        float value;
        if (!st && lmp_block_find_nonfinite(blk, bad, sizeof bad, &at, &value))
            st = lmp_fail(LMP_EINVAL, "pipeline[%d] (%s) left a non-finite value in %s (%g at element %lld)", s,
                          v->stages[s].plugin->desc->name, bad, (double)value, (long long)at);
    }
    return st;
}

static int store_group_load(void *self, int64_t g, lmp_block *out)
{
    const lmp_block_source *src = self;
    return src->get(src->self, g, out);
}

/* Block b compressed a group of `per` experts at a time: the skeleton (every linear that is no
 * routed expert's, and the norms) stays in memory; each group is read from the file, put beside
 * the skeleton (borrowed, not copied) for its statistics, compressed (only its experts), and
 * kept as codes in a temporary file.  The skeleton is compressed before the groups when its
 * compressed attention is what the experts' statistics see (a sequential stage calibrated on the
 * compressed inputs), else after them, so each expert's statistics are those of the whole block.
 * Then the next block's inputs and watch->block_done_paged read the groups back one at a time. */
static int compress_streamed(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, const lmp_variant *v,
                             void *const *selves, const lmp_compress_watch *watch, int64_t b, int64_t per, float *X,
                             const lmp_windows *calib)
{
    const lmp_arch *a = &m->arch;
    const int64_t E = a->n_experts, G = (E + per - 1) / per;
    const int original = v->calib_inputs == LMP_CALIB_INPUTS_ORIGINAL && calib->n;
    lmp_block skel, part, piece;
    lmp_block_store *store = NULL;
    int sequential = 0, router = 0, have_skel = 0;
    int st = stages_on_block(m, v, selves, b, &sequential, &router);
    if (!st) have_skel = !(st = lmp_model_block_copy_experts(m, b, 1, 0, 0, &skel));
    if (!st) st = lmp_block_store_open(ctx, G, "a block's compressed expert groups", &store);
    const int skeleton_first = sequential && !original;
    if (!st && skeleton_first) st = run_stages(ctx, be, m, v, selves, watch, &skel, X, calib, NULL, 0);
    for (int64_t g = 0; g < G && !st; g++) {
        const int64_t e0 = g * per, e1 = e0 + per < E ? e0 + per : E;
        if ((st = lmp_model_block_copy_experts(m, b, 0, e0, e1, &part))) break;
        piece = skel; /* the skeleton's tables and weights borrowed, the group's after them */
        piece.n_linears = skel.n_linears + part.n_linears;
        if (!(piece.linears = malloc((size_t)piece.n_linears * sizeof *piece.linears)))
            st = lmp_fail(LMP_ENOMEM, "out of memory");
        if (!st) {
            memcpy(piece.linears, skel.linears, (size_t)skel.n_linears * sizeof *skel.linears);
            memcpy(piece.linears + skel.n_linears, part.linears, (size_t)part.n_linears * sizeof *part.linears);
            st = run_stages(ctx, be, m, v, selves, watch, &piece, X, calib, NULL, 1);
            /* the group's linears as the stage left them (new arrays, grids) go back to the part */
            memcpy(part.linears, piece.linears + skel.n_linears, (size_t)part.n_linears * sizeof *part.linears);
            free(piece.linears);
        }
        part.index = (int)g; /* its slot in the store */
        if (!st) st = lmp_block_store_put(store, &part);
        lmp_block_free(&part);
    }
    if (!st && !skeleton_first) st = run_stages(ctx, be, m, v, selves, watch, &skel, X, calib, NULL, 0);
    lmp_block_source src = {0};
    lmp_expert_pager pager;
    if (store) src = lmp_block_store_source(store);
    lmp_expert_pager_init(&pager, E, per, store_group_load, &src);
    double t0 = lmp_now_s();
    if (!st && b + 1 < a->n_layers && calib->n) { /* block b+1's inputs, through every group in turn */
        double share = 0;
        if (original) { /* from the block as the model has it */
            lmp_block orig;
            lmp_model_experts from_file = {.m = m, .block = b, .per_group = per};
            lmp_expert_pager file_pager;
            lmp_expert_pager_init(&file_pager, E, per, lmp_model_experts_load, &from_file);
            if (!(st = lmp_model_block_copy_experts(m, b, 1, 0, 0, &orig))) {
                st = lmp_calib_pass_paged(ctx, NULL, be, a, &orig, &file_pager, X, X, 4, 4, NULL, NULL, calib->n,
                                          calib->T, &share);
                lmp_block_free(&orig);
            }
            lmp_expert_pager_drop(&file_pager);
        } else {
            st = lmp_calib_pass_paged(ctx, NULL, be, a, &skel, &pager, X, X, 4, 4, NULL, NULL, calib->n, calib->T,
                                      &share);
        }
        if (!st) ctx->times.forwards += share;
        lmp_expert_pager_drop(&pager);
    }
    ctx->times.propagate += lmp_now_s() - t0;
    if (!st && watch->block_done_paged) st = watch->block_done_paged(watch->ud, b, &skel, &pager);
    lmp_log(ctx, LMP_LOG_DEBUG, "block %lld: %lld expert groups of %lld, %lld group loads, %.1f MB of codes on disk",
            (long long)b, (long long)G, (long long)per, (long long)pager.loads,
            store ? (double)lmp_block_store_bytes(store) / 1e6 : 0.0);
    lmp_expert_pager_drop(&pager);
    lmp_block_store_free(store);
    if (have_skel) lmp_block_free(&skel);
    return st;
}

int lmp_compress_watched(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, const lmp_variant *v,
                         const lmp_windows *calib, const lmp_compress_watch *watch, lmp_block **out)
{
    static const lmp_compress_watch no_watch = {0};
    if (!watch) watch = &no_watch;
    const int64_t L = m->arch.n_layers, d = m->arch.dim;
    if (out) *out = NULL;
    else if (!watch->block_done) return lmp_fail(LMP_EINVAL, "lmp_compress: neither out nor block_done");
    void **selves = calloc((size_t)v->n_stages + 1, sizeof *selves);
    float *X = NULL;
    lmp_block *blocks = NULL;
    int st = selves ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    for (int s = 0; s < v->n_stages && !st; s++) {
        const lmp_strategy_i *vt = v->stages[s].plugin->desc->vtable;
        if (!vt->create) continue;
        lmp_host_clear_error(ctx);
        if ((st = vt->create(lmp_host_services(), ctx, v->stages[s].params, &selves[s])))
            st = lmp_fail(st, "strategy '%s': %s", v->stages[s].plugin->desc->name, lmp_host_error(ctx));
    }
    /* Every linear a stage quantizes with the importance matrix has its entry: a file of another
     * model is refused before the first block, not halfway through. */
    if (!st && v->n_stages) st = lmp_imatrix_check_stages(m, v, selves);
    /* Kept for the caller, or for a last stage that works on the whole model, or one at a time:
     * block b is read from the file when its turn comes. */
    int whole = 0;
    if (!st) st = whole_model_stage(m, v, selves, &whole);
    const int keep_all = out || whole;
    if (!st && !(blocks = calloc(keep_all ? (size_t)L : 1, sizeof *blocks))) st = lmp_fail(LMP_ENOMEM, "out of memory");
    int observes = 0;
    if (!st) st = any_stage_observes(m, v, selves, &observes);
    if (!st && v->kv.type != LMP_KV_NONE && !v->kv.dynamic) observes = 1; /* the KV cache's static scales */
    if (!st && observes && !calib->n)
        st = calibration_missing();
    if (!st && !observes && watch->observe && calib->n && v->n_stages) observes = 1; /* the watcher's observer needs them */
    lmp_windows none = {0};
    if (!observes) calib = &none;
    const int64_t per = calib->T * d; /* cached block inputs: X[n windows, T, dim] */
    if (!st && observes) {
        X = malloc((size_t)(calib->n * per) * sizeof *X);
        if (!X) st = lmp_fail(LMP_ENOMEM, "out of memory for %lld cached windows", (long long)calib->n);
    }
    for (int64_t w = 0; w < calib->n && !st; w++) {
        if ((w & 1023) == 0 && (st = lmp_host_stop_if_interrupted(ctx))) break;
        lmp_embed(m, calib->tokens + w * calib->T, calib->T, X + w * per);
    }
    /* What each pass over a block leaves for the next (none when a watcher observes every forward:
     * it must see all of them). */
    lmp_calib_states states_store, *states = NULL;
    if (!st && observes && calib->n && !watch->observe &&
        !(st = lmp_calib_states_init(ctx, &states_store, &m->arch, calib->n, calib->T)))
        states = &states_store;

    /* X holds the unmodified model's boundary b while every earlier block is the model's own (or
     * the variant calibrates on the original inputs): then the run's cache can give the next one. */
    lmp_calib_cache *cache = observes && !watch->observe ? watch->calib_cache : NULL;
    const int64_t x_floats = calib->n * per;
    int x_base = 1;
    char label[256];
    snprintf(label, sizeof label, "compress %s: block", v->name);
    int said = 0; /* what stream_group_size has logged for this variant */
    for (int64_t b = 0; b < L && !st; b++) {
        if (v->n_stages) lmp_progress(ctx, label, b, L);
        if ((st = lmp_host_stop_if_interrupted(ctx))) break;
        const int64_t per = stream_group_size(ctx, m, v, selves, watch, keep_all, b, &said);
        if (per) { /* its routed experts a group at a time (model/expert_pager.h) */
            st = compress_streamed(ctx, be, m, v, selves, watch, b, per, X, calib);
            x_base = 0; /* the run's cache is filled only from whole blocks */
            lmp_calib_states_forget(states);
            continue;
        }
        lmp_block *blk = &blocks[keep_all ? b : 0];
        if ((st = lmp_model_block_copy(m, b, blk))) break;
        /* Calibrated on the original inputs, block b+1's come from block b as the model has it. */
        lmp_block original;
        const int keep_original = v->calib_inputs == LMP_CALIB_INPUTS_ORIGINAL && calib->n;
        /* the block as the model has it: the next inputs (original), or to see whether the stages
         * left it unchanged (then the next inputs are still the model's) */
        const int clone = keep_original || (cache && x_base);
        int cloned = 0;
        if (!st && clone) cloned = !(st = lmp_block_clone(blk, &original));
        if (!st) st = run_stages(ctx, be, m, v, selves, watch, blk, X, calib, states, 0);
        /* the KV cache's quantization, on the block as its stages left it (compress/kv_calib.h) */
        if (!st && v->kv.type != LMP_KV_NONE) {
            st = lmp_kv_calibrate(be, &m->arch, blk, &v->kv, X, calib->n, calib->T);
            lmp_calib_states_forget(states); /* what the statistics passes kept ran without it */
        }
        if (!st && !keep_original && x_base)
            x_base = cloned && lmp_block_same(blk, &original) && blk->kv.type == LMP_KV_NONE;
        const lmp_block *next_inputs_from = keep_original ? &original : blk;
        double t0 = lmp_now_s();
        if (b + 1 < L || watch->observe) { /* block b+1's inputs (the watcher observes every forward) */
            if (!st && x_base && lmp_calib_cache_has(cache, b + 1, x_floats)) {
                st = lmp_calib_cache_get(cache, b + 1, X, x_floats);
            } else if (!st && calib->n) {
                double share = 0; /* from the states the statistics passes left, where they apply */
                st = lmp_calib_pass(ctx, states, be, &m->arch, next_inputs_from, X, X, 4, 4, watch->observe, watch->ud,
                                    calib->n, calib->T, &share);
                if (st == LMP_FORWARD_STOP) st = lmp_fail(LMP_EINVAL, "a compression watcher stopped a forward");
                if (!st) ctx->times.forwards += share;
                if (!st && x_base && cache) st = lmp_calib_cache_put(cache, b + 1, X, x_floats);
            }
            lmp_calib_states_forget(states); /* X now holds block b+1's inputs */
        }
        ctx->times.propagate += lmp_now_s() - t0;
        if (cloned) lmp_block_free(&original);
        if (whole) continue; /* handed over once the whole model is done */
        if (!st && watch->block_done) st = watch->block_done(watch->ud, b, blk);
        if (!out) lmp_block_free(blk);
    }
    if (!st && v->n_stages) lmp_progress(ctx, label, L, L);
    if (whole) {
        if (!st) st = finish_whole_model(ctx, be, m, v, selves[v->n_stages - 1], calib, blocks);
        for (int64_t b = 0; b < L && !st && watch->block_done; b++) st = watch->block_done(watch->ud, b, &blocks[b]);
        if (!out) {
            for (int64_t b = 0; b < L; b++) lmp_block_free(&blocks[b]);
            memset(blocks, 0, (size_t)L * sizeof *blocks);
        }
    }
    for (int s = 0; selves && s < v->n_stages; s++) {
        const lmp_strategy_i *vt = v->stages[s].plugin->desc->vtable;
        if (selves[s] && vt->destroy) vt->destroy(selves[s]);
    }
    free(selves);
    free(X);
    if (states) lmp_calib_states_free(states);
    if (st) {
        if (out) lmp_blocks_free(blocks, L);
        else free(blocks);
        return lmp_fail_prefix(st, "variant '%s'", v->name);
    }
    if (out) *out = blocks;
    else free(blocks);
    return 0;
}
