/* autoround.c — learned rounding and clipping, block by block (Intel's AutoRound, Cheng et al.
 * 2023, "Optimize Weight Rounding via Signed Gradient Descent"; docs/algorithms.md §3.6).
 *
 * For every targeted linear of a block, starting from the weights W0 the stage receives, each
 * weight gets a rounding offset v in [-0.5, 0.5] and each slice of the grid (tensor, row, group or
 * GGUF block) a clipping factor a in [min_clip, 1]:
 *   scale, zero = the slice's grid of W0 with clip a       (rtn's grid: lmp_wgrid_fit*)
 *   W' = value(code(W0 + v * scale))                       (rtn's rounding of the shifted weight)
 * so W' lies on the same grid rtn and gptq use, and an export writes it as they do.  v and a are
 * learned together for all of the block's linears through the host's learning service
 * (host->learn_block): block-output MSE against the unmodified block on the calibration inputs,
 * signed SGD at lr 1/steps decaying linearly to 0, 200 steps of 8 windows, keeping the step with
 * the least loss: AutoRound's recipe.  The rounding's gradient is the straight-through
 * estimator's (zero where the code saturates):
 *   dW'/dv = scale,   dW'/da = (W' - W0 [not saturated]) / a.
 * Uniform grids only: int (any sym/granularity), q8_0, q4_0, q4_1, q5_0, q5_1.  A weight an
 * earlier stage pruned (lmp_linear.mask) stays at the grid's value of 0 and is not learned.  After
 * another quantizing stage (gptq), W0 is that stage's weights and the grid is fitted to them anew:
 * on that stage's own grid no offset within +-0.5 could move a code, and a's gradient would be 0. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "lmpress/plugin.h"
#include "wgrid.h"
#include "learn_params.h"

enum { P_GRID = 0, P_STEPS = WGRID_COUNT, P_LR, P_BATCH, P_MIN_CLIP, P_LEARN_CLIP, P_OPTIMIZER, P_SCHEDULE, P_KEEP_BEST, P_COUNT };


static const lmp_param_spec ar_params[P_COUNT] = {
    WGRID_PARAMS(4, 8, "weight bits, 2..8"),
    [P_STEPS] = {"steps", LMP_PARAM_INT, "optimizer steps per block (0: round to nearest, no learning)", 200, NULL, 0,
                 1000000, NULL, 0},
    [P_LR] = {"lr", LMP_PARAM_FLOAT, "learning rate; 0: 1/steps (AutoRound's default)", 0, NULL, 0, 10, NULL, 0},
    [P_BATCH] = {"batch", LMP_PARAM_INT, "calibration windows per step (0: all of them)", 8, NULL, 0, 1 << 20, NULL, 0},
    [P_MIN_CLIP] = {"min_clip", LMP_PARAM_FLOAT, "the least clipping factor a slice may learn (AutoRound: 0.5)", 0.5,
                    NULL, 0.01, 1, NULL, 0},
    [P_LEARN_CLIP] = {"learn_clip", LMP_PARAM_BOOL, "learn each slice's clipping factor too (false: rounding only)", 1,
                      NULL, 0, 1, NULL, 0},
    [P_OPTIMIZER] = {"optimizer", LMP_PARAM_ENUM, "sign_sgd (AutoRound) or adam", 0, NULL, 0, 0, learn_optimizer_choices, 0},
    [P_SCHEDULE] = {"schedule", LMP_PARAM_ENUM, "learning rate over the steps: constant, linear to 0, cosine to 0", 1,
                    NULL, 0, 0, learn_schedule_choices, 0},
    [P_KEEP_BEST] = {"keep_best", LMP_PARAM_BOOL, "keep the step with the least batch loss (false: the last)", 1, NULL,
                     0, 1, NULL, 0},
};

/* One learned linear: its parameters (v, a), their gradients, and the grid they make. */
typedef struct ar_linear {
    int index;                /* in the block */
    lmp_wspec spec;           /* the grid; spec.clip is each slice's a when the grid is made */
    int64_t rows, cols, n_slices, per_row;
    float *w0;                /* [rows, cols] the weights the stage started from */
    float *v, *dv;            /* [rows, cols] */
    float *a, *da;            /* [n_slices] */
    float *scales, *zeros;    /* [n_slices] the grid the last materialize made */
    float *mn, *mx, *amax;    /* [n_slices] int grids: each slice's min and max (0 folded in) and
                               * abs-max in W0, which the clip scales */
} ar_linear;

