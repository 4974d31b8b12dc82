/* qat.c — quantization-aware (and sparsity-aware) fine-tuning of the whole model, after the
 * variant's other stages (docs/algorithms.md §3.12).
 *
 * The stage goes last in a variant.  Each targeted linear keeps a float copy of its weights (the
 * latent weights, starting from what the earlier stages left) and the forward runs them as the
 * variant stores them:
 *   - on the grid an earlier stage recorded (rtn, gptq, autoround, sparse24 with bits): W' =
 *     value(code(latent)) with that grid's scales, which stay fixed; the gradient passes the
 *     rounding straight through (STE) and is 0 where the code saturates;
 *   - with no recorded grid, the latent weights themselves;
 *   - an N:M mask from an earlier stage (sparse24) stays: pruned weights stay exactly 0 and are
 *     never learned, which is sparse fine-tuning;
 *   - an earlier stage's activation quantization (rtn's act, smoothquant's W8A8) runs in the
 *     forward as set, its gradient passed straight through by the host.
 * The host's learning service (host->learn_model) runs the loop: the loss is the KL divergence of
 * the model's next-token distribution to the unmodified model's on the calibration windows
 * (distillation; `loss = "ce"`: next-token cross-entropy), Adam at lr 1e-4 on a cosine schedule,
 * 4 windows a step. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "lmpress/plugin.h"
#include "learn_params.h"

enum { P_STEPS, P_LR, P_BATCH, P_SEQ_LEN, P_OPTIMIZER, P_SCHEDULE, P_LOSS, P_KEEP_BEST, P_COUNT };

static const char *const loss_choices[] = {"kl", "ce", NULL};                         /* lmp_loss's */

static const lmp_param_spec qat_params[P_COUNT] = {
    [P_STEPS] = {"steps", LMP_PARAM_INT, "optimizer steps over the whole model", 100, NULL, 0, 1000000, NULL, 0},
    [P_LR] = {"lr", LMP_PARAM_FLOAT, "learning rate", 1e-4, NULL, 0, 10, NULL, 0},
    [P_BATCH] = {"batch", LMP_PARAM_INT, "sequences per step (0: all of them)", 4, NULL, 0, 1 << 20, NULL, 0},
    [P_SEQ_LEN] = {"seq_len", LMP_PARAM_INT,
                   "tokens per training sequence, cut from the calibration windows one after the other (0: the "
                   "windows' calibration.seq_len)",
                   0, NULL, 0, 1 << 20, NULL, 0},
    [P_OPTIMIZER] = {"optimizer", LMP_PARAM_ENUM, "adam or sign_sgd", 1, NULL, 0, 0, learn_optimizer_choices, 0},
    [P_SCHEDULE] = {"schedule", LMP_PARAM_ENUM, "learning rate over the steps: constant, linear to 0, cosine to 0", 2,
                    NULL, 0, 0, learn_schedule_choices, 0},
    [P_LOSS] = {"loss", LMP_PARAM_ENUM,
                "kl: distillation to the unmodified model's next-token distribution; ce: next-token cross-entropy",
                0, NULL, 0, 0, loss_choices, 0},
    [P_KEEP_BEST] = {"keep_best", LMP_PARAM_BOOL, "end with the step of least batch loss (false: the last)", 0, NULL,
                     0, 1, NULL, 0},
};

/* One fine-tuned linear. */
typedef struct qat_linear {
    int block, index;
    int64_t rows, cols;
    float *latent, *grad; /* [rows, cols] */
} qat_linear;

typedef struct qat_problem {
    const lmp_host *host;
    void *hctx;
    int n;
    qat_linear *lin;
    lmp_block *blocks;
} qat_problem;

static int qat_create(const lmp_host *host, void *hctx, const lmp_value *p, void **self)
{
    (void)p;
    *self = NULL;
    if (host->struct_size < offsetof(lmp_host, learn_model) + sizeof host->learn_model)
        return host->set_error(hctx, LMP_EUNSUPPORTED, "qat: this lmpress has no learning service (plugin ABI 4.3 or "
                                                       "later is needed)");
    return LMP_OK;
}

