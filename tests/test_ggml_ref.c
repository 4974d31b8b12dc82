/* test_ggml_ref.c — lmpress's GGUF block grids (plugin.h: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) against ggml's own
 * reference quantizers, built from the llama.cpp source on PyPI by tools/ref/ggml_quant_ref.sh
 * (ggmlref.h runs it).  tests/test_quant_gguf.c holds the same grids against gguf-py's numpy
 * port; this is the check against ggml's C itself.
 *
 * The CPU backend's choose_weight_grid + apply_weight_grid on a random matrix with outlier rows
 * must give ggml's dequantized weights bit for bit, ggml's fp16 d (and min) of every block and
 * the codes ggml's blocks hold; with an importance matrix, ggml's d (and min) of every block.  The fixture is checked too: it refuses a row that is not whole
 * blocks, and runs every type ggmlref.h lists, with and without an imatrix, to the size that
 * header's layout says.  Without the harness each test prints SKIPPED and passes. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "export/gguf_kquants.h"
#include "formats/gguf.h"
#include "formats/gguf_quants.h"
#include "model/grid_codes.h"
#include "ggmlref.h"
#include "teststage.h"
#include "testutil.h"

#define ROWS 8
#define COLS 256

static const struct {
    const char *name;
    lmp_wformat f;
} FMTS[] = {{"q8_0", LMP_WFORMAT_GGUF_Q8_0}, {"q4_0", LMP_WFORMAT_GGUF_Q4_0}, {"q4_1", LMP_WFORMAT_GGUF_Q4_1},
            {"q5_0", LMP_WFORMAT_GGUF_Q5_0}, {"q5_1", LMP_WFORMAT_GGUF_Q5_1}, {"iq4_nl", LMP_WFORMAT_GGUF_IQ4_NL}};
enum { N_FMTS = sizeof FMTS / sizeof *FMTS };

/* [ROWS, COLS] of normals at a different magnitude per row; rows 1 and 5 carry outliers (one per
 * block), row 3 a zero block and a constant block, so d, min and the code edges all move. */
static void matrix(float *w)
{
    static const float SCALE[ROWS] = {1.0f, 0.02f, 3.0f, 0.5f, 1e-3f, 40.0f, 7.0f, 0.2f};
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) w[r * COLS + c] = SCALE[r] * lmp_test_normal(&s);
    for (int c = 5; c < COLS; c += 32) w[1 * COLS + c] = 30.0f * (c & 64 ? -1.0f : 1.0f);
    for (int c = 17; c < COLS; c += 32) w[5 * COLS + c] *= 25.0f;
    for (int c = 0; c < 32; c++) w[3 * COLS + c] = 0.0f, w[3 * COLS + 64 + c] = 0.3f;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }

/* The code block `blk` of format k holds for its input j (0..31): int8 for Q8_0, else a nibble,
 * with Q5's fifth bit from qh (bit j of the uint32 after d, and m for Q5_1). */
static int ggml_code(int k, const unsigned char *blk, int j)
{
    const lmp_wformat f = FMTS[k].f;
    if (f == LMP_WFORMAT_GGUF_Q8_0) return (int8_t)blk[2 + j];
    const int has_min = f == LMP_WFORMAT_GGUF_Q4_1 || f == LMP_WFORMAT_GGUF_Q5_1;
    const int five = f == LMP_WFORMAT_GGUF_Q5_0 || f == LMP_WFORMAT_GGUF_Q5_1;
    const unsigned char *p = blk + 2 + 2 * has_min;
    const int high = five ? (p[j / 8] >> (j % 8) & 1) << 4 : 0;
    const unsigned char b = p[4 * five + (j & 15)];
    return (j < 16 ? b & 15 : b >> 4) | high;
}