typedef struct ar_problem {
    const lmp_host *host;
    void *hctx;
    int n;
    ar_linear *lin;           /* [the block's linears] (a mixture of experts: every expert's) */
    float min_clip;
    int learn_clip;
} ar_problem;

static int format_ok(lmp_wformat f)
{
    return f == LMP_WFORMAT_INT || f == LMP_WFORMAT_GGUF_Q8_0 || f == LMP_WFORMAT_GGUF_Q4_0 ||
           f == LMP_WFORMAT_GGUF_Q4_1 || f == LMP_WFORMAT_GGUF_Q5_0 || f == LMP_WFORMAT_GGUF_Q5_1 || lmp_wformat_is_fp(f);
}

static int check_params(const lmp_host *host, void *hctx, const lmp_value *p, const char *where)
{
    int st = wgrid_check_options(host, hctx, p + P_GRID, "autoround", where);
    if (st) return st;
    const lmp_wformat f = wgrid_format(p + P_GRID);
    if ((int)p[P_GRID + WGRID_GRAN].num == LMP_GRAN_BLOCK && lmp_wformat_is_fp(f)) /* its slices are rows or groups */
        return host->set_error(hctx, LMP_EINVAL, "autoround: %s: granularity = \"block\" is not offered (it learns a "
                               "clip per row or group); use rtn or gptq for FP8 blocks", where);
    if (!format_ok(f))
        return host->set_error(hctx, LMP_EINVAL,
                               "autoround: %s: format %s is not a uniform grid of one scale per slice: use int, q8_0, "
                               "q4_0, q4_1, q5_0, q5_1, fp8_e4m3, fp8_e5m2, nvfp4, mxfp4 or mxfp8",
                               where, lmp_wformat_name(f));
    if (wgrid_importance(p + P_GRID) != WGRID_IMP_NONE)
        return host->set_error(hctx, LMP_EINVAL, "autoround: %s: the scales are learned: leave importance at \"none\"",
                               where);
    if ((int)p[P_GRID + WGRID_BITS].num == 16 || ((int)p[P_GRID + WGRID_BITS].num > 8 && f == LMP_WFORMAT_INT))
        return host->set_error(hctx, LMP_EINVAL, "autoround: %s: bits must be 2..8", where);
    return 0;
}

static int ar_create(const lmp_host *host, void *hctx, const lmp_value *p, void **self)
{
    *self = NULL;
    if (host->struct_size < offsetof(lmp_host, learn_block) + sizeof host->learn_block)
        return host->set_error(hctx, LMP_EUNSUPPORTED, "autoround: this lmpress has no learning service (plugin ABI "
                                                       "4.3 or later is needed)");
    return check_params(host, hctx, p, "params");
}

static uint32_t ar_needs(void *self, const lmp_value *p)
{
    (void)self;
    (void)p;
    return LMP_NEED_CALIB_INPUTS;
}

/* The slice of element (r, j). */
static int64_t slice_of(const ar_linear *L, int64_t r, int64_t j)
{
    if (L->spec.gran == LMP_GRAN_TENSOR) return 0;
    if (L->spec.gran == LMP_GRAN_CHANNEL) return r;
    return r * L->per_row + j / L->spec.group;
}

/* The grid of every slice of W0 with its clipping factor a (plugin.h: lmp_wgrid_fit for int, from
 * the slice's min and max with 0 folded in; lmp_wgrid_fit_block for a GGUF block). */
