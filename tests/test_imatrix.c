/* test_imatrix.c — llama.cpp importance matrices (core/formats/imatrix.c) and the grids of
 * importance = "imatrix" (plugins/common/wgrid.h), against references that are not lmpress:
 *
 *  - tools/ref/imatrix_fixture.py writes the files with the PyPI gguf package (the legacy .dat
 *    byte by byte) and the importance llama-quantize derives from each (in_sum2 / counts,
 *    value / ncall, f32 divisions); the reader must give those values bit for bit;
 *  - rtn with format q4_0 and iq4_nl and importance = "imatrix" on stories260K: every block's
 *    fp16 d equal to ggml's own quantizer (tests/ggmlref.h) fed the linear's vector, IQ4_NL's
 *    weights equal bit for bit, the others' weighted error no higher than ggml's (the assertions
 *    of tests/test_ggml_ref.c), from both file forms, with no calibration at all; GPT-2's q, k and
 *    v take llama.cpp's fused attn_qkv entry; gptq takes the file's vector for its grids;
 *  - a file holding the calibration's own Σx² per input (counts 512, the tokens: a power of two,
 *    so the division is exact) gives exactly the grids of importance = "calibration" (the search
 *    does not change under a power-of-two scaling of the importance);
 *  - every bad input (a truncated, damaged or inconsistent file, a FIFO, a device, a folder, a
 *    file of another model, importance = "imatrix" without a file) fails with one message naming
 *    the file and the entry or the setting, before any block is compressed, never a crash.
 * Without the gguf package (or ggml's harness) the tests that need it print SKIPPED and pass. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "compress/calib_stats.h"
#include "compress/imatrix_map.h"
#include "formats/imatrix.h"
#include "ggmlref.h"
#include "model/forward.h"
#include "model/model.h"
#include "teststage.h"
#include "testutil.h"

#define MODEL_DIR LMP_SOURCE_DIR "/models/stories260K"
#define MODEL MODEL_DIR "/stories260K.bin"
#define TOK MODEL_DIR "/tok512.bin"
#define EVAL_TEXT MODEL_DIR "/tinystories-synth-eval.txt"
#define GPT2 LMP_SOURCE_DIR "/tests/golden/gpt2-tiny"
#define FIXTURE LMP_SOURCE_DIR "/tools/ref/imatrix_fixture.py"
/* every linear of stories260K but down_proj (172 inputs, not whole blocks of 32) */
#define NOT_DOWN "re:\\.(q|k|v|o|gate|up)_proj$"

/* llama.cpp's names, restated here from its llama-arch.cpp rather than taken from the core */
static const char *const LLAMA_STEM[LMP_ROLE_COUNT] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                                       "ffn_gate", "ffn_up", "ffn_down"};
static const char *const GPT2_STEM[LMP_ROLE_COUNT] = {"attn_qkv", "attn_qkv", "attn_qkv", "attn_output",
                                                      NULL,       "ffn_up",   "ffn_down"};

/* ---- the fixture ------------------------------------------------------------------------- */

enum { MAX_ENTRIES = 128 };

/* What imatrix_fixture.py wrote: its folder, and the expected importance of each entry the model
 * uses, from each file form. */
typedef struct fixture {
    char dir[64];
    int n;
    char name[MAX_ENTRIES][64];
    int64_t len[MAX_ENTRIES], at[MAX_ENTRIES];
    float *imp[2]; /* [0] from imatrix.gguf, [1] from imatrix.dat */
} fixture;

static const char *const FORM_FILE[2] = {"imatrix.gguf", "imatrix.dat"};

/* imatrix_fixture.py ARGS; the test fails if it does. */
static void run_fixture(const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' '%s' %s", LMP_TEST_PYDEPS, lmp_test_python(), FIXTURE, args);
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
}

