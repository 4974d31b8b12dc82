/* test_fpgrid.c — the floating-point grids (plugin_fpquants.h: FP8 E4M3 and E5M2 per tensor,
 * channel or group; NVFP4; MXFP4; MXFP8).
 *
 * Against compressed-tensors itself: tools/ref/ct_fpgrid_check.py runs its calculate_qparams
 * (generate_gparam for NVFP4) and fake_quantize on the same matrices, and the CPU backend's
 * choose_weight_grid + apply_weight_grid must give its scales and its dequantized weights bit for
 * bit (E5M2: torch's float8_e5m2 cast, compressed-tensors having no E5M2 scheme).  That needs
 * torch and compressed-tensors: the interpreter LMP_CT_PYTHON names; without it that case prints
 * SKIPPED.  Always: every E4M3 / E5M2 / E2M1 bit pattern decodes and encodes back to itself, the
 * E2M1 ties go as compressed-tensors' cast_to_fp4 thresholds say, the MX exponent of hand-worked
 * abs-maxes, and the pipeline (rtn, gptq, rtn_mse, autoround on stories260K) records each grid with
 * every weight on it. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "compress/pipeline.h"
#include "model/model.h"
#include "teststage.h"
#include "testutil.h"
#include "../plugins/common/wgrid.h"

#define ROWS 8
#define COLS 256

START_TEST(bit_patterns_round_trip)
{
    const lmp_minifloat *types[] = {&LMP_MF_E4M3, &LMP_MF_E5M2, &LMP_MF_E2M1};
    for (int t = 0; t < 3; t++) {
        const lmp_minifloat *f = types[t];
        const uint32_t n = 1u << (f->sign_bit + 1);
        for (uint32_t b = 0; b < n; b++) {
            const float v = lmp_minifloat_decode(f, b);
            if (!isfinite(v)) continue; /* E4M3's NaN, E5M2's inf and NaN */
            ck_assert_msg(fabsf(v) <= f->max, "type %d pattern %u: %g beyond max", t, b, v);
            ck_assert_msg(lmp_minifloat_encode(f, v) == b, "type %d pattern %u (%g) encodes to %u", t, b, v,
                          lmp_minifloat_encode(f, v));
        }
    }
    ck_assert(lmp_minifloat_decode(&LMP_MF_E4M3, 0x7E) == 448.0f);
    ck_assert(isnan(lmp_minifloat_decode(&LMP_MF_E4M3, 0x7F)));
    ck_assert(lmp_minifloat_decode(&LMP_MF_E4M3, 0x01) == 0x1p-9f);
    ck_assert(lmp_minifloat_decode(&LMP_MF_E5M2, 0x7B) == 57344.0f);
    ck_assert(lmp_minifloat_decode(&LMP_MF_E2M1, 0x7) == 6.0f && lmp_minifloat_decode(&LMP_MF_E2M1, 0xF) == -6.0f);
    /* compressed-tensors' cast_to_fp4: |x| <= 0.25 -> 0, < 0.75 -> 0.5, <= 1.25 -> 1, < 1.75 -> 1.5,
     * <= 2.5 -> 2, < 3.5 -> 3, <= 5 -> 4, else 6: ties to the even mantissa */
    static const float x[] = {0.25f, 0.26f, 0.75f, 1.25f, 1.26f, 1.75f, 2.5f, 2.51f, 3.5f, 5.0f, 5.01f, -0.75f, -0.1f};
    static const float want[] = {0.0f, 0.5f, 1.0f, 1.0f, 1.5f, 2.0f, 2.0f, 3.0f, 4.0f, 4.0f, 6.0f, -1.0f, -0.0f};
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) {
        const float r = lmp_minifloat_round(&LMP_MF_E2M1, x[i]);
        ck_assert_msg(r == want[i] && signbit(r) == signbit(want[i]), "e2m1(%g) = %g, want %g", x[i], r, want[i]);
    }
    /* E4M3 ties: 17 lies between 16 and 18 (step 2 in [16, 32)), mantissa 0 is even */
    ck_assert(lmp_minifloat_round(&LMP_MF_E4M3, 17.0f) == 16.0f);
    ck_assert(lmp_minifloat_round(&LMP_MF_E4M3, 19.0f) == 20.0f);
    ck_assert(lmp_minifloat_round(&LMP_MF_E4M3, 1000.0f) == 448.0f); /* clamped first */
    /* round_to_power_2 then floor(log2) - offset + 127: 1.75 rounds up to 2, 1.74 stays at 1 */
    ck_assert_int_eq(lmp_mx_exponent(1.75f, 2), 127 + 1 - 2);
    ck_assert_int_eq(lmp_mx_exponent(1.74f, 2), 127 + 0 - 2);
    ck_assert_int_eq(lmp_mx_exponent(6.0f, 8), 127 + 2 - 8); /* 6 = 1.5 * 4: stays at 4 */
    ck_assert_int_eq(lmp_mx_exponent(0.0f, 2), 0);
    ck_assert(lmp_nvfp4_global_scale_of(2688.0f) == 1.0f);
}
END_TEST

