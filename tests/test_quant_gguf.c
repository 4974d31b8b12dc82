/* test_quant_gguf.c — the GGUF block formats of the weight grid (plugin.h: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)
 * against the PyPI gguf package, whose quants.py ports ggml's reference quantizers.
 *
 * tools/ref/ggml_quants_ref.py writes a matrix of awkward rows (zeros, magnitude ties, rounding
 * ties, constant blocks, fp16 overflow and underflow of the scale, f32 subnormals) and gguf's
 * blocks and dequantization of it.  The CPU backend's choose_weight_grid + apply_weight_grid
 * must give the same dequantized weights bit for bit (NaN where gguf gives NaN: an infinite
 * fp16 scale times a zero code), the codes the file's blocks hold, and the fp16 d (and min) of
 * each block.  Then rtn with format = q4_0 on stories260K: the quantized linears equal gguf's
 * Q4_0 of the original weights, 4.5 bits per weight; a linear 172 inputs wide is refused with
 * the format and the width in the message.  gptq with format = q4_0 and static groups lands
 * every column on the file's grid of its block.
 *
 * The Python side runs with lmp_test_python() (LMP_PYTHON to try another numpy) and
 * PYTHONPATH=build/pydeps (tools/test.sh unpacks the gguf wheel there); without them the tests
 * that need it print SKIPPED and pass. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "model/model.h"
#include "teststage.h"
#include "testutil.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define PYDEPS LMP_BINARY_DIR "/pydeps"
#define REF LMP_SOURCE_DIR "/tools/ref/ggml_quants_ref.py"
/* every linear of stories260K but down_proj (172 inputs, not a multiple of 32) */
#define NOT_DOWN "re:\\.(q|k|v|o|gate|up)_proj$"

static const struct {
    const char *name;
    lmp_wformat f;
    int block_bytes, has_min;
} FMTS[] = {{"q8_0", LMP_WFORMAT_GGUF_Q8_0, 34, 0}, {"q4_0", LMP_WFORMAT_GGUF_Q4_0, 18, 0},
            {"q4_1", LMP_WFORMAT_GGUF_Q4_1, 20, 1}, {"q5_0", LMP_WFORMAT_GGUF_Q5_0, 22, 0},
            {"q5_1", LMP_WFORMAT_GGUF_Q5_1, 24, 1}};

static unsigned char *slurp_n(const char *dir, const char *file, size_t want)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    size_t n;
    unsigned char *b = lmp_test_slurp(path, &n);
    ck_assert_msg(n == want, "%s: %zu bytes, expected %zu", path, n, want);
    return b;
}

/* An IEEE half, decoded here rather than with plugin.h's helper under test. */
static float half_to_float(const unsigned char *p)
{
    const unsigned h = (unsigned)p[0] | (unsigned)p[1] << 8, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), (int)e - 25);
    return (h & 0x8000) ? -v : v;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }

/* The codes block `blk` of format k holds for its input j (0..31). */
static int file_code(int k, const unsigned char *blk, int j)
{
    if (FMTS[k].f == LMP_WFORMAT_GGUF_Q8_0) return (int8_t)blk[2 + j];
    const unsigned char *p = blk + 2 + 2 * FMTS[k].has_min;
    const int five = FMTS[k].block_bytes - 2 - 2 * FMTS[k].has_min == 20; /* qh: the fifth bits */
    const int high = five ? (p[j / 8] >> (j % 8) & 1) << 4 : 0;
    const unsigned char b = p[4 * five + (j & 15)];
    return (j < 16 ? b & 15 : b >> 4) | high;
}

/* CPU choose + apply of format k on W[rows, cols]: W quantized in place, scales/zeros/codes out. */
static void cpu_quantize(int k, int64_t rows, int64_t cols, float *W, float *sc, float *zc, int32_t *codes)
{
    const lmp_wspec s = lmp_wspec_for_format(FMTS[k].f, 1.0f);
    ck_assert_msg(lmp_be_choose_weight_grid(&be, &s, rows, cols, W, sc, zc) == 0, "%s", lmp_last_error());
    ck_assert_msg(lmp_be_apply_weight_grid(&be, &s, rows, cols, W, sc, zc, codes) == 0, "%s", lmp_last_error());
}

