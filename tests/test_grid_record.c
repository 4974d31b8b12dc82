/* test_grid_record.c — every weight-quantizing strategy records the grid it quantized onto
 * (host->set_weight_grid, lmp_linear.grid), and the codes an export writes are recovered from it
 * exactly (core/model/grid_codes.h).
 *
 * On stories260K through lmp_compress: rtn (int per channel, int asym in groups with bf16
 * scales, q4_0, q8_0), rtn_mse, gptq (act-order with dynamic groups: a g_idx; q4_1 with static
 * groups; f16 scales) and sparse24's SparseGPT with quantization.  For each targeted linear: a
 * grid is recorded with lmp_wspec_n_scales scales; every row's codes are recovered and dequantize
 * to the weights bit for bit; rounded scale types hold values of that type; for RTN the codes
 * equal those of the original weights coded on the recorded grid (written here from plugin.h's
 * formulas), so the recovered codes are the ones the strategy chose.  A weight moved by one ulp
 * is reported with the linear's name and position, and an edit that rescales W drops the grid. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "compress/block_edit.h"
#include "model/grid_codes.h"
#include "model/model.h"
#include "teststage.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
/* the linears whose width is a multiple of 32 (down_proj is 172 wide) */
#define NOT_DOWN "re:(q|k|v|o|gate|up)_proj"

static lmp_model *g_m;

static void open_model(void)
{
    setup();
    ck_assert_msg(lmp_model_load(MODEL, &g_m) == 0, "%s", lmp_last_error());
}

static void close_model(void)
{
    lmp_model_free(g_m);
    teardown();
}

/* One stage on the model under test (teststage.h's compress_stage). */
static lmp_block *compress(const char *plugin, const char *const *settings, const char *target, int calibrate)
{
    return compress_stage(g_m, plugin, settings, target, calibrate);
}

/* Every linear with a grid: the scales' count, every row recovered exactly; returns how many
 * linears had one.  scale_type: the type every scale must hold a value of. */
static int check_grids(const lmp_block *blocks, lmp_scale_type scale_type)
{
    int n = 0;
    for (int64_t b = 0; b < g_m->arch.n_layers; b++)
        for (int i = 0; i < blocks[b].n_linears; i++) {
            const lmp_linear *l = &blocks[b].linears[i];
            if (!l->grid) continue;
            n++;
            ck_assert_int_eq(l->grid->n_scales, lmp_wspec_n_scales(&l->grid->spec, l->out, l->in));
            ck_assert(l->grid->spec.sym ? l->grid->zeros == NULL : l->grid->zeros != NULL);
            for (int64_t k = 0; k < l->grid->n_scales; k++) {
                const float s = l->grid->scales[k];
                if (scale_type == LMP_SCALE_BF16) ck_assert_msg(lmp_bf16_round(s) == s, "%s: scale %g is not a bf16", l->name, s);
                if (scale_type == LMP_SCALE_F16) ck_assert_msg(lmp_fp16_round(s) == s, "%s: scale %g is not an f16", l->name, s);
            }
            int32_t *codes = malloc((size_t)l->in * sizeof *codes);
            for (int64_t r = 0; r < l->out; r++)
                ck_assert_msg(lmp_grid_codes_row(l, r, codes) == 0, "%s", lmp_last_error());
            free(codes);
        }
    return n;
}

static int64_t total_linears(void)
{
    return g_m->arch.n_layers * 7;
}

START_TEST(rtn_int_channel_codes_are_the_strategys)
{
    const char *const set[] = {"bits=4", "sym=false", "granularity=channel", NULL};
    lmp_block *blocks = compress("rtn", set, NULL, 0);
    ck_assert_int_eq(check_grids(blocks, LMP_SCALE_F32), total_linears());
    /* the original weights coded on the recorded grid give the recovered codes */
    lmp_block orig;
    ck_assert_int_eq(lmp_model_block_copy(g_m, 0, &orig), 0);
    for (int i = 0; i < orig.n_linears; i++) {
        const lmp_linear *l = &blocks[0].linears[i];
        int32_t *codes = malloc((size_t)l->in * sizeof *codes);
        for (int64_t r = 0; r < l->out; r++) {
            ck_assert_int_eq(lmp_grid_codes_row(l, r, codes), 0);
            const float scale = l->grid->scales[r], zero = l->grid->zeros[r];
            for (int64_t c = 0; c < l->in; c++) {
                const float q = lmp_wgrid_code(&l->grid->spec, orig.linears[i].w[r * l->in + c], scale, zero);
                ck_assert_int_eq(codes[c], (int32_t)q);
            }
        }
        free(codes);
    }
    lmp_block_free(&orig);
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}
END_TEST

