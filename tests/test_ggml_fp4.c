/* test_ggml_fp4.c — ggml's GGUF MXFP4, NVFP4, Q1_0 and Q2_0 (plugin_fpquants.h's gguf_mxfp4,
 * gguf_nvfp4, q1_0, q2_0) against ggml's own reference quantizers and dequantizers, built from the
 * llama.cpp source in the llama-cpp-python 0.3.36 sdist by tools/ref/ggml_quant_ref.sh (ggmlref.h).
 *
 *   - grids_equal_ggml: the CPU backend's choose_weight_grid + apply_weight_grid on a matrix with
 *     rows of very different sizes gives ggml's dequantized weights bit for bit, and its codes and
 *     scales, packed as gguf_write.c packs them (lmp_export_gguf, through a one-linear model below),
 *     are ggml's bytes;
 *   - dequantizers_equal_ggml: lmpress's reader (formats/gguf_quants.c) decodes ggml's blocks of
 *     each type to ggml's own dequantization (Q1_0 and Q2_0 newly; the PyPI gguf package has no
 *     decoder of them);
 *   - exported_file_reads_back: rtn with each format on stories260K (Q1_0, whose blocks of 128 fit
 *     none of its linears, on SmolLM2-135M's down_proj), exported as a GGUF, loads in lmpress with
 *     the tensor of that type and scores the perplexity of the blocks in memory.
 * Without the harness the ggml comparisons print SKIPPED. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eval/eval.h"
#include "export/export.h"
#include "formats/gguf.h"
#include "formats/gguf_quants.h"
#include "model/model.h"
#include "text/tokenizer_open.h"
#include "ggmlref.h"
#include "teststage.h"
#include "testutil.h"

#define ROWS 8
#define COLS 256

static const struct {
    const char *name; /* ggml's */
    lmp_wformat f;
    lmp_ggml_type t;
    int block, bytes;
} FMTS[] = {{"mxfp4", LMP_WFORMAT_GGUF_MXFP4, LMP_GGML_MXFP4, 32, 17},
            {"nvfp4", LMP_WFORMAT_GGUF_NVFP4, LMP_GGML_NVFP4, 64, 36},
            {"q1_0", LMP_WFORMAT_GGUF_Q1_0, LMP_GGML_Q1_0, 128, 18},
            {"q2_0", LMP_WFORMAT_GGUF_Q2_0, LMP_GGML_Q2_0, 64, 18}};
enum { N_FMTS = sizeof FMTS / sizeof *FMTS };

static void matrix(float *w)
{
    static const float SCALE[ROWS] = {1.0f, 0.02f, 3.0f, 0.5f, 1e-3f, 40.0f, 7.0f, 1e-5f};
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) w[r * COLS + c] = SCALE[r] * lmp_test_normal(&s);
    for (int c = 5; c < COLS; c += 32) w[1 * COLS + c] = 30.0f * (c & 64 ? -1.0f : 1.0f);
    for (int c = 0; c < 128; c++) w[3 * COLS + c] = 0.0f; /* a zero block of every type */
    for (int c = 128; c < 160; c++) w[3 * COLS + c] = 0.3f;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* ggml's code of weight j of the block at p (ggml-common.h's layouts). */
static int ggml_code(lmp_ggml_type t, const unsigned char *p, int j)
{
    switch (t) {
    case LMP_GGML_MXFP4: return j < 16 ? p[1 + j] & 15 : p[1 + j - 16] >> 4;
    case LMP_GGML_NVFP4: {
        const int sb = j / 16, k = j % 16;
        return k < 8 ? p[4 + 8 * sb + k] & 15 : p[4 + 8 * sb + k - 8] >> 4;
    }
    case LMP_GGML_Q1_0: return (p[2 + j / 8] >> (j % 8)) & 1;
    default: return (p[2 + j / 4] >> ((j % 4) * 2)) & 3;
    }
}

