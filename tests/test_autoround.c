/* test_autoround.c — the learning service (host->learn_block, core/train/learn.c) and the
 * autoround plugin on stories260K:
 *  - the service fits perturbed weights back: Adam brings the block-output MSE down tenfold;
 *  - autoround with 0 steps is rtn on the same grid, bit for bit;
 *  - learned, every weight lies on the recorded grid (what an export writes), and each block's
 *    output error on the unmodified model's inputs is below rtn's;
 *  - it composes after smoothquant;
 *  - what it cannot learn on is refused before any block. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "teststage.h"
#include "testutil.h"
#include "train/learn.h"

#define STORIES LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"

/* ---- the service on its own --------------------------------------------------------------- */

/* The problem: every weight of the block is a parameter, written into W as it is. */
typedef struct copy_problem {
    int n;
    float *params[8], *grads[8];
    int64_t sizes[8];
} copy_problem;

static int copy_materialize(void *ud, lmp_block *blk)
{
    copy_problem *c = ud;
    for (int i = 0; i < c->n; i++) memcpy(blk->linears[i].w, c->params[i], (size_t)c->sizes[i] * sizeof(float));
    return 0;
}

static int copy_pullback(void *ud, const lmp_block *blk, float *const *dw)
{
    (void)blk;
    copy_problem *c = ud;
    for (int i = 0; i < c->n; i++)
        for (int64_t k = 0; k < c->sizes[i]; k++) c->grads[i][k] += dw[i][k];
    return 0;
}

START_TEST(service_fits_perturbed_weights)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    const int64_t n = 8, T = 64, per = T * m->arch.dim;
    lmp_windows w = windows((int)n, (int)T, m->arch.vocab, 5);
    float *X = malloc((size_t)(n * per) * sizeof *X);
    for (int64_t i = 0; i < n; i++) lmp_embed(m, w.tokens + i * T, T, X + i * per);
    lmp_block blk;
    ck_assert_int_eq(lmp_model_block_copy(m, 0, &blk), 0);
    copy_problem c = {.n = blk.n_linears};
    uint64_t r = 7;
    for (int i = 0; i < c.n; i++) {
        const lmp_linear *l = &blk.linears[i];
        c.sizes[i] = l->out * l->in;
        c.params[i] = malloc((size_t)c.sizes[i] * sizeof(float));
        c.grads[i] = malloc((size_t)c.sizes[i] * sizeof(float));
        for (int64_t k = 0; k < c.sizes[i]; k++) { /* W + 20 % noise */
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            c.params[i][k] = l->w[k] * (1.0f + 0.2f * ((float)(r >> 40) / 8388608.0f - 1.0f));
        }
    }
    const lmp_learn_inputs lent = {.be = &be, .m = m, .X = X, .n = n, .T = T};
    const lmp_learn_spec spec = {.optimizer = LMP_OPT_ADAM, .schedule = LMP_LR_CONSTANT, .steps = 60, .batch = 4,
                                 .lr = 2e-3, .keep_best = 0};
    uint8_t all_learned[64]; /* linears 0..c.n-1 (ABI 5: one flag each) */
    ck_assert_int_le(c.n, 64);
    memset(all_learned, 1, sizeof all_learned);
    const lmp_learn_problem p = {.n_params = c.n, .params = c.params, .sizes = c.sizes, .grads = c.grads,
                                 .linears = all_learned, .materialize = copy_materialize,
                                 .pullback = copy_pullback, .ud = &c};
    lmp_learn_result res;
    ck_assert_int_eq(lmp_learn_block(&ctx, &blk, &spec, &p, &res), LMP_EINVAL); /* nothing lent */
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "LMP_NEED_CALIB_INPUTS"));
    ctx.learn = &lent;
    ck_assert_msg(lmp_learn_block(&ctx, &blk, &spec, &p, &res) == 0, "%s", lmp_last_error());
    ctx.learn = NULL;
    printf("service: block-output MSE %.6g -> %.6g in %lld Adam steps\n", res.loss_first, res.loss_final,
           (long long)spec.steps);
    ck_assert_double_gt(res.loss_first, 0);
    ck_assert_double_lt(res.loss_final, 0.1 * res.loss_first);
    for (int i = 0; i < c.n; i++) /* the block holds the learned weights */
        ck_assert_int_eq(memcmp(blk.linears[i].w, c.params[i], (size_t)c.sizes[i] * sizeof(float)), 0);
    for (int i = 0; i < c.n; i++) free(c.params[i]), free(c.grads[i]);
    lmp_block_free(&blk);
    free(X);
    lmp_windows_free(&w);
    lmp_model_free(m);
}
END_TEST

