/* test_awq.c — the awq plugin (plugins/awq/awq.c):
 *   - awq alone (no clip search) leaves the logits unchanged (1e-5 relative, 2-norm) on
 *     stories260K (grouped-query attention: no v -> o), the GPT-2-shaped fixture (LayerNorm with
 *     bias, biased v: v -> o but no up -> down) and the Qwen2 fixture (biased q/k/v);
 *   - the scales of every mapping of block 0 agree to 1e-5 with the independent numpy reference
 *     tools/ref/awq_ref.py (llm-compressor's AWQModifier formulas) from the same calibration
 *     sample, on stories260K and the GPT-2 fixture, symmetric and asymmetric grids;
 *   - with clip_search, down_proj of block 0 is clipped as AutoAWQ's search does (same reference);
 *   - awq composes with rtn (awq, rtn in one variant), and is refused after a quantizing stage and
 *     with a group that does not divide a linear's width, by name;
 *   - awq -> rtn exported as a GGUF (`lmpress run -o`), alone and on a model with fused rotations
 *     (model.rotate r1, r2), reads back with the perplexity the run measured. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "compress/calib_stats.h"
#include "compress/pipeline.h"
#include "model/forward.h"

#include "teststage.h"
#include "testutil.h"

#define STORIES LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define GPT2 LMP_SOURCE_DIR "/tests/golden/gpt2-tiny"
#define QWEN2 LMP_SOURCE_DIR "/tests/golden/qwen2-tiny"

enum { N_WIN = 16, T_WIN = 64, S_ALL = N_WIN * T_WIN };

/* ||logits(blocks) - logits(model)|| / ||logits(model)|| on one window. */
static double logits_change(lmp_model *m, const lmp_block *blocks, const int32_t *tok, int64_t T)
{
    const int64_t V = m->arch.vocab;
    float *a = malloc((size_t)(T * V) * sizeof *a), *b = malloc((size_t)(T * V) * sizeof *b);
    ck_assert_int_eq(lmp_forward(&be, m, lmp_model_blocks(m), tok, T, 0, a), 0);
    ck_assert_int_eq(lmp_forward(&be, m, blocks, tok, T, 0, b), 0);
    double diff = 0, ref = 0;
    for (int64_t i = 0; i < T * V; i++) {
        const double d = (double)a[i] - b[i];
        diff += d * d;
        ref += (double)a[i] * a[i];
    }
    free(a), free(b);
    return sqrt(diff / ref);
}

static void check_invariance(const char *path, const char *group)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(path, &m), 0);
    lmp_windows calib = windows(4, 64, m->arch.vocab, 0), eval = windows(1, 64, m->arch.vocab, 5);
    const char *settings[] = {group, "bits=3", NULL};
    one_stage os;
    make_stage(&reg, &os, "awq", settings, NULL);
    lmp_block *out;
    ck_assert_msg(lmp_compress(&ctx, &be, m, &os.v, &calib, &out) == 0, "%s", lmp_last_error());
    /* the scales really moved something (a unit scale everywhere would pass trivially) */
    double moved = 0;
    for (int64_t j = 0; j < out[0].norms[0].dim; j++)
        moved = fmax(moved, fabs(out[0].norms[0].w[j] / lmp_model_blocks(m)[0].norms[0].w[j] - 1));
    const double change = logits_change(m, out, eval.tokens, 64);
    printf("%s: awq alone: logits change %.2e relative (2-norm); block 0's first norm moved by up to %.2f\n", path,
           change, moved);
    ck_assert_msg(moved > 0.05, "%s: awq left the first norm as it was", path);
    ck_assert_msg(change < 1e-5, "%s: awq changes the logits by %g", path, change);
    lmp_blocks_free(out, m->arch.n_layers);
    free(os.stage.params);
    lmp_windows_free(&calib), lmp_windows_free(&eval);
    lmp_model_free(m);
}

/* Every architecture fixture (tests/fixtures/arch, its Hugging Face folder): awq alone (its scales
 * folded, nothing quantized) leaves the logits within 1e-5 (relative, 2-norm), or it is refused
 * naming what it does not take (the routed experts of a mixture).  One line each. */
