/* learn.c — see learn.h. */
#include "train/learn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/forward.h"
#include "train/backward.h"
#include "train/loss.h"

static int check_problem(const lmp_ctx *ctx, const lmp_block *blk, const lmp_learn_spec *spec,
                         const lmp_learn_problem *p)
{
    if (!ctx->learn)
        return lmp_fail(LMP_EINVAL, "learn_block: no calibration inputs were lent for block %d: the stage must ask "
                                    "for LMP_NEED_CALIB_INPUTS in needs()",
                        blk->index);
    if (spec->steps < 0 || spec->batch < 0 || !(spec->lr >= 0 && isfinite(spec->lr)))
        return lmp_fail(LMP_EINVAL, "learn_block: steps %lld, batch %lld and lr %g must be >= 0",
                        (long long)spec->steps, (long long)spec->batch, spec->lr);
    if (spec->optimizer != LMP_OPT_SIGN_SGD && spec->optimizer != LMP_OPT_ADAM)
        return lmp_fail(LMP_EINVAL, "learn_block: unknown optimizer %d", (int)spec->optimizer);
    if (spec->schedule < LMP_LR_CONSTANT || spec->schedule > LMP_LR_COSINE)
        return lmp_fail(LMP_EINVAL, "learn_block: unknown learning-rate schedule %d", (int)spec->schedule);
    if (p->n_params <= 0 || !p->params || !p->sizes || !p->grads || !p->materialize || !p->pullback)
        return lmp_fail(LMP_EINVAL, "learn_block: the problem needs parameters, their gradients, materialize and "
                                    "pullback");
    for (int i = 0; i < p->n_params; i++)
        if (!p->params[i] || !p->grads[i] || p->sizes[i] <= 0)
            return lmp_fail(LMP_EINVAL, "learn_block: parameter array %d is empty", i);
    if (p->linears >> blk->n_linears)
        return lmp_fail(LMP_EINVAL, "learn_block: the problem names linears the block does not have");
    return 0;
}

/* The schedule's factor at step s of n. */
static double lr_factor(lmp_lr_schedule sched, int64_t s, int64_t n)
{
    const double x = n > 0 ? (double)s / (double)n : 0.0;
    if (sched == LMP_LR_LINEAR) return 1.0 - x;
    if (sched == LMP_LR_COSINE) return 0.5 * (1.0 + cos(3.14159265358979323846 * x));
    return 1.0;
}

/* The block-output MSE over windows[0..nw) of X against Y, as the forward runs now; y is [T, d]
 * scratch. */
static int mse_over(const lmp_learn_inputs *in, const lmp_block *blk, const float *Y, const int64_t *windows,
                    int64_t nw, float *y, double *loss)
{
    const int64_t per = in->T * in->m->arch.dim;
    double sum = 0;
    for (int64_t i = 0; i < nw; i++) {
        const int64_t w = windows ? windows[i] : i;
        memcpy(y, in->X + w * per, (size_t)per * sizeof *y);
        int st = lmp_block_forward(in->be, &in->m->arch, blk, in->T, y, NULL, NULL);
        if (st) return st;
        double l;
        lmp_loss_mse(per, y, Y + w * per, &l, NULL);
        sum += l;
    }
    *loss = nw > 0 ? sum / (double)nw : 0.0;
    return 0;
}

/* One optimizer step over every parameter array; m and v are Adam's moments (NULL for signed
 * SGD), t the 1-based step. */
static void step_params(const lmp_learn_spec *spec, const lmp_learn_problem *p, double lr, int64_t t, float **m,
                        float **v)
{
    const double b1 = spec->beta1 > 0 ? spec->beta1 : 0.9, b2 = spec->beta2 > 0 ? spec->beta2 : 0.999;
    const double eps = spec->eps > 0 ? spec->eps : 1e-8;
    const double c1 = 1.0 - pow(b1, (double)t), c2 = 1.0 - pow(b2, (double)t);
    for (int a = 0; a < p->n_params; a++) {
        float *w = p->params[a];
        const float *g = p->grads[a];
        for (int64_t i = 0; i < p->sizes[a]; i++) {
            if (spec->optimizer == LMP_OPT_SIGN_SGD) {
                w[i] -= (float)(lr * (g[i] > 0 ? 1.0 : g[i] < 0 ? -1.0 : 0.0));
            } else {
                m[a][i] = (float)(b1 * m[a][i] + (1.0 - b1) * g[i]);
                v[a][i] = (float)(b2 * v[a][i] + (1.0 - b2) * (double)g[i] * g[i]);
                w[i] -= (float)(lr * (m[a][i] / c1) / (sqrt(v[a][i] / c2) + eps));
            }
        }
    }
}

/* Copies every parameter array into (to_saved) or out of the flat buffer saved. */
static void swap_params(const lmp_learn_problem *p, float *saved, int to_saved)
{
    for (int a = 0; a < p->n_params; a++) {
        const size_t bytes = (size_t)p->sizes[a] * sizeof(float);
        if (to_saved) memcpy(saved, p->params[a], bytes);
        else memcpy(p->params[a], saved, bytes);
        saved += p->sizes[a];
    }
}

