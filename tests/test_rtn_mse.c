/* test_rtn_mse.c — the rtn_mse strategy (plugins/rtn_mse), and the plugin guide's example of
 * testing a strategy: the teststage.h fixture (a context, the registry, the CPU backend), a
 * one-stage variant from the plugin's defaults plus settings, lmp_compress on the bundled
 * stories260K, then checks against an independent computation.
 *
 * Checked: every row's squared error is at most rtn's on the same grid (ratio 1 is a
 * candidate) and some are strictly smaller; each row equals a brute-force search written here
 * with plugin.h's element formulas; with min_clip = 1 the result is rtn's, bit for bit; the
 * storage cost is rtn's. */
#include <check.h>
#include <math.h>

#include "base/error.h"
#include "model/model.h"
#include "teststage.h"
#include "testutil.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"

static lmp_block *compress(const lmp_model *m, const char *plugin, const char *const *settings)
{
    one_stage os;
    make_stage(&reg, &os, plugin, settings, NULL);
    lmp_windows none = {0};
    lmp_block *out = NULL;
    ck_assert_msg(lmp_compress(&ctx, &be, m, &os.v, &none, &out) == 0, "%s", lmp_last_error());
    free(os.stage.params);
    return out;
}

static double row_error(const float *w, const float *q, int64_t n)
{
    double e = 0;
    for (int64_t j = 0; j < n; j++) e += ((double)w[j] - q[j]) * ((double)w[j] - q[j]);
    return e;
}

/* One row on the 4-bit symmetric grid of the clip ratio in {1, 0.95, ..., 0.75} with the least
 * squared error (the first of equals), written from plugin.h's formulas. */
static void brute_force_row(const float *w, int64_t n, float *out)
{
    const lmp_wspec s = {.bits = 4, .sym = 1, .gran = LMP_GRAN_CHANNEL, .rounding = LMP_ROUND_HALF_EVEN};
    float amax = 0;
    for (int64_t j = 0; j < n; j++) amax = fmaxf(amax, fabsf(w[j]));
    double best = INFINITY;
    for (int k = 0; k <= 5; k++) {
        lmp_wspec c = s;
        c.clip = (float)(1.0 - k * 0.05);
        float scale, zero;
        lmp_wgrid_fit(&c, 0, 0, amax, &scale, &zero);
        double e = 0;
        for (int64_t j = 0; j < n; j++) {
            double d = (double)w[j] - lmp_wgrid_value(&c, lmp_wgrid_code(&c, w[j], scale, zero), scale, zero);
            e += d * d;
        }
        if (e < best) {
            best = e;
            for (int64_t j = 0; j < n; j++) out[j] = lmp_wgrid_value(&c, lmp_wgrid_code(&c, w[j], scale, zero), scale, zero);
        }
    }
}

START_TEST(never_worse_than_rtn_and_equal_to_brute_force)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(MODEL, &m), 0);
    lmp_block *mse = compress(m, "rtn_mse", NULL), *rtn = compress(m, "rtn", NULL);
    int64_t rows = 0, better = 0;
    for (int b = 0; b < m->arch.n_layers; b++)
        for (int i = 0; i < m->blocks[b].n_linears; i++) {
            const lmp_linear *w = &m->blocks[b].linears[i], *q = &mse[b].linears[i], *r = &rtn[b].linears[i];
            float *expect = malloc((size_t)w->in * sizeof(float));
            for (int64_t o = 0; o < w->out; o++, rows++) {
                const float *wr = w->w + o * w->in;
                double e_mse = row_error(wr, q->w + o * w->in, w->in), e_rtn = row_error(wr, r->w + o * w->in, w->in);
                ck_assert_msg(e_mse <= e_rtn, "%s row %lld: %g > rtn's %g", w->name, (long long)o, e_mse, e_rtn);
                better += e_mse < e_rtn;
                brute_force_row(wr, w->in, expect);
                ck_assert_msg(memcmp(expect, q->w + o * w->in, (size_t)w->in * sizeof(float)) == 0,
                              "%s row %lld differs from the brute-force search", w->name, (long long)o);
            }
            free(expect);
            ck_assert_double_eq(q->weight_bits, r->weight_bits); /* 4 + 16/in: the ratio is not stored */
        }
    printf("  rtn_mse: %lld of %lld rows below rtn's squared error, none above\n", (long long)better, (long long)rows);
    ck_assert_int_gt(better, rows / 10); /* the search does something on real weights */
    lmp_blocks_free(mse, m->arch.n_layers);
    lmp_blocks_free(rtn, m->arch.n_layers);
    lmp_model_free(m);
}
END_TEST

START_TEST(min_clip_one_is_rtn)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(MODEL, &m), 0);
    static const char *const only_one[] = {"min_clip=1", "sym=false", "granularity=group", "group_size=32", NULL};
    static const char *const rtn_same[] = {"sym=false", "granularity=group", "group_size=32", NULL};
    lmp_block *mse = compress(m, "rtn_mse", only_one), *rtn = compress(m, "rtn", rtn_same);
    for (int b = 0; b < m->arch.n_layers; b++)
        for (int i = 0; i < m->blocks[b].n_linears; i++) {
            const lmp_linear *q = &mse[b].linears[i], *r = &rtn[b].linears[i];
            ck_assert_msg(memcmp(q->w, r->w, (size_t)(q->out * q->in) * sizeof(float)) == 0, "%s", q->name);
            ck_assert_double_eq(q->weight_bits, r->weight_bits);
        }
    lmp_blocks_free(mse, m->arch.n_layers);
    lmp_blocks_free(rtn, m->arch.n_layers);
    lmp_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rtn_mse");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, never_worse_than_rtn_and_equal_to_brute_force);
    tcase_add_test(tc, min_clip_one_is_rtn);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
