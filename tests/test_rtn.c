/* test_rtn.c — the RTN strategy through the real pipeline on stories260K blocks:
 * weights equal the reference grid kernel's output, storage bits follow the formula, static
 * activation scales come from the calibration abs-max, targets/ignore/overrides pick the right
 * linears, and the core's block editing (fold_norm_scale) leaves the function unchanged. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "compress/block_edit.h"
#include "config/config.h"
#include "cpu_ref.h"
#include "model/forward.h"
#include "base/ctx.h"
#include "plugin/host_services.h"
#include "compress/pipeline.h"

#include "testutil.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"

static lmp_ctx ctx; /* the fixture's run (check's fixtures take no arguments) */
static lmp_registry reg;
static lmp_backend be;
static lmp_model *model;
static const lmp_plugin *rtn;

static void setup(void)
{
    lmp_ctx_init(&ctx);
    lmp_host_set_verbosity(&ctx, LMP_LOG_ERROR);
    ck_assert_int_eq(lmp_registry_init(&reg, &ctx, NULL, 0), 0);
    ck_assert_int_eq(lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, "rtn", &rtn), 0);
    ck_assert_int_eq(lmp_backend_open(&ctx, &reg, "cpu", NULL, &be), 0);
    lmp_host_set_backend(&ctx, &be);
    ck_assert_int_eq(lmp_model_load(MODEL, &model), 0);
}

static void teardown(void)
{
    lmp_model_free(model);
    lmp_host_set_backend(&ctx, NULL);
    lmp_backend_close(&be);
    lmp_registry_free(&reg);
    lmp_ctx_clear(&ctx);
}

/* rtn's parameter values: its defaults with the given overrides ("name", value) pairs. */
static lmp_value *rtn_params(int n, const char *const *names, const double *nums)
{
    lmp_value *v;
    ck_assert_int_eq(lmp_params_defaults(rtn->desc, &v), 0);
    for (int i = 0; i < n; i++) {
        uint32_t k = 0;
        while (k < rtn->desc->n_params && strcmp(rtn->desc->params[k].name, names[i]) != 0) k++;
        ck_assert_uint_lt(k, rtn->desc->n_params);
        v[k].num = nums[i];
        if (rtn->desc->params[k].type == LMP_PARAM_ENUM) v[k].str = rtn->desc->params[k].choices[(int)nums[i]];
    }
    return v;
}

/* A one-stage variant around `params`, targeting everything. */
static lmp_variant one_stage(lmp_stage *stage, lmp_value *params)
{
    memset(stage, 0, sizeof *stage);
    stage->plugin = rtn;
    stage->params = params;
    return (lmp_variant){.name = "test", .stages = stage, .n_stages = 1};
}

static lmp_windows calib_windows(int n, int T)
{
    lmp_windows w = {.n = n, .T = T, .tokens = malloc((size_t)(n * T) * sizeof(int32_t))};
    for (int i = 0; i < n * T; i++) w.tokens[i] = i == 0 ? 1 : (int32_t)((i * 7919) % 509 + 3);
    return w;
}

/* RTN by the reference kernels: the grid of W, then W on it. */
static void ref_quantize(const lmp_wspec *spec, int64_t rows, int64_t cols, float *W)
{
    int64_t ns = lmp_wspec_n_scales(spec, rows, cols);
    float *sc = malloc((size_t)ns * sizeof *sc), *zp = malloc((size_t)ns * sizeof *zp);
    ck_assert_int_eq(lmp_ref_choose_weight_grid(spec, rows, cols, W, sc, zp), 0);
    ck_assert_int_eq(lmp_ref_apply_weight_grid(spec, rows, cols, W, sc, zp, NULL), 0);
    free(sc);
    free(zp);
}

