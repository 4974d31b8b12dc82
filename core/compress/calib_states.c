/* calib_states.c — see calib_states.h. */
#include "compress/calib_states.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/hash.h"
#include "base/log.h"
#include "model/block_device.h"

int lmp_calib_states_init(lmp_ctx *ctx, lmp_calib_states *cs, const lmp_arch *a, int64_t n, int64_t T)
{
    memset(cs, 0, sizeof *cs);
    cs->ctx = ctx;
    cs->n = n;
    cs->T = T;
    cs->dim = a->dim;
    cs->wide = lmp_arch_mid_width(a);
    const char *env = getenv("LMPRESS_FULL_PASSES");
    cs->full_passes = env && *env && strcmp(env, "0") != 0;
    int st = lmp_spill_init(ctx, &cs->x1, n * T * cs->dim, LMP_CALIB_STATES_BUDGET, "the calibration windows' residual states");
    if (!st)
        st = lmp_spill_init(ctx, &cs->mid, n * T * cs->wide, LMP_CALIB_STATES_BUDGET,
                            "the calibration windows' attention and MLP states");
    if (!st && (!cs->x1.mem || !cs->mid.mem) && !(cs->buf = malloc((size_t)(T * (cs->dim + cs->wide)) * sizeof(float))))
        st = lmp_fail(LMP_ENOMEM, "out of memory");
    if (st) lmp_calib_states_free(cs);
    return st;
}

void lmp_calib_states_free(lmp_calib_states *cs)
{
    lmp_spill_free(&cs->x1);
    lmp_spill_free(&cs->mid);
    free(cs->buf);
    memset(cs, 0, sizeof *cs);
}

static uint64_t mix_linear(uint64_t h, const lmp_linear *l)
{
    const size_t in = (size_t)l->in, out = (size_t)l->out;
    h = lmp_fnv1a64_words(h, l->w, out * in * sizeof *l->w);
    h = lmp_fnv1a64_words(h, l->b, out * sizeof *l->b);
    h = lmp_fnv1a64_words(h, l->in_shift, in * sizeof *l->in_shift);
    h = lmp_fnv1a64_words(h, l->in_scale, in * sizeof *l->in_scale);
    h = lmp_fnv1a64_words(h, l->shift_bias, out * sizeof *l->shift_bias);
    const int64_t act[] = {l->act.mode, l->act.bits, l->act.rounding};
    h = lmp_fnv1a64_words(h, act, sizeof act);
    return lmp_fnv1a64_words(h, &l->act.scale, sizeof l->act.scale);
}

/* Every array segments 0..at-1 of blk read: the norms and linears of the block's steps in those
 * groups (model/block_steps.h), q/k and post norms included. */
static uint64_t segments_key(const lmp_arch *a, const lmp_block *blk, int at)
{
    lmp_block_plan p;
    lmp_block_plan_make(&p, a, blk->index);
    uint64_t h = LMP_FNV1A64_INIT;
    for (int i = 0; i < p.n_steps; i++) {
        const lmp_block_step *s = &p.step[i];
        if (s->group >= at) continue;
        if ((s->kind == LMP_STEP_NORM || s->kind == LMP_STEP_HEAD_NORM) && s->norm >= 0 && s->norm < blk->n_norms) {
            const lmp_norm *nm = &blk->norms[s->norm];
            h = lmp_fnv1a64_words(h, nm->w, (size_t)nm->dim * sizeof *nm->w);
            h = lmp_fnv1a64_words(h, nm->b, (size_t)nm->dim * sizeof *nm->b);
        }
        if (s->kind == LMP_STEP_ATTENTION) /* the KV cache's quantization (model/kv_quant.h) */
            h = lmp_fnv1a64_words(h, &blk->kv, sizeof blk->kv);
        for (int o = 0; s->kind == LMP_STEP_LINEARS && o < s->n_out; o++) {
            const int li = lmp_block_find(blk, s->roles[o]);
            if (li >= 0) h = mix_linear(h, &blk->linears[li]);
        }
    }
    return h;
}

/* Window w's state for a forward from segment `from`: in place in memory, else read into buf
 * (x1 is read from segment 2 on, mid at segments 1 and 3). */
static int state_load(lmp_calib_states *cs, int64_t w, int from, lmp_block_state *s)
{
    const int64_t T = cs->T, ox = w * T * cs->dim, om = w * T * cs->wide;
    s->x1 = cs->x1.mem ? lmp_spill_at(&cs->x1, ox) : cs->buf;
    s->mid = cs->mid.mem ? lmp_spill_at(&cs->mid, om) : cs->buf + T * cs->dim;
    int st = 0;
    if (from >= 2 && !cs->x1.mem) st = lmp_spill_read(&cs->x1, ox, T * cs->dim, s->x1);
    if (!st && (from == 1 || from == 3) && !cs->mid.mem) st = lmp_spill_read(&cs->mid, om, T * cs->wide, s->mid);
    return st;
}