START_TEST(matches_gguf_package)
{
    if (!lmp_test_have_gguf("matches_gguf_package")) return;
    char dir[64], cmd[1024];
    lmp_test_tmpdir(dir, sizeof dir, "quant-gguf");
    snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' '%s' cases '%s'", PYDEPS, lmp_test_python(), REF, dir);
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
    char path[512];
    snprintf(path, sizeof path, "%s/shape.txt", dir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    long long rows = 0, cols = 0;
    ck_assert_int_eq(fscanf(f, "%lld %lld", &rows, &cols), 2);
    fclose(f);
    const size_t n = (size_t)(rows * cols), nb = n / 32;
    float *in = (float *)(void *)slurp_n(dir, "input.f32", n * sizeof(float));
    float *W = malloc(n * sizeof *W), *sc = malloc(nb * sizeof *sc), *zc = malloc(nb * sizeof *zc);
    int32_t *codes = malloc(n * sizeof *codes);
    for (int k = 0; k < (int)(sizeof FMTS / sizeof *FMTS); k++) {
        char file[32];
        snprintf(file, sizeof file, "%s.deq", FMTS[k].name);
        float *deq = (float *)(void *)slurp_n(dir, file, n * sizeof(float));
        snprintf(file, sizeof file, "%s.bin", FMTS[k].name);
        unsigned char *blocks = slurp_n(dir, file, nb * (size_t)FMTS[k].block_bytes);
        memcpy(W, in, n * sizeof *W);
        cpu_quantize(k, rows, cols, W, sc, zc, codes);
        int64_t nan = 0, flushed = 0;
        for (size_t i = 0; i < n; i++) {
            ck_assert_msg(same_bits(W[i], deq[i]), "%s: w[%lld][%lld] = %a (input %a), gguf %a", FMTS[k].name,
                          (long long)(i / (size_t)cols), (long long)(i % (size_t)cols), (double)W[i], (double)in[i],
                          (double)deq[i]);
            nan += !isfinite(W[i]);
            const unsigned char *blk = blocks + (i / 32) * (size_t)FMTS[k].block_bytes;
            ck_assert_msg(codes[i] == file_code(k, blk, (int)(i % 32)), "%s: code[%zu] = %d, the file's %d",
                          FMTS[k].name, i, codes[i], file_code(k, blk, (int)(i % 32)));
        }
        for (size_t b = 0; b < nb; b++) {
            const unsigned char *blk = blocks + b * (size_t)FMTS[k].block_bytes;
            ck_assert_msg(same_bits(lmp_fp16_round(sc[b]), half_to_float(blk)), "%s block %zu: fp16(d = %a) = %a, file %a",
                          FMTS[k].name, b, (double)sc[b], (double)lmp_fp16_round(sc[b]), (double)half_to_float(blk));
            flushed += sc[b] != 0.0f && lmp_fp16_round(sc[b]) == 0.0f;
            if (FMTS[k].has_min)
                ck_assert_msg(same_bits(lmp_fp16_round(zc[b]), half_to_float(blk + 2)), "%s block %zu: min", FMTS[k].name, b);
        }
        printf("  %s: %zu weights, %zu blocks equal to gguf's (%lld non-finite from an infinite fp16 d, %lld d flushed to "
               "0)\n", FMTS[k].name, n, nb, (long long)nan, (long long)flushed);
        /* the cases reach the edges they are there for */
        ck_assert_int_gt(nan, 0);
        ck_assert_int_gt(flushed, 0);
        free(deq);
        free(blocks);
    }
    /* plugin.h's fp16 round trip against numpy's on values at and around every rounding edge */
    snprintf(path, sizeof path, "%s/fp16_in.f32", dir);
    size_t nx;
    float *x = (float *)(void *)lmp_test_slurp(path, &nx);
    float *y = (float *)(void *)slurp_n(dir, "fp16_out.f32", nx);
    nx /= sizeof(float);
    ck_assert_uint_gt(nx, 65536 * 6);
    for (size_t i = 0; i < nx; i++)
        ck_assert_msg(same_bits(lmp_fp16_round(x[i]), y[i]), "fp16 round trip of %a: %a, numpy %a", (double)x[i],
                      (double)lmp_fp16_round(x[i]), (double)y[i]);
    printf("  fp16 round trip: %zu values equal to numpy's astype(float16)\n", nx);
    free(x);
    free(y);
    free(in);
    free(W);
    free(sc);
    free(zc);
    free(codes);
    lmp_test_rmtree(dir);
}
END_TEST

/* Hand-worked: ggml's own rounding, not the spec's. */
START_TEST(hand_worked_blocks)
{
    float w[32], sc, zc;
    int32_t c[32];
    /* Q8_0, amax 127: d = 1, 2.5 -> roundf 3 (half away; half-even would give 2) */
    for (int j = 0; j < 32; j++) w[j] = 0.0f;
    w[0] = 127.0f, w[1] = 2.5f, w[2] = -2.5f;
    cpu_quantize(0, 1, 32, w, &sc, &zc, c);
    ck_assert(sc == 1.0f && c[1] == 3 && c[2] == -3 && w[1] == 3.0f && w[2] == -3.0f);
    /* Q4_0: the first of equal magnitudes sets the sign: +2 first -> d = -0.25, -2 -> code 16 -> 15 */
    for (int j = 0; j < 32; j++) w[j] = 0.0f;
    w[4] = 2.0f, w[9] = -2.0f;
    cpu_quantize(1, 1, 32, w, &sc, &zc, c);
    ck_assert(sc == -0.25f && c[4] == 0 && c[9] == 15 && c[0] == 8);
    ck_assert(w[4] == 2.0f && w[9] == -1.75f && w[0] == 0.0f);
    /* Q4_1: a constant block: d = 0, every code 0, the value the fp16 min (0.1 is not a half) */
    for (int j = 0; j < 32; j++) w[j] = 0.1f;
    cpu_quantize(2, 1, 32, w, &sc, &zc, c);
    ck_assert(sc == 0.0f && zc == 0.1f && c[0] == 0 && w[0] == lmp_fp16_round(0.1f) && w[0] != 0.1f);
    /* fp16 round trip: ties to even, subnormals, overflow */
    ck_assert(lmp_fp16_round(1.0f + 0x1.0p-11f) == 1.0f);                    /* tie -> even */
    ck_assert(lmp_fp16_round(1.0f + 3 * 0x1.0p-11f) == 1.0f + 0x1.0p-9f);    /* tie -> even (up) */
    ck_assert(lmp_fp16_round(0x1.0p-25f) == 0.0f);                           /* half the least subnormal */
    ck_assert(lmp_fp16_round(0x1.8p-25f) == 0x1.0p-24f);
    ck_assert(lmp_fp16_round(65504.0f) == 65504.0f && isinf(lmp_fp16_round(65520.0f)));
    ck_assert(lmp_fp16_round(65519.0f) == 65504.0f && isnan(lmp_fp16_round(NAN)));
}
END_TEST

START_TEST(refusals)
{
    float w[48] = {0}, sc[2], zc[2];
    lmp_wspec s = lmp_wspec_for_format(LMP_WFORMAT_GGUF_Q4_1, 1.0f);
    ck_assert_int_eq(lmp_be_choose_weight_grid(&be, &s, 1, 48, w, sc, zc), LMP_EINVAL);
    ck_assert_msg(strstr(lmp_last_error(), "q4_1") && strstr(lmp_last_error(), "48"), "%s", lmp_last_error());
    ck_assert_int_eq(lmp_be_apply_weight_grid(&be, &s, 1, 48, w, sc, zc, NULL), LMP_EINVAL);
    s = lmp_wspec_for_format(LMP_WFORMAT_GGUF_Q8_0, 1.0f);
    s.bits = 4; /* not what Q8_0 stores */
    ck_assert_int_eq(lmp_be_choose_weight_grid(&be, &s, 1, 32, w, sc, zc), LMP_EINVAL);
    ck_assert_msg(strstr(lmp_last_error(), "q8_0"), "%s", lmp_last_error());
    s = lmp_wspec_for_format((lmp_wformat)7, 1.0f);
    ck_assert_int_eq(lmp_be_choose_weight_grid(&be, &s, 1, 32, w, sc, zc), LMP_EINVAL);
}
END_TEST

static lmp_block *compress(const lmp_model *m, const char *plugin, const char *const *settings, const char *target,
                           int expect_ok)
{
    one_stage os;
    make_stage(&reg, &os, plugin, settings, target);
    lmp_windows w = windows(4, 32, m->arch.vocab, 7), none = {0};
    lmp_block *out = NULL;
    int st = lmp_compress(&ctx, &be, m, &os.v, strncmp(plugin, "rtn", 3) ? &w : &none, &out);
    free(os.stage.params);
    free(w.tokens);
    if (expect_ok) ck_assert_msg(st == 0, "%s", lmp_last_error());
    else ck_assert_int_ne(st, 0);
    return out;
}

START_TEST(rtn_q4_0_on_stories260K)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(MODEL, &m), 0);
    static const char *const q4_0[] = {"format=q4_0", NULL};
    /* down_proj is 172 inputs wide */
    lmp_block *bad = compress(m, "rtn", q4_0, NULL, 0);
    ck_assert_ptr_null(bad);
    ck_assert_msg(strstr(lmp_last_error(), "q4_0") && strstr(lmp_last_error(), "172"), "%s", lmp_last_error());
    lmp_block *q = compress(m, "rtn", q4_0, NOT_DOWN, 1);
    /* the original weights of the quantized linears, one [rows, 64] matrix, and gguf's Q4_0 of it */
    int64_t rows = 0;
    for (int b = 0; b < m->arch.n_layers; b++)
        for (int i = 0; i < m->blocks[b].n_linears; i++) {
            const lmp_linear *l = &m->blocks[b].linears[i], *o = &q[b].linears[i];
            if (strstr(l->name, "down_proj")) {
                ck_assert_msg(memcmp(l->w, o->w, (size_t)(l->out * l->in) * sizeof(float)) == 0, "%s changed", l->name);
                continue;
            }
            ck_assert_int_eq(l->in, 64);
            ck_assert_msg(o->weight_bits == 4.5, "%s: %g bits per weight", o->name, o->weight_bits);
            rows += l->out;
        }
    if (lmp_test_have_gguf("rtn_q4_0_on_stories260K (gguf's side)")) {
        char dir[64], cmd[1024], path[512];
        lmp_test_tmpdir(dir, sizeof dir, "quant-gguf");
        float *orig = malloc((size_t)(rows * 64) * sizeof *orig), *p = orig;
        for (int b = 0; b < m->arch.n_layers; b++)
            for (int i = 0; i < m->blocks[b].n_linears; i++) {
                const lmp_linear *l = &m->blocks[b].linears[i];
                if (strstr(l->name, "down_proj")) continue;
                memcpy(p, l->w, (size_t)(l->out * 64) * sizeof *p);
                p += l->out * 64;
            }
        snprintf(path, sizeof path, "%s/w.f32", dir);
        lmp_test_spit(path, orig, (size_t)(rows * 64) * sizeof *orig);
        snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' '%s' quantize q4_0 '%s' %lld 64 '%s/ref'", PYDEPS,
                 lmp_test_python(), REF, path, (long long)rows, dir);
        ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
        float *ref = (float *)(void *)slurp_n(dir, "ref.deq", (size_t)(rows * 64) * sizeof(float)), *r = ref;
        for (int b = 0; b < m->arch.n_layers; b++)
            for (int i = 0; i < m->blocks[b].n_linears; i++) {
                const lmp_linear *o = &q[b].linears[i];
                if (strstr(o->name, "down_proj")) continue;
                for (int64_t e = 0; e < o->out * 64; e++)
                    ck_assert_msg(same_bits(o->w[e], r[e]), "%s: w[%lld] = %a, gguf Q4_0 %a", o->name, (long long)e,
                                  (double)o->w[e], (double)r[e]);
                r += o->out * 64;
            }
        printf("  rtn q4_0: %lld rows of stories260K equal to gguf's Q4_0, 4.5 bits per weight\n", (long long)rows);
        free(ref);
        free(orig);
        lmp_test_rmtree(dir);
    }
    lmp_blocks_free(q, m->arch.n_layers);
    lmp_model_free(m);
}
END_TEST