START_TEST(grids_equal_ggml)
{
    const char *test = "grids_equal_ggml";
    float w[ROWS * COLS], deq[ROWS * COLS], W[ROWS * COLS], sc[ROWS * COLS / 32], zc[ROWS * COLS / 32];
    int32_t codes[ROWS * COLS];
    matrix(w);
    for (int k = 0; k < N_FMTS; k++) {
        const size_t nbytes = ggml_ref_nbytes(FMTS[k].name, ROWS, COLS);
        unsigned char *bytes = malloc(nbytes);
        if (ggml_ref_run(test, FMTS[k].name, ROWS, COLS, w, NULL, deq, bytes, nbytes) != 0) {
            free(bytes);
            return;
        }
        memcpy(W, w, sizeof W);
        const lmp_wspec s = lmp_wspec_for_format(FMTS[k].f, 1.0f);
        ck_assert_msg(lmp_be_choose_weight_grid(&be, &s, ROWS, COLS, W, sc, zc) == 0, "%s", lmp_last_error());
        ck_assert_msg(lmp_be_apply_weight_grid(&be, &s, ROWS, COLS, W, sc, zc, codes) == 0, "%s", lmp_last_error());
        const ggml_ref_type *t = ggml_ref_type_of(FMTS[k].name);
        for (int i = 0; i < ROWS * COLS; i++) {
            ck_assert_msg(same_bits(W[i], deq[i]), "%s: w[%d][%d] = %a (input %a), ggml %a", FMTS[k].name, i / COLS,
                          i % COLS, (double)W[i], (double)w[i], (double)deq[i]);
            const int c = ggml_code(k, bytes + (size_t)(i / 32) * (size_t)t->block_bytes, i % 32);
            ck_assert_msg(codes[i] == c, "%s: code[%d] = %d, ggml's %d", FMTS[k].name, i, codes[i], c);
        }
        for (size_t b = 0; b < ROWS * COLS / 32; b++) {
            const float d = ggml_ref_block_d(FMTS[k].name, bytes, b);
            ck_assert_msg(same_bits(lmp_fp16_round(sc[b]), d), "%s block %zu: fp16(d = %a) = %a, ggml %a", FMTS[k].name, b,
                          (double)sc[b], (double)lmp_fp16_round(sc[b]), (double)d);
            if (t->m_at >= 0)
                ck_assert_msg(same_bits(lmp_fp16_round(zc[b]), ggml_ref_block_m(FMTS[k].name, bytes, b)), "%s block %zu: min",
                              FMTS[k].name, b);
        }
        printf("  %s: %d x %d equal to ggml's quantize_%s bit for bit (%d blocks' d%s and codes)\n", FMTS[k].name, ROWS, COLS,
               FMTS[k].name, ROWS * COLS / 32, t->m_at >= 0 ? ", min" : "");
        free(bytes);
    }
}
END_TEST

/* With an importance matrix (llama-quantize --imatrix): each block's grid chosen by plugin.h's
 * lmp_wgrid_fit_block_imp (σ² the mean of w² over the row, as wgrid_choose gives it) must have
 * ggml's fp16 d (and min) for every block.  IQ4_NL codes every weight to the level nearest it on
 * that grid, as lmpress does, so its weights are ggml's bit for bit.  The others keep the codes of
 * their best trial scale, which the final least-squares d no longer rounds to everywhere;
 * lmpress codes each weight to the nearest level of that d instead, so its error, weighted as
 * ggml weights it (imatrix · sqrt(σ² + w²)), is below ggml's over the matrix.  In a single block
 * it can pass ggml's by a hair: a code is nearest for the f32 d it is coded with (ggml's id =
 * 1/d), the weight is read back with fp16(d); 1e-4 relative bounds that here. */