/* What a forward from `from` that stopped at `stop` made, back to the files (in memory it was
 * made in place): x1 when segment 1 ran, mid when segment stop-1 (0 or 2) made it. */
static int state_save(lmp_calib_states *cs, int64_t w, int from, int stop, const lmp_block_state *s)
{
    const int64_t T = cs->T;
    int st = 0;
    if (from <= 1 && stop >= 2 && !cs->x1.mem) st = lmp_spill_write(&cs->x1, w * T * cs->dim, T * cs->dim, s->x1);
    if (!st && (stop == 1 || stop == 3) && !cs->mid.mem)
        st = lmp_spill_write(&cs->mid, w * T * cs->wide, T * cs->wide, s->mid);
    return st;
}

int lmp_calib_pass(const lmp_ctx *ctx, lmp_calib_states *cs, const lmp_backend *be, const lmp_arch *a, const lmp_block *blk,
                   const float *X, float *out, int first, int stop, lmp_observe_fn obs, void *ud,
                   int64_t n, int64_t T, double *share)
{
    return lmp_calib_pass_paged(ctx, cs, be, a, blk, NULL, X, out, first, stop, obs, ud, n, T, share);
}

int lmp_calib_pass_paged(const lmp_ctx *ctx, lmp_calib_states *cs, const lmp_backend *be, const lmp_arch *a,
                         const lmp_block *blk, struct lmp_expert_pager *pager, const float *X, float *out, int first,
                         int stop, lmp_observe_fn obs, void *ud, int64_t n, int64_t T, double *share)
{
    const int64_t per = T * a->dim;
    if (!obs && !pager && out && stop == 4 && n > 0 && lmp_block_device_enabled(be)) {
        /* the whole block on the device, every window in one call (no states are left: none
         * is needed after a pass over the whole block) */
        int st = ctx ? lmp_host_stop_if_interrupted(ctx) : 0;
        if (st) return st;
        st = lmp_block_device_forward(be, a, blk, X, n, T, out, 4, NULL);
        if (st != LMP_EUNSUPPORTED) {
            *share = 1.0;
            return st;
        }
        if (be->ctx) lmp_log(be->ctx, LMP_LOG_DEBUG, "block %d forward op by op: %s", blk->index, lmp_last_error());
    }
    int from = 0;
    /* A mixture of experts computes its groups 2 and 3 in one step, whose inner state (each
     * expert's activations) is not kept: its passes always start from the block's input. */
    if (blk->n_experts > 0 || a->mla || pager) cs = NULL; /* MLA's inner latents likewise (group 0 in one step) */
    if (cs && !cs->full_passes && cs->at > 0 && cs->at <= first && cs->at <= stop &&
        segments_key(a, blk, cs->at) == cs->key)
        from = cs->at;
    /* A pass that stops inside the block past where it started leaves a state for the next. */
    int keep = cs && !cs->full_passes && stop < 4 && stop > from;
    const int use_state = from > 0 || keep;
    if (use_state && from < stop) cs->at = 0; /* the segments run overwrite it window by window */
    float *tmp = out ? NULL : malloc((size_t)per * sizeof *tmp);
    int st = out || tmp ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    for (int64_t w = 0; w < n && !st; w++) {
        /* a pass over many windows takes long: SIGINT / SIGTERM stop it at the next window */
        if (ctx && (st = lmp_host_stop_if_interrupted(ctx))) break;
        float *x = out ? out + w * per : tmp;
        if (x != X + w * per) memcpy(x, X + w * per, (size_t)per * sizeof *x);
        lmp_block_state s;
        if (use_state) st = state_load(cs, w, from, &s);
        if (!st) st = lmp_block_forward_paged(be, a, blk, pager, T, from, x, use_state ? &s : NULL, obs, ud);
        if (st == LMP_FORWARD_STOP && stop < 4) st = 0;
        if (!st && keep && (st = state_save(cs, w, from, stop, &s))) {
            /* the statistics are whole: only the reuse is lost (a full disk, say) */
            lmp_log(cs->ctx, LMP_LOG_WARN, "%s; later passes start from the block's input", lmp_last_error());
            cs->full_passes = 1;
            keep = st = 0;
        }
    }
    free(tmp);
    if (!st && keep) {
        cs->at = stop;
        cs->key = segments_key(a, blk, stop);
    }
    *share = (lmp_block_flops(a, T, stop) - lmp_block_flops(a, T, from)) / lmp_block_flops(a, T, 4);
    return st;
}
