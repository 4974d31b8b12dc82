/* learn.c — see learn.h. */
#include "train/learn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "model/forward.h"
#include "plugin/host_services.h"
#include "train/backward.h"
#include "train/loss.h"
#include "train/model_grad.h"

/* The spec and the problem, for either loop (`what`: its name in messages). */
static int check_problem(const char *what, const lmp_block *blk, const lmp_learn_spec *spec,
                         const lmp_learn_problem *p)
{
    if (spec->steps < 0 || spec->batch < 0 || !(spec->lr >= 0 && isfinite(spec->lr)))
        return lmp_fail(LMP_EINVAL, "%s: steps %lld, batch %lld and lr %g must be >= 0", what,
                        (long long)spec->steps, (long long)spec->batch, spec->lr);
    if (spec->optimizer != LMP_OPT_SIGN_SGD && spec->optimizer != LMP_OPT_ADAM)
        return lmp_fail(LMP_EINVAL, "%s: unknown optimizer %d", what, (int)spec->optimizer);
    if (spec->schedule < LMP_LR_CONSTANT || spec->schedule > LMP_LR_COSINE)
        return lmp_fail(LMP_EINVAL, "%s: unknown learning-rate schedule %d", what, (int)spec->schedule);
    if (spec->loss != LMP_LOSS_KL && spec->loss != LMP_LOSS_CE)
        return lmp_fail(LMP_EINVAL, "%s: unknown loss %d", what, (int)spec->loss);
    if (p->n_params <= 0 || !p->params || !p->sizes || !p->grads || !p->materialize || !p->pullback)
        return lmp_fail(LMP_EINVAL, "%s: the problem needs parameters, their gradients, materialize and pullback",
                        what);
    for (int i = 0; i < p->n_params; i++)
        if (!p->params[i] || !p->grads[i] || p->sizes[i] <= 0)
            return lmp_fail(LMP_EINVAL, "%s: parameter array %d is empty", what, i);
    if (!p->linears) return lmp_fail(LMP_EINVAL, "%s: the problem names no linears to learn", what);
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

/* The block-output MSE over every window of X against Y, as the forward runs now; y is [T, d]
 * scratch. */
static int mse_over(const lmp_learn_inputs *in, const lmp_block *blk, const float *Y, float *y, double *loss)
{
    const int64_t per = in->T * in->m->arch.dim;
    double sum = 0;
    for (int64_t w = 0; w < in->n; w++) {
        memcpy(y, in->X + w * per, (size_t)per * sizeof *y);
        int st = lmp_block_forward(in->be, &in->m->arch, blk, in->T, y, NULL, NULL);
        if (st) return st;
        double l;
        lmp_loss_mse(per, y, Y + w * per, &l, NULL);
        sum += l;
    }
    *loss = in->n > 0 ? sum / (double)in->n : 0.0;
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

/* What both loops share: the optimizer's state, the windows' order, the kept parameters. */
typedef struct learn_loop {
    const lmp_learn_spec *spec;
    const lmp_learn_problem *p;
    int64_t n, batch;   /* windows; windows per step */
    int64_t *order;     /* a permutation of the windows: each step's are its first `batch` */
    float *saved;       /* the best step's parameters (keep_best) */
    float **mom, **vel; /* Adam's moments per parameter array */
} learn_loop;

static void loop_free(learn_loop *L)
{
    for (int i = 0; L->mom && i < 2 * L->p->n_params; i++) free(L->mom[i]);
    free(L->mom);
    free(L->saved);
    free(L->order);
}

static int loop_init(learn_loop *L, const lmp_learn_spec *spec, const lmp_learn_problem *p, int64_t n,
                     lmp_learn_result *out)
{
    memset(L, 0, sizeof *L);
    L->spec = spec, L->p = p, L->n = n;
    L->batch = spec->batch > 0 && spec->batch < n ? spec->batch : n;
    int64_t total = 0;
    for (int i = 0; i < p->n_params; i++) total += p->sizes[i];
    L->order = malloc((size_t)n * sizeof *L->order);
    L->saved = spec->keep_best ? malloc((size_t)total * sizeof *L->saved) : NULL;
    L->mom = calloc((size_t)(2 * p->n_params), sizeof *L->mom);
    int ok = L->order && (!spec->keep_best || L->saved) && L->mom;
    if (ok) L->vel = L->mom + p->n_params;
    for (int i = 0; ok && spec->optimizer == LMP_OPT_ADAM && i < p->n_params; i++)
        ok = (L->mom[i] = calloc((size_t)p->sizes[i], sizeof(float))) && (L->vel[i] = calloc((size_t)p->sizes[i], sizeof(float)));
    for (int64_t w = 0; ok && w < n; w++) L->order[w] = w;
    memset(out, 0, sizeof *out);
    out->best_batch_loss = INFINITY;
    out->best_step = -1;
    if (ok) return 0;
    loop_free(L);
    return lmp_fail(LMP_ENOMEM, "out of memory for the optimizer's state (%d parameter arrays)", p->n_params);
}

/* Step s begins: its windows drawn (a partial shuffle with the run's seeded RNG), the plugin's
 * gradients zeroed. */
static void loop_begin_step(learn_loop *L, lmp_ctx *ctx)
{
    const lmp_host *h = lmp_host_services();
    for (int64_t i = 0; i < L->batch && L->batch < L->n; i++) {
        const int64_t j = i + (int64_t)(h->rng_u64(ctx) % (uint64_t)(L->n - i)), t = L->order[i];
        L->order[i] = L->order[j];
        L->order[j] = t;
    }
    for (int i = 0; i < L->p->n_params; i++) memset(L->p->grads[i], 0, (size_t)L->p->sizes[i] * sizeof(float));
}

/* Step s ends with its batch's loss: the parameters it ran with are kept if best, then stepped. */
static void loop_end_step(learn_loop *L, int64_t s, double batch_loss, lmp_learn_result *out)
{
    if (batch_loss < out->best_batch_loss) {
        out->best_batch_loss = batch_loss;
        out->best_step = s;
        if (L->saved) swap_params(L->p, L->saved, 1);
    }
    step_params(L->spec, L->p, L->spec->lr * lr_factor(L->spec->schedule, s, L->spec->steps), s + 1, L->mom, L->vel);
    if (L->p->project) L->p->project(L->p->ud);
}

/* After the last step: the kept parameters back in place. */
static void loop_end(learn_loop *L, const lmp_learn_result *out)
{
    if (L->saved && out->best_step >= 0) swap_params(L->p, L->saved, 0);
}

int lmp_learn_block(lmp_ctx *ctx, lmp_block *blk, const lmp_learn_spec *spec, const lmp_learn_problem *p,
                    lmp_learn_result *out)
{
    if (!ctx->learn || !ctx->learn->X)
        return lmp_fail(LMP_EINVAL, "learn_block: no calibration inputs were lent for block %d: the stage must ask "
                                    "for LMP_NEED_CALIB_INPUTS in needs()",
                        blk->index);
    int st = check_problem("learn_block", blk, spec, p);
    if (st) return st;
    const double t_start = lmp_now_s();
    const lmp_learn_inputs *in = ctx->learn;
    const lmp_arch *a = &in->m->arch;
    const int64_t n = in->n, T = in->T, per = T * a->dim;
    learn_loop L;
    if ((st = loop_init(&L, spec, p, n, out))) return st;

    /* Y: the unmodified block's outputs over every window; y, dy: one window */
    float *Y = malloc((size_t)(n * per) * sizeof *Y), *y = malloc((size_t)(2 * per) * sizeof *y), *dy = y + per;
    lmp_block orig;
    lmp_block_tape tape = {0};
    lmp_block_grads g = {0};
    int have_orig = 0;
    if (!Y || !y) st = lmp_fail(LMP_ENOMEM, "out of memory to learn block %d", blk->index);
    if (!st) st = lmp_block_tape_init(&tape, a, T);
    if (!st) st = lmp_block_grads_alloc(&g, blk, p->linears, 0);
    if (!st) have_orig = !(st = lmp_model_block_copy(in->m, blk->index, &orig));
    for (int64_t w = 0; w < n && !st; w++) {
        memcpy(Y + w * per, in->X + w * per, (size_t)per * sizeof *Y);
        st = lmp_block_forward(in->be, a, &orig, T, Y + w * per, NULL, NULL);
    }
    if (have_orig) lmp_block_free(&orig);
    if (!st) st = p->materialize(p->ud, blk);
    if (!st) st = mse_over(in, blk, Y, y, &out->loss_first);

    char label[64];
    snprintf(label, sizeof label, "learn block %d: step", blk->index);
    for (int64_t s = 0; s < spec->steps && !st; s++) {
        lmp_progress(ctx, label, s, spec->steps);
        if ((st = lmp_host_stop_if_interrupted(ctx))) break;
        loop_begin_step(&L, ctx);
        lmp_block_grads_zero(&g, blk);
        if ((st = p->materialize(p->ud, blk))) break;
        double batch_loss = 0;
        for (int64_t i = 0; i < L.batch && !st; i++) {
            memcpy(y, in->X + L.order[i] * per, (size_t)per * sizeof *y);
            double l;
            st = lmp_block_forward_train(in->be, a, blk, y, &tape);
            if (st) break;
            lmp_loss_mse(per, y, Y + L.order[i] * per, &l, dy);
            for (int64_t k = 0; k < per; k++) dy[k] /= (float)L.batch; /* the batch's mean */
            batch_loss += l / (double)L.batch;
            st = lmp_block_backward(in->be, a, blk, &tape, dy, NULL, &g);
        }
        if (!st) st = p->pullback(p->ud, blk, g.dw);
        if (!st) loop_end_step(&L, s, batch_loss, out);
    }
    if (!st && spec->steps > 0) lmp_progress(ctx, label, spec->steps, spec->steps);
    if (!st) loop_end(&L, out);
    if (!st) st = p->materialize(p->ud, blk);
    if (!st) st = mse_over(in, blk, Y, y, &out->loss_final);
    out->seconds = lmp_now_s() - t_start;
    loop_free(&L);
    free(Y);
    free(y);
    lmp_block_tape_free(&tape);
    lmp_block_grads_free(&g);
    return st;
}

/* ---- the whole model ----------------------------------------------------------------------- */

/* The sequences learn_model trains on: pieces of T tokens cut one after the other from each
 * calibration window (the window's tail shorter than T dropped), per_window of them a window. */
typedef struct pieces {
    const int32_t *tokens; /* the calibration windows, [n_windows, window_T] */
    int64_t n, T, per_window, window_T;
} pieces;

static const int32_t *piece(const pieces *pc, int64_t i)
{
    return pc->tokens + (i / pc->per_window) * pc->window_T + (i % pc->per_window) * pc->T;
}

/* Piece i's loss on the model with `blocks`, by the production forward: lp[T, vocab] and ref (the
 * unmodified model's log-probabilities, for KL) are scratch. */
static int piece_loss(const lmp_learn_inputs *in, const pieces *pc, const lmp_block *fp, const lmp_block *blocks,
                      lmp_loss loss, int64_t i, float *lp, float *ref, double *out)
{
    const lmp_model *m = in->m;
    const int64_t T = pc->T, V = m->arch.vocab;
    const int32_t *tok = piece(pc, i);
    int st = lmp_forward(in->be, m, blocks, tok, T, 1, lp);
    if (!st && loss == LMP_LOSS_KL) st = lmp_forward(in->be, m, fp, tok, T, 1, ref);
    if (st) return st;
    double sum = 0;
    for (int64_t t = 0; t < (loss == LMP_LOSS_KL ? T : T - 1); t++)
        if (loss == LMP_LOSS_CE) sum -= lp[t * V + tok[t + 1]];
        else
            for (int64_t v = 0; v < V; v++) {
                const double pr = exp((double)ref[t * V + v]);
                if (pr > 0) sum += pr * ((double)ref[t * V + v] - lp[t * V + v]);
            }
    *out = sum / (double)(loss == LMP_LOSS_KL ? T : T - 1);
    return 0;
}

static int mean_loss(const lmp_learn_inputs *in, const pieces *pc, const lmp_block *fp, const lmp_block *blocks,
                     lmp_loss loss, float *lp, float *ref, double *out)
{
    double sum = 0, l;
    for (int64_t i = 0; i < pc->n; i++) {
        int st = piece_loss(in, pc, fp, blocks, loss, i, lp, ref, &l);
        if (st) return st;
        sum += l;
    }
    *out = sum / (double)pc->n;
    return 0;
}

static int materialize_all(const lmp_learn_problem *p, lmp_block *blocks, int n_blocks)
{
    int st = 0;
    for (int b = 0; b < n_blocks && !st; b++) st = p->materialize(p->ud, &blocks[b]);
    return st;
}

int lmp_learn_model(lmp_ctx *ctx, lmp_block *blocks, int n_blocks, const lmp_learn_spec *spec,
                    const lmp_learn_problem *p, lmp_learn_result *out)
{
    if (!ctx->learn || !ctx->learn->tokens)
        return lmp_fail(LMP_EINVAL, "learn_model: no calibration windows were lent: the stage must ask for "
                                    "LMP_NEED_WHOLE_MODEL in needs() and call it from finish()");
    const lmp_learn_inputs *in = ctx->learn;
    const lmp_model *m = in->m;
    if (n_blocks != m->arch.n_layers)
        return lmp_fail(LMP_EINVAL, "learn_model: %d blocks for a model of %lld", n_blocks, (long long)m->arch.n_layers);
    int st = check_problem("learn_model", &blocks[0], spec, p);
    if (st) return st;
    if (spec->seq_len < 0 || spec->seq_len > in->T)
        return lmp_fail(LMP_EINVAL, "learn_model: seq_len %lld: the calibration windows have %lld tokens (0: all of them)",
                        (long long)spec->seq_len, (long long)in->T);
    const int64_t T = spec->seq_len > 0 ? spec->seq_len : in->T, V = m->arch.vocab;
    const pieces pc = {.tokens = in->tokens, .n = in->n * (in->T / T), .T = T, .per_window = in->T / T, .window_T = in->T};
    if (spec->loss == LMP_LOSS_CE && T < 2)
        return lmp_fail(LMP_EINVAL, "learn_model: next-token cross-entropy needs sequences of 2 tokens or more");
    const double t_start = lmp_now_s();
    lmp_model *mm = (lmp_model *)m; /* its f32 blocks are converted, and released after if they were not there */
    const int had_blocks = mm->blocks != NULL;
    const lmp_block *fp = lmp_model_blocks(mm); /* the unmodified model, f32 */
    if (!fp) return lmp_fail_prefix(LMP_ENOMEM, "learn_model: the unmodified model's blocks: ");
    learn_loop L;
    if ((st = loop_init(&L, spec, p, pc.n, out))) return st;
    lmp_model_tape mt = {0};
    lmp_block_grads *g = calloc((size_t)n_blocks, sizeof *g), **gp = calloc((size_t)n_blocks, sizeof *gp);
    float *lp = malloc((size_t)(2 * T * V) * sizeof *lp), *ref = lp ? lp + T * V : NULL;
    if (!g || !gp || !lp) st = lmp_fail(LMP_ENOMEM, "out of memory to learn the model");
    for (int b = 0; b < n_blocks && !st; b++) {
        st = lmp_block_grads_alloc(&g[b], &blocks[b], p->linears, 0);
        gp[b] = &g[b];
    }
    if (!st) st = lmp_model_tape_init(&mt, m, T);
    if (!st) st = materialize_all(p, blocks, n_blocks);
    if (!st) st = mean_loss(in, &pc, fp, blocks, spec->loss, lp, ref, &out->loss_first);

    for (int64_t s = 0; s < spec->steps && !st; s++) {
        lmp_progress(ctx, "learn the model: step", s, spec->steps);
        if ((st = lmp_host_stop_if_interrupted(ctx))) break;
        loop_begin_step(&L, ctx);
        for (int b = 0; b < n_blocks; b++) lmp_block_grads_zero(&g[b], &blocks[b]);
        if ((st = materialize_all(p, blocks, n_blocks))) break;
        double batch_loss = 0, l;
        for (int64_t i = 0; i < L.batch && !st; i++) {
            const int32_t *tok = piece(&pc, L.order[i]);
            if (spec->loss == LMP_LOSS_KL) st = lmp_forward(in->be, m, fp, tok, T, 1, ref);
            if (!st) st = lmp_model_loss_grad(in->be, m, blocks, tok, spec->loss == LMP_LOSS_KL ? ref : NULL, &mt, gp, &l);
            batch_loss += l / (double)L.batch;
        }
        for (int b = 0; b < n_blocks && !st; b++) { /* the batch's mean, then the plugin's parameters */
            for (int i = 0; i < blocks[b].n_linears; i++)
                if (g[b].dw[i])
                    for (int64_t k = 0; k < blocks[b].linears[i].out * blocks[b].linears[i].in; k++)
                        g[b].dw[i][k] /= (float)L.batch;
            st = p->pullback(p->ud, &blocks[b], g[b].dw);
        }
        if (!st) loop_end_step(&L, s, batch_loss, out);
    }
    if (!st && spec->steps > 0) lmp_progress(ctx, "learn the model: step", spec->steps, spec->steps);
    if (!st) loop_end(&L, out);
    if (!st) st = materialize_all(p, blocks, n_blocks);
    if (!st) st = mean_loss(in, &pc, fp, blocks, spec->loss, lp, ref, &out->loss_final);
    out->seconds = lmp_now_s() - t_start;
    for (int b = 0; g && b < n_blocks; b++) lmp_block_grads_free(&g[b]);
    free(g);
    free(gp);
    free(lp);
    lmp_model_tape_free(&mt);
    loop_free(&L);
    if (!had_blocks) lmp_model_blocks_release(mm);
    return st;
}