START_TEST(importance_search_equals_ggml)
{
    const char *test = "importance_search_equals_ggml";
    float w[ROWS * COLS], deq[ROWS * COLS], W[ROWS * COLS], sc[ROWS * COLS / 32], zc[ROWS * COLS / 32], imatrix[COLS];
    int32_t codes[ROWS * COLS];
    matrix(w);
    uint64_t s = 7;
    for (int c = 0; c < COLS; c++) imatrix[c] = (float)(0.01 + 4.0 * lmp_test_uniform(&s) * lmp_test_uniform(&s));
    for (int k = 1; k < N_FMTS; k++) { /* Q8_0 takes no importance */
        const size_t nbytes = ggml_ref_nbytes(FMTS[k].name, ROWS, COLS);
        unsigned char *bytes = malloc(nbytes);
        if (ggml_ref_run(test, FMTS[k].name, ROWS, COLS, w, imatrix, deq, bytes, nbytes) != 0) {
            free(bytes);
            return;
        }
        const lmp_wspec spec = lmp_wspec_for_format(FMTS[k].f, 1.0f);
        for (int r = 0; r < ROWS; r++) {
            float sum_x2 = 0;
            for (int c = 0; c < COLS; c++) sum_x2 += w[r * COLS + c] * w[r * COLS + c];
            for (int b = 0; b < COLS / 32; b++)
                lmp_wgrid_fit_block_imp(&spec, w + r * COLS + 32 * b, imatrix + 32 * b, sum_x2 / COLS,
                                        &sc[r * COLS / 32 + b], &zc[r * COLS / 32 + b]);
        }
        memcpy(W, w, sizeof W);
        ck_assert_msg(lmp_be_apply_weight_grid(&be, &spec, ROWS, COLS, W, sc, zc, codes) == 0, "%s", lmp_last_error());
        const ggml_ref_type *t = ggml_ref_type_of(FMTS[k].name);
        int differ = 0, lower = 0, higher = 0;
        double tot_lmp = 0, tot_ggml = 0;
        for (int b = 0; b < ROWS * COLS / 32; b++) {
            ck_assert_msg(same_bits(lmp_fp16_round(sc[b]), ggml_ref_block_d(FMTS[k].name, bytes, (size_t)b)),
                          "%s block %d: fp16(d = %a) = %a, ggml %a", FMTS[k].name, b, (double)sc[b],
                          (double)lmp_fp16_round(sc[b]), (double)ggml_ref_block_d(FMTS[k].name, bytes, (size_t)b));
            if (t->m_at >= 0)
                ck_assert_msg(same_bits(lmp_fp16_round(zc[b]), ggml_ref_block_m(FMTS[k].name, bytes, (size_t)b)),
                              "%s block %d: min", FMTS[k].name, b);
            const int r = b / (COLS / 32);
            double sigma2 = 0, e_lmp = 0, e_ggml = 0;
            for (int c = 0; c < COLS; c++) sigma2 += (double)w[r * COLS + c] * w[r * COLS + c];
            sigma2 /= COLS;
            int block_differs = 0;
            for (int j = 0; j < 32; j++) {
                const int i = 32 * b + j;
                const double wt = imatrix[(32 * b + j) % COLS] * sqrt(sigma2 + (double)w[i] * w[i]);
                e_lmp += wt * ((double)W[i] - w[i]) * ((double)W[i] - w[i]);
                e_ggml += wt * ((double)deq[i] - w[i]) * ((double)deq[i] - w[i]);
                block_differs |= codes[i] != ggml_code(k, bytes + (size_t)b * (size_t)t->block_bytes, j);
                if (FMTS[k].f == LMP_WFORMAT_GGUF_IQ4_NL)
                    ck_assert_msg(same_bits(W[i], deq[i]), "iq4_nl: w[%d] = %a, ggml %a", i, (double)W[i], (double)deq[i]);
            }
            ck_assert_msg(e_lmp <= e_ggml * (1 + 1e-4), "%s block %d: weighted error %.9g above ggml's %.9g",
                          FMTS[k].name, b, e_lmp, e_ggml);
            tot_lmp += e_lmp;
            tot_ggml += e_ggml;
            differ += block_differs;
            lower += e_lmp < e_ggml;
            higher += e_lmp > e_ggml;
        }
        ck_assert_msg(tot_lmp <= tot_ggml, "%s: weighted error %.9g above ggml's %.9g", FMTS[k].name, tot_lmp, tot_ggml);
        printf("  %s with an imatrix: %d blocks' d%s equal to ggml's; codes differ in %d blocks (error lower in %d, "
               "higher in %d by < 1e-4); weighted error %.6g against ggml's %.6g\n", FMTS[k].name, ROWS * COLS / 32,
               t->m_at >= 0 ? " and min" : "", differ, lower, higher, tot_lmp, tot_ggml);
        if (FMTS[k].f == LMP_WFORMAT_GGUF_IQ4_NL) ck_assert_int_eq(differ, 0);
        free(bytes);
    }
}
END_TEST