START_TEST(every_fixture_keeps_its_logits_or_is_refused)
{
    static lmp_test_fixture fx[64];
    const int n = lmp_test_arch_folders(fx, 64);
    int kept = 0, refused = 0;
    for (int f = 0; f < n; f++) {
        const char *path = fx[f].path, *name = fx[f].name;
        lmp_model *m;
        ck_assert_msg(lmp_model_load(path, &m) == 0, "%s: %s", path, lmp_last_error());
        lmp_windows calib = windows(4, 32, m->arch.vocab, 0), eval = windows(1, 32, m->arch.vocab, 5);
        const char *settings[] = {"group=0", "bits=3", NULL};
        one_stage os;
        make_stage(&reg, &os, "awq", settings, NULL);
        lmp_block *out = NULL;
        if (lmp_compress(&ctx, &be, m, &os.v, &calib, &out) != 0) {
            printf("  %-16s refused: %s\n", name, lmp_last_error());
            ck_assert_msg(strstr(lmp_last_error(), "routed expert"), "%s: %s", path, lmp_last_error());
            refused++;
        } else {
            const double change = logits_change(m, out, eval.tokens, 32);
            printf("  %-16s awq alone: logits change %.2e relative\n", name, change);
            ck_assert_msg(change < 1e-5, "%s: awq changes the logits by %g", path, change);
            lmp_blocks_free(out, m->arch.n_layers);
            kept++;
        }
        free(os.stage.params);
        lmp_windows_free(&calib), lmp_windows_free(&eval);
        lmp_model_free(m);
    }
    printf("  %d fixtures kept by awq alone, %d refused by name\n", kept, refused);
    ck_assert_int_gt(kept, 0);
}
END_TEST

START_TEST(awq_keeps_stories260K) { check_invariance(STORIES, "group=4"); }
END_TEST
START_TEST(awq_keeps_gpt2_fixture) { check_invariance(GPT2, "group=8"); }
END_TEST
START_TEST(awq_keeps_qwen2_fixture) { check_invariance(QWEN2, "group=8"); }
END_TEST

/* ---- against the numpy reference ---------------------------------------------------------- */
typedef struct calib {
    lmp_model *m;
    lmp_windows w;
    float *X; /* [N_WIN, T_WIN, dim]: block 0's input */
    lmp_block_stats bs;
} calib;

static void calib_open(calib *c, const char *path)
{
    ck_assert_int_eq(lmp_model_load(path, &c->m), 0);
    c->w = windows(N_WIN, T_WIN, c->m->arch.vocab, 0);
    const int64_t per = T_WIN * c->m->arch.dim;
    c->X = malloc((size_t)(N_WIN * per) * sizeof *c->X);
    for (int i = 0; i < N_WIN; i++) lmp_embed(c->m, c->w.tokens + i * T_WIN, T_WIN, c->X + i * per);
    const lmp_block *blk = &lmp_model_blocks(c->m)[0];
    ck_assert_int_eq(lmp_block_stats_init(&c->bs, blk->n_linears), 0);
    for (int i = 0; i < blk->n_linears; i++) {
        c->bs.needs[i] = LMP_STAT_SAMPLE;
        c->bs.n_sample[i] = S_ALL;
    }
    ck_assert_int_eq(lmp_block_stats_collect(NULL, &be, &c->m->arch, blk, c->X, N_WIN, T_WIN, NULL, &c->bs), 0);
}

static void calib_close(calib *c)
{
    lmp_block_stats_free(&c->bs, lmp_model_blocks(c->m)[0].n_linears);
    free(c->X);
    lmp_windows_free(&c->w);
    lmp_model_free(c->m);
}

static int role(const lmp_block *b, lmp_role r)
{
    for (int i = 0; i < b->n_linears; i++)
        if (b->linears[i].role == r) return i;
    return -1;
}

static float *read_f32(const char *dir, const char *name, int64_t n)
{
    char path[1024];
    size_t size;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unsigned char *buf = lmp_test_slurp(path, &size);
    ck_assert_uint_eq(size, (size_t)n * sizeof(float));
    return (float *)buf;
}

static void put(const char *dir, const char *name, const void *p, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    lmp_test_spit(path, p, n);
}