START_TEST(rtn_group_bf16_scales)
{
    const char *const set[] = {"bits=4", "sym=false", "granularity=group", "group_size=32", "scale_dtype=bf16", NULL};
    lmp_block *blocks = compress("rtn", set, NULL, 0);
    ck_assert_int_eq(check_grids(blocks, LMP_SCALE_BF16), total_linears());
    ck_assert_int_eq(blocks[0].linears[0].grid->spec.scale_type, LMP_SCALE_BF16);
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}
END_TEST

START_TEST(rtn_gguf_formats)
{
    const char *const formats[] = {"format=q4_0", "format=q8_0", "format=q4_1"};
    for (int f = 0; f < 3; f++) {
        const char *const set[] = {formats[f], NULL};
        lmp_block *blocks = compress("rtn", set, NOT_DOWN, 0);
        ck_assert_int_eq(check_grids(blocks, LMP_SCALE_F32), g_m->arch.n_layers * 6);
        ck_assert_ptr_null(blocks[0].linears[lmp_block_find(&blocks[0], LMP_ROLE_DOWN)].grid);
        lmp_blocks_free(blocks, g_m->arch.n_layers);
    }
}
END_TEST

START_TEST(rtn_mse_records_its_best_grid)
{
    const char *const set[] = {"bits=3", "sym=true", "granularity=group", "group_size=32", NULL};
    lmp_block *blocks = compress("rtn_mse", set, NULL, 0);
    ck_assert_int_eq(check_grids(blocks, LMP_SCALE_F32), total_linears());
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}
END_TEST

START_TEST(gptq_act_order_dynamic_groups_give_g_idx)
{
    const char *const set[] = {"bits=4", "sym=false", "granularity=group", "group_size=32", "act_order=true",
                               "scale_dtype=f16", NULL};
    lmp_block *blocks = compress("gptq", set, NULL, 1);
    ck_assert_int_eq(check_grids(blocks, LMP_SCALE_F16), total_linears());
    const lmp_linear *l = &blocks[0].linears[0];
    ck_assert_ptr_nonnull(l->grid->g_idx);
    /* each group holds group_size columns (the last the rest) */
    int count[64] = {0};
    const int64_t ng = (l->in + 31) / 32;
    for (int64_t c = 0; c < l->in; c++) count[l->grid->g_idx[c]]++;
    for (int64_t g = 0; g < ng; g++) ck_assert_int_eq(count[g], g + 1 < ng ? 32 : l->in - 32 * (ng - 1));
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}
END_TEST

START_TEST(gptq_q4_1_static_groups)
{
    const char *const set[] = {"format=q4_1", "act_order=true", "static_groups=true", NULL};
    lmp_block *blocks = compress("gptq", set, NOT_DOWN, 1);
    ck_assert_int_eq(check_grids(blocks, LMP_SCALE_F32), g_m->arch.n_layers * 6);
    ck_assert_ptr_null(blocks[0].linears[0].grid->g_idx);
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}
END_TEST

START_TEST(sparsegpt_with_quantization)
{
    const char *const set[] = {"method=sparsegpt", "bits=4", "sym=true", "granularity=channel", NULL};
    lmp_block *blocks = compress("sparse24", set, NULL, 1);
    ck_assert_int_eq(check_grids(blocks, LMP_SCALE_F32), total_linears());
    ck_assert_ptr_nonnull(blocks[0].linears[0].mask);
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}
END_TEST