static uint32_t qat_needs(void *self, const lmp_value *p)
{
    (void)self;
    (void)p;
    return LMP_NEED_WHOLE_MODEL;
}

/* Nothing per block: the work is in finish(), once every block is there. */
static int qat_apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    (void)self, (void)host, (void)hctx, (void)blk;
    return LMP_OK;
}

/* What the forward runs for a latent weight w of element (r, j): a pruned weight is 0, as the
 * mask promises. */
static float stored(const lmp_linear *l, int64_t r, int64_t j, float w)
{
    if (l->mask && !l->mask[r * l->in + j]) return 0.0f;
    const lmp_wgrid *g = l->grid;
    if (!g) return w;
    const int64_t k = lmp_wgrid_slice(g, l->in, r, j);
    const float z = g->zeros ? g->zeros[k] : 0.0f;
    return lmp_wgrid_value(&g->spec, lmp_wgrid_code(&g->spec, w, g->scales[k], z), g->scales[k], z);
}

static int qat_materialize(void *ud, lmp_block *blk)
{
    qat_problem *P = ud;
    for (int n = 0; n < P->n; n++) {
        const qat_linear *Q = &P->lin[n];
        if (Q->block != blk->index) continue;
        lmp_linear *l = &blk->linears[Q->index];
        for (int64_t r = 0; r < Q->rows; r++)
            for (int64_t j = 0; j < Q->cols; j++) l->w[r * Q->cols + j] = stored(l, r, j, Q->latent[r * Q->cols + j]);
    }
    return LMP_OK;
}

/* dL/dW' -> dL/dlatent: straight through the rounding, 0 where the code saturated (the stored
 * weight more than half a step from the latent one) and at pruned weights. */
static int qat_pullback(void *ud, const lmp_block *blk, float *const *dw)
{
    qat_problem *P = ud;
    for (int n = 0; n < P->n; n++) {
        qat_linear *Q = &P->lin[n];
        if (Q->block != blk->index) continue;
        const lmp_linear *l = &blk->linears[Q->index];
        const lmp_wgrid *g = l->grid;
        for (int64_t r = 0; r < Q->rows; r++)
            for (int64_t j = 0; j < Q->cols; j++) {
                const int64_t e = r * Q->cols + j;
                if (l->mask && !l->mask[e]) continue;
                const float half = g ? 0.5001f * fabsf(g->scales[lmp_wgrid_slice(g, Q->cols, r, j)]) : INFINITY;
                if (fabsf(l->w[e] - Q->latent[e]) <= half) Q->grad[e] += dw[Q->index][e];
            }
    }
    return LMP_OK;
}

static void qat_project(void *ud)
{
    qat_problem *P = ud;
    for (int n = 0; n < P->n; n++) {
        const qat_linear *Q = &P->lin[n];
        const lmp_linear *l = &P->blocks[Q->block].linears[Q->index];
        if (l->mask)
            for (int64_t e = 0; e < Q->rows * Q->cols; e++)
                if (!l->mask[e]) Q->latent[e] = 0.0f;
    }
}