typedef struct fp_case {
    const char *fmt, *gran;
    int group;
    const char *sdt;
    lmp_wformat f;
} fp_case;

static const fp_case CASES[] = {
    {"fp8_e4m3", "tensor", 1, "f32", LMP_WFORMAT_FP8_E4M3},   {"fp8_e4m3", "channel", 1, "f32", LMP_WFORMAT_FP8_E4M3},
    {"fp8_e4m3", "channel", 1, "bf16", LMP_WFORMAT_FP8_E4M3}, {"fp8_e4m3", "group", 128, "f16", LMP_WFORMAT_FP8_E4M3},
    {"fp8_e5m2", "channel", 1, "f32", LMP_WFORMAT_FP8_E5M2},  {"fp8_e5m2", "tensor", 1, "bf16", LMP_WFORMAT_FP8_E5M2},
    {"nvfp4", "group", 16, "f32", LMP_WFORMAT_NVFP4},         {"mxfp4", "group", 32, "f32", LMP_WFORMAT_MXFP4},
    {"mxfp8", "group", 32, "f32", LMP_WFORMAT_MXFP8},
    /* ABI 6.2: tiles of group x group (compressed-tensors' strategy "block"): FP8_BLOCK's 128 x 128
     * (one tile row of 8, two tiles across), and 3 x 3 / 5 x 5 tiles whose last row and column
     * of tiles are partial (compressed-tensors pads them with zeros) */
    {"fp8_e4m3", "block", 128, "bf16", LMP_WFORMAT_FP8_E4M3}, {"fp8_e4m3", "block", 3, "f32", LMP_WFORMAT_FP8_E4M3},
    {"fp8_e4m3", "block", 5, "f16", LMP_WFORMAT_FP8_E4M3},    {"fp8_e5m2", "block", 3, "bf16", LMP_WFORMAT_FP8_E5M2},
};
#define N_CASES (int)(sizeof CASES / sizeof *CASES)

static lmp_wspec case_spec(const fp_case *c, const float *w)
{
    lmp_wspec s = lmp_wspec_for_format(c->f, 1.0f);
    if (c->f == LMP_WFORMAT_FP8_E4M3 || c->f == LMP_WFORMAT_FP8_E5M2) {
        s.gran = !strcmp(c->gran, "tensor")    ? LMP_GRAN_TENSOR
                 : !strcmp(c->gran, "channel") ? LMP_GRAN_CHANNEL
                 : !strcmp(c->gran, "block")   ? LMP_GRAN_BLOCK
                                               : LMP_GRAN_GROUP;
        s.group = c->group;
        s.scale_type = !strcmp(c->sdt, "bf16") ? LMP_SCALE_BF16 : !strcmp(c->sdt, "f16") ? LMP_SCALE_F16 : LMP_SCALE_F32;
    }
    if (c->f == LMP_WFORMAT_NVFP4) s.global_scale = lmp_nvfp4_global_scale(w, ROWS * COLS);
    return s;
}