/* Reads names.txt, gguf.f32 and dat.f32 of fx->dir. */
static void read_expected(fixture *fx)
{
    char path[512];
    snprintf(path, sizeof path, "%s/names.txt", fx->dir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    long long len;
    int64_t total = 0;
    fx->n = 0;
    while (fx->n < MAX_ENTRIES && fscanf(f, "%63s %lld", fx->name[fx->n], &len) == 2) {
        fx->len[fx->n] = len;
        fx->at[fx->n] = total;
        total += len;
        fx->n++;
    }
    fclose(f);
    for (int k = 0; k < 2; k++) {
        size_t got;
        fx->imp[k] = (float *)(void *)lmp_test_slurp(lmp_test_path(fx->dir, k ? "dat.f32" : "gguf.f32"), &got);
        ck_assert_uint_eq(got, (size_t)total * sizeof(float));
    }
}

/* The fixture of `args` ("random --llama2c MODEL"), in a fresh folder; 0, or -1 after SKIPPED. */
static int make_fixture(fixture *fx, const char *test, const char *args)
{
    memset(fx, 0, sizeof *fx);
    if (!lmp_test_have_gguf(test)) return -1;
    lmp_test_tmpdir(fx->dir, sizeof fx->dir, "imatrix");
    char a[1024];
    snprintf(a, sizeof a, "%s '%s'", args, fx->dir);
    run_fixture(a);
    read_expected(fx);
    return 0;
}

static void free_fixture(fixture *fx)
{
    free(fx->imp[0]);
    free(fx->imp[1]);
    lmp_test_rmtree(fx->dir);
}

/* The expected vector of `name` from form k; the test fails when the fixture has none. */
static const float *expected(const fixture *fx, int k, const char *name, int64_t n)
{
    for (int i = 0; i < fx->n; i++)
        if (strcmp(fx->name[i], name) == 0) {
            ck_assert_msg(fx->len[i] == n, "%s: %lld values in the fixture, %lld inputs", name, (long long)fx->len[i],
                          (long long)n);
            return fx->imp[k] + fx->at[i];
        }
    ck_abort_msg("no entry %s in the fixture", name);
    return NULL;
}

static lmp_imatrix *load_form(const fixture *fx, int k)
{
    lmp_imatrix *im = NULL;
    ck_assert_msg(lmp_imatrix_load(lmp_test_path(fx->dir, FORM_FILE[k]), &im) == 0, "%s", lmp_last_error());
    return im;
}

static lmp_model *load_model(const char *path)
{
    lmp_model *m = NULL;
    ck_assert_msg(lmp_model_load(path, &m) == 0, "%s", lmp_last_error());
    ck_assert_ptr_nonnull(lmp_model_blocks(m)); /* the original weights, as m->blocks */
    return m;
}

/* lmp_compress of m with one stage of `plugin` (settings as in teststage.h) on NOT_DOWN's linears
 * (or all: target NULL), with the importance matrix im, calibrated on 8 windows of 64 tokens or
 * not at all. */
static lmp_block *compress_im(const lmp_model *m, const char *plugin, const char *const *settings, const char *target,
                              const lmp_imatrix *im, int calibrate, lmp_calib_inputs inputs)
{
    one_stage os;
    make_stage(&reg, &os, plugin, settings, target);
    os.v.imatrix = im;
    os.v.calib_inputs = inputs;
    lmp_windows w = calibrate ? windows(8, 64, m->arch.vocab, 3) : (lmp_windows){0};
    lmp_block *out = NULL;
    int st = lmp_compress(&ctx, &be, m, &os.v, &w, &out);
    free(os.stage.params);
    free(w.tokens);
    return st ? NULL : out;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }

static const char *weight_name(const char *const *stems, int b, lmp_role role, char *buf, size_t n)
{
    snprintf(buf, n, "blk.%d.%s.weight", b, stems[role]);
    return buf;
}

/* ---- (a) the reader ------------------------------------------------------------------------ */

/* Every entry of both forms holds llama-quantize's importance bit for bit; the entries the model
 * does not use are read as well (the head; a MoE weight of four experts, one never reached:
 * 1s there, as llama-quantize puts, and counted as empty); the metadata and trailer are kept. */
START_TEST(reads_both_forms)
{
    fixture fx;
    if (make_fixture(&fx, "reads_both_forms", "random --llama2c '" MODEL "'")) return;
    for (int k = 0; k < 2; k++) {
        lmp_imatrix *im = load_form(&fx, k);
        ck_assert_int_eq(im->legacy, k);
        ck_assert_int_eq(im->chunk_count, 10);
        ck_assert_str_eq(im->dataset, "tinystories-synth-calib.txt");
        ck_assert_int_eq(im->n_entries, fx.n + (k ? 1 : 2));
        int64_t values = 0;
        for (int i = 0; i < fx.n; i++) {
            const lmp_imatrix_entry *e = lmp_imatrix_find(im, fx.name[i]);
            ck_assert_msg(e != NULL, "%s: no entry %s", FORM_FILE[k], fx.name[i]);
            ck_assert_int_eq(e->rows, 1);
            ck_assert_int_eq(e->empty_rows, 0);
            ck_assert_int_eq(e->n, fx.len[i]);
            for (int64_t j = 0; j < e->n; j++, values++)
                ck_assert_msg(same_bits(e->values[j], fx.imp[k][fx.at[i] + j]), "%s %s[%lld] = %a, llama-quantize's %a",
                              FORM_FILE[k], e->name, (long long)j, (double)e->values[j],
                              (double)fx.imp[k][fx.at[i] + j]);
        }
        const lmp_imatrix_entry *head = lmp_imatrix_find(im, "output.weight");
        ck_assert_ptr_nonnull(head);
        ck_assert_int_eq(head->n, 64);
        ck_assert(head->values[0] == 1.0f / 7.0f); /* GGUF: 1 / count 7; dat: 1 / ncall 7 */
        if (!k) {
            const lmp_imatrix_entry *moe = lmp_imatrix_find(im, "blk.0.ffn_up_exps.weight");
            ck_assert_ptr_nonnull(moe);
            ck_assert_int_eq(moe->rows, 4);
            ck_assert_int_eq(moe->n, 64);
            ck_assert_int_eq(moe->empty_rows, 1);
            const float want[4] = {3.0f / 10.0f, 1.0f, 3.0f / 5.0f, 3.0f / 2.0f};
            for (int r = 0; r < 4; r++) ck_assert(moe->values[r * 64 + 63] == want[r]);
        }
        ck_assert_ptr_null(lmp_imatrix_find(im, "blk.0.attn_q"));
        ck_assert_ptr_null(lmp_imatrix_find(im, "blk.99.attn_q.weight"));
        printf("  %s: %lld entries, %lld values of the model's %d equal to llama-quantize's bit for bit\n",
               FORM_FILE[k], (long long)im->n_entries, (long long)values, fx.n);
        lmp_imatrix_free(im);
    }
    free_fixture(&fx);
}
END_TEST

/* ---- (b) the grids against ggml's --------------------------------------------------------- */

/* Linear w quantized by lmpress (q) against ggml's quantizer fed the same weights and importance:
 * every block's fp16 d equal; IQ4_NL's weights equal bit for bit.  The other formats keep the
 * codes of ggml's best trial scale where lmpress codes each weight to the level nearest it for
 * the final f32 d (test_ggml_ref.c): so, per block and weighted as ggml weights the error
 * (imp · sqrt(σ² + w²)), lmpress's codes are no worse than ggml's for that d (1e-6: a code is
 * chosen with ggml's id = 1/d, so a near-tie may go either way), and over the whole matrix no
 * worse as a reader dequantizes them, with fp16(d).  Per block that last one does not hold: a
 * weight next to a midpoint for d can be on the far side for fp16(d), and an importance spread
 * over five decades (this fixture's) lets that one weight outweigh the block (up to 2e-3 of its
 * error here).  *excess gets the largest such relative excess.  Returns 0, or -1 when the
 * harness is missing. */
static int against_ggml(const char *test, const char *type, const lmp_linear *w, const lmp_linear *q, const float *imp,
                        int *blocks_out, double *excess)
{
    const int64_t rows = w->out, cols = w->in, n = rows * cols;
    const size_t nbytes = ggml_ref_nbytes(type, rows, cols);
    float *deq = malloc((size_t)n * sizeof *deq);
    unsigned char *bytes = malloc(nbytes);
    if (ggml_ref_run(test, type, rows, cols, w->w, imp, deq, bytes, nbytes) != 0) {
        free(deq);
        free(bytes);
        return -1;
    }
    ck_assert_ptr_nonnull(q->grid);
    const int iq4 = strcmp(type, "iq4_nl") == 0;
    double tot_lmp = 0, tot_ggml = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        const float d = ggml_ref_block_d(type, bytes, (size_t)b), d32 = q->grid->scales[b], d16 = lmp_fp16_round(d32);
        ck_assert_msg(same_bits(d16, d), "%s %s block %lld: fp16(d = %a) = %a, ggml %a", type, w->name, (long long)b,
                      (double)d32, (double)d16, (double)d);
        const int64_t r = b / (cols / 32);
        double sigma2 = 0, e_lmp = 0, e_ggml = 0, f_lmp = 0, f_ggml = 0;
        for (int64_t c = 0; c < cols; c++) sigma2 += (double)w->w[r * cols + c] * w->w[r * cols + c];
        sigma2 /= (double)cols;
        for (int j = 0; j < 32; j++) {
            const int64_t i = 32 * b + j;
            const double x = w->w[i], wt = imp[i % cols] * sqrt(sigma2 + x * x);
            /* the levels: exact, an fp16 d times a code of at most 8 bits */
            const double l_lmp = d16 ? q->w[i] / d16 : 0, l_ggml = d16 ? deq[i] / d16 : 0;
            e_lmp += wt * ((double)q->w[i] - x) * ((double)q->w[i] - x);
            e_ggml += wt * ((double)deq[i] - x) * ((double)deq[i] - x);
            f_lmp += wt * (x - d32 * l_lmp) * (x - d32 * l_lmp);
            f_ggml += wt * (x - d32 * l_ggml) * (x - d32 * l_ggml);
            if (iq4) ck_assert_msg(same_bits(q->w[i], deq[i]), "iq4_nl %s: w[%lld] = %a, ggml %a", w->name, (long long)i,
                                   (double)q->w[i], (double)deq[i]);
        }
        ck_assert_msg(f_lmp <= f_ggml * (1 + 1e-6), "%s %s block %lld: weighted error %.9g for the f32 d, ggml's codes' "
                      "%.9g", type, w->name, (long long)b, f_lmp, f_ggml);
        if (e_ggml > 0 && e_lmp / e_ggml - 1 > *excess) *excess = e_lmp / e_ggml - 1;
        tot_lmp += e_lmp;
        tot_ggml += e_ggml;
    }
    ck_assert_msg(tot_lmp <= tot_ggml, "%s %s: weighted error %.9g above ggml's %.9g", type, w->name, tot_lmp, tot_ggml);
    *blocks_out += (int)(n / 32);
    free(deq);
    free(bytes);
    return 0;
}