/* ---- the plugin ----------------------------------------------------------------------------- */

static const char *const w3g32[] = {"bits=3", "sym=false", "granularity=group", "group_size=32", NULL};

START_TEST(zero_steps_is_rtn)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    static const char *const ar0[] = {"bits=3", "sym=false", "granularity=group", "group_size=32", "steps=0", NULL};
    static const char *const q40[] = {"format=q4_0", "steps=0", NULL}, *const rq40[] = {"format=q4_0", NULL};
    const char *const *cases[2][2] = {{ar0, w3g32}, {q40, rq40}};
    for (int c = 0; c < 2; c++) { /* q4_0 on the attention: down's 172 inputs are no multiple of 32 */
        lmp_block *ar = compress_stage(m, "autoround", cases[c][0], c ? "*self_attn*" : NULL, 1);
        lmp_block *rtn = compress_stage(m, "rtn", cases[c][1], c ? "*self_attn*" : NULL, 0);
        for (int64_t b = 0; b < m->arch.n_layers; b++)
            for (int i = 0; i < ar[b].n_linears; i++) {
                const lmp_linear *x = &ar[b].linears[i], *y = &rtn[b].linears[i];
                if (!y->grid) continue; /* not targeted */
                ck_assert_msg(memcmp(x->w, y->w, (size_t)(x->out * x->in) * sizeof(float)) == 0, "%s differs from rtn",
                              x->name);
                ck_assert_ptr_nonnull(x->grid);
                ck_assert_int_eq(x->grid->n_scales, y->grid->n_scales);
                ck_assert_int_eq(memcmp(x->grid->scales, y->grid->scales, (size_t)x->grid->n_scales * sizeof(float)), 0);
                ck_assert(x->weight_bits == y->weight_bits);
            }
        lmp_blocks_free(ar, m->arch.n_layers);
        lmp_blocks_free(rtn, m->arch.n_layers);
    }
    lmp_model_free(m);
}
END_TEST

/* Every weight is its code's value on the recorded grid (the exporters' own check). */
static void check_on_grid(const lmp_linear *l)
{
    const lmp_wgrid *g = l->grid;
    ck_assert_msg(g != NULL, "%s: no grid recorded", l->name);
    const lmp_wspec *s = &g->spec;
    for (int64_t r = 0; r < l->out; r++)
        for (int64_t j = 0; j < l->in; j++) {
            const int64_t k = lmp_wgrid_slice(g, l->in, r, j);
            const float w = l->w[r * l->in + j], z = g->zeros ? g->zeros[k] : 0.0f;
            const float back = lmp_wgrid_value(s, lmp_wgrid_code(s, w, g->scales[k], z), g->scales[k], z);
            ck_assert_msg(back == w, "%s[%lld, %lld] = %.9g is not on its grid (%.9g)", l->name, (long long)r,
                          (long long)j, (double)w, (double)back);
        }
}

/* Block b's output error over X (the unmodified model's inputs to it, [n, T, dim]) against the
 * unmodified block. */
static double block_error(const lmp_model *m, const lmp_block *fp, const lmp_block *q, const float *X, int64_t n,
                          int64_t T)
{
    const int64_t per = T * m->arch.dim;
    float *a = malloc((size_t)per * sizeof *a), *c = malloc((size_t)per * sizeof *c);
    double err = 0;
    for (int64_t i = 0; i < n; i++) {
        memcpy(a, X + i * per, (size_t)per * sizeof *a);
        memcpy(c, X + i * per, (size_t)per * sizeof *c);
        ck_assert_int_eq(lmp_block_forward(&be, &m->arch, fp, T, a, NULL, NULL), 0);
        ck_assert_int_eq(lmp_block_forward(&be, &m->arch, q, T, c, NULL, NULL), 0);
        for (int64_t k = 0; k < per; k++) err += ((double)a[k] - c[k]) * ((double)a[k] - c[k]);
    }
    free(a);
    free(c);
    return err / (double)(n * per);
}