/* The k-quants, on [KROWS, KCOLS]: two super-blocks a row, rows of different magnitudes, one
 * with an outlier per sub-block, one with an all-zero and a constant sub-block, one tiny. */
#define KROWS 12
#define KCOLS 512

static const struct {
    const char *name;
    lmp_wformat f;
} KFMTS[] = {{"q2_k", LMP_WFORMAT_GGUF_Q2_K}, {"q3_k", LMP_WFORMAT_GGUF_Q3_K}, {"q4_k", LMP_WFORMAT_GGUF_Q4_K},
             {"q5_k", LMP_WFORMAT_GGUF_Q5_K}, {"q6_k", LMP_WFORMAT_GGUF_Q6_K}};

static void kmatrix(float *w)
{
    static const float SCALE[KROWS] = {1.0f, 0.02f, 3.0f, 0.5f, 1e-5f, 40.0f, 7.0f, 0.2f, 0.05f, 1.5f, 0.01f, 9.0f};
    uint64_t s = 0xD1B54A32D192ED03ULL;
    for (int r = 0; r < KROWS; r++)
        for (int c = 0; c < KCOLS; c++) w[r * KCOLS + c] = SCALE[r] * lmp_test_normal(&s);
    for (int c = 3; c < KCOLS; c += 16) w[1 * KCOLS + c] = 2.0f * (c & 32 ? -1.0f : 1.0f);
    for (int c = 0; c < 32; c++) w[3 * KCOLS + 256 + c] = 0.0f, w[3 * KCOLS + 64 + c] = 0.3f;
    for (int c = 0; c < KCOLS; c++) w[8 * KCOLS + c] += 0.08f; /* a row mostly of one sign */
}

/* The k-quant grids (plugin_kquants.h's lmp_wgrid_fit_kblock, through the CPU backend without an
 * importance and directly with one) and their coding give ggml's dequantized weights bit for bit,
 * with and without an imatrix (but for the sign of a 0 in a sub-block whose scale underflowed to
 * 0, where ggml dequantizes the codes of its search and lmpress code 0).  lmpress's GGUF packing of them (core/export/gguf_kquants.c: d
 * and the integer scales recovered from the recorded products) decodes, by lmpress's reader
 * (tests/test_gguf_quants.c holds it to gguf-py's), to lmpress's weights; its bytes are ggml's
 * wherever the split of the products into d times integers is the one ggml chose, which the
 * test counts (other splits hold the same products, so the same weights). */