START_TEST(grids_equal_ggml)
{
    const char *test = "grids_equal_ggml";
    fixture fx;
    if (!ggml_ref_available(test) || make_fixture(&fx, test, "random --llama2c '" MODEL "'")) return;
    lmp_model *m = load_model(MODEL);
    static const char *const types[] = {"q4_0", "iq4_nl"};
    for (int k = 0; k < 2; k++) {
        lmp_imatrix *im = load_form(&fx, k);
        for (int t = 0; t < 2; t++) {
            char fmt[32];
            snprintf(fmt, sizeof fmt, "format=%s", types[t]);
            const char *set[] = {fmt, "importance=imatrix", NULL};
            /* no calibration windows: the file is all the search needs */
            lmp_block *q = compress_im(m, "rtn", set, NOT_DOWN, im, 0, LMP_CALIB_INPUTS_COMPRESSED);
            ck_assert_msg(q != NULL, "%s", lmp_last_error());
            int blocks = 0;
            double excess = 0;
            for (int b = 0; b < m->arch.n_layers; b++)
                for (int i = 0; i < m->blocks[b].n_linears; i++) {
                    const lmp_linear *w = &m->blocks[b].linears[i];
                    if (w->role == LMP_ROLE_DOWN) continue;
                    char name[64];
                    const float *imp = expected(&fx, k, weight_name(LLAMA_STEM, b, w->role, name, sizeof name), w->in);
                    ck_assert_int_eq(against_ggml(test, types[t], w, &q[b].linears[i], imp, &blocks, &excess), 0);
                }
            printf("  %s, %s: %d blocks' d equal to ggml's quantizer with the same importance%s; weighted error at "
                   "most %.1e above ggml's in a block\n", FORM_FILE[k], types[t], blocks, t ? ", every weight bit for bit" : "",
                   excess);
            lmp_blocks_free(q, m->arch.n_layers);
        }
        lmp_imatrix_free(im);
    }
    lmp_model_free(m);
    free_fixture(&fx);
}
END_TEST

/* Each block of each linear of q on lmp_wgrid_fit_block_imp's grid for the original row and the
 * vector imp_of(linear) gives; returns the blocks checked. */