START_TEST(equals_compressed_tensors)
{
    const char *test = "equals_compressed_tensors";
    const char *py = getenv("LMP_CT_PYTHON");
    if (!py || !*py) {
        lmp_test_skip("SKIPPED %s: LMP_CT_PYTHON is not set (an interpreter with torch and compressed-tensors runs "
                      "tools/ref/ct_fpgrid_check.py)\n", test);
        return;
    }
    static float w[ROWS * COLS], W[ROWS * COLS];
    /* rows of very different magnitudes: f32, bf16 and f16 scales, E4M3's subnormal scales (NVFP4's
     * 1e-4 row under a 40 row), E8M0 exponents far below 127; an all-zero group; an exact tie */
    static const float SCALE[ROWS] = {1.0f, 0.02f, 3.0f, 1e-4f, 40.0f, 0.3f, 1e-6f, 5.0f};
    uint64_t s = 0x853C49E6748FEA9BULL;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) w[r * COLS + c] = SCALE[r] * lmp_test_normal(&s);
    for (int c = 0; c < 32; c++) w[5 * COLS + c] = 0.0f;
    for (int c = 40; c < 48; c++) w[7 * COLS + c] = -(float)(c - 40) * 0.25f;
    char dir[64], cmd[4096], line[512];
    lmp_test_tmpdir(dir, sizeof dir, "fpgrid");
    lmp_test_spit(lmp_test_path(dir, "in.f32"), w, sizeof w);
    FILE *m = fopen(lmp_test_path(dir, "cases.txt"), "w");
    ck_assert_ptr_nonnull(m);
    for (int k = 0; k < N_CASES; k++)
        fprintf(m, "%s %s %d %s %d %d %s/in.f32 %s/deq%d.f32 %s/sc%d.f32\n", CASES[k].fmt, CASES[k].gran, CASES[k].group,
                CASES[k].sdt, ROWS, COLS, dir, dir, k, dir, k);
    static const char *const ACTS[] = {"act_fp8_static", "act_fp8_token", "act_nvfp4", "act_mxfp4"};
    static const lmp_act_mode ACT_MODES[] = {LMP_ACT_FP8_STATIC_TENSOR, LMP_ACT_FP8_DYN_TOKEN, LMP_ACT_NVFP4, LMP_ACT_MXFP4};
    for (int k = 0; k < 4; k++)
        fprintf(m, "%s - 0 - %d %d %s/in.f32 %s/adeq%d.f32 %s/asc%d.f32\n", ACTS[k], ROWS, COLS, dir, dir, k, dir, k);
    fclose(m);
    snprintf(cmd, sizeof cmd, "'%s' '%s/tools/ref/ct_fpgrid_check.py' '%s/cases.txt' 2>&1", py, LMP_SOURCE_DIR, dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    static char out[16384];
    out[fread(out, 1, sizeof out - 1, p)] = 0;
    const int rc = pclose(p);
    if (rc != 0 && strstr(out, "No module named")) {
        lmp_test_skip("SKIPPED %s: %s lacks torch or compressed-tensors: %s", test, py, out);
        lmp_test_rmtree(dir);
        return;
    }
    ck_assert_msg(rc == 0, "%s\n%s", cmd, out);
    printf("%s", out);
    for (int k = 0; k < N_CASES; k++) {
        const fp_case *c = &CASES[k];
        lmp_wspec spec = case_spec(c, w);
        const int64_t n = lmp_wspec_n_scales(&spec, ROWS, COLS);
        static float sc[ROWS * COLS];
        size_t nb;
        snprintf(line, sizeof line, "deq%d.f32", k);
        float *deq = (float *)lmp_test_slurp(lmp_test_path(dir, line), &nb);
        ck_assert_uint_eq(nb, sizeof w);
        snprintf(line, sizeof line, "sc%d.f32", k);
        float *ref_sc = (float *)lmp_test_slurp(lmp_test_path(dir, line), &nb);
        ck_assert_uint_eq(nb, (size_t)(n + (c->f == LMP_WFORMAT_NVFP4)) * sizeof(float));
        if (c->f == LMP_WFORMAT_NVFP4)
            ck_assert_msg(spec.global_scale == ref_sc[n], "nvfp4 global scale %a, compressed-tensors %a",
                          (double)spec.global_scale, (double)ref_sc[n]);
        memcpy(W, w, sizeof W);
        ck_assert_msg(lmp_be_choose_weight_grid(&be, &spec, ROWS, COLS, W, sc, NULL) == 0, "%s", lmp_last_error());
        for (int64_t i = 0; i < n; i++)
            ck_assert_msg(sc[i] == ref_sc[i], "%s %s/%d %s: scale %lld = %a, compressed-tensors %a", c->fmt, c->gran,
                          c->group, c->sdt, (long long)i, (double)sc[i], (double)ref_sc[i]);
        ck_assert_msg(lmp_be_apply_weight_grid(&be, &spec, ROWS, COLS, W, sc, NULL, NULL) == 0, "%s", lmp_last_error());
        int64_t neg_zero = 0;
        for (int i = 0; i < ROWS * COLS; i++) {
            ck_assert_msg(W[i] == deq[i] && signbit(W[i]) == signbit(deq[i]),
                          "%s %s/%d %s: w[%d][%d] = %a (input %a), compressed-tensors %a", c->fmt, c->gran, c->group,
                          c->sdt, i / COLS, i % COLS, (double)W[i], (double)w[i], (double)deq[i]);
            neg_zero += W[i] == 0.0f && signbit(W[i]);
        }
        printf("  %s %s/%d %s: %d x %d and %lld scales equal to compressed-tensors bit for bit (%lld weights -0)\n",
               c->fmt, c->gran, c->group, c->sdt, ROWS, COLS, (long long)n, (long long)neg_zero);
        free(deq);
        free(ref_sc);
    }
    /* the activations: the rows of w as tokens, the static scales (fp8's, nvfp4's global) from w
     * itself as rtn makes them from the calibration's abs-max */
    float amax = 0.0f;
    for (int i = 0; i < ROWS * COLS; i++) amax = fmaxf(amax, fabsf(w[i]));
    for (int k = 0; k < 4; k++) {
        lmp_aspec a = {.mode = ACT_MODES[k], .bits = 8};
        a.scale = ACT_MODES[k] == LMP_ACT_FP8_STATIC_TENSOR ? amax / 448.0f
                  : ACT_MODES[k] == LMP_ACT_NVFP4           ? lmp_nvfp4_global_scale_of(amax)
                                                            : 0.0f;
        size_t nb;
        snprintf(line, sizeof line, "adeq%d.f32", k);
        float *deq = (float *)lmp_test_slurp(lmp_test_path(dir, line), &nb);
        ck_assert_uint_eq(nb, sizeof w);
        snprintf(line, sizeof line, "asc%d.f32", k);
        float *ref_sc = (float *)lmp_test_slurp(lmp_test_path(dir, line), &nb);
        if (nb) ck_assert_msg(a.scale == ref_sc[0], "%s: scale %a, compressed-tensors %a", ACTS[k], (double)a.scale,
                              (double)ref_sc[0]);
        memcpy(W, w, sizeof W);
        ck_assert_msg(lmp_be_quantize_act(&be, &a, ROWS, COLS, W) == 0, "%s", lmp_last_error());
        for (int i = 0; i < ROWS * COLS; i++)
            ck_assert_msg(W[i] == deq[i] && signbit(W[i]) == signbit(deq[i]), "%s: x[%d][%d] = %a (input %a), "
                          "compressed-tensors %a", ACTS[k], i / COLS, i % COLS, (double)W[i], (double)w[i], (double)deq[i]);
        printf("  %s: %d tokens x %d equal to compressed-tensors' forward_quantize bit for bit\n", ACTS[k], ROWS, COLS);
        free(deq);
        free(ref_sc);
    }
    lmp_test_rmtree(dir);
}
END_TEST