int lmp_learn_block(lmp_ctx *ctx, lmp_block *blk, const lmp_learn_spec *spec, const lmp_learn_problem *p,
                    lmp_learn_result *out)
{
    int st = check_problem(ctx, blk, spec, p);
    if (st) return st;
    const double t_start = lmp_now_s();
    const lmp_learn_inputs *in = ctx->learn;
    const lmp_arch *a = &in->m->arch;
    const int64_t n = in->n, T = in->T, per = T * a->dim;
    const int64_t batch = spec->batch > 0 && spec->batch < n ? spec->batch : n;
    int64_t total = 0;
    for (int i = 0; i < p->n_params; i++) total += p->sizes[i];
    memset(out, 0, sizeof *out);
    out->best_batch_loss = INFINITY;
    out->best_step = -1;

    /* Y: the unmodified block's outputs over every window; order: a permutation of the windows
     * whose first `batch` entries are each step's; y, dy: one window */
    float *Y = malloc((size_t)(n * per) * sizeof *Y), *y = malloc((size_t)(2 * per) * sizeof *y), *dy = y + per;
    int64_t *order = malloc((size_t)n * sizeof *order);
    float *saved = spec->keep_best ? malloc((size_t)total * sizeof *saved) : NULL;
    float **mom = calloc((size_t)(2 * p->n_params), sizeof *mom), **vel = mom ? mom + p->n_params : NULL;
    lmp_block orig;
    lmp_block_tape tape = {0};
    lmp_block_grads g = {0};
    int have_orig = 0;
    if (!Y || !y || !order || (spec->keep_best && !saved) || !mom) st = lmp_fail(LMP_ENOMEM, "out of memory to learn block %d", blk->index);
    for (int i = 0; !st && spec->optimizer == LMP_OPT_ADAM && i < p->n_params; i++)
        if (!(mom[i] = calloc((size_t)p->sizes[i], sizeof(float))) || !(vel[i] = calloc((size_t)p->sizes[i], sizeof(float))))
            st = lmp_fail(LMP_ENOMEM, "out of memory for Adam's moments (block %d)", blk->index);
    if (!st) st = lmp_block_tape_init(&tape, a, T);
    if (!st) st = lmp_block_grads_alloc(&g, blk, p->linears, 0);
    if (!st) have_orig = !(st = lmp_model_block_copy(in->m, blk->index, &orig));
    for (int64_t w = 0; w < n && !st; w++) {
        memcpy(Y + w * per, in->X + w * per, (size_t)per * sizeof *Y);
        st = lmp_block_forward(in->be, a, &orig, T, Y + w * per, NULL, NULL);
    }
    if (have_orig) lmp_block_free(&orig);
    for (int64_t w = 0; w < n; w++) order[w] = w;
    if (!st) st = p->materialize(p->ud, blk);
    if (!st) st = mse_over(in, blk, Y, NULL, n, y, &out->loss_first);

    char label[64];
    snprintf(label, sizeof label, "learn block %d: step", blk->index);
    const lmp_host *h = lmp_host_services();
    for (int64_t s = 0; s < spec->steps && !st; s++) {
        lmp_progress(ctx, label, s, spec->steps);
        if ((st = lmp_host_stop_if_interrupted(ctx))) break;
        for (int64_t i = 0; i < batch && batch < n; i++) { /* this step's windows: a partial shuffle */
            const int64_t j = i + (int64_t)(h->rng_u64(ctx) % (uint64_t)(n - i)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int i = 0; i < p->n_params; i++) memset(p->grads[i], 0, (size_t)p->sizes[i] * sizeof(float));
        lmp_block_grads_zero(&g, blk);
        if ((st = p->materialize(p->ud, blk))) break;
        double batch_loss = 0;
        for (int64_t i = 0; i < batch && !st; i++) {
            memcpy(y, in->X + order[i] * per, (size_t)per * sizeof *y);
            double l;
            st = lmp_block_forward_train(in->be, a, blk, y, &tape);
            if (st) break;
            lmp_loss_mse(per, y, Y + order[i] * per, &l, dy);
            for (int64_t k = 0; k < per; k++) dy[k] /= (float)batch; /* the batch's mean */
            batch_loss += l / (double)batch;
            st = lmp_block_backward(in->be, a, blk, &tape, dy, NULL, &g);
        }
        if (!st) st = p->pullback(p->ud, blk, g.dw);
        if (st) break;
        if (batch_loss < out->best_batch_loss) { /* the parameters this batch ran with */
            out->best_batch_loss = batch_loss;
            out->best_step = s;
            if (saved) swap_params(p, saved, 1);
        }
        step_params(spec, p, spec->lr * lr_factor(spec->schedule, s, spec->steps), s + 1, mom, vel);
        if (p->project) p->project(p->ud);
    }
    if (!st && spec->steps > 0) lmp_progress(ctx, label, spec->steps, spec->steps);
    if (!st && saved && out->best_step >= 0) swap_params(p, saved, 0);
    if (!st) st = p->materialize(p->ud, blk);
    if (!st) st = mse_over(in, blk, Y, NULL, n, y, &out->loss_final);
    out->seconds = lmp_now_s() - t_start;

    for (int i = 0; mom && i < 2 * p->n_params; i++) free(mom[i]);
    free(mom);
    free(saved);
    free(order);
    free(Y);
    free(y);
    lmp_block_tape_free(&tape);
    lmp_block_grads_free(&g);
    return st;
}