static int64_t grids_of(const lmp_model *m, const lmp_block *q, const fixture *fx, const char *const *stems,
                        int skip_down)
{
    int64_t blocks = 0;
    for (int b = 0; b < m->arch.n_layers; b++)
        for (int i = 0; i < m->blocks[b].n_linears; i++) {
            const lmp_linear *w = &m->blocks[b].linears[i], *l = &q[b].linears[i];
            if (skip_down && w->role == LMP_ROLE_DOWN) continue;
            char name[64];
            const float *imp = expected(fx, 0, weight_name(stems, b, w->role, name, sizeof name), w->in);
            ck_assert_ptr_nonnull(l->grid);
            for (int64_t o = 0; o < w->out; o++) {
                const float *row = w->w + o * w->in;
                float sum_x2 = 0;
                for (int64_t j = 0; j < w->in; j++) sum_x2 += row[j] * row[j];
                for (int64_t j = 0; j < w->in; j += 32, blocks++) {
                    const int64_t at = (o * w->in + j) / 32;
                    float d, zero;
                    lmp_wgrid_fit_block_imp(&l->grid->spec, row + j, imp + j, sum_x2 / (float)w->in, &d, &zero);
                    ck_assert_msg(d == l->grid->scales[at], "%s row %lld block %lld: d %a, recorded %a", w->name,
                                  (long long)o, (long long)j / 32, (double)d, (double)l->grid->scales[at]);
                    ck_assert(l->grid->spec.sym || zero == l->grid->zeros[at]);
                }
            }
        }
    return blocks;
}

/* GPT-2: llama.cpp fuses c_attn into one attn_qkv weight, so its entry weights q, k and v alike. */
START_TEST(gpt2_takes_attn_qkv)
{
    fixture fx;
    if (make_fixture(&fx, "gpt2_takes_attn_qkv", "random --gpt2 '" GPT2 "'")) return;
    lmp_model *m = load_model(GPT2);
    lmp_imatrix *im = load_form(&fx, 0);
    const char *set[] = {"format=q4_0", "importance=imatrix", NULL};
    lmp_block *q = compress_im(m, "rtn", set, NULL, im, 0, LMP_CALIB_INPUTS_COMPRESSED);
    ck_assert_msg(q != NULL, "%s", lmp_last_error());
    const int64_t blocks = grids_of(m, q, &fx, GPT2_STEM, 0);
    printf("  gpt2-tiny q4_0: %lld block grids from the file's attn_qkv, attn_output, ffn_up, ffn_down entries\n",
           (long long)blocks);
    ck_assert_int_gt(blocks, 0);
    lmp_blocks_free(q, m->arch.n_layers);
    lmp_imatrix_free(im);
    lmp_model_free(m);
    free_fixture(&fx);
}
END_TEST

/* gptq asks for the file's vector beside its Hessian: with static groups its block grids are
 * those of the original weights searched with that vector. */
START_TEST(gptq_takes_the_file)
{
    fixture fx;
    if (make_fixture(&fx, "gptq_takes_the_file", "random --llama2c '" MODEL "'")) return;
    lmp_model *m = load_model(MODEL);
    lmp_imatrix *im = load_form(&fx, 0);
    const char *set[] = {"format=q5_1", "importance=imatrix", "act_order=true", "static_groups=true", NULL};
    lmp_block *q = compress_im(m, "gptq", set, NOT_DOWN, im, 1, LMP_CALIB_INPUTS_COMPRESSED);
    ck_assert_msg(q != NULL, "%s", lmp_last_error());
    const int64_t blocks = grids_of(m, q, &fx, LLAMA_STEM, 1);
    printf("  gptq q5_1 (static groups): %lld block grids searched with the file's importance\n", (long long)blocks);
    lmp_blocks_free(q, m->arch.n_layers);
    lmp_imatrix_free(im);
    lmp_model_free(m);
    free_fixture(&fx);
}
END_TEST

/* ---- (c) the calibration's own Σx² as a file ----------------------------------------------- */

/* Σx² per input of every linear of m on the original model's hidden states, over teststage.h's 8
 * windows of 64 tokens (what lmp_compress collects with calibration inputs "original"), into
 * dir/raw.txt (the GGUF names) and dir/raw.f32. */
static void dump_sqsum(const lmp_model *m, const char *dir)
{
    const int64_t T = 64, n = 8, per = T * m->arch.dim;
    lmp_windows w = windows((int)n, (int)T, m->arch.vocab, 3);
    float *X = malloc((size_t)(n * per) * sizeof *X);
    for (int64_t k = 0; k < n; k++) lmp_embed(m, w.tokens + k * T, T, X + k * per);
    FILE *names = fopen(lmp_test_path(dir, "raw.txt"), "w"), *raw = fopen(lmp_test_path(dir, "raw.f32"), "wb");
    ck_assert(names && raw);
    for (int b = 0; b < m->arch.n_layers; b++) {
        const lmp_block *blk = &m->blocks[b];
        lmp_block_stats bs;
        ck_assert_int_eq(lmp_block_stats_init(&bs, blk->n_linears), 0);
        for (int i = 0; i < blk->n_linears; i++) bs.needs[i] = LMP_STAT_SQSUM;
        ck_assert_msg(lmp_block_stats_collect(NULL, &be, &m->arch, blk, X, n, T, NULL, &bs) == 0, "%s", lmp_last_error());
        for (int i = 0; i < blk->n_linears; i++) {
            char name[64];
            ck_assert_int_eq(bs.stats[i].n_tokens, n * T);
            fprintf(names, "%s %lld\n", weight_name(LLAMA_STEM, b, blk->linears[i].role, name, sizeof name),
                    (long long)blk->linears[i].in);
            ck_assert_uint_eq(fwrite(bs.stats[i].sqsum, sizeof(float), (size_t)blk->linears[i].in, raw),
                              (size_t)blk->linears[i].in);
        }
        lmp_block_stats_free(&bs, blk->n_linears);
        for (int64_t k = 0; k < n; k++)
            ck_assert_int_eq(lmp_block_forward(&be, &m->arch, blk, T, X + k * per, NULL, NULL), 0);
    }
    fclose(names);
    fclose(raw);
    free(X);
    free(w.tokens);
}