/* Through the pipeline on stories260K (its 64-wide linears; down_proj's 172 inputs are not whole
 * groups of 16 or 32): rtn, gptq, rtn_mse and autoround record each floating-point grid, every
 * weight is the value of its code on it, and the bits per weight are the format's. */
START_TEST(in_the_pipeline)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(LMP_SOURCE_DIR "/models/stories260K/stories260K.bin", &m), 0);
    static const char *const fmts[] = {"format=fp8_e4m3", "format=nvfp4", "format=mxfp4", "format=mxfp8",
                                       "format=fp8_e5m2"};
    static const char *const plugins[] = {"rtn", "gptq", "rtn_mse", "autoround"};
    for (int f = 0; f < 5; f++)
        for (int pl = 0; pl < 4; pl++) {
            if (pl >= 2 && f >= 2) continue; /* rtn_mse and autoround: fp8 and nvfp4 are enough here */
            const char *set[] = {fmts[f], pl == 3 ? "steps=2" : NULL, NULL};
            lmp_block *q = compress_stage(m, plugins[pl], set, "re:\\.(q|k|v|o|gate|up)_proj$", pl == 1 || pl == 3);
            ck_assert_msg(q != NULL, "%s", lmp_last_error());
            for (int b = 0; b < m->arch.n_layers; b++)
                for (int i = 0; i < q[b].n_linears; i++) {
                    const lmp_linear *l = &q[b].linears[i];
                    if (l->role == LMP_ROLE_DOWN) continue;
                    ck_assert_ptr_nonnull(l->grid);
                    const lmp_wgrid *g = l->grid;
                    ck_assert_msg(lmp_wformat_is_fp(g->spec.format), "%s %s: format %d", plugins[pl], fmts[f],
                                  (int)g->spec.format);
                    ck_assert(!strcmp(lmp_wformat_name(g->spec.format), fmts[f] + 7));
                    ck_assert(lmp_wspec_format_ok(&g->spec));
                    ck_assert_double_eq_tol(l->weight_bits, wgrid_weight_bits(&g->spec, l->out, l->in), 1e-12);
                    ck_assert(l->weight_bits < 9.0);
                    for (int64_t r = 0; r < l->out; r++)
                        for (int64_t c = 0; c < l->in; c++) {
                            const float wv = l->w[r * l->in + c], sc = g->scales[lmp_wgrid_slice(g, l->in, r, c)];
                            const float v = lmp_wgrid_value(&g->spec, lmp_wgrid_code(&g->spec, wv, sc, 0.0f), sc, 0.0f);
                            ck_assert_msg(v == wv, "%s %s %s [%lld, %lld]: %a is not on its grid (%a)", plugins[pl],
                                          fmts[f], l->name, (long long)r, (long long)c, (double)wv, (double)v);
                        }
                }
            lmp_blocks_free(q, m->arch.n_layers);
        }
    /* FP8 in blocks of 16 x 16 (ABI 6.2) through rtn, gptq and rtn_mse on every linear: the 64 x 172
     * down_proj has partial tiles at its right edge, the 172 x 64 gate/up at their bottom */
    static const char *const blockplugins[] = {"rtn", "gptq", "rtn_mse"};
    for (int pl = 0; pl < 3; pl++) {
        static const char *const set[] = {"format=fp8_e4m3", "granularity=block", "group_size=16", "scale_dtype=bf16", NULL};
        lmp_block *q = compress_stage(m, blockplugins[pl], set, NULL, pl == 1);
        int64_t partial = 0;
        for (int b = 0; b < m->arch.n_layers; b++)
            for (int i = 0; i < q[b].n_linears; i++) {
                const lmp_linear *l = &q[b].linears[i];
                const lmp_wgrid *g = l->grid;
                ck_assert_ptr_nonnull(g);
                ck_assert_int_eq(g->spec.gran, LMP_GRAN_BLOCK);
                ck_assert_int_eq(g->n_scales, ((l->out + 15) / 16) * ((l->in + 15) / 16));
                partial += l->out % 16 != 0 || l->in % 16 != 0;
                ck_assert_double_eq_tol(l->weight_bits, 8.0 + g->n_scales * 16.0 / (double)(l->out * l->in), 1e-12);
                for (int64_t r = 0; r < l->out; r++)
                    for (int64_t c = 0; c < l->in; c++) {
                        const float wv = l->w[r * l->in + c], sc = g->scales[(r / 16) * ((l->in + 15) / 16) + c / 16];
                        ck_assert(sc == g->scales[lmp_wgrid_slice(g, l->in, r, c)]);
                        const float v = lmp_wgrid_value(&g->spec, lmp_wgrid_code(&g->spec, wv, sc, 0.0f), sc, 0.0f);
                        ck_assert_msg(v == wv, "%s block %s [%lld, %lld]: %a is not on its tile's grid (%a)",
                                      blockplugins[pl], l->name, (long long)r, (long long)c, (double)wv, (double)v);
                    }
            }
        ck_assert(partial > 0);
        printf("  %s: fp8_e4m3 in 16 x 16 blocks on every linear (%lld with partial tiles), every weight on its tile\n",
               blockplugins[pl], (long long)partial);
        lmp_blocks_free(q, m->arch.n_layers);
    }
    /* blocks are FP8's only; autoround and sparse24 refuse them by name */
    static const char *const intblock[] = {"bits=4", "granularity=block", NULL};
    lmp_block *refused;
    ck_assert_int_ne(try_compress_stage(m, "rtn", intblock, NULL, 0, &refused), 0);
    ck_assert_msg(strstr(lmp_last_error(), "block") && strstr(lmp_last_error(), "fp8_e4m3"), "%s", lmp_last_error());
    static const char *const arblock[] = {"format=fp8_e4m3", "granularity=block", "steps=2", NULL};
    ck_assert_int_ne(try_compress_stage(m, "autoround", arblock, NULL, 1, &refused), 0);
    ck_assert_msg(strstr(lmp_last_error(), "block"), "%s", lmp_last_error());
    static const char *const spblock[] = {"method=sparsegpt", "bits=8", "format=fp8_e4m3", "granularity=block", NULL};
    ck_assert_int_ne(try_compress_stage(m, "sparse24", spblock, NULL, 1, &refused), 0);
    ck_assert_msg(strstr(lmp_last_error(), "block"), "%s", lmp_last_error());
    /* granularity tensor goes through rtn, not through the row-by-row solver */
    static const char *const tensor[] = {"format=fp8_e4m3", "granularity=tensor", NULL};
    lmp_block *none;
    ck_assert_int_ne(try_compress_stage(m, "gptq", tensor, "re:\\.(q|k|v|o|gate|up)_proj$", 1, &none), 0);
    ck_assert_msg(strstr(lmp_last_error(), "tensor"), "%s", lmp_last_error());
    lmp_block *q = compress_stage(m, "rtn", tensor, "re:\\.(q|k|v|o|gate|up)_proj$", 0);
    ck_assert_int_eq(q[0].linears[0].grid->n_scales, 1);
    lmp_blocks_free(q, m->arch.n_layers);
    static const char *const weighted[] = {"format=nvfp4", "importance=uniform", NULL};
    ck_assert_int_ne(try_compress_stage(m, "rtn", weighted, "re:\\.(q|k|v|o|gate|up)_proj$", 0, &none), 0);
    ck_assert_msg(strstr(lmp_last_error(), "importance"), "%s", lmp_last_error());
    /* the writers refuse what they do not write yet, by name */
    lmp_model_free(m);
}
END_TEST

