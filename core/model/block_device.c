/* block_device.c — see block_device.h. */
#include "model/block_device.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/forward.h"

int lmp_block_device_enabled(const lmp_backend *be)
{
    const char *env = getenv("LMPRESS_DEVICE_BLOCKS");
    if (env && strcmp(env, "0") == 0) return 0;
    return be && be->vt && LMP_BACKEND_I_HAS(be->vt, block_run);
}

/* RoPE's cos/sin table [T, n_rot/2, 2] for `layer`, as the CPU backend computes the angles
 * (cpu_ref.c: rope in double from theta, rope_table from the f32 product p * inv_freq), times
 * the attention factor.  *n_rot gets the dims turned per head. */
static float *rope_cs(const lmp_arch *a, int64_t layer, int64_t T, int64_t *n_rot)
{
    const lmp_rope *r = lmp_arch_rope(a, layer);
    const int table = r->n_rot && !r->plain;
    const int64_t hd = a->head_dim, nr = table ? r->n_rot : hd, half = nr / 2;
    const double theta = r->n_rot ? (double)r->theta : (double)a->rope_theta;
    const float *inv = table ? lmp_rope_table_for(r, T) : NULL;
    const double ms = table ? (double)r->mscale : 1.0;
    float *cs = malloc((size_t)(T * (half > 0 ? half : 1) * 2) * sizeof *cs);
    if (!cs) return NULL;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            const double ang = table ? (double)((float)t * inv[i]) : (double)t * pow(theta, -2.0 * (double)i / (double)hd);
            cs[(t * half + i) * 2] = (float)(cos(ang) * ms);
            cs[(t * half + i) * 2 + 1] = (float)(sin(ang) * ms);
        }
    *n_rot = nr;
    return cs;
}

/* Refuses a linear the device path does not compute as forward.c does. */
static int linear_on_device(const lmp_linear *l, int affine)
{
    if (l->act.mode != LMP_ACT_NONE)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: simulated activation quantization is not on the device block path",
                        l->name);
    if (l->shift_bias)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: a shifted linear's exact-sum epilogue is not on the device block path",
                        l->name);
    if (affine && (l->in_shift || l->in_scale))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: an explicit input shift or scale is not on the device block path",
                        l->name);
    return 0;
}

typedef struct job_maker {
    lmp_block_job job;
    lmp_bop ops[(LMP_STEP_MAX_IO + 1) * LMP_BLOCK_MAX_STEPS]; /* a step: its linears and an observe */
    lmp_bstat stats[4];
} job_maker;

static lmp_bop *add_op(job_maker *jm, lmp_bop_kind kind, int in0, int out)
{
    /* make_job's steps make at most (LMP_STEP_MAX_IO + 1) ops each, which ops[] holds */
    lmp_bop *o = &jm->ops[jm->job.n_ops++];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->in[0] = o->in[1] = o->in[2] = in0;
    o->out = out;
    o->rows = 1;
    return o;
}

/* The job's ops for plan p's steps up to the observation of group `stop`; *cs gets the RoPE
 * table it points into (the caller frees it). */