static int same_grids(const lmp_model *m, const lmp_block *a, const lmp_block *b, int64_t *blocks)
{
    int differ = 0;
    for (int k = 0; k < m->arch.n_layers; k++)
        for (int i = 0; i < m->blocks[k].n_linears; i++) {
            const lmp_linear *x = &a[k].linears[i], *y = &b[k].linears[i];
            if (!x->grid) continue;
            ck_assert_ptr_nonnull(y->grid);
            for (int64_t s = 0; s < x->grid->n_scales; s++) {
                differ |= !same_bits(x->grid->scales[s], y->grid->scales[s]) ||
                          (x->grid->zeros && !same_bits(x->grid->zeros[s], y->grid->zeros[s]));
                *blocks += 1;
            }
            differ |= memcmp(x->w, y->w, (size_t)(x->out * x->in) * sizeof *x->w) != 0;
        }
    return !differ;
}

START_TEST(file_of_calibration_sums_equals_calibration)
{
    const char *test = "file_of_calibration_sums_equals_calibration";
    if (!lmp_test_have_gguf(test)) return;
    lmp_model *m = load_model(MODEL);
    fixture fx;
    memset(&fx, 0, sizeof fx);
    lmp_test_tmpdir(fx.dir, sizeof fx.dir, "imatrix");
    dump_sqsum(m, fx.dir);
    char args[512];
    snprintf(args, sizeof args, "from-raw '%s' 512 4", fx.dir); /* counts: the 512 tokens; ncall 4 chunks */
    run_fixture(args);
    read_expected(&fx);
    static const char *const fmts[] = {"format=q4_0", "format=q4_1", "format=q5_0", "format=iq4_nl"};
    for (int f = 0; f < 4; f++) {
        const char *cal[] = {fmts[f], "importance=calibration", NULL};
        const char *imx[] = {fmts[f], "importance=imatrix", NULL};
        const char *uni[] = {fmts[f], "importance=uniform", NULL};
        lmp_block *c = compress_im(m, "rtn", cal, NOT_DOWN, NULL, 1, LMP_CALIB_INPUTS_ORIGINAL);
        ck_assert_msg(c != NULL, "%s", lmp_last_error());
        lmp_block *u = compress_im(m, "rtn", uni, NOT_DOWN, NULL, 0, LMP_CALIB_INPUTS_COMPRESSED);
        int64_t blocks = 0, ignored = 0;
        ck_assert_msg(!same_grids(m, c, u, &ignored), "%s: calibration's grids are the unweighted ones: the test "
                      "could not tell", fmts[f]);
        for (int k = 0; k < 2; k++) {
            lmp_imatrix *im = load_form(&fx, k);
            lmp_block *i = compress_im(m, "rtn", imx, NOT_DOWN, im, 0, LMP_CALIB_INPUTS_COMPRESSED);
            ck_assert_msg(i != NULL, "%s", lmp_last_error());
            ck_assert_msg(same_grids(m, c, i, &blocks), "%s from %s: grids or weights differ from importance = "
                          "\"calibration\"", fmts[f], FORM_FILE[k]);
            lmp_blocks_free(i, m->arch.n_layers);
            lmp_imatrix_free(im);
        }
        printf("  %s: %lld block grids from the file of Σx²/512 (gguf, dat) = importance = \"calibration\"'s\n", fmts[f] + 7,
               (long long)blocks / 2);
        lmp_blocks_free(c, m->arch.n_layers);
        lmp_blocks_free(u, m->arch.n_layers);
    }
    lmp_model_free(m);
    free_fixture(&fx);
}
END_TEST

/* ---- (d) bad inputs ------------------------------------------------------------------------ */

/* lmp_imatrix_load(path) fails, its message holding every needle (NULL ends them). */
static void refused(const char *path, const char *n1, const char *n2, const char *n3)
{
    lmp_imatrix *im = (lmp_imatrix *)1;
    lmp_clear_error();
    ck_assert_msg(lmp_imatrix_load(path, &im) != 0, "%s: loaded", path);
    ck_assert_ptr_null(im);
    const char *e = lmp_last_error();
    ck_assert_msg(strstr(e, path), "'%s' missing from: %s", path, e);
    const char *needles[] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        if (needles[i]) ck_assert_msg(strstr(e, needles[i]), "'%s' missing from: %s", needles[i], e);
}

/* The fixture script's bad files for `test` into <fixture>/bad (bad[80]); 0, or -1 when the
 * fixture is skipped. */
static int make_bad_files(fixture *fx, const char *test, char *bad)
{
    if (make_fixture(fx, test, "random --llama2c '" MODEL "'")) return -1;
    snprintf(bad, 80, "%s/bad", fx->dir);
    ck_assert_int_eq(mkdir(bad, 0755), 0);
    char args[512];
    snprintf(args, sizeof args, "bad --llama2c '%s' '%s'", MODEL, bad);
    run_fixture(args);
    return 0;
}