/* One mapping of the reference case: its input sample and the stacked rows of its balance linears. */
static void add_scale_job(FILE *f, const char *dir, const char *name, const lmp_block *b, const int *lins, int n,
                          const lmp_stats *st)
{
    const int64_t C = b->linears[lins[0]].in;
    int64_t O = 0;
    for (int i = 0; i < n; i++) O += b->linears[lins[i]].out;
    float *W = malloc((size_t)(O * C) * sizeof *W), *p = W;
    for (int i = 0; i < n; i++) {
        memcpy(p, b->linears[lins[i]].w, (size_t)(b->linears[lins[i]].out * C) * sizeof *p);
        p += b->linears[lins[i]].out * C;
    }
    char file[256];
    snprintf(file, sizeof file, "%s.x.f32", name);
    put(dir, file, st->sample, (size_t)(st->n_sample * C) * sizeof(float));
    snprintf(file, sizeof file, "%s.w.f32", name);
    put(dir, file, W, (size_t)(O * C) * sizeof(float));
    fprintf(f, "scale %s %lld %lld %lld\n", name, (long long)st->n_sample, (long long)C, (long long)O);
    free(W);
}

/* s_j of a linear whose columns were multiplied by s: after / before at each column's largest weight. */
static void column_scales(const lmp_linear *before, const lmp_linear *after, float *s)
{
    for (int64_t j = 0; j < before->in; j++) {
        int64_t best = 0;
        for (int64_t o = 1; o < before->out; o++)
            if (fabsf(before->w[o * before->in + j]) > fabsf(before->w[best * before->in + j])) best = o;
        s[j] = after->w[best * before->in + j] / before->w[best * before->in + j];
    }
}

static double max_rel_diff(const float *a, const float *b, int64_t n)
{
    double d = 0;
    for (int64_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), 1e-30));
    return d;
}