static int qat_finish(void *self, const lmp_host *host, void *hctx, lmp_block *blocks, int n_blocks)
{
    (void)self;
    qat_problem P = {.host = host, .hctx = hctx, .blocks = blocks};
    const lmp_value *p = NULL;
    int total = 0, st = 0, widest = 0;
    for (int b = 0; b < n_blocks; b++) widest = blocks[b].n_linears > widest ? blocks[b].n_linears : widest;
    /* linear i of every block: the problem's mask is per index, over the widest block */
    uint8_t *linears = host->alloc(hctx, (size_t)widest + 1);
    if (!linears) return host->set_error(hctx, LMP_ENOMEM, "qat: out of memory");
    for (int b = 0; b < n_blocks; b++)
        for (int i = 0; i < blocks[b].n_linears; i++)
            if (blocks[b].linears[i].params) {
                total++;
                linears[i] = 1;
                p = blocks[b].linears[i].params;
            }
    if (!total) {
        host->free(hctx, linears);
        return LMP_OK;
    }
    P.lin = host->alloc(hctx, (size_t)total * sizeof *P.lin);
    float **params = host->alloc(hctx, (size_t)total * sizeof *params);
    float **grads = host->alloc(hctx, (size_t)total * sizeof *grads);
    int64_t *sizes = host->alloc(hctx, (size_t)total * sizeof *sizes);
    if (!P.lin || !params || !grads || !sizes) st = host->set_error(hctx, LMP_ENOMEM, "qat: out of memory");
    for (int b = 0; b < n_blocks && !st; b++)
        for (int i = 0; i < blocks[b].n_linears && !st; i++) {
            const lmp_linear *l = &blocks[b].linears[i];
            if (!l->params) continue;
            if (l->in_shift || l->in_scale)
                st = host->set_error(hctx, LMP_EUNSUPPORTED, "qat: %s has an explicit input affine (smoothquant's "
                                                             "all_linears, shift on o/down): not learnable yet", l->name);
            qat_linear *Q = &P.lin[P.n];
            *Q = (qat_linear){.block = b, .index = i, .rows = l->out, .cols = l->in};
            const size_t bytes = (size_t)(l->out * l->in) * sizeof(float);
            Q->latent = host->alloc(hctx, bytes);
            Q->grad = host->alloc(hctx, bytes);
            P.n++;
            if (!st && (!Q->latent || !Q->grad)) st = host->set_error(hctx, LMP_ENOMEM, "qat: %s: out of memory", l->name);
            if (st) break;
            memcpy(Q->latent, l->w, bytes);
            params[P.n - 1] = Q->latent, grads[P.n - 1] = Q->grad, sizes[P.n - 1] = l->out * l->in;
        }
    lmp_learn_result res;
    if (!st) {
        const lmp_learn_spec spec = {.optimizer = (lmp_optimizer)(int)p[P_OPTIMIZER].num,
                                     .schedule = (lmp_lr_schedule)(int)p[P_SCHEDULE].num,
                                     .steps = (int64_t)p[P_STEPS].num,
                                     .batch = (int64_t)p[P_BATCH].num,
                                     .lr = p[P_LR].num,
                                     .keep_best = p[P_KEEP_BEST].num != 0,
                                     .seq_len = (int64_t)p[P_SEQ_LEN].num,
                                     .loss = (lmp_loss)(int)p[P_LOSS].num};
        const lmp_learn_problem prob = {.n_params = P.n, .params = params, .sizes = sizes, .grads = grads,
                                        .linears = linears, .materialize = qat_materialize, .pullback = qat_pullback,
                                        .project = qat_project, .ud = &P};
        st = host->learn_model(hctx, blocks, n_blocks, &spec, &prob, &res);
        host->free(hctx, linears);
        linears = NULL;
        if (!st)
            host->log(hctx, LMP_LOG_INFO, "qat: %s %.6g -> %.6g over the calibration windows, %lld steps, %.1f s",
                      spec.loss == LMP_LOSS_KL ? "KL" : "cross-entropy", res.loss_first, res.loss_final,
                      (long long)spec.steps, res.seconds);
    }
    for (int n = 0; P.lin && n < P.n; n++) {
        if (P.lin[n].latent) host->free(hctx, P.lin[n].latent);
        if (P.lin[n].grad) host->free(hctx, P.lin[n].grad);
    }
    if (linears) host->free(hctx, linears); /* when learn_model was not reached */
    void *arrays[] = {P.lin, params, grads, sizes};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++)
        if (arrays[i]) host->free(hctx, arrays[i]);
    return st;
}

static const lmp_strategy_i qat_vtable = {
    .struct_size = sizeof(lmp_strategy_i),
    .create = qat_create,
    .needs = qat_needs,
    .apply = qat_apply,
    .finish = qat_finish,
};

static const lmp_plugin_desc qat_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_STRATEGY,
    .name = "qat",
    .version = "0.1.0",
    .summary = "fine-tunes the whole model under the variant's quantization and sparsity (STE), by distillation",
    .params = qat_params,
    .n_params = P_COUNT,
    .vtable = &qat_vtable,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &qat_desc; }