static void make_grid(ar_linear *L)
{
    lmp_wspec s = L->spec;
    if (lmp_wformat_is_fp(s.format)) { /* INT's slices, the format's scale of the clipped abs-max */
        for (int64_t k = 0; k < L->n_slices; k++) {
            s.clip = L->a[k];
            L->scales[k] = lmp_wgrid_fit_fp(&s, L->amax[k]);
        }
        return;
    }
    if (s.format != LMP_WFORMAT_INT) {
        for (int64_t r = 0; r < L->rows; r++)
            for (int64_t c = 0; c < L->cols; c += s.group) {
                const int64_t k = slice_of(L, r, c);
                float zero;
                s.clip = L->a[k];
                lmp_wgrid_fit_block(&s, L->w0 + r * L->cols + c, s.group, &L->scales[k], &zero);
                if (L->zeros) L->zeros[k] = zero;
            }
        return;
    }
    for (int64_t k = 0; k < L->n_slices; k++) {
        float zero;
        s.clip = L->a[k];
        lmp_wgrid_fit(&s, L->mn[k], L->mx[k], L->amax[k], &L->scales[k], &zero);
        if (L->zeros) L->zeros[k] = zero;
    }
}

/* The weight of element e of slice k: its shifted value rounded onto the grid (a pruned one: the
 * grid's 0). */
/* The unit v moves a weight by: the slice's scale (NVFP4's divided by the global scale). */
static float shift_unit(const ar_linear *L, int64_t k)
{
    return lmp_wformat_is_fp(L->spec.format) ? lmp_wgrid_fp_eff(&L->spec, L->scales[k]) : L->scales[k];
}

static float quantized(const ar_linear *L, const lmp_linear *l, int64_t e, int64_t k)
{
    const float scale = L->scales[k], zero = L->zeros ? L->zeros[k] : 0.0f;
    const float w = l->mask && !l->mask[e] ? 0.0f : L->w0[e] + L->v[e] * shift_unit(L, k);
    return lmp_wgrid_value(&L->spec, lmp_wgrid_code(&L->spec, w, scale, zero), scale, zero);
}

static int ar_materialize(void *ud, lmp_block *blk)
{
    ar_problem *P = ud;
    for (int n = 0; n < P->n; n++) {
        ar_linear *L = &P->lin[n];
        lmp_linear *l = &blk->linears[L->index];
        make_grid(L);
        for (int64_t r = 0; r < L->rows; r++)
            for (int64_t j = 0; j < L->cols; j++)
                l->w[r * L->cols + j] = quantized(L, l, r * L->cols + j, slice_of(L, r, j));
    }
    return LMP_OK;
}

/* dW' -> dv and da by the straight-through estimator (the header's formulas).  A weight's code
 * saturated when the grid moved it more than half a step from its shifted value. */
static int ar_pullback(void *ud, const lmp_block *blk, float *const *dw)
{
    ar_problem *P = ud;
    for (int n = 0; n < P->n; n++) {
        ar_linear *L = &P->lin[n];
        const lmp_linear *l = &blk->linears[L->index];
        const float *g = dw[L->index];
        for (int64_t r = 0; r < L->rows; r++)
            for (int64_t j = 0; j < L->cols; j++) {
                const int64_t e = r * L->cols + j, k = slice_of(L, r, j);
                if (l->mask && !l->mask[e]) continue;
                const float scale = shift_unit(L, k), shifted = L->w0[e] + L->v[e] * scale;
                /* a floating-point grid's step grows with the value: inside = not clamped at its max */
                const lmp_minifloat *mf = lmp_wformat_minifloat(L->spec.format);
                const int inside = mf ? fabsf(shifted / scale) <= mf->max
                                      : fabsf(l->w[e] - shifted) <= 0.5001f * fabsf(scale);
                if (inside) L->dv[e] += g[e] * scale;
                if (P->learn_clip) L->da[k] += g[e] * (l->w[e] - (inside ? L->w0[e] : 0.0f)) / L->a[k];
            }
    }
    return LMP_OK;
}

static void ar_project(void *ud)
{
    ar_problem *P = ud;
    for (int n = 0; n < P->n; n++) {
        ar_linear *L = &P->lin[n];
        for (int64_t e = 0; e < L->rows * L->cols; e++) L->v[e] = lmp_wgrid_clampf(L->v[e], -0.5f, 0.5f);
        for (int64_t k = 0; k < L->n_slices; k++) L->a[k] = lmp_wgrid_clampf(L->a[k], P->min_clip, 1.0f);
    }
}