START_TEST(grids_equal_ggml)
{
    const char *test = "grids_equal_ggml";
    static float w[ROWS * COLS], deq[ROWS * COLS], W[ROWS * COLS], sc[ROWS * COLS];
    static int32_t codes[ROWS * COLS];
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
        ck_assert_msg(lmp_be_choose_weight_grid(&be, &s, ROWS, COLS, W, sc, NULL) == 0, "%s", lmp_last_error());
        ck_assert_msg(lmp_be_apply_weight_grid(&be, &s, ROWS, COLS, W, sc, NULL, codes) == 0, "%s", lmp_last_error());
        for (int i = 0; i < ROWS * COLS; i++) {
            ck_assert_msg(same_bits(W[i], deq[i]), "%s: w[%d][%d] = %a (input %a), ggml %a", FMTS[k].name, i / COLS,
                          i % COLS, (double)W[i], (double)w[i], (double)deq[i]);
            const unsigned char *blk = bytes + (size_t)(i / FMTS[k].block) * (size_t)FMTS[k].bytes;
            const int c = ggml_code(FMTS[k].t, blk, i % FMTS[k].block);
            ck_assert_msg(codes[i] == c, "%s: code[%d] = %d, ggml's %d", FMTS[k].name, i, codes[i], c);
        }
        /* each block's scale byte(s) as ggml wrote them */
        for (int b = 0; b < ROWS * COLS / FMTS[k].block; b++) {
            const unsigned char *p = bytes + (size_t)b * (size_t)FMTS[k].bytes;
            if (FMTS[k].t == LMP_GGML_MXFP4) {
                ck_assert_msg(same_bits(sc[b], lmp_e8m0_half(p[0])), "mxfp4 block %d: d %a, ggml's e %d", b,
                              (double)sc[b], p[0]);
            } else if (FMTS[k].t == LMP_GGML_NVFP4) {
                for (int sb = 0; sb < 4; sb++)
                    ck_assert_msg(lmp_ue4m3_encode(2.0f * sc[4 * b + sb]) == p[sb] ||
                                      (sc[4 * b + sb] == 0.0f && (p[sb] == 0 || p[sb] == 0x7F)),
                                  "nvfp4 block %d.%d: d %a, ggml's byte 0x%02x", b, sb, (double)sc[4 * b + sb], p[sb]);
            } else {
                ck_assert_msg(same_bits(lmp_fp16_round(sc[b]), ggml_ref_half(p)), "%s block %d: fp16(d = %a), ggml %a",
                              FMTS[k].name, b, (double)sc[b], (double)ggml_ref_half(p));
            }
        }
        printf("  %s: %d x %d equal to ggml's quantize_row_%s_ref bit for bit (weights, codes, %d blocks' scales)\n",
               FMTS[k].name, ROWS, COLS, FMTS[k].name, ROWS * COLS / FMTS[k].block);
        free(bytes);
    }
}
END_TEST

START_TEST(dequantizers_equal_ggml)
{
    const char *test = "dequantizers_equal_ggml";
    static float w[ROWS * COLS], deq[ROWS * COLS], mine[ROWS * COLS];
    matrix(w);
    for (int k = 0; k < N_FMTS; k++) {
        const size_t nbytes = ggml_ref_nbytes(FMTS[k].name, ROWS, COLS);
        unsigned char *bytes = malloc(nbytes);
        if (ggml_ref_run(test, FMTS[k].name, ROWS, COLS, w, NULL, deq, bytes, nbytes) != 0) {
            free(bytes);
            return;
        }
        const lmp_gguf_tensor t = {.name = (char *)FMTS[k].name, .n_dims = 2, .ne = {COLS, ROWS, 1, 1},
                                   .type = FMTS[k].t, .data = bytes, .nbytes = nbytes};
        ck_assert_msg(lmp_gguf_dequantize(&t, 0, ROWS * COLS, mine) == 0, "%s", lmp_last_error());
        for (int i = 0; i < ROWS * COLS; i++)
            ck_assert_msg(same_bits(mine[i], deq[i]), "%s: %d: lmpress %a, ggml %a", FMTS[k].name, i, (double)mine[i],
                          (double)deq[i]);
        printf("  %s: lmpress reads ggml's %zu bytes as ggml's dequantize_row_%s does\n", FMTS[k].name, nbytes,
               FMTS[k].name);
        free(bytes);
    }
}
END_TEST