START_TEST(kquant_grids_equal_ggml)
{
    const char *test = "kquant_grids_equal_ggml";
    static float w[KROWS * KCOLS], deq[KROWS * KCOLS], W[KROWS * KCOLS], sc[KROWS * KCOLS / 16], zc[KROWS * KCOLS / 16],
        imatrix[KCOLS];
    static int32_t codes[KROWS * KCOLS];
    static unsigned char mine[KCOLS / 256 * 210];
    kmatrix(w);
    uint64_t s = 11;
    for (int c = 0; c < KCOLS; c++) imatrix[c] = (float)(0.01 + 4.0 * lmp_test_uniform(&s) * lmp_test_uniform(&s));
    for (size_t k = 0; k < sizeof KFMTS / sizeof *KFMTS; k++)
        for (int im = 0; im < 2; im++) {
            const char *name = KFMTS[k].name;
            const size_t nbytes = ggml_ref_nbytes(name, KROWS, KCOLS), row_bytes = nbytes / KROWS;
            unsigned char *bytes = malloc(nbytes);
            if (ggml_ref_run(test, name, KROWS, KCOLS, w, im ? imatrix : NULL, deq, bytes, nbytes) != 0) {
                free(bytes);
                return;
            }
            const lmp_wspec spec = lmp_wspec_for_format(KFMTS[k].f, 1.0f);
            const int64_t nsub = 256 / spec.group, n = lmp_wspec_n_scales(&spec, KROWS, KCOLS);
            ck_assert_int_eq(n, KROWS * KCOLS / spec.group);
            memcpy(W, w, sizeof W);
            if (im)
                for (int64_t r = 0, idx = 0; r < KROWS; r++)
                    for (int64_t c = 0; c < KCOLS; c += 256, idx += nsub)
                        lmp_wgrid_fit_kblock(&spec, w + r * KCOLS + c, imatrix + c, sc + idx, spec.sym ? NULL : zc + idx);
            else ck_assert_msg(lmp_be_choose_weight_grid(&be, &spec, KROWS, KCOLS, W, sc, zc) == 0, "%s", lmp_last_error());
            ck_assert_msg(lmp_be_apply_weight_grid(&be, &spec, KROWS, KCOLS, W, sc, zc, codes) == 0, "%s", lmp_last_error());
            int signed_zeros = 0; /* the sign of 0 where a sub-block's scale is 0: ggml's codes there are its search's */
            for (int i = 0; i < KROWS * KCOLS; i++) {
                const int zero_scale = sc[i / spec.group] == 0.0f && W[i] == 0.0f && deq[i] == 0.0f;
                signed_zeros += zero_scale && !same_bits(W[i], deq[i]);
                ck_assert_msg(zero_scale || same_bits(W[i], deq[i]), "%s%s: w[%d][%d] = %a (input %a), ggml %a", name,
                              im ? " imatrix" : "", i / KCOLS, i % KCOLS, (double)W[i], (double)w[i], (double)deq[i]);
            }
            lmp_wgrid g = {.spec = spec, .n_scales = n, .scales = sc, .zeros = spec.sym ? NULL : zc};
            lmp_linear l = {.name = name, .out = KROWS, .in = KCOLS, .w = W, .grid = &g};
            const lmp_ggml_decode_fn decode = lmp_ggml_decoder(LMP_GGML_Q2_K + (uint32_t)k);
            ck_assert_ptr_nonnull(decode);
            int same_rows = 0;
            for (int64_t r = 0; r < KROWS; r++) {
                int32_t rc[KCOLS];
                float back[KCOLS];
                ck_assert_msg(lmp_grid_codes_row(&l, r, rc) == 0, "%s", lmp_last_error());
                ck_assert_msg(lmp_gguf_pack_k_row(&l, r, rc, mine) == 0, "%s", lmp_last_error());
                decode(mine, KCOLS / 256, back);
                for (int c = 0; c < KCOLS; c++)
                    ck_assert_msg(same_bits(back[c], W[r * KCOLS + c]) ||
                                      (sc[(r * KCOLS + c) / spec.group] == 0.0f && back[c] == 0.0f && W[r * KCOLS + c] == 0.0f),
                                  "%s%s: written w[%lld][%d] reads %a, not %a", name, im ? " imatrix" : "", (long long)r, c,
                                  (double)back[c], (double)W[r * KCOLS + c]);
                same_rows += memcmp(mine, bytes + r * row_bytes, row_bytes) == 0;
            }
            printf("  %s%s: %d x %d weights equal to ggml's bit for bit (%d zeros of the other sign, in sub-blocks of "
                   "scale 0), and read back as written; %d of %d rows' blocks byte for byte ggml's (the others split a "
                   "scale into d times integers otherwise)\n", name, im ? " with an imatrix" : "", KROWS, KCOLS,
                   signed_zeros, same_rows, KROWS);
            free(bytes);
        }
}
END_TEST