static void run_ref(const char *dir)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import numpy' 2>/dev/null", lmp_test_python());
    if (system(cmd) != 0)
        ck_abort_msg("%s with numpy is needed for tools/ref/awq_ref.py: apt-get install python3-numpy", lmp_test_python());
    snprintf(cmd, sizeof cmd, "'%s' '%s/tools/ref/awq_ref.py' '%s'", lmp_test_python(), LMP_SOURCE_DIR, dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Every mapping of block 0: the plugin's scales against the reference's.  Returns the mappings. */
static int check_scales(const char *path, const char *tag, const char *group, const char *sym)
{
    calib c;
    calib_open(&c, path);
    const char *settings[] = {group, sym, "bits=3", "sample_tokens=1024", NULL};
    one_stage os;
    make_stage(&reg, &os, "awq", settings, NULL);
    lmp_block *out;
    ck_assert_msg(lmp_compress(&ctx, &be, c.m, &os.v, &c.w, &out) == 0, "%s", lmp_last_error());
    const lmp_block *b = &lmp_model_blocks(c.m)[0], *a = &out[0];
    char dir[1024], file[1200];
    snprintf(dir, sizeof dir, "%s/fixtures/awq-ref-%s", LMP_BINARY_DIR, tag);
    snprintf(file, sizeof file, "mkdir -p '%s'", dir);
    ck_assert_int_eq(system(file), 0);
    snprintf(file, sizeof file, "%s/case.txt", dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "bits 3\ngroup %s\nsymmetric %d\nduo 1\nn_grid 20\nmax_shrink 0.5\nclip_tokens 512\n",
            strchr(group, '=') + 1, strcmp(sym, "symmetric=true") == 0);
    const char *names[8];
    int kinds[8], idx[8], n_maps = 0; /* kind 0: norm idx; 1: a balance linear idx */
    for (int n = 0; n < b->n_norms; n++) {
        if (b->norms[n].n_fed == 0) continue;
        names[n_maps] = n == 0 ? "norm0" : n == 1 ? "norm1" : "norm";
        add_scale_job(f, dir, names[n_maps], b, b->norms[n].fed, b->norms[n].n_fed, &c.bs.stats[b->norms[n].fed[0]]);
        kinds[n_maps] = 0, idx[n_maps++] = n;
    }
    const int v = role(b, LMP_ROLE_V), o = role(b, LMP_ROLE_O), gate = role(b, LMP_ROLE_GATE), up = role(b, LMP_ROLE_UP),
              down = role(b, LMP_ROLE_DOWN);
    if (b->linears[v].out == b->linears[o].in) {
        add_scale_job(f, dir, "v_o", b, &o, 1, &c.bs.stats[o]);
        names[n_maps] = "v_o", kinds[n_maps] = 1, idx[n_maps++] = o;
    }
    if (gate >= 0) {
        add_scale_job(f, dir, "up_down", b, &down, 1, &c.bs.stats[down]);
        names[n_maps] = "up_down", kinds[n_maps] = 1, idx[n_maps++] = down;
    }
    (void)up;
    fclose(f);
    run_ref(dir);
    for (int k = 0; k < n_maps; k++) {
        const int64_t C = kinds[k] == 0 ? b->norms[idx[k]].dim : b->linears[idx[k]].in;
        snprintf(file, sizeof file, "%s.scales.f32", names[k]);
        float *ref = read_f32(dir, file, C), *got = malloc((size_t)C * sizeof *got);
        if (kinds[k] == 0)
            for (int64_t j = 0; j < C; j++) got[j] = b->norms[idx[k]].w[j] / a->norms[idx[k]].w[j];
        else
            column_scales(&b->linears[idx[k]], &a->linears[idx[k]], got);
        float lo = INFINITY, hi = 0;
        for (int64_t j = 0; j < C; j++) lo = fminf(lo, ref[j]), hi = fmaxf(hi, ref[j]);
        const double d = max_rel_diff(got, ref, C);
        printf("%s %s: %s scales vs numpy %.2e (reference scales %.3g..%.3g)\n", path, sym, names[k], d, lo, hi);
        ck_assert_msg(d < 1e-5, "%s: %s scales differ from the reference by %g", path, names[k], d);
        ck_assert_msg(hi / lo > 1.15, "%s: %s: the reference picked near-unit scales, a weak check", path, names[k]);
        free(ref), free(got);
    }
    lmp_blocks_free(out, c.m->arch.n_layers);
    free(os.stage.params);
    calib_close(&c);
    return n_maps;
}

START_TEST(scales_match_reference_stories260K)
{
    ck_assert_int_eq(check_scales(STORIES, "stories-asym", "group=4", "symmetric=false"), 3);
    ck_assert_int_eq(check_scales(STORIES, "stories-sym", "group=4", "symmetric=true"), 3);
}
END_TEST

START_TEST(scales_match_reference_gpt2_fixture)
{
    ck_assert_int_eq(check_scales(GPT2, "gpt2", "group=8", "symmetric=false"), 3);
}
END_TEST

/* clip_search on: block 0's down_proj against the reference's clip of the scaled weights with the
 * input divided by the scales. */
START_TEST(clip_matches_reference)
{
    calib c;
    calib_open(&c, STORIES);
    const char *plain[] = {"group=4", "bits=3", "sample_tokens=1024", NULL};
    const char *clipped[] = {"group=4", "bits=3", "sample_tokens=1024", "clip_search=true", "clip_tokens=256", NULL};
    one_stage os_plain, os_clip;
    make_stage(&reg, &os_plain, "awq", plain, NULL);
    make_stage(&reg, &os_clip, "awq", clipped, NULL);
    lmp_block *scaled, *out;
    ck_assert_msg(lmp_compress(&ctx, &be, c.m, &os_plain.v, &c.w, &scaled) == 0, "%s", lmp_last_error());
    ck_assert_msg(lmp_compress(&ctx, &be, c.m, &os_clip.v, &c.w, &out) == 0, "%s", lmp_last_error());
    const lmp_block *b = &lmp_model_blocks(c.m)[0];
    const int down = role(b, LMP_ROLE_DOWN);
    const lmp_linear *l0 = &b->linears[down], *ls = &scaled[0].linears[down], *lc = &out[0].linears[down];
    const int64_t C = l0->in, O = l0->out, S = c.bs.stats[down].n_sample;
    float *s = malloc((size_t)C * sizeof *s), *x = malloc((size_t)(S * C) * sizeof *x);
    column_scales(l0, ls, s);
    for (int64_t i = 0; i < S * C; i++) x[i] = c.bs.stats[down].sample[i] / s[i % C];
    char dir[1024], file[1200];
    snprintf(dir, sizeof dir, "%s/fixtures/awq-ref-clip", LMP_BINARY_DIR);
    snprintf(file, sizeof file, "mkdir -p '%s'", dir);
    ck_assert_int_eq(system(file), 0);
    put(dir, "down.x.f32", x, (size_t)(S * C) * sizeof *x);
    put(dir, "down.w.f32", ls->w, (size_t)(O * C) * sizeof(float));
    snprintf(file, sizeof file, "%s/case.txt", dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "bits 3\ngroup 4\nsymmetric 0\nduo 1\nn_grid 20\nmax_shrink 0.5\nclip_tokens 256\nclip down %lld %lld %lld\n",
            (long long)S, (long long)C, (long long)O);
    fclose(f);
    run_ref(dir);
    float *ref = read_f32(dir, "down.clipped.f32", O * C);
    int64_t clipped_n = 0, differ = 0;
    for (int64_t i = 0; i < O * C; i++) {
        clipped_n += ref[i] != ls->w[i];
        differ += fabsf(ref[i] - lc->w[i]) > 1e-6f * fmaxf(fabsf(ref[i]), 1e-6f);
    }
    printf("clip search: the reference clips %lld of %lld weights of %s; the plugin differs on %lld\n",
           (long long)clipped_n, (long long)(O * C), l0->name, (long long)differ);
    ck_assert_msg(clipped_n > O * C / 100, "the reference clipped almost nothing: a weak check");
    /* a (row, group) whose two best clip ratios tie to the summation order may go either way */
    ck_assert_msg(differ <= O * C / 1000, "%lld weights differ from the reference's clip", (long long)differ);
    free(s), free(x), free(ref);
    lmp_blocks_free(scaled, c.m->arch.n_layers);
    lmp_blocks_free(out, c.m->arch.n_layers);
    free(os_plain.stage.params), free(os_clip.stage.params);
    calib_close(&c);
}
END_TEST

/* ---- composition and refusals ------------------------------------------------------------- */
static int two_stages(lmp_model *m, const char *first, const char *const *s1, const char *second,
                      const char *const *s2, lmp_block **out)
{
    one_stage a, b;
    make_stage(&reg, &a, first, s1, NULL);
    make_stage(&reg, &b, second, s2, NULL);
    lmp_stage stages[2] = {a.stage, b.stage};
    lmp_variant v = {.name = "two", .stages = stages, .n_stages = 2};
    lmp_windows w = windows(4, 64, m->arch.vocab, 3);
    const int st = lmp_compress(&ctx, &be, m, &v, &w, out);
    free(a.stage.params), free(b.stage.params);
    free(w.tokens);
    return st;
}

START_TEST(awq_then_rtn_quantizes_the_scaled_weights)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    const char *awq[] = {"group=4", "bits=3", NULL}, *rtn[] = {"bits=3", "granularity=group", "group_size=4", NULL};
    lmp_block *out;
    ck_assert_msg(two_stages(m, "awq", awq, "rtn", rtn, &out) == 0, "%s", lmp_last_error());
    /* every linear lies on a recorded grid, and the first norm carries awq's scales */
    for (int i = 0; i < out[0].n_linears; i++) ck_assert_ptr_nonnull(out[0].linears[i].grid);
    double moved = 0;
    for (int64_t j = 0; j < out[0].norms[0].dim; j++)
        moved = fmax(moved, fabs(out[0].norms[0].w[j] / lmp_model_blocks(m)[0].norms[0].w[j] - 1));
    ck_assert_msg(moved > 0.05, "awq's scales are not in the norm");
    lmp_blocks_free(out, m->arch.n_layers);
    lmp_model_free(m);
}
END_TEST