START_TEST(off_grid_weight_is_named)
{
    const char *const set[] = {"bits=4", NULL};
    lmp_block *blocks = compress("rtn", set, NULL, 0);
    lmp_linear *l = &blocks[1].linears[2];
    int32_t *codes = malloc((size_t)l->in * sizeof *codes);
    l->w[3 * l->in + 5] = nextafterf(l->w[3 * l->in + 5], INFINITY);
    ck_assert_int_ne(lmp_grid_codes_row(l, 3, codes), 0);
    char want[160];
    snprintf(want, sizeof want, "%s: weight [3, 5]", l->name);
    ck_assert_msg(strstr(lmp_last_error(), want), "%s", lmp_last_error());
    ck_assert_int_eq(lmp_grid_codes_row(l, 2, codes), 0); /* the other rows are fine */
    free(codes);
    /* rescaling the columns a norm feeds drops the grids of those linears */
    float *s = malloc((size_t)g_m->arch.dim * sizeof *s);
    for (int64_t j = 0; j < g_m->arch.dim; j++) s[j] = 2.0f;
    ck_assert_int_eq(lmp_fold_norm_scale(&blocks[0], 0, s), 0);
    for (int f = 0; f < blocks[0].norms[0].n_fed; f++) ck_assert_ptr_null(blocks[0].linears[blocks[0].norms[0].fed[f]].grid);
    ck_assert_ptr_nonnull(blocks[0].linears[lmp_block_find(&blocks[0], LMP_ROLE_O)].grid);
    free(s);
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}
END_TEST

START_TEST(set_weight_grid_checks_its_input)
{
    lmp_block b;
    ck_assert_int_eq(lmp_model_block_copy(g_m, 0, &b), 0);
    const lmp_linear *l = &b.linears[0];
    float *sc = calloc((size_t)l->out, sizeof *sc);
    lmp_wspec asym = {.bits = 4, .sym = 0, .gran = LMP_GRAN_CHANNEL};
    ck_assert_int_ne(lmp_set_weight_grid(&b, 0, &asym, sc, NULL, NULL), 0); /* asym without zeros */
    lmp_wspec q40 = lmp_wspec_for_format(LMP_WFORMAT_GGUF_Q4_0, 1.0f);
    q40.scale_type = LMP_SCALE_BF16; /* a GGUF format stores fp16 d itself */
    ck_assert_int_ne(lmp_set_weight_grid(&b, 0, &q40, sc, NULL, NULL), 0);
    int32_t *g_idx = calloc((size_t)l->in, sizeof *g_idx);
    lmp_wspec grp = {.bits = 4, .sym = 1, .gran = LMP_GRAN_GROUP, .group = 32};
    float *gsc = calloc((size_t)lmp_wspec_n_scales(&grp, l->out, l->in), sizeof *gsc);
    g_idx[7] = 2; /* 64 columns: groups 0 and 1 only */
    ck_assert_int_ne(lmp_set_weight_grid(&b, 0, &grp, gsc, NULL, g_idx), 0);
    ck_assert_msg(strstr(lmp_last_error(), "g_idx[7] = 2"), "%s", lmp_last_error());
    g_idx[7] = 1;
    ck_assert_int_eq(lmp_set_weight_grid(&b, 0, &grp, gsc, NULL, g_idx), 0);
    ck_assert_ptr_nonnull(b.linears[0].grid);
    ck_assert_int_ne(lmp_set_weight_grid(&b, 99, &grp, gsc, NULL, NULL), 0);
    free(sc);
    free(gsc);
    free(g_idx);
    lmp_block_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grid_record");
    TCase *tc = tcase_create("stories260K");
    tcase_add_checked_fixture(tc, open_model, close_model);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, rtn_int_channel_codes_are_the_strategys);
    tcase_add_test(tc, rtn_group_bf16_scales);
    tcase_add_test(tc, rtn_gguf_formats);
    tcase_add_test(tc, rtn_mse_records_its_best_grid);
    tcase_add_test(tc, gptq_act_order_dynamic_groups_give_g_idx);
    tcase_add_test(tc, gptq_q4_1_static_groups);
    tcase_add_test(tc, sparsegpt_with_quantization);
    tcase_add_test(tc, off_grid_weight_is_named);
    tcase_add_test(tc, set_weight_grid_checks_its_input);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