static void free_problem(ar_problem *P)
{
    for (int n = 0; n < P->n; n++) {
        ar_linear *L = &P->lin[n];
        float *arrays[] = {L->w0, L->v, L->dv, L->a, L->da, L->scales, L->zeros, L->mn, L->mx, L->amax};
        for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++)
            if (arrays[i]) P->host->free(P->hctx, arrays[i]);
    }
    if (P->lin) P->host->free(P->hctx, P->lin);
    P->lin = NULL;
}

/* The learned linear for blk->linears[i]: its grid, and v = 0, a = the grid's clip. */
static int add_linear(ar_problem *P, const lmp_block *blk, int i)
{
    const lmp_linear *l = &blk->linears[i];
    const lmp_host *host = P->host;
    int st = check_params(host, P->hctx, l->params, l->name); /* a linear's own overrides */
    if (st) return st;
    ar_linear *L = &P->lin[P->n++];
    memset(L, 0, sizeof *L);
    L->index = i;
    wgrid_spec_linear(l->params + P_GRID, l, &L->spec);
    if (!format_ok(L->spec.format)) /* a k-quant's fallback is one of them; kept as a guard */
        return host->set_error(P->hctx, LMP_EINVAL, "autoround: %s: format %s", l->name, lmp_wformat_name(L->spec.format));
    if (l->in % lmp_wformat_span(L->spec.format))
        return host->set_error(P->hctx, LMP_EINVAL, "autoround: %s: %lld inputs, not a multiple of format %s's block of %lld",
                               l->name, (long long)l->in, lmp_wformat_name(L->spec.format),
                               (long long)lmp_wformat_span(L->spec.format));
    L->rows = l->out, L->cols = l->in;
    L->n_slices = lmp_wspec_n_scales(&L->spec, l->out, l->in);
    L->per_row = L->spec.gran == LMP_GRAN_GROUP ? (l->in + L->spec.group - 1) / L->spec.group : 1;
    const size_t RC = (size_t)(L->rows * L->cols) * sizeof(float), S = (size_t)L->n_slices * sizeof(float);
    const int int_grid = L->spec.format == LMP_WFORMAT_INT || lmp_wformat_is_fp(L->spec.format); /* slice stats */
    L->w0 = host->alloc(P->hctx, RC);
    L->v = host->alloc(P->hctx, RC);
    L->dv = host->alloc(P->hctx, RC);
    L->a = host->alloc(P->hctx, S);
    L->da = host->alloc(P->hctx, S);
    L->scales = host->alloc(P->hctx, S);
    L->zeros = L->spec.sym ? NULL : host->alloc(P->hctx, S);
    L->mn = int_grid ? host->alloc(P->hctx, S) : NULL;
    L->mx = int_grid ? host->alloc(P->hctx, S) : NULL;
    L->amax = int_grid ? host->alloc(P->hctx, S) : NULL;
    if (!L->w0 || !L->v || !L->dv || !L->a || !L->da || !L->scales || (!L->spec.sym && !L->zeros) ||
        (int_grid && (!L->mn || !L->mx || !L->amax)))
        return host->set_error(P->hctx, LMP_ENOMEM, "autoround: %s: out of memory", l->name);
    memcpy(L->w0, l->w, RC);
    for (int64_t k = 0; k < L->n_slices; k++) L->a[k] = lmp_wspec_clip(&L->spec);
    for (int64_t r = 0; int_grid && r < L->rows; r++) /* host->alloc zeroes: 0 is folded in */
        for (int64_t j = 0; j < L->cols; j++) {
            const int64_t k = slice_of(L, r, j);
            const float w = L->w0[r * L->cols + j];
            if (w < L->mn[k]) L->mn[k] = w;
            if (w > L->mx[k]) L->mx[k] = w;
            if (fabsf(w) > L->amax[k]) L->amax[k] = fabsf(w);
        }
    return 0;
}