/* GPTQ's columns land on the grid the file holds: with static groups each block's d is ggml's d
 * of the original block (static groups take the grids before any update), so every weight is
 * fp16(d) * (c - 8) for a code c in 0..15, exactly; and the result is not plain RTN. */
START_TEST(gptq_q4_0_on_the_file_grid)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(MODEL, &m), 0);
    static const char *const set[] = {"format=q4_0", "static_groups=true", "true_sequential=false", NULL};
    lmp_block *q = compress(m, "gptq", set, NOT_DOWN, 1);
    const lmp_wspec s = lmp_wspec_for_format(LMP_WFORMAT_GGUF_Q4_0, 1.0f);
    int64_t moved = 0, n = 0;
    for (int b = 0; b < m->arch.n_layers; b++)
        for (int i = 0; i < m->blocks[b].n_linears; i++) {
            const lmp_linear *l = &m->blocks[b].linears[i], *o = &q[b].linears[i];
            if (strstr(l->name, "down_proj")) continue;
            ck_assert_msg(o->weight_bits == 4.5, "%s: %g bits", o->name, o->weight_bits);
            for (int64_t r = 0; r < l->out; r++)
                for (int64_t c0 = 0; c0 < l->in; c0 += 32) {
                    float d, z;
                    lmp_wgrid_fit_block(&s, l->w + r * l->in + c0, 32, &d, &z);
                    const float D = lmp_fp16_round(d);
                    for (int j = 0; j < 32; j++) {
                        const float v = o->w[r * l->in + c0 + j], k = v / D;
                        ck_assert_msg(k == truncf(k) && k >= -8.0f && k <= 7.0f, "%s[%lld][%lld] = %a is not on fp16(d) = %a",
                                      o->name, (long long)r, (long long)(c0 + j), (double)v, (double)D);
                        const float rtn = lmp_wgrid_value(&s, lmp_wgrid_code(&s, l->w[r * l->in + c0 + j], d, z), d, z);
                        moved += v != rtn;
                        n++;
                    }
                }
        }
    printf("  gptq q4_0: %lld of %lld weights on the file's grid away from RTN's code\n", (long long)moved, (long long)n);
    ck_assert_int_gt(moved, n / 100);
    lmp_blocks_free(q, m->arch.n_layers);
    lmp_model_free(m);
}
END_TEST