START_TEST(learned_weights_beat_rtn_on_the_grid)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    static const char *const ar[] = {"bits=3", "sym=false", "granularity=group", "group_size=32", "steps=40", "batch=4", NULL};
    static const char *const arq[] = {"format=q4_0", "steps=40", "batch=4", NULL}, *const rq[] = {"format=q4_0", NULL};
    const char *const *cases[2][2] = {{ar, w3g32}, {arq, rq}};
    /* held-out windows: the unmodified model's inputs to each block */
    const int64_t n = 4, T = 64, per = T * m->arch.dim;
    lmp_windows w = windows((int)n, (int)T, m->arch.vocab, 11);
    float *X = malloc((size_t)(n * per) * sizeof *X);
    const lmp_block *fp = lmp_model_blocks(m);
    for (int c = 0; c < 2; c++) {
        lmp_block *learned = compress_stage(m, "autoround", cases[c][0], c ? "*self_attn*" : NULL, 1);
        lmp_block *rtn = compress_stage(m, "rtn", cases[c][1], c ? "*self_attn*" : NULL, 0);
        for (int64_t i = 0; i < n; i++) lmp_embed(m, w.tokens + i * T, T, X + i * per);
        double sum_ar = 0, sum_rtn = 0;
        for (int64_t b = 0; b < m->arch.n_layers; b++) {
            for (int i = 0; i < learned[b].n_linears; i++)
                if (rtn[b].linears[i].grid) check_on_grid(&learned[b].linears[i]);
            const double e_ar = block_error(m, &fp[b], &learned[b], X, n, T), e_rtn = block_error(m, &fp[b], &rtn[b], X, n, T);
            printf("%s block %lld: output MSE autoround %.6g, rtn %.6g\n", c ? "q4_0" : "w3 g32", (long long)b, e_ar, e_rtn);
            ck_assert_double_lt(e_ar, e_rtn);
            sum_ar += e_ar, sum_rtn += e_rtn;
            for (int64_t i = 0; i < n; i++) ck_assert_int_eq(lmp_block_forward(&be, &m->arch, &fp[b], T, X + i * per, NULL, NULL), 0);
        }
        printf("%s: sum of block output MSEs autoround %.6g, rtn %.6g\n", c ? "q4_0" : "w3 g32", sum_ar, sum_rtn);
        lmp_blocks_free(learned, m->arch.n_layers);
        lmp_blocks_free(rtn, m->arch.n_layers);
    }
    free(X);
    lmp_windows_free(&w);
    lmp_model_free(m);
}
END_TEST

/* After smoothquant (the scales folded into the norms: the block's function unchanged), autoround
 * learns on the smoothed weights, and they end on its grid. */
START_TEST(after_smoothquant)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    static const char *const ar[] = {"bits=4", "sym=false", "granularity=group", "group_size=32", "steps=10", "batch=4", NULL};
    one_stage sq, a;
    make_stage(&reg, &sq, "smoothquant", NULL, NULL);
    make_stage(&reg, &a, "autoround", ar, NULL);
    lmp_stage stages[2] = {sq.stage, a.stage};
    lmp_variant v = {.name = "smoothquant+autoround", .stages = stages, .n_stages = 2};
    lmp_windows w = windows(8, 64, m->arch.vocab, 3);
    lmp_block *out;
    ck_assert_msg(lmp_compress(&ctx, &be, m, &v, &w, &out) == 0, "%s", lmp_last_error());
    for (int64_t b = 0; b < m->arch.n_layers; b++)
        for (int i = 0; i < out[b].n_linears; i++) check_on_grid(&out[b].linears[i]);
    lmp_blocks_free(out, m->arch.n_layers);
    free(sq.stage.params);
    free(a.stage.params);
    lmp_windows_free(&w);
    lmp_model_free(m);
}
END_TEST

START_TEST(what_it_cannot_learn_is_refused)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    lmp_block *out;
    static const char *const nl[] = {"format=iq4_nl", NULL}, *const imp[] = {"format=q4_0", "importance=uniform", NULL};
    ck_assert_int_ne(try_compress_stage(m, "autoround", nl, NULL, 1, &out), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "iq4_nl"));
    ck_assert_int_ne(try_compress_stage(m, "autoround", imp, NULL, 1, &out), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "importance"));
    ck_assert_int_ne(try_compress_stage(m, "autoround", w3g32, NULL, 0, &out), 0); /* no calibration */
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "calibration.text"));
    lmp_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("autoround");
    TCase *tc = tcase_create("autoround");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, service_fits_perturbed_weights);
    tcase_add_test(tc, zero_steps_is_rtn);
    tcase_add_test(tc, learned_weights_beat_rtn_on_the_grid);
    tcase_add_test(tc, after_smoothquant);
    tcase_add_test(tc, what_it_cannot_learn_is_refused);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
