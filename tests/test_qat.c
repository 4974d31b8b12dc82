/* test_qat.c — whole-model fine-tuning (the qat plugin through host->learn_model) on stories260K:
 *  - after SparseGPT 2:4, fine-tuning keeps every pruned weight at exactly 0 and lowers the KL to
 *    the unmodified model on held-out windows;
 *  - after RTN W4 with static W8 activations, every weight stays on the grid RTN recorded, the
 *    activation quantization stays as set, and 0 steps change nothing;
 *  - a whole-model stage that is not the variant's last, or has no calibration, is refused before
 *    any block. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "teststage.h"
#include "testutil.h"

#define STORIES LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"

/* A variant of two stages: `first` (settings) then qat (settings). */
static int compress_two(const lmp_model *m, const char *first, const char *const *set1, const char *const *set2,
                        lmp_block **out)
{
    one_stage a, q;
    make_stage(&reg, &a, first, set1, NULL);
    make_stage(&reg, &q, "qat", set2, NULL);
    lmp_stage stages[2] = {a.stage, q.stage};
    lmp_variant v = {.name = "then-qat", .stages = stages, .n_stages = 2};
    lmp_windows w = windows(8, 64, m->arch.vocab, 3); /* the windows compress_stage calibrates on */
    const int st = lmp_compress(&ctx, &be, m, &v, &w, out);
    free(a.stage.params);
    free(q.stage.params);
    lmp_windows_free(&w);
    return st;
}

/* Mean KL of the model with `blocks` to the unmodified model over 4 held-out windows of 64. */
static double held_out_kl(lmp_model *m, const lmp_block *blocks)
{
    const int64_t T = 64, V = m->arch.vocab;
    lmp_windows w = windows(4, (int)T, V, 101);
    float *p = malloc((size_t)(T * V) * 4), *q = malloc((size_t)(T * V) * 4);
    const lmp_block *fp = lmp_model_blocks(m);
    double sum = 0;
    for (int64_t i = 0; i < w.n; i++) {
        ck_assert_int_eq(lmp_forward(&be, m, fp, w.tokens + i * T, T, 1, p), 0);
        ck_assert_int_eq(lmp_forward(&be, m, blocks, w.tokens + i * T, T, 1, q), 0);
        for (int64_t k = 0; k < T * V; k++) sum += exp((double)p[k]) * ((double)p[k] - q[k]);
    }
    const double n = (double)(w.n * T);
    free(p);
    free(q);
    lmp_windows_free(&w);
    return sum / n;
}

START_TEST(sparse_fine_tuning_keeps_the_mask_and_recovers)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    static const char *const sg[] = {"method=sparsegpt", NULL};
    static const char *const ft[] = {"steps=40", "lr=2e-4", "seq_len=32", "batch=8", NULL}; /* 2 pieces a window */
    lmp_block *pruned = compress_stage(m, "sparse24", sg, NULL, 1), *tuned;
    ck_assert_msg(compress_two(m, "sparse24", sg, ft, &tuned) == 0, "%s", lmp_last_error());
    for (int64_t b = 0; b < m->arch.n_layers; b++)
        for (int i = 0; i < tuned[b].n_linears; i++) {
            const lmp_linear *l = &tuned[b].linears[i], *o = &pruned[b].linears[i];
            ck_assert_ptr_nonnull(l->mask);
            ck_assert_int_eq(memcmp(l->mask, o->mask, (size_t)(l->out * l->in)), 0);
            int moved = 0;
            for (int64_t e = 0; e < l->out * l->in; e++) {
                if (!l->mask[e]) ck_assert_msg(l->w[e] == 0.0f, "%s[%lld] pruned but %g", l->name, (long long)e, l->w[e]);
                moved |= l->w[e] != o->w[e];
            }
            ck_assert_msg(moved, "%s: no weight learned", l->name);
        }
    const double kl_pruned = held_out_kl(m, pruned), kl_tuned = held_out_kl(m, tuned);
    printf("SparseGPT 2:4 on stories260K: held-out KL %.5f, fine-tuned 40 steps %.5f\n", kl_pruned, kl_tuned);
    ck_assert_double_lt(kl_tuned, 0.9 * kl_pruned);
    lmp_blocks_free(pruned, m->arch.n_layers);
    lmp_blocks_free(tuned, m->arch.n_layers);
    lmp_model_free(m);
}
END_TEST