static int make_job(job_maker *jm, const lmp_arch *a, const lmp_block *blk, const lmp_block_plan *p, int64_t T,
                    int stop, const lmp_block_watch *watch, float **cs)
{
    *cs = NULL;
    lmp_block_job *job = &jm->job;
    if (blk->kv.type != LMP_KV_NONE) /* declined: the per-op forward quantizes K and V (model/kv_quant.h) */
        return lmp_fail(LMP_EUNSUPPORTED, "block %d: the KV cache's simulated quantization (kv_cache) is not on the "
                        "device block path", blk->index);
    int64_t n_rot = 0;
    unsigned observed = 0; /* the input groups observed */
    memset(job, 0, sizeof *job);
    job->struct_size = sizeof *job;
    job->T = T;
    if (LMP_SLOT_COUNT > LMP_BJOB_MAX_BUFS) /* a later block with more values than a job carries */
        return lmp_fail(LMP_EUNSUPPORTED, "block %d: %d slots, a device job carries %d", blk->index, (int)LMP_SLOT_COUNT,
                        LMP_BJOB_MAX_BUFS);
    job->n_bufs = LMP_SLOT_COUNT; /* buffer i is slot i */
    for (int i = 0; i < LMP_SLOT_COUNT; i++) job->buf_cols[i] = p->width[i];
    job->x_buf = LMP_SLOT_X;
    job->y_buf = LMP_SLOT_Y;
    job->ops = jm->ops;
    job->stats = jm->stats;
    for (int i = 0; i < p->n_steps; i++) {
        const lmp_block_step *s = &p->step[i];
        if (s->group > stop) break;
        const int in0 = (int)s->in[0], out0 = s->n_out ? (int)s->out[0] : in0;
        const int64_t C = p->width[s->in[0]];
        lmp_bop *o;
        switch (s->kind) {
        case LMP_STEP_NORM:
        case LMP_STEP_HEAD_NORM: {
            const lmp_norm *nm = &blk->norms[s->norm];
            const int layer = s->kind == LMP_STEP_NORM && s->layer_norm;
            o = add_op(jm, layer ? LMP_BOP_LAYERNORM : LMP_BOP_RMSNORM, in0, out0);
            o->rows = s->kind == LMP_STEP_HEAD_NORM ? s->heads[0] : 1;
            o->cols = C / o->rows;
            o->w = nm->w;
            o->b = s->kind == LMP_STEP_HEAD_NORM ? NULL : nm->b; /* forward.c: a q/k norm takes no bias */
            o->eps = a->norm_eps;
            break;
        }
        case LMP_STEP_LINEARS: {
            const int g = s->group;
            if (g < 0 || g > 3) return lmp_fail(LMP_EUNSUPPORTED, "block %d: input group %d", blk->index, g);
            if (g == stop || (watch && watch->want[g])) {
                if (watch && watch->want[g]) {
                    if (observed >> g & 1u) /* one input per group: a plan with two would count twice */
                        return lmp_fail(LMP_EUNSUPPORTED, "block %d: two inputs of group %d", blk->index, g);
                    observed |= 1u << g;
                    jm->stats[job->n_stats] = *watch->want[g];
                    o = add_op(jm, LMP_BOP_OBSERVE, in0, in0);
                    o->cols = C;
                    o->stat = job->n_stats++;
                }
                if (g == stop) return 0; /* nothing after the last input asked for */
            }
            for (int k = 0; k < s->n_out; k++) {
                const int li = lmp_block_find(blk, s->roles[k]);
                if (li < 0) return lmp_fail(LMP_EINVAL, "block %d has no linear of role %d", blk->index, (int)s->roles[k]);
                const lmp_linear *l = &blk->linears[li];
                int st = linear_on_device(l, s->affine);
                if (st) return st;
                o = add_op(jm, LMP_BOP_LINEAR, in0, (int)s->out[k]);
                o->cols = C;
                o->n_out = l->out;
                o->w = l->w;
                o->b = l->b;
            }
            break;
        }
        case LMP_STEP_ROPE:
            if (!*cs && !(*cs = rope_cs(a, p->layer, T, &n_rot)))
                return lmp_fail(LMP_ENOMEM, "out of memory for a RoPE table");
            for (int k = 0; k < 2; k++) { /* q and k, one table */
                o = add_op(jm, LMP_BOP_ROPE, (int)s->in[k], (int)s->in[k]);
                o->rows = s->heads[k];
                o->cols = p->width[s->in[k]];
                o->head_dim = a->head_dim;
                o->n_rot = n_rot;
                o->table = *cs;
            }
            break;
        case LMP_STEP_SCALE:
            o = add_op(jm, LMP_BOP_SCALE, in0, in0);
            o->cols = C;
            o->scale = s->scale;
            break;
        case LMP_STEP_ATTENTION:
            if (s->norm >= 0) /* gpt-oss's sinks: the device job's attention has none */
                return lmp_fail(LMP_EUNSUPPORTED, "block %d: attention sinks do not run as a device job", blk->index);
            if (s->alibi) /* Bloom: forward.c runs ALiBi's reference kernel on the host */
                return lmp_fail(LMP_EUNSUPPORTED, "block %d: ALiBi attention (Bloom) has no op on the device block path",
                                blk->index);
            o = add_op(jm, LMP_BOP_ATTENTION, in0, out0);
            o->in[1] = (int)s->in[1];
            o->in[2] = (int)s->in[2];
            o->cols = C;
            o->heads = a->n_heads;
            o->kv_heads = a->n_kv_heads;
            o->head_dim = a->head_dim;
            o->window = s->window;
            o->softcap = s->softcap;
            break;
        case LMP_STEP_GLU:
            o = add_op(jm, s->gelu ? LMP_BOP_GEGLU : LMP_BOP_SWIGLU, in0, out0);
            o->in[1] = (int)s->in[1];
            o->cols = C;
            break;
        case LMP_STEP_GELU:
            if (s->relu) /* OPT: forward.c runs it on the host */
                return lmp_fail(LMP_EUNSUPPORTED, "block %d: the ReLU MLP (OPT) has no op on the device block path",
                                blk->index);
            if (s->erf) /* the op is the tanh GELU; forward.c runs the erf one on the host */
                return lmp_fail(LMP_EUNSUPPORTED, "block %d: the erf GELU has no op on the device block path",
                                blk->index);
            o = add_op(jm, LMP_BOP_GELU, in0, out0);
            o->cols = C;
            break;
        case LMP_STEP_ADD:
            o = add_op(jm, LMP_BOP_ADD, in0, out0);
            o->in[1] = (int)s->in[1];
            o->cols = C;
            break;
        default:
            return lmp_fail(LMP_EUNSUPPORTED, "block %d: the step '%s' has no op on the device block path", blk->index,
                            lmp_step_kind_name(s->kind));
        }
    }
    return 0;
}