static int ar_apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    (void)self;
    ar_problem P = {.host = host, .hctx = hctx};
    const lmp_value *p = NULL;
    int st = 0;
    /* one entry per linear of the block (as many as a mixture of experts has), and two learned
     * arrays each (v, a) */
    P.lin = host->alloc(hctx, (size_t)blk->n_linears * sizeof *P.lin);
    float **params = host->alloc(hctx, (size_t)(4 * blk->n_linears) * sizeof *params), **grads = params + 2 * blk->n_linears;
    int64_t *sizes = host->alloc(hctx, (size_t)(2 * blk->n_linears) * sizeof *sizes);
    if (!P.lin || !params || !sizes) {
        free_problem(&P);
        if (params) host->free(hctx, params);
        if (sizes) host->free(hctx, sizes);
        return host->set_error(hctx, LMP_ENOMEM, "autoround: out of memory for block %d's %d linears", blk->index,
                               blk->n_linears);
    }
    for (int i = 0; i < blk->n_linears && !st; i++)
        if (blk->linears[i].params) {
            p = blk->linears[i].params; /* the learning settings: the block's first targeted linear's */
            st = add_linear(&P, blk, i);
        }
    if (st || !P.n) {
        free_problem(&P);
        host->free(hctx, params);
        host->free(hctx, sizes);
        return st;
    }
    P.min_clip = (float)p[P_MIN_CLIP].num;
    P.learn_clip = p[P_LEARN_CLIP].num != 0;
    int np = 0;
    uint8_t *linears = host->alloc(hctx, (size_t)blk->n_linears);
    if (!linears) {
        free_problem(&P);
        host->free(hctx, params);
        host->free(hctx, sizes);
        return host->set_error(hctx, LMP_ENOMEM, "autoround: out of memory");
    }
    for (int n = 0; n < P.n; n++) {
        ar_linear *L = &P.lin[n];
        linears[L->index] = 1;
        params[np] = L->v, grads[np] = L->dv, sizes[np++] = L->rows * L->cols;
        if (P.learn_clip) params[np] = L->a, grads[np] = L->da, sizes[np++] = L->n_slices;
    }
    const int64_t steps = (int64_t)p[P_STEPS].num;
    const lmp_learn_spec spec = {.optimizer = (lmp_optimizer)(int)p[P_OPTIMIZER].num,
                                 .schedule = (lmp_lr_schedule)(int)p[P_SCHEDULE].num,
                                 .steps = steps,
                                 .batch = (int64_t)p[P_BATCH].num,
                                 .lr = p[P_LR].num > 0 ? p[P_LR].num : 1.0 / (double)(steps > 0 ? steps : 1),
                                 .keep_best = p[P_KEEP_BEST].num != 0};
    const lmp_learn_problem prob = {.n_params = np, .params = params, .sizes = sizes, .grads = grads,
                                    .linears = linears, .materialize = ar_materialize, .pullback = ar_pullback,
                                    .project = ar_project, .ud = &P};
    lmp_learn_result res;
    st = host->learn_block(hctx, blk, &spec, &prob, &res);
    host->free(hctx, linears);
    if (!st)
        host->log(hctx, LMP_LOG_INFO, "autoround: block %d: MSE %.6g -> %.6g (best batch at step %lld of %lld), %.1f s",
                  blk->index, res.loss_first, res.loss_final, (long long)res.best_step, (long long)steps, res.seconds);
    for (int n = 0; n < P.n && !st; n++) { /* the grid the kept parameters made, for an export */
        ar_linear *L = &P.lin[n];
        lmp_wspec rec = L->spec;
        rec.clip = 1.0f; /* each slice's clip is in its scale */
        st = host->set_weight_grid(hctx, blk, L->index, &rec, L->scales, L->zeros, NULL);
        blk->linears[L->index].weight_bits = wgrid_weight_bits(&L->spec, L->rows, L->cols);
    }
    free_problem(&P);
    host->free(hctx, params);
    host->free(hctx, sizes);
    return st;
}

static const lmp_strategy_i ar_vtable = {
    .struct_size = sizeof(lmp_strategy_i),
    .create = ar_create,
    .needs = ar_needs,
    .apply = ar_apply,
};

static const lmp_plugin_desc ar_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_STRATEGY,
    .name = "autoround",
    .version = "0.1.0",
    .summary = "learned rounding offsets and clipping per block by signed gradient descent (AutoRound)",
    .params = ar_params,
    .n_params = P_COUNT,
    .vtable = &ar_vtable,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &ar_desc; }