START_TEST(quantized_weights_stay_on_their_grid)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    static const char *const w4a8[] = {"bits=4", "sym=false", "granularity=group", "group_size=32", "act=static_tensor", NULL};
    static const char *const none[] = {"steps=0", NULL}, *const some[] = {"steps=20", "lr=1e-3", NULL};
    lmp_block *rtn = compress_stage(m, "rtn", w4a8, NULL, 1), *same, *tuned;
    ck_assert_msg(compress_two(m, "rtn", w4a8, none, &same) == 0, "%s", lmp_last_error());
    ck_assert_msg(compress_two(m, "rtn", w4a8, some, &tuned) == 0, "%s", lmp_last_error());
    int64_t changed = 0, total = 0;
    for (int64_t b = 0; b < m->arch.n_layers; b++)
        for (int i = 0; i < rtn[b].n_linears; i++) {
            const lmp_linear *r = &rtn[b].linears[i], *s = &same[b].linears[i], *t = &tuned[b].linears[i];
            ck_assert_int_eq(memcmp(r->w, s->w, (size_t)(r->out * r->in) * 4), 0);
            ck_assert_int_eq(memcmp(&r->act, &t->act, sizeof r->act), 0);
            const lmp_wgrid *g = t->grid;
            ck_assert_ptr_nonnull(g);
            for (int64_t o = 0; o < t->out; o++)
                for (int64_t j = 0; j < t->in; j++) {
                    const int64_t k = lmp_wgrid_slice(g, t->in, o, j), e = o * t->in + j;
                    const float back = lmp_wgrid_value(&g->spec, lmp_wgrid_code(&g->spec, t->w[e], g->scales[k], g->zeros[k]),
                                                       g->scales[k], g->zeros[k]);
                    ck_assert_msg(back == t->w[e], "%s[%lld] is off its grid", t->name, (long long)e);
                    changed += t->w[e] != r->w[e];
                    total++;
                }
        }
    printf("QAT 20 steps after RTN W4 g32 + static A8: %lld of %lld weights moved to another level\n", (long long)changed,
           (long long)total);
    ck_assert_int_gt(changed, 0);
    lmp_blocks_free(rtn, m->arch.n_layers);
    lmp_blocks_free(same, m->arch.n_layers);
    lmp_blocks_free(tuned, m->arch.n_layers);
    lmp_model_free(m);
}
END_TEST

START_TEST(misplaced_or_uncalibrated_is_refused)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    one_stage q, r;
    static const char *const w8[] = {"bits=8", NULL};
    make_stage(&reg, &q, "qat", NULL, NULL);
    make_stage(&reg, &r, "rtn", w8, NULL);
    lmp_stage stages[2] = {q.stage, r.stage};
    lmp_variant v = {.name = "qat-first", .stages = stages, .n_stages = 2};
    lmp_windows w = windows(4, 64, m->arch.vocab, 3);
    lmp_block *out;
    ck_assert_int_ne(lmp_compress(&ctx, &be, m, &v, &w, &out), 0);
    ck_assert_msg(strstr(lmp_last_error(), "must be the variant's last stage"), "%s", lmp_last_error());
    ck_assert_int_ne(try_compress_stage(m, "qat", NULL, NULL, 0, &out), 0);
    ck_assert_msg(strstr(lmp_last_error(), "calibration.text"), "%s", lmp_last_error());
    free(q.stage.params);
    free(r.stage.params);
    lmp_windows_free(&w);
    lmp_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("qat");
    TCase *tc = tcase_create("qat");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, sparse_fine_tuning_keeps_the_mask_and_recovers);
    tcase_add_test(tc, quantized_weights_stay_on_their_grid);
    tcase_add_test(tc, misplaced_or_uncalibrated_is_refused);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