/* NVFP4 without a global scale is refused by the backend, naming it. */
START_TEST(nvfp4_needs_global_scale)
{
    float W[32] = {1.0f}, sc[2];
    lmp_wspec s = lmp_wspec_for_format(LMP_WFORMAT_NVFP4, 1.0f);
    ck_assert_int_ne(lmp_be_choose_weight_grid(&be, &s, 1, 32, W, sc, NULL), 0);
    ck_assert_msg(strstr(lmp_last_error(), "global scale"), "%s", lmp_last_error());
    s.global_scale = lmp_nvfp4_global_scale(W, 32);
    ck_assert_int_eq(lmp_be_choose_weight_grid(&be, &s, 1, 32, W, sc, NULL), 0);
    ck_assert(sc[0] == 448.0f && sc[1] == 0.125f); /* gs * amax / 6 = 448; an all-zero group: 0.125 */
    ck_assert_int_eq(lmp_be_apply_weight_grid(&be, &s, 1, 32, W, sc, NULL, NULL), 0);
    ck_assert(W[0] == 1.0f && W[1] == 0.0f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fpgrid");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, bit_patterns_round_trip);
    tcase_add_test(tc, nvfp4_needs_global_scale);
    tcase_add_test(tc, equals_compressed_tensors);
    tcase_add_test(tc, in_the_pipeline);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