/* A row of 48 is not whole Q4_0 blocks: the harness says so and exits non-zero rather than
 * letting ggml's assertion abort. */
START_TEST(harness_refuses_partial_blocks)
{
    if (!ggml_ref_available("harness_refuses_partial_blocks")) return;
    char dir[64], cmd[1024], out[1024];
    lmp_test_tmpdir(dir, sizeof dir, "ggmlref");
    const float w[48] = {1.0f};
    lmp_test_spit(lmp_test_path(dir, "in.f32"), w, sizeof w);
    snprintf(cmd, sizeof cmd, "'%s' q4_0 1 48 '%s/in.f32' '%s/o.bin' '%s/d.f32' 2>&1", GGML_REF_HARNESS, dir, dir, dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    out[fread(out, 1, sizeof out - 1, p)] = 0;
    const int st = pclose(p);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s: status %d, said %s", cmd, st, out);
    ck_assert_msg(strstr(out, "multiple of 32"), "%s", out);
    lmp_test_rmtree(dir);
}
END_TEST

/* Every type ggmlref.h lists comes back at the size its layout gives (ggml_ref_run checks it),
 * with and without an imatrix, and near the input; the imatrix reaches ggml (every type but Q8_0,
 * whose quantizer has no use for one, comes out otherwise with it): the fixture works for each,
 * so a suite can compare against any of them. */
START_TEST(harness_runs_every_type)
{
    float w[ROWS * COLS], deq[ROWS * COLS], plain[ROWS * COLS], imatrix[COLS];
    matrix(w);
    uint64_t s = 42;
    for (int c = 0; c < COLS; c++) imatrix[c] = (float)(0.01 + 4.0 * lmp_test_uniform(&s));
    double energy = 0;
    for (int i = 0; i < ROWS * COLS; i++) energy += (double)w[i] * w[i];
    for (size_t k = 0; k < sizeof GGML_REF_TYPES / sizeof *GGML_REF_TYPES; k++)
        for (int im = 0; im < 2; im++) {
            const char *type = GGML_REF_TYPES[k].name;
            if (ggml_ref_run("harness_runs_every_type", type, ROWS, COLS, w, im ? imatrix : NULL, deq, NULL, 0) != 0) return;
            double err = 0;
            for (int i = 0; i < ROWS * COLS; i++) err += ((double)deq[i] - w[i]) * ((double)deq[i] - w[i]);
            /* relative rms error below 0.32: Q2_K's, the largest of the 2-bit-and-up k-quants, is about
             * half that; Q1_0 (signs) and Q2_0 (levels -1..2 of the abs-max) only have to beat 0 */
            const int low = !strcmp(type, "q1_0") || !strcmp(type, "q2_0");
            ck_assert_msg(isfinite(err) && err < (low ? 1.0 : 0.1) * energy, "%s%s: relative squared error %g", type,
                          im ? " with imatrix" : "", err / energy);
            if (!im) memcpy(plain, deq, sizeof plain);
            else if (strcmp(type, "q8_0") != 0 && strcmp(type, "mxfp4") != 0 && strcmp(type, "nvfp4") != 0 && !low)
                /* ggml's quantize_q8_0, _mxfp4, _nvfp4, _q1_0 and _q2_0 ignore the importance */
                ck_assert_msg(memcmp(plain, deq, sizeof plain) != 0, "%s: the same with and without an imatrix", type);
            printf("  %-6s %-12s relative rms error %.4f\n", type, im ? "imatrix" : "no imatrix", sqrt(err / energy));
        }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ggml_ref");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, grids_equal_ggml);
    tcase_add_test(tc, importance_search_equals_ggml);
    tcase_add_test(tc, kquant_grids_equal_ggml);
    tcase_add_test(tc, harness_refuses_partial_blocks);
    tcase_add_test(tc, harness_runs_every_type);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