START_TEST(weights_follow_the_reference_grid)
{
    const char *names[] = {"bits", "granularity", "group_size", "sym"};
    const double nums[] = {3, 2 /* group */, 48, 0};
    lmp_value *p = rtn_params(4, names, nums);
    lmp_stage stage;
    lmp_variant v = one_stage(&stage, p);
    lmp_windows none = {0};
    lmp_block *out;
    ck_assert_int_eq(lmp_compress(&ctx, &be, model, &v, &none, &out), 0);
    lmp_wspec spec = {.bits = 3, .sym = 0, .gran = LMP_GRAN_GROUP, .group = 48, .rounding = LMP_ROUND_HALF_EVEN};
    for (int b = 0; b < model->arch.n_layers; b++)
        for (int i = 0; i < model->blocks[b].n_linears; i++) {
            const lmp_linear *src = &model->blocks[b].linears[i], *q = &out[b].linears[i];
            int64_t n = src->out * src->in;
            float *expect = malloc((size_t)n * sizeof *expect);
            memcpy(expect, src->w, (size_t)n * sizeof *expect);
            ref_quantize(&spec, src->out, src->in, expect);
            ck_assert_int_eq(memcmp(expect, q->w, (size_t)n * sizeof *expect), 0);
            /* Ragged groups (64 = 48 + 16, 172 = 3*48 + 28): two groups of scale+zero per row. */
            int64_t groups = (src->in + 47) / 48;
            double bits = 3.0 + (double)(groups * (16 + 3)) / (double)src->in;
            ck_assert_double_eq_tol(q->weight_bits, bits, 1e-12);
            ck_assert_int_eq(q->act.mode, LMP_ACT_NONE);
            free(expect);
        }
    lmp_blocks_free(out, model->arch.n_layers);
    free(p);
}
END_TEST

/* clip reaches the grid: rtn with clip = 0.5 gives the reference's clipped grid on every linear,
 * which is not the plain one, and the storage cost does not change (same slices). */
START_TEST(clip_reaches_the_grid)
{
    const char *names[] = {"clip", "granularity"};
    const double nums[] = {0.5, 1 /* channel */};
    lmp_value *p = rtn_params(2, names, nums);
    lmp_stage stage;
    lmp_variant v = one_stage(&stage, p);
    lmp_windows none = {0};
    lmp_block *out;
    ck_assert_int_eq(lmp_compress(&ctx, &be, model, &v, &none, &out), 0);
    lmp_wspec clipped = {.bits = 4, .sym = 1, .gran = LMP_GRAN_CHANNEL, .rounding = LMP_ROUND_HALF_EVEN, .clip = 0.5f};
    lmp_wspec plain = clipped;
    plain.clip = 1.0f;
    for (int b = 0; b < model->arch.n_layers; b++)
        for (int i = 0; i < model->blocks[b].n_linears; i++) {
            const lmp_linear *src = &model->blocks[b].linears[i], *q = &out[b].linears[i];
            int64_t n = src->out * src->in;
            float *expect = malloc((size_t)n * sizeof *expect), *unclipped = malloc((size_t)n * sizeof *unclipped);
            memcpy(expect, src->w, (size_t)n * sizeof *expect);
            memcpy(unclipped, src->w, (size_t)n * sizeof *expect);
            ref_quantize(&clipped, src->out, src->in, expect);
            ref_quantize(&plain, src->out, src->in, unclipped);
            ck_assert_int_eq(memcmp(expect, q->w, (size_t)n * sizeof *expect), 0);
            ck_assert_int_ne(memcmp(unclipped, q->w, (size_t)n * sizeof *expect), 0);
            /* the row's largest weight saturates at clip * abs-max (sym: code qmax or -qmax-1) */
            float amax = 0.0f, qmax = 0.0f;
            for (int64_t j = 0; j < src->in; j++) amax = fmaxf(amax, fabsf(src->w[j]));
            for (int64_t j = 0; j < src->in; j++) qmax = fmaxf(qmax, fabsf(q->w[j]));
            ck_assert_msg(qmax <= 0.5f * amax * 8.0f / 7.0f * (1.0f + 1e-6f) && qmax >= 0.5f * amax * (1.0f - 1e-6f),
                          "%s: max |w'| %g for abs-max %g with clip 0.5", src->name, (double)qmax, (double)amax);
            ck_assert_double_eq_tol(q->weight_bits, 4.0 + 16.0 / (double)src->in, 1e-12);
            free(expect);
            free(unclipped);
        }
    lmp_blocks_free(out, model->arch.n_layers);
    free(p);
}
END_TEST