static double sq_error(const float *a, const float *b, int64_t n)
{
    double e = 0;
    for (int64_t i = 0; i < n; i++) e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return e;
}

/* rtn_mse's clip search on a block format: no row worse than rtn's (clip 1 is a candidate),
 * 4.5 bits per weight; sparse24's joint SparseGPT + Q4_1: the 2:4 mask holds and 5.0 bits. */
START_TEST(rtn_mse_and_sparse24_take_formats)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(MODEL, &m), 0);
    static const char *const q8[] = {"format=q4_0", NULL};
    lmp_block *mse = compress(m, "rtn_mse", q8, NOT_DOWN, 1), *rtn = compress(m, "rtn", q8, NOT_DOWN, 1);
    static const char *const joint[] = {"format=q4_1", NULL};
    lmp_block *sp = compress(m, "sparse24", joint, NOT_DOWN, 1);
    int64_t better = 0;
    for (int b = 0; b < m->arch.n_layers; b++)
        for (int i = 0; i < m->blocks[b].n_linears; i++) {
            const lmp_linear *w = &m->blocks[b].linears[i], *q = &mse[b].linears[i], *r = &rtn[b].linears[i];
            const lmp_linear *j = &sp[b].linears[i];
            if (strstr(w->name, "down_proj")) continue;
            ck_assert(q->weight_bits == 4.5 && r->weight_bits == 4.5 && j->weight_bits == 5.0);
            for (int64_t o = 0; o < w->out; o++) {
                const int64_t at = o * w->in;
                const double em = sq_error(w->w + at, q->w + at, w->in), er = sq_error(w->w + at, r->w + at, w->in);
                ck_assert_msg(em <= er, "%s row %lld: rtn_mse %g > rtn %g", w->name, (long long)o, em, er);
                better += em < er;
                for (int64_t c = 0; c < w->in; c += 4) {
                    int kept = 0;
                    for (int k = 0; k < 4; k++) kept += j->w[at + c + k] != 0.0f;
                    ck_assert_msg(kept <= 2, "%s row %lld: %d of 4 kept", j->name, (long long)o, kept);
                }
            }
        }
    printf("  rtn_mse q4_0: %lld rows below rtn's error; sparse24 + q4_1: 2:4 at 5.0 bits\n", (long long)better);
    ck_assert_int_gt(better, 0);
    lmp_blocks_free(mse, m->arch.n_layers);
    lmp_blocks_free(rtn, m->arch.n_layers);
    lmp_blocks_free(sp, m->arch.n_layers);
    lmp_model_free(m);
}
END_TEST