START_TEST(awq_after_rtn_is_refused)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    const char *awq[] = {"group=4", NULL};
    lmp_block *out;
    ck_assert_int_ne(two_stages(m, "rtn", NULL, "awq", awq, &out), 0);
    printf("awq after rtn: %s\n", lmp_last_error());
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "put awq before"));
    lmp_model_free(m);
}
END_TEST

START_TEST(awq_group_not_dividing_is_refused)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    const char *awq[] = {"group=128", NULL};
    lmp_block *out;
    ck_assert_int_ne(try_compress_stage(m, "awq", awq, NULL, 1, &out), 0);
    printf("group 128 on stories260K: %s\n", lmp_last_error());
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "not a multiple of group 128"));
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "layers.0"));
    lmp_model_free(m);
}
END_TEST

/* ---- export: the scales are in the weights --------------------------------------------------- */
/* `lmpress run -o x.gguf` of awq -> rtn, with and without fused rotations (model.rotate r1, r2):
 * the exported file, evaluated by `lmpress eval`, gives the variant's own perplexity (the same
 * windows), so the folded scales and the turned embeddings, blocks and head are what it holds. */
static double ppl_in(const char *out, const char *line_start)
{
    const char *p = out, *hit = NULL;
    while ((p = strstr(p, line_start))) hit = p++;
    ck_assert_msg(hit != NULL, "no '%s' in:\n%s", line_start, out);
    return atof(hit + strlen(line_start));
}