START_TEST(bad_gguf_files)
{
    fixture fx;
    char bad[80];
    if (make_bad_files(&fx, "bad_gguf_files", bad)) return;
    refused(lmp_test_path(bad, "no-metadata.gguf"), "not a llama.cpp importance matrix", "imatrix.datasets", NULL);
    refused(lmp_test_path(bad, "no-counts.gguf"), "blk.1.attn_k.weight", "in_sum2 has no counts", NULL);
    refused(lmp_test_path(bad, "no-sum2.gguf"), "blk.1.attn_k.weight", "counts has no in_sum2", NULL);
    refused(lmp_test_path(bad, "nan.gguf"), "blk.2.ffn_up.weight", "in_sum2[17] is nan", NULL);
    refused(lmp_test_path(bad, "negative.gguf"), "blk.3.attn_v.weight", "in_sum2[3] is -1.5", NULL);
    refused(lmp_test_path(bad, "inf-count.gguf"), "blk.0.attn_q.weight", "counts[0] is inf", NULL);
    refused(lmp_test_path(bad, "negative-count.gguf"), "blk.0.attn_output.weight", "counts[0] is -3", NULL);
    refused(lmp_test_path(bad, "f16.gguf"), "blk.4.ffn_gate.weight", "must be F32", "F16");
    refused(lmp_test_path(bad, "ragged.gguf"), "blk.1.attn_q.weight", "64 values", "3 counts");
    refused(lmp_test_path(bad, "empty.gguf"), "no entry", NULL, NULL);
    /* a model file is not an importance matrix */
    refused(LMP_SOURCE_DIR "/tests/golden/dequant_fixture.gguf", "not a llama.cpp importance matrix", NULL, NULL);
    /* truncated: the GGUF reader's message, naming the file (the last 28 bytes are the padding
     * after the last tensor, which a file may leave out: size - 64 is inside the data) */
    size_t size;
    unsigned char *good = lmp_test_slurp(lmp_test_path(fx.dir, "imatrix.gguf"), &size);
    const size_t cuts[] = {0, 3, 10, 100, size / 2, size - 64};
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        lmp_test_spit(lmp_test_path(bad, "cut.gguf"), good, cuts[c]);
        refused(lmp_test_path(bad, "cut.gguf"), NULL, NULL, NULL);
    }
    free(good);
    /* read, but refused where a linear is quantized with them, before any block is compressed */
    lmp_model *m = load_model(MODEL);
    static const struct {
        const char *file, *n1, *n2;
    } at_use[] = {
        {"zero-count.gguf", "'blk.2.attn_q.weight' saw no token", "model.layers.2.self_attn.q_proj"},
        {"short.gguf", "'blk.1.ffn_gate.weight' has 32 values", "model.layers.1.mlp.gate_proj has 64 inputs"},
        {"missing.gguf", "no entry 'blk.3.ffn_up.weight' for model.layers.3.mlp.up_proj", "another model"},
        {"moe.gguf", "'blk.0.attn_k.weight' has 2 rows", "model.layers.0.self_attn.k_proj is a dense linear"},
    };
    const char *set[] = {"format=q4_0", "importance=imatrix", NULL};
    for (size_t k = 0; k < sizeof at_use / sizeof *at_use; k++) {
        lmp_imatrix *im = NULL;
        ck_assert_msg(lmp_imatrix_load(lmp_test_path(bad, at_use[k].file), &im) == 0, "%s", lmp_last_error());
        lmp_clear_error();
        ck_assert_ptr_null(compress_im(m, "rtn", set, NOT_DOWN, im, 0, LMP_CALIB_INPUTS_COMPRESSED));
        const char *e = lmp_last_error();
        ck_assert_msg(strstr(e, at_use[k].n1) && strstr(e, at_use[k].n2) && strstr(e, "pipeline[0] (rtn)") &&
                          strstr(e, at_use[k].file), "%s: %s", at_use[k].file, e);
        lmp_imatrix_free(im);
    }
    /* only the linears a stage quantizes with it need an entry: blocks 0-2 are whole */
    lmp_imatrix *im = NULL;
    ck_assert_int_eq(lmp_imatrix_load(lmp_test_path(bad, "missing.gguf"), &im), 0);
    lmp_block *q = compress_im(m, "rtn", set, "re:layers\\.[0-2]\\..*(q|k|v|o|gate|up)_proj$", im, 0,
                               LMP_CALIB_INPUTS_COMPRESSED);
    ck_assert_msg(q != NULL, "%s", lmp_last_error());
    lmp_blocks_free(q, m->arch.n_layers);
    lmp_imatrix_free(im);
    /* importance = "imatrix" with no file at all */
    lmp_clear_error();
    ck_assert_ptr_null(compress_im(m, "rtn", set, NOT_DOWN, NULL, 0, LMP_CALIB_INPUTS_COMPRESSED));
    ck_assert_msg(strstr(lmp_last_error(), "imatrix = \"FILE\"") &&
                      strstr(lmp_last_error(), "model.layers.0.self_attn.q_proj"), "%s", lmp_last_error());
    lmp_model_free(m);
    free_fixture(&fx);
}
END_TEST

static void put32(unsigned char *p, int32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)((uint32_t)v >> (8 * i));
}

/* A legacy file by hand: one entry "blk.0.attn_q.weight" (nval values of 1, ncall), then `tail`
 * bytes of trailer as given.  Returns its size. */
static size_t legacy(unsigned char *buf, int32_t n_entries, int32_t name_len, int32_t ncall, int32_t nval,
                     const unsigned char *tail, size_t n_tail)
{
    static const char name[] = "blk.0.attn_q.weight";
    size_t at = 0;
    put32(buf + at, n_entries), at += 4;
    put32(buf + at, name_len), at += 4;
    memcpy(buf + at, name, sizeof name - 1), at += sizeof name - 1;
    put32(buf + at, ncall), at += 4;
    put32(buf + at, nval), at += 4;
    for (int i = 0; i < 64; i++) {
        const float one = 1.0f;
        memcpy(buf + at, &one, 4), at += 4;
    }
    memcpy(buf + at, tail, n_tail);
    return at + n_tail;
}