/* One grid schema: rtn, gptq and sparse24 offer the same grid parameters (plugins/common/wgrid.h)
 * with the same defaults, ranges and choices; only bits differs by purpose (quantizers 4,
 * sparse24 16 = prune only; rtn stops at 8, the solvers take 16 as "no grid"). */
START_TEST(one_grid_schema)
{
    const char *const names[] = {"rtn", "gptq", "sparse24"};
    const lmp_plugin_desc *d[3];
    for (int k = 0; k < 3; k++) {
        const lmp_plugin *pl;
        ck_assert_msg(lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, names[k], &pl) == 0, "%s: %s", names[k],
                      lmp_last_error());
        d[k] = pl->desc;
    }
    const char *const grid[] = {"bits", "sym", "granularity", "group_size", "rounding", "clip"};
    const lmp_param_spec *ps[3][6];
    for (int k = 0; k < 3; k++)
        for (int g = 0; g < 6; g++) {
            ps[k][g] = NULL;
            for (uint32_t i = 0; i < d[k]->n_params; i++)
                if (strcmp(d[k]->params[i].name, grid[g]) == 0) ps[k][g] = &d[k]->params[i];
            ck_assert_msg(ps[k][g] != NULL, "%s has no parameter %s", names[k], grid[g]);
        }
    for (int g = 1; g < 6; g++) /* everything but bits: identical in all three */
        for (int k = 1; k < 3; k++) {
            const lmp_param_spec *a = ps[0][g], *b = ps[k][g];
            ck_assert_msg(a->type == b->type && a->def_num == b->def_num && a->min == b->min && a->max == b->max &&
                              a->flags == b->flags && strcmp(a->help, b->help) == 0,
                          "%s.%s differs from rtn's", names[k], grid[g]);
            for (int c = 0; a->choices && (a->choices[c] || b->choices[c]); c++)
                ck_assert_msg(a->choices[c] && b->choices[c] && strcmp(a->choices[c], b->choices[c]) == 0,
                              "%s.%s: choice %d differs from rtn's", names[k], grid[g], c);
        }
    /* the one set of defaults: symmetric, per channel, groups of 128, half to even, no clip */
    ck_assert(ps[0][1]->type == LMP_PARAM_BOOL && ps[0][1]->def_num == 1.0);
    ck_assert_str_eq(ps[0][2]->choices[(int)ps[0][2]->def_num], "channel");
    ck_assert_str_eq(ps[0][2]->choices[0], "tensor");
    ck_assert(ps[0][3]->def_num == 128.0);
    ck_assert_str_eq(ps[0][4]->choices[(int)ps[0][4]->def_num], "half_even");
    ck_assert(ps[0][5]->type == LMP_PARAM_FLOAT && ps[0][5]->def_num == 1.0 && ps[0][5]->max == 1.0);
    /* bits by purpose */
    ck_assert(ps[0][0]->def_num == 4.0 && ps[0][0]->max == 8.0);
    ck_assert(ps[1][0]->def_num == 4.0 && ps[1][0]->max == 16.0);
    ck_assert(ps[2][0]->def_num == 16.0 && ps[2][0]->max == 16.0);
}
END_TEST

/* gptq and sparse24 quantize row by row (the OBS solver): granularity = "tensor" is refused with
 * a message that says so, where rtn takes it. */