static void export_reads_back(const char *rotate)
{
    char dir[512], cfg[1024], gguf[1024], args[4096], *out = malloc(1 << 16);
    lmp_test_tmpdir(dir, sizeof dir, "awq-export");
    snprintf(cfg, sizeof cfg, "%s/x.cfg", dir);
    snprintf(gguf, sizeof gguf, "%s/x.gguf", dir);
    FILE *f = fopen(cfg, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "model = { path = \"%s\"; tokenizer = \"%s/models/stories260K/tok512.bin\"; %s };\n"
               "calibration = { text = \"%s/models/stories260K/tinystories-synth-calib.txt\"; samples = 4; seq_len = 128; };\n"
               "eval = { texts = [ \"%s/models/stories260K/tinystories-synth-eval.txt\" ]; seq_len = 128; max_windows = 4; };\n"
               "variants = ( { name = \"awq-rtn\"; pipeline = (\n"
               "  { strategy = \"awq\"; params = { bits = 4; group = 4; symmetric = true; }; },\n"
               "  { strategy = \"rtn\"; params = { bits = 4; granularity = \"group\"; group_size = 32; }; } ); } );\n",
            STORIES, LMP_SOURCE_DIR, rotate, LMP_SOURCE_DIR, LMP_SOURCE_DIR);
    fclose(f);
    snprintf(args, sizeof args, "run '%s' -o '%s'", cfg, gguf);
    ck_assert_msg(lmp_test_cli_all(args, out, 1 << 16) == 0, "%s", out);
    /* the table row: name, bits/w, ppl */
    const char *row = strstr(out, "\nawq-rtn ");
    ck_assert_msg(row != NULL, "no row in:\n%s", out);
    double bits, ppl_run;
    ck_assert_int_eq(sscanf(row + 9, "%lf %lf", &bits, &ppl_run), 2);
    snprintf(args, sizeof args, "eval '%s' --text '%s/models/stories260K/tinystories-synth-eval.txt' --seq-len 128 "
             "--max-windows 4", gguf, LMP_SOURCE_DIR);
    ck_assert_msg(lmp_test_cli_all(args, out, 1 << 16) == 0, "%s", out);
    const double ppl_file = ppl_in(out, "ppl ");
    printf("awq -> rtn %s: run ppl %.4f, its exported GGUF %.6f\n", *rotate ? rotate : "(no rotation)", ppl_run, ppl_file);
    ck_assert_msg(fabs(ppl_file / ppl_run - 1) < 2e-4, "exported %g, evaluated %g", ppl_file, ppl_run); /* 4 digits printed */
    lmp_test_rmtree(dir);
    free(out);
}

START_TEST(awq_export_reads_back) { export_reads_back(""); }
END_TEST
START_TEST(awq_rotated_export_reads_back) { export_reads_back("rotate = { r1 = \"hadamard\"; r2 = \"hadamard\"; };"); }
END_TEST

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    Suite *s = suite_create("awq");
    TCase *tc = tcase_create("invariance");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, every_fixture_keeps_its_logits_or_is_refused);
    tcase_add_test(tc, awq_keeps_stories260K);
    tcase_add_test(tc, awq_keeps_gpt2_fixture);
    tcase_add_test(tc, awq_keeps_qwen2_fixture);
    suite_add_tcase(s, tc);
    tc = tcase_create("reference");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, scales_match_reference_stories260K);
    tcase_add_test(tc, scales_match_reference_gpt2_fixture);
    tcase_add_test(tc, clip_matches_reference);
    suite_add_tcase(s, tc);
    tc = tcase_create("compose");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, awq_then_rtn_quantizes_the_scaled_weights);
    tcase_add_test(tc, awq_after_rtn_is_refused);
    tcase_add_test(tc, awq_group_not_dividing_is_refused);
    suite_add_tcase(s, tc);
    tc = tcase_create("export");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, awq_export_reads_back);
    tcase_add_test(tc, awq_rotated_export_reads_back);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