/* stories260K: every linear but down_proj (172 inputs: not whole blocks) on each format, exported,
 * loaded back: the file's linears are that type and its perplexity is the blocks'. */
START_TEST(exported_file_reads_back)
{
    char dir[64];
    lmp_test_tmpdir(dir, sizeof dir, "ggml-fp4");
    for (int k = 0; k < N_FMTS; k++) {
        const int smol = FMTS[k].t == LMP_GGML_Q1_0;
        lmp_model *m = NULL;
        ck_assert_msg(lmp_model_load(smol ? LMP_SOURCE_DIR "/models/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
                                          : LMP_SOURCE_DIR "/models/stories260K/stories260K.bin", &m) == 0, "%s",
                      lmp_last_error());
        lmp_tokenizer *tok = NULL;
        int32_t *ids = NULL;
        int64_t n = 0;
        ck_assert_msg(lmp_open_tokenizer(m, smol ? NULL : LMP_SOURCE_DIR "/models/stories260K/tok512.bin", &tok) == 0,
                      "%s", lmp_last_error());
        ck_assert(lmp_tokenize_file(tok, LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-eval.txt", &ids, &n) == 0);
        lmp_tokenizer_free(tok);
        char set0[64], file[64];
        snprintf(set0, sizeof set0, "format=%s", lmp_wformat_name(FMTS[k].f));
        const char *set[] = {set0, NULL};
        lmp_block *q = compress_stage(m, "rtn", set, smol ? "re:\\.down_proj$" : "re:\\.(q|k|v|o|gate|up)_proj$", 0);
        const lmp_linear *ql = &q[0].linears[smol ? LMP_ROLE_DOWN : 0];
        snprintf(file, sizeof file, "%s.gguf", FMTS[k].name);
        lmp_export_opts o = {.path = lmp_test_path(dir, file), .variant = FMTS[k].name, .pipeline = "[]"};
        lmp_block_store *store;
        const lmp_block_source src = stored_blocks(q, m->arch.n_layers, &store);
        ck_assert_msg(lmp_export_model(&ctx, m, &src, &o) == 0, "%s", lmp_last_error());
        lmp_block_store_free(store);
        lmp_gguf *g = NULL;
        ck_assert_msg(lmp_gguf_open(lmp_test_path(dir, file), &g) == 0, "%s", lmp_last_error());
        const lmp_gguf_tensor *t = lmp_gguf_find_tensor(g, smol ? "blk.0.ffn_down.weight" : "blk.0.attn_q.weight");
        ck_assert_ptr_nonnull(t);
        ck_assert_int_eq(t->type, FMTS[k].t);
        lmp_gguf_close(g);
        lmp_model *m2 = NULL;
        ck_assert_msg(lmp_model_load(lmp_test_path(dir, file), &m2) == 0, "%s", lmp_last_error());
        lmp_score s1, s2;
        const int64_t windows = smol ? 2 : 4;
        ck_assert(lmp_eval_text(&ctx, &be, m, q, m, q, NULL, ids, n, 64, windows, "eval", &s1) == 0);
        ck_assert(lmp_eval_text(&ctx, &be, m2, lmp_model_blocks(m2), m2, lmp_model_blocks(m2), NULL, ids, n, 64, windows,
                                "eval", &s2) == 0);
        printf("  %s: %s ppl in memory %.10f, from the file %.10f (%.4f bits per weight)\n", FMTS[k].name,
               smol ? "SmolLM2 down_proj" : "stories260K", lmp_score_ppl(&s1), lmp_score_ppl(&s2), ql->weight_bits);
        ck_assert_int_eq(s1.scored, s2.scored);
        ck_assert_msg(fabs(s1.nll_sum - s2.nll_sum) <= 1e-6 * fabs(s1.nll_sum), "%s: nll %.17g vs %.17g", FMTS[k].name,
                      s1.nll_sum, s2.nll_sum);
        lmp_model_free(m2);
        lmp_blocks_free(q, m->arch.n_layers);
        free(ids);
        lmp_model_free(m);
    }
    lmp_test_rmtree(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ggml_fp4");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, grids_equal_ggml);
    tcase_add_test(tc, dequantizers_equal_ggml);
    tcase_add_test(tc, exported_file_reads_back);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