START_TEST(bad_legacy_files)
{
    char dir[64];
    lmp_test_tmpdir(dir, sizeof dir, "imatrix");
    const char *p = lmp_test_path(dir, "x.dat");
    unsigned char buf[1024], tail[64] = {0};
    put32(tail, 10), put32(tail + 4, 3), memcpy(tail + 8, "abc", 3);
    const size_t ok = legacy(buf, 1, 19, 2, 64, tail, 11);
    lmp_test_spit(p, buf, ok);
    lmp_imatrix *im = NULL;
    ck_assert_msg(lmp_imatrix_load(p, &im) == 0, "%s", lmp_last_error());
    ck_assert(im->entries[0].values[0] == 0.5f && im->chunk_count == 10 && strcmp(im->dataset, "abc") == 0);
    lmp_imatrix_free(im);
    /* no trailer, or only the chunk count (older llama-imatrix): fine */
    lmp_test_spit(p, buf, ok - 11);
    ck_assert_msg(lmp_imatrix_load(p, &im) == 0, "%s", lmp_last_error());
    ck_assert_int_eq(im->chunk_count, -1);
    lmp_imatrix_free(im);
    lmp_test_spit(p, buf, ok - 7);
    ck_assert_msg(lmp_imatrix_load(p, &im) == 0, "%s", lmp_last_error());
    lmp_imatrix_free(im);
    /* ncall 0: the values as written (llama-quantize's rule) */
    lmp_test_spit(p, buf, legacy(buf, 1, 19, 0, 64, tail, 11));
    ck_assert_msg(lmp_imatrix_load(p, &im) == 0, "%s", lmp_last_error());
    ck_assert(im->entries[0].values[0] == 1.0f);
    lmp_imatrix_free(im);
    /* truncated at every byte before the trailer, and inside it */
    legacy(buf, 1, 19, 2, 64, tail, 11);
    for (size_t cut = 0; cut < ok; cut++) {
        if (cut == ok - 11 || cut == ok - 7) continue; /* the two complete shorter forms */
        lmp_test_spit(p, buf, cut);
        refused(p, cut < ok - 11 ? "truncated" : NULL, NULL, NULL);
    }
    lmp_test_spit(p, buf, legacy(buf, 0, 19, 2, 64, tail, 11));
    refused(p, "no entries", NULL, NULL);
    lmp_test_spit(p, buf, legacy(buf, 1000000, 19, 2, 64, tail, 11));
    refused(p, "truncated", "1000000 entries", NULL);
    lmp_test_spit(p, buf, legacy(buf, 1, -5, 2, 64, tail, 11));
    refused(p, "entry 0", "name length -5", NULL);
    lmp_test_spit(p, buf, legacy(buf, 1, 100000, 2, 64, tail, 11));
    refused(p, "entry 0", "runs past the end", NULL);
    lmp_test_spit(p, buf, legacy(buf, 1, 19, -1, 64, tail, 11));
    refused(p, "blk.0.attn_q.weight", "ncall is -1", NULL);
    lmp_test_spit(p, buf, legacy(buf, 1, 19, 2, 0, tail, 11));
    refused(p, "blk.0.attn_q.weight", "0 values", NULL);
    lmp_test_spit(p, buf, legacy(buf, 1, 19, 2, 65, tail, 0)); /* one value more than there is */
    refused(p, "truncated", "65 values", NULL);
    lmp_test_spit(p, buf, legacy(buf, 1, 19, 2, 64, tail, 13)); /* two bytes after the dataset name */
    refused(p, "trailer", "but 5 bytes follow", NULL);
    size_t n = legacy(buf, 1, 19, 2, 64, tail, 11);
    buf[12] = 0; /* a NUL inside the name */
    lmp_test_spit(p, buf, n);
    refused(p, "entry 0", "NUL", NULL);
    lmp_test_spit(p, buf, 0);
    refused(p, "truncated", "entry count", NULL);
    lmp_test_rmtree(dir);

    fixture fx;
    char bad[80];
    if (make_bad_files(&fx, "bad_legacy_files", bad)) return;
    refused(lmp_test_path(bad, "nan.dat"), "blk.2.ffn_up.weight", "value[5] is nan", NULL);
    refused(lmp_test_path(bad, "dup.dat"), "'blk.0.attn_q.weight' appears twice", NULL, NULL);
    free_fixture(&fx);
}
END_TEST

/* A FIFO is refused without waiting for a writer (and, read on purpose, is an empty file), a
 * device and a folder are refused, a missing file names errno's reason. */
START_TEST(special_files)
{
    char dir[64];
    lmp_test_tmpdir(dir, sizeof dir, "imatrix");
    const char *fifo = lmp_test_path(dir, "x.gguf");
    ck_assert_msg(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno));
    refused(fifo, "FIFO", "LMP_ALLOW_SPECIAL_FILES", NULL);
    setenv("LMP_ALLOW_SPECIAL_FILES", "1", 1);
    refused(fifo, "truncated", NULL, NULL); /* nobody writes: empty, at once */
    unsetenv("LMP_ALLOW_SPECIAL_FILES");
    refused("/dev/zero", "character device", NULL, NULL);
    refused(dir, "directory", NULL, NULL);
    refused(lmp_test_path(dir, "none.gguf"), "No such file", NULL, NULL);
    lmp_test_rmtree(dir);
}
END_TEST

/* ---- the config and the CLI ---------------------------------------------------------------- */

/* A config in dir: `top` on line 3, the pipeline variant's extra settings on line 6 (its rtn
 * stage quantizes every linear but down_proj with importance = "imatrix"), fp32's on line 5. */
static const char *write_cfg(const char *dir, const char *top, const char *fp32_extra, const char *q4_extra)
{
    char text[4096];
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"                        /* 1 */
             "eval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 1; };\n"        /* 2 */
             "%s\n"                                                                     /* 3 */
             "variants = (\n"                                                           /* 4 */
             "  { name = \"fp32\";%s },\n"                                              /* 5 */
             "  { name = \"q4-imat\";%s pipeline = ( { strategy = \"rtn\"; params = { format = \"q4_0\"; "
             "importance = \"imatrix\"; }; targets = [ \"re:\\\\.(q|k|v|o|gate|up)_proj$\" ]; } ); }\n" /* 6 */
             ");\n",
             MODEL, TOK, EVAL_TEXT, top, fp32_extra, q4_extra);
    const char *path = lmp_test_path(dir, "test.cfg");
    lmp_test_spit(path, text, strlen(text));
    return path;
}

