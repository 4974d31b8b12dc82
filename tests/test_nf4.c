/* test_nf4.c — the nf4 grid (plugin.h: bitsandbytes' NF4, blocks of 64 with an f32 abs-max).
 *
 * Against bitsandbytes itself: tools/ref/nf4_check.py runs its quantize_4bit / dequantize_4bit
 * on the same matrix, and the CPU backend's choose_weight_grid + apply_weight_grid must give its
 * abs-max of every block and its dequantized weights bit for bit.  That needs torch and
 * bitsandbytes: the interpreter LMP_CT_PYTHON names (the one the compressed-tensors checks use,
 * with `pip install bitsandbytes`); without it that case prints SKIPPED.  Always: hand-worked
 * blocks (each level times the abs-max codes to itself, a value on a midpoint takes the lower
 * level as torch.bucketize does, an all-zero block reads 0), and the pipeline's refusals (clip,
 * importance) and its bits per weight. */
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

#define ROWS 6
#define COLS 256

static const lmp_wspec *nf4(void)
{
    static lmp_wspec s;
    s = lmp_wspec_for_format(LMP_WFORMAT_NF4, 1.0f);
    return &s;
}

START_TEST(hand_worked_blocks)
{
    float w[2 * 64], sc[2];
    int32_t codes[2 * 64];
    const float a = 2.5f;
    for (int k = 0; k < 16; k++) w[k] = lmp_nf4_values[k] * a;
    for (int k = 0; k < 15; k++) /* midpoints: exactly representable here, and they go down */
        w[16 + k] = (lmp_nf4_values[k] + lmp_nf4_values[k + 1]) / 2.0f * a;
    for (int j = 31; j < 64; j++) w[j] = 0.1f;
    memset(w + 64, 0, 64 * sizeof *w);
    float W[2 * 64];
    memcpy(W, w, sizeof W);
    ck_assert_msg(lmp_be_choose_weight_grid(&be, nf4(), 1, 128, W, sc, NULL) == 0, "%s", lmp_last_error());
    ck_assert(sc[0] == a && sc[1] == 0.0f);
    ck_assert_msg(lmp_be_apply_weight_grid(&be, nf4(), 1, 128, W, sc, NULL, codes) == 0, "%s", lmp_last_error());
    for (int k = 0; k < 16; k++) {
        ck_assert_int_eq(codes[k], k);
        ck_assert(W[k] == lmp_nf4_values[k] * a);
    }
    for (int k = 0; k < 15; k++) {
        /* w * (1/a) may land a hair off the midpoint: the level is then the nearer one, else the lower */
        const float x = w[16 + k] * (1.0f / a), mid = (lmp_nf4_values[k] + lmp_nf4_values[k + 1]) / 2.0f;
        ck_assert_int_eq(codes[16 + k], x <= mid ? k : k + 1);
    }
    for (int j = 64; j < 128; j++) ck_assert(codes[j] == 7 && W[j] == 0.0f); /* 0 / 1e-38 -> level 0.0 */
}
END_TEST