int lmp_block_device_forward(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, const float *X, int64_t n,
                             int64_t T, float *Y, int stop, const lmp_block_watch *watch)
{
    if (!lmp_block_device_enabled(be))
        return lmp_fail(LMP_EUNSUPPORTED, "backend '%s' has no device block path%s", be->name,
                        be->vt && LMP_BACKEND_I_HAS(be->vt, block_run) ? " (LMPRESS_DEVICE_BLOCKS=0)" : "");
    if (Y && stop != 4) return lmp_fail(LMP_EINVAL, "a block's outputs need the whole block (stop %d)", stop);
    lmp_block_plan p;
    lmp_block_plan_make(&p, a, blk->index);
    /* a block that does not match its steps is the per-op forward's to judge: declined here */
    int st = lmp_block_plan_check(&p, blk);
    if (st) return lmp_fail_prefix(LMP_EUNSUPPORTED, "block %d does not match its steps", blk->index);
    job_maker *jm = malloc(sizeof *jm);
    if (!jm) return lmp_fail(LMP_ENOMEM, "out of memory");
    float *cs = NULL;
    st = make_job(jm, a, blk, &p, T, stop, watch, &cs);
    if (st && st != LMP_ENOMEM && st != LMP_EUNSUPPORTED)
        st = lmp_fail_prefix(LMP_EUNSUPPORTED, "block %d", blk->index);
    if (!st) {
        jm->job.n_windows = n;
        jm->job.x = X;
        jm->job.y = Y;
        /* the statistics are copies of watch's, pointing at the caller's arrays, which the
         * backend folds into; the backend's reason for declining is the last error */
        st = lmp_be_block_run(be, &jm->job);
    }
    free(cs);
    free(jm);
    return st;
}