/* `lmpress ARGS 2>&1` exits with `rc`, its output holding each needle. */
static char *cli_expect(int rc, const char *args, const char *n1, const char *n2, const char *n3)
{
    static char out[1 << 16];
    char a[2048];
    snprintf(a, sizeof a, "%s 2>&1", args);
    const int got = lmp_test_cli(a, out, sizeof out);
    ck_assert_msg(got == rc, "lmpress %s: exit %d, expected %d\n%s", args, got, rc, out);
    const char *needles[] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        if (needles[i]) ck_assert_msg(strstr(out, needles[i]), "'%s' missing from lmpress %s:\n%s", needles[i], args, out);
    return out;
}

START_TEST(config_and_cli)
{
    fixture fx;
    if (make_fixture(&fx, "config_and_cli", "random --llama2c '" MODEL "'")) return;
    char bad[80], args[1024];
    snprintf(bad, sizeof bad, "%s/bad", fx.dir);
    ck_assert_int_eq(mkdir(bad, 0755), 0);
    snprintf(args, sizeof args, "bad --llama2c '%s' '%s'", MODEL, bad);
    run_fixture(args);
    const char *cfg;
    /* relative to the config's folder, at the top level: check lists it, compare runs without
     * any calibration section, and the JSON records the file */
    cfg = write_cfg(fx.dir, "imatrix = \"imatrix.gguf\";", "", "");
    snprintf(args, sizeof args, "check '%s'", cfg);
    cli_expect(0, args, "q4-imat: rtn (imatrix ", "imatrix.gguf: 37 entries)", NULL);
    snprintf(args, sizeof args, "compare '%s' --quiet --json '%s/out.json'", cfg, fx.dir);
    cli_expect(0, args, "q4-imat", NULL, NULL);
    size_t n;
    char *json = (char *)lmp_test_slurp(lmp_test_path(fx.dir, "out.json"), &n);
    ck_assert_msg(strstr(json, "\"imatrix\": \"") && strstr(json, "/imatrix.gguf\"") &&
                      strstr(json, "\"importance\": \"imatrix\""), "%s", json);
    free(json);
    /* a variant's own file wins over the top level's */
    cfg = write_cfg(fx.dir, "imatrix = \"bad/missing.gguf\";", "", " imatrix = \"imatrix.dat\";");
    snprintf(args, sizeof args, "check '%s'", cfg);
    cli_expect(0, args, "imatrix.dat: 36 entries)", NULL, NULL);
    /* and the top level's is refused where it does not fit: compare stops before any variant */
    cfg = write_cfg(fx.dir, "imatrix = \"bad/missing.gguf\";", "", "");
    snprintf(args, sizeof args, "check '%s'", cfg);
    cli_expect(1, args, "test.cfg: variant 'q4-imat': pipeline[0] (rtn): ", "no entry 'blk.3.ffn_up.weight'", NULL);
    snprintf(args, sizeof args, "compare '%s'", cfg);
    char *out = cli_expect(1, args, "no entry 'blk.3.ffn_up.weight' for model.layers.3.mlp.up_proj", NULL, NULL);
    ck_assert_msg(!strstr(out, "fp32 "), "a variant ran before the check:\n%s", out);
    /* damaged files: the setting, the file and the entry */
    cfg = write_cfg(fx.dir, "imatrix = \"bad/nan.gguf\";", "", "");
    snprintf(args, sizeof args, "check '%s'", cfg);
    cli_expect(1, args, "test.cfg:3: imatrix: ", "nan.gguf: entry 'blk.2.ffn_up.weight': in_sum2[17] is nan", NULL);
    cfg = write_cfg(fx.dir, "", "", " imatrix = \"bad/dup.dat\";");
    snprintf(args, sizeof args, "check '%s'", cfg);
    cli_expect(1, args, "test.cfg:6: variants[1].imatrix: ", "appears twice", NULL);
    /* missing, a FIFO, a folder: refused without waiting, naming the setting */
    cfg = write_cfg(fx.dir, "imatrix = \"nowhere.gguf\";", "", "");
    snprintf(args, sizeof args, "check '%s'", cfg);
    cli_expect(1, args, "test.cfg:3: imatrix: ", "nowhere.gguf: cannot open: No such file", NULL);
    ck_assert_int_eq(mkfifo(lmp_test_path(fx.dir, "fifo.gguf"), 0600), 0);
    cfg = write_cfg(fx.dir, "imatrix = \"fifo.gguf\";", "", "");
    cli_expect(1, args, "test.cfg:3: imatrix: ", "is a FIFO", NULL);
    cfg = write_cfg(fx.dir, "imatrix = \"bad\";", "", "");
    cli_expect(1, args, "test.cfg:3: imatrix: ", "is a directory", NULL);
    /* importance = "imatrix" and no file */
    cfg = write_cfg(fx.dir, "", "", "");
    cli_expect(1, args, "variant 'q4-imat': pipeline[0] (rtn) quantizes model.layers.0.self_attn.q_proj",
               "add imatrix = \"FILE\";", NULL);
    /* not a string; on the unmodified model (nothing to quantize with it) */
    cfg = write_cfg(fx.dir, "imatrix = 3;", "", "");
    cli_expect(1, args, "test.cfg:3: imatrix: expected a string", NULL, NULL);
    cfg = write_cfg(fx.dir, "imatrix = \"imatrix.gguf\";", " imatrix = \"imatrix.gguf\";", "");
    cli_expect(1, args, "test.cfg:5: variants[0].imatrix: only a variant with a pipeline", NULL, NULL);
    /* the listing documents it */
    cli_expect(0, "plugins", "calibration|imatrix", "importance = \"imatrix\"", NULL);
    free_fixture(&fx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("imatrix");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, reads_both_forms);
    tcase_add_test(tc, grids_equal_ggml);
    tcase_add_test(tc, gpt2_takes_attn_qkv);
    tcase_add_test(tc, gptq_takes_the_file);
    tcase_add_test(tc, file_of_calibration_sums_equals_calibration);
    tcase_add_test(tc, bad_gguf_files);
    tcase_add_test(tc, bad_legacy_files);
    tcase_add_test(tc, special_files);
    tcase_add_test(tc, config_and_cli);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