START_TEST(solvers_refuse_tensor_granularity)
{
    const char *const names[] = {"gptq", "sparse24"};
    for (int k = 0; k < 2; k++) {
        const lmp_plugin *pl;
        ck_assert_int_eq(lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, names[k], &pl), 0);
        lmp_value *v;
        ck_assert_int_eq(lmp_params_defaults(pl->desc, &v), 0);
        for (uint32_t i = 0; i < pl->desc->n_params; i++)
            if (strcmp(pl->desc->params[i].name, "granularity") == 0) {
                v[i].num = 0;
                v[i].str = "tensor";
            }
        const lmp_strategy_i *vt = pl->desc->vtable;
        void *self = NULL;
        lmp_clear_error();
        ck_assert_int_eq(vt->create(lmp_host_services(), &ctx, v, &self), LMP_EINVAL);
        ck_assert_msg(strstr(lmp_last_error(), "granularity = \"tensor\"") && strstr(lmp_last_error(), names[k]),
                      "%s: %s", names[k], lmp_last_error());
        free(v);
    }
}
END_TEST

START_TEST(static_activation_scale_from_calibration)
{
    const char *names[] = {"act", "weights", "act_bits"};
    const double nums[] = {1 /* static_tensor */, 0, 6};
    lmp_value *p = rtn_params(3, names, nums);
    lmp_stage stage;
    lmp_variant v = one_stage(&stage, p);
    lmp_windows calib = calib_windows(2, 32);
    lmp_block *out;
    ck_assert_int_eq(lmp_compress(&ctx, &be, model, &v, &calib, &out), 0);
    /* Block 0's q/k/v input is rmsnorm(embeddings): recompute its abs-max independently. */
    const int64_t d = model->arch.dim, T = calib.T;
    float amax = 0;
    float *x = malloc((size_t)(T * d) * sizeof *x), *xn = malloc((size_t)(T * d) * sizeof *xn);
    for (int w = 0; w < calib.n; w++) {
        lmp_embed(model, calib.tokens + w * T, T, x);
        ck_assert_int_eq(lmp_ref_rmsnorm(T, d, x, model->blocks[0].norms[0].w, 1e-5f, xn), 0);
        for (int64_t i = 0; i < T * d; i++) amax = fmaxf(amax, fabsf(xn[i]));
    }
    for (int r = LMP_ROLE_Q; r <= LMP_ROLE_V; r++) {
        const lmp_linear *l = &out[0].linears[r];
        ck_assert_int_eq(l->act.mode, LMP_ACT_STATIC_TENSOR);
        ck_assert_int_eq(l->act.bits, 6);
        ck_assert_float_eq_tol(l->act.scale, amax / 31.0f, 1e-6f * amax);
        ck_assert_double_eq(l->weight_bits, 32.0); /* weights = false */
        ck_assert_int_eq(memcmp(l->w, model->blocks[0].linears[r].w, (size_t)(l->out * l->in) * sizeof(float)), 0);
    }
    for (int b = 0; b < model->arch.n_layers; b++)
        for (int r = 0; r < out[b].n_linears; r++) ck_assert_float_gt(out[b].linears[r].act.scale, 0.0f);
    lmp_blocks_free(out, model->arch.n_layers);
    lmp_windows_free(&calib);
    free(x);
    free(xn);
    free(p);
}
END_TEST