/* importance through the pipeline.  uniform: every recorded block grid of rtn (and of gptq's
 * static groups, taken from the original weights) is plugin.h's lmp_wgrid_fit_block_imp of the
 * original block with unit importance and σ² from its row (the function tests/test_ggml_ref.c
 * holds to ggml), for q4_0, q5_1 and iq4_nl; every weight is then on its recorded grid.
 * calibration: the Σx² the core collects changes the grids.  Refused before any work: importance
 * with format int, with clip < 1, and in rtn_mse; sym_scale on an asymmetric grid. */
START_TEST(importance_in_the_pipeline)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(MODEL, &m), 0);
    static const char *const fmts[] = {"q4_0", "q5_1", "iq4_nl"};
    for (int k = 0; k < 3; k++)
        for (int use_gptq = 0; use_gptq < 2; use_gptq++) {
            char fmt[32];
            snprintf(fmt, sizeof fmt, "format=%s", fmts[k]);
            /* rtn stops at the NULL in third place; gptq reads on */
            const char *uni[] = {fmt, "importance=uniform", NULL, "act_order=true", "static_groups=true", NULL};
            const char *cal[] = {fmt, "importance=calibration", NULL, "act_order=true", "static_groups=true", NULL};
            if (use_gptq) uni[2] = cal[2] = "block_size=128";
            lmp_block *u = compress_stage(m, use_gptq ? "gptq" : "rtn", uni, NOT_DOWN, 1);
            lmp_block *c = compress_stage(m, use_gptq ? "gptq" : "rtn", cal, NOT_DOWN, 1);
            int64_t blocks = 0, moved = 0;
            for (int b = 0; b < m->arch.n_layers; b++)
                for (int i = 0; i < m->blocks[b].n_linears; i++) {
                    const lmp_linear *w = &m->blocks[b].linears[i], *q = &u[b].linears[i], *qc = &c[b].linears[i];
                    if (strstr(w->name, "down_proj")) continue;
                    ck_assert_ptr_nonnull(q->grid);
                    const lmp_wspec *spec = &q->grid->spec;
                    static const float ones[32] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                                   1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
                    for (int64_t o = 0; o < w->out; o++) {
                        const float *row = w->w + o * w->in;
                        float sum_x2 = 0;
                        for (int64_t j = 0; j < w->in; j++) sum_x2 += row[j] * row[j];
                        for (int64_t j = 0; j < w->in; j += 32, blocks++) {
                            const int64_t at = (o * w->in + j) / 32;
                            float d, zero;
                            lmp_wgrid_fit_block_imp(spec, row + j, ones, sum_x2 / w->in, &d, &zero);
                            ck_assert_msg(d == q->grid->scales[at] && (spec->sym || zero == q->grid->zeros[at]),
                                          "%s %s row %lld block %lld: d %a, recorded %a", fmts[k], w->name,
                                          (long long)o, (long long)j / 32, (double)d, (double)q->grid->scales[at]);
                            moved += qc->grid->scales[at] != q->grid->scales[at];
                            for (int64_t t = j; t < j + 32; t++) {
                                const float code = lmp_wgrid_code(spec, q->w[o * w->in + t], d, zero);
                                ck_assert(lmp_wgrid_value(spec, code, d, zero) == q->w[o * w->in + t]);
                            }
                        }
                    }
                }
            printf("  %s %s: %lld block grids = lmp_wgrid_fit_block_imp's (uniform); calibration moves %lld\n",
                   use_gptq ? "gptq" : "rtn", fmts[k], (long long)blocks, (long long)moved);
            ck_assert_int_gt(moved, blocks / 10);
            lmp_blocks_free(u, m->arch.n_layers);
            lmp_blocks_free(c, m->arch.n_layers);
        }
    static const char *const on_int[] = {"bits=4", "importance=calibration", NULL};
    static const char *const clipped[] = {"format=q4_0", "importance=uniform", "clip=0.9", NULL};
    static const char *const plain[] = {"format=q4_0", "importance=uniform", NULL};
    ck_assert_ptr_null(compress(m, "rtn", on_int, NOT_DOWN, 0));
    ck_assert_msg(strstr(lmp_last_error(), "importance") && strstr(lmp_last_error(), "format"), "%s", lmp_last_error());
    ck_assert_ptr_null(compress(m, "gptq", clipped, NOT_DOWN, 0));
    ck_assert_msg(strstr(lmp_last_error(), "clip"), "%s", lmp_last_error());
    static const char *const asym_full[] = {"bits=4", "sym=false", "sym_scale=full", NULL};
    ck_assert_ptr_null(compress(m, "gptq", asym_full, NOT_DOWN, 0));
    ck_assert_msg(strstr(lmp_last_error(), "sym_scale"), "%s", lmp_last_error());
    ck_assert_ptr_null(compress(m, "rtn_mse", plain, NOT_DOWN, 0));
    ck_assert_msg(strstr(lmp_last_error(), "rtn_mse") && strstr(lmp_last_error(), "importance"), "%s", lmp_last_error());
    lmp_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("quant_gguf");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, matches_gguf_package);
    tcase_add_test(tc, hand_worked_blocks);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, rtn_q4_0_on_stories260K);
    tcase_add_test(tc, gptq_q4_0_on_the_file_grid);
    tcase_add_test(tc, rtn_mse_and_sparse24_take_formats);
    tcase_add_test(tc, importance_in_the_pipeline);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