START_TEST(equals_bitsandbytes)
{
    const char *test = "equals_bitsandbytes";
    const char *py = getenv("LMP_CT_PYTHON");
    if (!py || !*py) {
        lmp_test_skip("SKIPPED %s: LMP_CT_PYTHON is not set (an interpreter with torch and bitsandbytes runs "
               "tools/ref/nf4_check.py)\n", test);
        return;
    }
    static float w[ROWS * COLS], W[ROWS * COLS], deq[ROWS * COLS], absmax[ROWS * COLS / 64], sc[ROWS * COLS / 64];
    static const float SCALE[ROWS] = {1.0f, 0.02f, 3.0f, 1e-4f, 40.0f, 0.3f};
    uint64_t s = 0x853C49E6748FEA9BULL;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) w[r * COLS + c] = SCALE[r] * lmp_test_normal(&s);
    for (int c = 9; c < COLS; c += 64) w[2 * COLS + c] = -25.0f; /* a negative abs-max per block */
    for (int c = 0; c < 64; c++) w[5 * COLS + c] = 0.0f;         /* an all-zero block */
    char dir[64], cmd[2048];
    lmp_test_tmpdir(dir, sizeof dir, "nf4");
    lmp_test_spit(lmp_test_path(dir, "in.f32"), w, sizeof w);
    snprintf(cmd, sizeof cmd, "'%s' '%s/tools/ref/nf4_check.py' %d %d '%s/in.f32' '%s/deq.f32' '%s/absmax.f32' 2>&1", py,
             LMP_SOURCE_DIR, ROWS, COLS, dir, dir, dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char out[4096];
    out[fread(out, 1, sizeof out - 1, p)] = 0;
    const int rc = pclose(p);
    if (rc != 0 && strstr(out, "No module named")) {
        lmp_test_skip("SKIPPED %s: %s lacks torch or bitsandbytes: %s", test, py, out);
        lmp_test_rmtree(dir);
        return;
    }
    ck_assert_msg(rc == 0, "%s\n%s", cmd, out);
    printf("  %s", out);
    size_t n;
    unsigned char *d = lmp_test_slurp(lmp_test_path(dir, "deq.f32"), &n);
    ck_assert_uint_eq(n, sizeof deq);
    memcpy(deq, d, n);
    free(d);
    d = lmp_test_slurp(lmp_test_path(dir, "absmax.f32"), &n);
    ck_assert_uint_eq(n, sizeof absmax);
    memcpy(absmax, d, n);
    free(d);
    memcpy(W, w, sizeof W);
    ck_assert_msg(lmp_be_choose_weight_grid(&be, nf4(), ROWS, COLS, W, sc, NULL) == 0, "%s", lmp_last_error());
    ck_assert_msg(lmp_be_apply_weight_grid(&be, nf4(), ROWS, COLS, W, sc, NULL, NULL) == 0, "%s", lmp_last_error());
    for (int b = 0; b < ROWS * COLS / 64; b++) ck_assert_msg(sc[b] == absmax[b], "block %d: %a, bitsandbytes %a", b, sc[b], absmax[b]);
    for (int i = 0; i < ROWS * COLS; i++)
        ck_assert_msg(W[i] == deq[i] && signbit(W[i]) == signbit(deq[i]), "w[%d][%d] = %a (input %a), bitsandbytes %a",
                      i / COLS, i % COLS, (double)W[i], (double)w[i], (double)deq[i]);
    printf("  nf4: %d x %d equal to bitsandbytes' quantize_4bit + dequantize_4bit bit for bit (%d blocks' abs-max)\n",
           ROWS, COLS, ROWS * COLS / 64);
    lmp_test_rmtree(dir);
}
END_TEST

/* Through the pipeline on stories260K (its 64-wide linears; down_proj's 172 is not whole blocks):
 * rtn and gptq record an nf4 grid at 4.5 bits per weight and leave every weight on it; a clip
 * ratio and an importance are refused before any work, naming the key. */
START_TEST(in_the_pipeline)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(LMP_SOURCE_DIR "/models/stories260K/stories260K.bin", &m), 0);
    static const char *const set[] = {"format=nf4", NULL};
    for (int use_gptq = 0; use_gptq < 2; use_gptq++) {
        lmp_block *q = compress_stage(m, use_gptq ? "gptq" : "rtn", set, "re:\\.(q|k|v|o|gate|up)_proj$", use_gptq);
        ck_assert_msg(q != NULL, "%s", lmp_last_error());
        for (int b = 0; b < m->arch.n_layers; b++)
            for (int i = 0; i < q[b].n_linears; i++) {
                const lmp_linear *l = &q[b].linears[i];
                if (l->role == LMP_ROLE_DOWN) continue;
                ck_assert_ptr_nonnull(l->grid);
                ck_assert_int_eq(l->grid->spec.format, LMP_WFORMAT_NF4);
                ck_assert(l->weight_bits == 4.5);
                for (int64_t j = 0; j < l->out * l->in; j++) {
                    const float a = l->grid->scales[j / 64];
                    ck_assert(lmp_wgrid_value(nf4(), lmp_wgrid_code(nf4(), l->w[j], a, 0), a, 0) == l->w[j]);
                }
            }
        lmp_blocks_free(q, m->arch.n_layers);
    }
    static const char *const clipped[] = {"format=nf4", "clip=0.9", NULL};
    static const char *const weighted[] = {"format=nf4", "importance=uniform", NULL};
    lmp_block *none;
    ck_assert_int_ne(try_compress_stage(m, "rtn", clipped, "re:\\.(q|k|v|o|gate|up)_proj$", 0, &none), 0);
    ck_assert_msg(strstr(lmp_last_error(), "clip") && strstr(lmp_last_error(), "nf4"), "%s", lmp_last_error());
    ck_assert_int_ne(try_compress_stage(m, "gptq", weighted, "re:\\.(q|k|v|o|gate|up)_proj$", 0, &none), 0);
    ck_assert_msg(strstr(lmp_last_error(), "importance"), "%s", lmp_last_error());
    lmp_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nf4");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, hand_worked_blocks);
    tcase_add_test(tc, equals_bitsandbytes);
    tcase_add_test(tc, in_the_pipeline);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