START_TEST(targets_ignore_overrides)
{
    const char *names[] = {"bits"};
    const double four[] = {4}, eight[] = {8};
    lmp_value *p = rtn_params(1, names, four), *p8 = rtn_params(1, names, eight);
    const char *targets[] = {"re:\\.(self_attn|mlp)\\."}, *ignore[] = {"model.layers.1.*"};
    lmp_override ov[] = {{.match = "down_proj", .params = p8}, {.match = "re:layers\\.3\\..*gate", .skip = 1}};
    lmp_stage stage;
    lmp_variant v = one_stage(&stage, p);
    stage.targets = targets;
    stage.n_targets = 1;
    stage.ignore = ignore;
    stage.n_ignore = 1;
    stage.overrides = ov;
    stage.n_overrides = 2;
    ck_assert_ptr_eq(lmp_stage_params_for(&stage, "model.layers.0.self_attn.q_proj"), p);
    ck_assert_ptr_null(lmp_stage_params_for(&stage, "model.layers.1.self_attn.q_proj"));
    ck_assert_ptr_eq(lmp_stage_params_for(&stage, "model.layers.2.mlp.down_proj"), p8);
    ck_assert_ptr_null(lmp_stage_params_for(&stage, "model.layers.3.mlp.gate_proj"));
    ck_assert_ptr_null(lmp_stage_params_for(&stage, "lm_head"));
    lmp_windows none = {0};
    lmp_block *out;
    ck_assert_int_eq(lmp_compress(&ctx, &be, model, &v, &none, &out), 0);
    ck_assert_double_eq(out[1].linears[LMP_ROLE_Q].weight_bits, 32.0);
    ck_assert_double_eq(out[3].linears[LMP_ROLE_GATE].weight_bits, 32.0);
    ck_assert_double_eq_tol(out[0].linears[LMP_ROLE_Q].weight_bits, 4.0 + 16.0 / 64.0, 1e-12);
    ck_assert_double_eq_tol(out[2].linears[LMP_ROLE_DOWN].weight_bits, 8.0 + 16.0 / 172.0, 1e-12);
    lmp_blocks_free(out, model->arch.n_layers);
    free(p);
    free(p8);
}
END_TEST

START_TEST(fold_norm_scale_keeps_the_function)
{
    const int64_t T = 16, d = model->arch.dim;
    int32_t tok[16];
    for (int i = 0; i < T; i++) tok[i] = (int32_t)(1 + i * 31 % 500);
    float *x0 = malloc((size_t)(T * d) * sizeof *x0), *x1 = malloc((size_t)(T * d) * sizeof *x1);
    float s[64];
    for (int j = 0; j < d; j++) s[j] = 0.25f + (float)((j * 37) % 17) / 4.0f;
    for (int b = 0; b < model->arch.n_layers; b++) {
        lmp_block blk;
        ck_assert_int_eq(lmp_block_clone(&model->blocks[b], &blk), 0);
        ck_assert_int_eq(lmp_host_services()->fold_norm_scale(&ctx, &blk, 0, s), 0);
        ck_assert_int_eq(lmp_fold_norm_scale(&blk, 1, s), 0);
        lmp_embed(model, tok, T, x0);
        memcpy(x1, x0, (size_t)(T * d) * sizeof *x0);
        ck_assert_int_eq(lmp_block_forward(&be, &model->arch, &model->blocks[b], T, x0, NULL, NULL), 0);
        ck_assert_int_eq(lmp_block_forward(&be, &model->arch, &blk, T, x1, NULL, NULL), 0);
        double num = 0, den = 0;
        for (int64_t i = 0; i < T * d; i++) {
            num += (double)(x0[i] - x1[i]) * (x0[i] - x1[i]);
            den += (double)x0[i] * x0[i];
        }
        ck_assert_msg(sqrt(num / den) < 1e-5, "block %d: relative change %g", b, sqrt(num / den));
        float bad[64];
        memcpy(bad, s, sizeof bad);
        bad[5] = 0.0f;
        ck_assert_int_eq(lmp_fold_norm_scale(&blk, 0, bad), LMP_EINVAL);
        lmp_block_free(&blk);
    }
    free(x0);
    free(x1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rtn");
    TCase *tc = tcase_create("rtn");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, weights_follow_the_reference_grid);
    tcase_add_test(tc, clip_reaches_the_grid);
    tcase_add_test(tc, one_grid_schema);
    tcase_add_test(tc, solvers_refuse_tensor_granularity);
    tcase_add_test(tc, static_activation_scale_from_calibration);
    tcase_add_test(tc, targets_ignore_overrides);
    tcase_add_test(tc, fold_norm_scale_keeps_the_function);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
