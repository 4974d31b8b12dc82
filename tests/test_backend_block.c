/* test_backend_block.c — the device block path (model/block_device.h, plugin.h's block_run) of one
 * backend, held to the CPU backend's per-op path: part of the backend conformance suite
 * (test_backend_conformance holds the ops one by one; this holds a whole block).
 *
 *   test_backend_block [BACKEND]      (default opencl; ctest also runs it as
 *                                      test_backend_block_cuda with "cuda")
 *
 * A backend whose probe says no here skips (exit 77) with the probe's reason.  For each model —
 * stories260K (Llama: RMSNorm, RoPE, SwiGLU), the Qwen3 fixture (q/k norms, GQA) and the Gemma 2
 * fixture (post norms, GeGLU, the q scale, sliding windows and soft-capped scores) — every block
 * is run over 3 windows on both paths (also GPT-2: LayerNorm, biases, GELU; Qwen2 with YaRN,
 * Phi-3 with LongRoPE and GLM-4 with partial rotary: RoPE from a table): the statistics a compression asks for (X^T X, sum x^2,
 * min, max, abs-max and mean of every linear input: lmp_block_stats_collect) and the block's
 * outputs (lmp_calib_pass), which must agree by normalized MSE, nmse = sum((ref-got)^2) /
 * sum(ref^2), below 1e-9.  Why 1e-9: the ops held one by one sit at 1e-10 (GEMM, X^T X) to 1e-12
 * (norms) in the conformance suite, and a block chains about a dozen of them with two norms that
 * rescale their inputs' rounding; a wrong index, transpose, bias or window gives 1e-3 .. 1.  The
 * backend's counters must show the block ran on the device (block_calls) and that the bytes
 * moved are the block's, not the ops': no more than its weights, norms and RoPE table, the
 * windows' inputs and outputs and the statistics.
 *
 * Refusals by name: a linear with simulated activation quantization, an op kind the backend does
 * not know, and the CPU backend (no block path) are LMP_EUNSUPPORTED with the reason, and the
 * statistics then come from the per-op path all the same. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ctx.h"
#include "base/error.h"
#include "compress/calib_stats.h"
#include "model/block_device.h"
#include "model/forward.h"
#include "model/model.h"
#include "plugin/backend.h"
#include "plugin/registry.h"

#include "testutil.h"

static const char *g_backend = "opencl";

#define STORIES LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define FIXTURE(name) LMP_SOURCE_DIR "/tests/fixtures/arch/" name "/model.gguf"
#define ALL_STATS (LMP_STAT_HESSIAN | LMP_STAT_SQSUM | LMP_STAT_MINMAX | LMP_STAT_ABSMAX | LMP_STAT_MEAN)

typedef struct fixture {
    lmp_ctx ctx;
    lmp_registry reg;
    lmp_backend cpu, dev;
} fixture;

/* 0 and both backends open, or 1 after a skip (the backend is not usable here).  block_rows >= 0
 * sets the backend's parameter of that name where it has one (opencl: 0 one window at a time,
 * larger: several windows per batch, as on a GPU). */
static int open_fixture_rows(fixture *f, int block_rows)
{
    lmp_ctx_init(&f->ctx);
    lmp_host_set_verbosity(&f->ctx, LMP_LOG_ERROR);
    ck_assert_int_eq(lmp_registry_init(&f->reg, &f->ctx, NULL, 0), 0);
    ck_assert_msg(lmp_backend_open(&f->ctx, &f->reg, "cpu", NULL, &f->cpu) == 0, "%s", lmp_last_error());
    lmp_value *params = NULL;
    const lmp_plugin *p = lmp_registry_require(&f->reg, LMP_PLUGIN_BACKEND, g_backend, NULL) == 0
                              ? lmp_registry_find(&f->reg, LMP_PLUGIN_BACKEND, g_backend) : NULL;
    if (p && block_rows >= 0 && lmp_params_defaults(p->desc, &params) == 0)
        for (uint32_t i = 0; i < p->desc->n_params; i++)
            if (strcmp(p->desc->params[i].name, "block_rows") == 0) params[i].num = block_rows;
    const int st = lmp_backend_open(&f->ctx, &f->reg, g_backend, params, &f->dev);
    free(params);
    if (st != 0) {
        lmp_test_skip("SKIPPED the %s block path: the backend is not usable here: %s", g_backend, lmp_last_error());
        lmp_backend_close(&f->cpu);
        lmp_registry_free(&f->reg); /* no device runtime was started: nothing to keep loaded */
        lmp_ctx_clear(&f->ctx);
        return 1;
    }
    return 0;
}

static int open_fixture(fixture *f) { return open_fixture_rows(f, -1); }

static void close_fixture(fixture *f)
{
    lmp_backend_close(&f->dev);
    lmp_backend_close(&f->cpu);
}

static double nmse(const float *ref, const float *got, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)ref[i] - (double)got[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? num / den : num;
}

static void check_close(const char *model, int b, const char *what, const float *ref, const float *got, int64_t n)
{
    ck_assert_msg((ref == NULL) == (got == NULL), "%s block %d %s: present on one path only", model, b, what);
    if (!ref) return;
    const double e = nmse(ref, got, n);
    printf("  %s block %d %-8s nmse %.2e\n", model, b, what, e);
    ck_assert_msg(e < 1e-9, "%s block %d %s: nmse %.3e >= 1e-9", model, b, what, e);
}

/* n windows of T pseudo-random tokens, embedded. */
static float *windows_of(const lmp_model *m, int64_t n, int64_t T)
{
    float *X = malloc((size_t)(n * T * m->arch.dim) * sizeof *X);
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    ck_assert(X && tok);
    uint32_t seed = 12345;
    for (int64_t w = 0; w < n; w++) {
        for (int64_t t = 0; t < T; t++) {
            seed = seed * 1664525u + 1013904223u;
            tok[t] = (int32_t)((seed >> 8) % (uint32_t)m->arch.vocab);
        }
        lmp_embed(m, tok, T, X + w * T * m->arch.dim);
    }
    free(tok);
    return X;
}

/* The bytes a block pass must move at most: weights, norms, RoPE tables, the windows in and
 * out, and the statistics of every linear input (each X^T X and five [in] arrays, both ways). */
static uint64_t block_bytes(const lmp_arch *a, const lmp_block *blk, int64_t n, int64_t T)
{
    uint64_t f = 0;
    for (int i = 0; i < blk->n_linears; i++) {
        const lmp_linear *l = &blk->linears[i];
        f += (uint64_t)(l->out * l->in + (l->b ? l->out : 0));
        f += 2 * (uint64_t)(l->in * l->in + 5 * l->in);
    }
    for (int i = 0; i < blk->n_norms; i++) f += (uint64_t)(2 * blk->norms[i].dim);
    f += (uint64_t)(T * a->head_dim);          /* one RoPE table */
    f += 2 * (uint64_t)(n * T * a->dim);       /* the windows in and out */
    return 4 * f;
}

/* Every block of the model on both paths: statistics and outputs, the device's windows in
 * batches of block_rows rows (-1: the backend's default). */
static void compare_model_n(const char *path, const char *name, int64_t n, int64_t T, int block_rows)
{
    fixture f;
    if (open_fixture_rows(&f, block_rows)) return;
    lmp_model *m;
    ck_assert_msg(lmp_model_load(path, &m) == 0, "%s: %s", path, lmp_last_error());
    const lmp_arch *a = &m->arch;
    if (a->seq_len > 0 && T > a->seq_len) T = a->seq_len;
    const int64_t per = T * a->dim;
    float *Xc = windows_of(m, n, T), *Xd = malloc((size_t)(n * per) * sizeof *Xd);
    ck_assert_ptr_nonnull(Xd);
    memcpy(Xd, Xc, (size_t)(n * per) * sizeof *Xd);
    for (int64_t b = 0; b < a->n_layers; b++) {
        lmp_block blk;
        ck_assert_msg(lmp_model_block_copy(m, b, &blk) == 0, "%s", lmp_last_error());
        lmp_block_stats sc, sd;
        memset(&sc, 0, sizeof sc);
        memset(&sd, 0, sizeof sd);
        for (int i = 0; i < blk.n_linears; i++) sc.needs[i] = sd.needs[i] = ALL_STATS;
        const lmp_be_counters *cnt = lmp_be_counters_get(&f.dev);
        const int64_t calls0 = cnt->block_calls;
        uint64_t m0[2], m1[2];
        lmp_be_bytes_moved(&f.dev, m0);
        double share = 0;
        ck_assert_msg(lmp_block_stats_collect(NULL, &f.cpu, a, &blk, Xc, n, T, NULL, &sc) == 0, "%s", lmp_last_error());
        ck_assert_msg(lmp_block_stats_collect(NULL, &f.dev, a, &blk, Xd, n, T, NULL, &sd) == 0, "%s", lmp_last_error());
        ck_assert_msg(lmp_calib_pass(NULL, NULL, &f.cpu, a, &blk, Xc, Xc, 4, 4, NULL, NULL, n, T, &share) == 0, "%s",
                      lmp_last_error());
        ck_assert_msg(lmp_calib_pass(NULL, NULL, &f.dev, a, &blk, Xd, Xd, 4, 4, NULL, NULL, n, T, &share) == 0, "%s",
                      lmp_last_error());
        lmp_be_bytes_moved(&f.dev, m1);
        ck_assert_msg(cnt->block_calls == calls0 + 2, "%s block %lld: %lld block calls, expected 2 (statistics, "
                      "outputs) on the device", name, (long long)b, (long long)(cnt->block_calls - calls0));
        const uint64_t moved = (m1[0] - m0[0]) + (m1[1] - m0[1]), most = 2 * block_bytes(a, &blk, n, T);
        printf("  %s block %lld: %llu bytes moved (bound %llu)\n", name, (long long)b, (unsigned long long)moved,
               (unsigned long long)most);
        ck_assert_msg(moved <= most, "%s block %lld: %llu bytes moved, more than the block's %llu", name, (long long)b,
                      (unsigned long long)moved, (unsigned long long)most);
        for (int i = 0; i < blk.n_linears; i++) {
            const lmp_stats *r = &sc.stats[i], *g = &sd.stats[i];
            const int64_t C = blk.linears[i].in;
            ck_assert_int_eq(r->n_tokens, g->n_tokens);
            check_close(name, (int)b, "hessian", r->hessian, g->hessian, C * C);
            check_close(name, (int)b, "sqsum", r->sqsum, g->sqsum, C);
            check_close(name, (int)b, "min", r->min, g->min, C);
            check_close(name, (int)b, "max", r->max, g->max, C);
            check_close(name, (int)b, "absmax", r->absmax, g->absmax, C);
            check_close(name, (int)b, "mean", r->mean, g->mean, C);
        }
        check_close(name, (int)b, "outputs", Xc, Xd, n * per);
        lmp_block_stats_free(&sc, blk.n_linears);
        lmp_block_stats_free(&sd, blk.n_linears);
        lmp_block_free(&blk);
    }
    free(Xc);
    free(Xd);
    lmp_model_free(m);
    close_fixture(&f);
}

static void compare_model(const char *path, const char *name, int64_t T, int block_rows)
{
    compare_model_n(path, name, 3, T, block_rows);
}

START_TEST(test_block_stories260K)
{
    compare_model(STORIES, "stories260K", 64, -1);
    /* 5 windows of 512 rows: X^T X's rows are stacked 4 windows (2048 rows) at a time, so the
     * fifth flushes a full stack in the middle of the pass */
    compare_model_n(STORIES, "stories260K 5x512", 5, 512, -1);
}
END_TEST

START_TEST(test_block_qwen3) { compare_model(FIXTURE("qwen3"), "qwen3", 48, -1); }
END_TEST

START_TEST(test_block_gemma2) { compare_model(FIXTURE("gemma2"), "gemma2", 48, -1); }
END_TEST

/* GPT-2: LayerNorm, biases, GELU, learned positions (no RoPE). */
START_TEST(test_block_gpt2) { compare_model(FIXTURE("gpt2"), "gpt2", 48, -1); }
END_TEST

/* RoPE from a table: YaRN's scaled frequencies and attention factor (Qwen2), LongRoPE's table
 * and factor (Phi-3), and partial rotary with post norms (GLM-4: 8 of each head's 16 dims). */
START_TEST(test_block_rope_tables)
{
    compare_model(FIXTURE("qwen2-yarn"), "qwen2-yarn", 48, -1);
    compare_model(FIXTURE("phi3"), "phi3", 48, -1);
    compare_model(FIXTURE("glm4"), "glm4", 48, -1);
}
END_TEST

/* Three windows in one batch (RoPE and attention per window inside a batch, the sliding window
 * and soft-cap included): what a GPU runs by default. */
START_TEST(test_block_batched) {
    compare_model(FIXTURE("gemma2"), "gemma2 batched", 48, 4096);
    compare_model(FIXTURE("qwen3"), "qwen3 batched", 48, 4096);
}
END_TEST

/* What the path does not carry is refused by name, and the per-op path takes over. */
START_TEST(test_block_refusals)
{
    fixture f;
    if (open_fixture(&f)) return;
    lmp_model *m;
    ck_assert_msg(lmp_model_load(STORIES, &m) == 0, "%s", lmp_last_error());
    const lmp_arch *a = &m->arch;
    const int64_t n = 2, T = 16;
    float *X = windows_of(m, n, T);
    lmp_block blk;
    ck_assert_int_eq(lmp_model_block_copy(m, 0, &blk), 0);

    /* the CPU backend has no block path */
    ck_assert_int_eq(lmp_block_device_forward(&f.cpu, a, &blk, X, n, T, NULL, 0, NULL), LMP_EUNSUPPORTED);
    ck_assert_msg(strstr(lmp_last_error(), "no device block path"), "%s", lmp_last_error());

    /* simulated activation quantization: named, and the statistics come op by op */
    const int q = lmp_block_find(&blk, LMP_ROLE_Q);
    blk.linears[q].act = (lmp_aspec){.mode = LMP_ACT_DYN_TOKEN, .bits = 8};
    ck_assert_int_eq(lmp_block_device_forward(&f.dev, a, &blk, X, n, T, NULL, 4, NULL), LMP_EUNSUPPORTED);
    ck_assert_msg(strstr(lmp_last_error(), blk.linears[q].name) && strstr(lmp_last_error(), "activation quantization"),
                  "%s", lmp_last_error());
    const int64_t calls0 = lmp_be_counters_get(&f.dev)->block_calls;
    lmp_block_stats sc, sd;
    memset(&sc, 0, sizeof sc);
    memset(&sd, 0, sizeof sd);
    const int down = lmp_block_find(&blk, LMP_ROLE_DOWN);
    sc.needs[down] = sd.needs[down] = LMP_STAT_HESSIAN;
    ck_assert_int_eq(lmp_block_stats_collect(NULL, &f.cpu, a, &blk, X, n, T, NULL, &sc), 0);
    ck_assert_int_eq(lmp_block_stats_collect(NULL, &f.dev, a, &blk, X, n, T, NULL, &sd), 0);
    ck_assert_int_eq(lmp_be_counters_get(&f.dev)->block_calls, calls0); /* never reached the device */
    check_close("stories260K act-quant", 0, "hessian", sc.stats[down].hessian, sd.stats[down].hessian,
                blk.linears[down].in * blk.linears[down].in);
    lmp_block_stats_free(&sc, blk.n_linears);
    lmp_block_stats_free(&sd, blk.n_linears);

    /* an op kind the backend does not know (one a later core would send): declined by name */
    lmp_bop op = {.kind = LMP_BOP_KINDS, .cols = a->dim};
    lmp_block_job job = {.struct_size = sizeof job, .n_windows = n, .T = T, .n_bufs = 1, .buf_cols = {a->dim},
                         .n_ops = 1, .ops = &op, .x = X};
    ck_assert_int_eq(lmp_be_block_run(&f.dev, &job), LMP_EUNSUPPORTED);
    ck_assert_msg(strstr(lmp_last_error(), "kind"), "%s", lmp_last_error());

    /* LMPRESS_DEVICE_BLOCKS=0 turns the path off */
    blk.linears[q].act.mode = LMP_ACT_NONE;
    setenv("LMPRESS_DEVICE_BLOCKS", "0", 1);
    ck_assert_int_eq(lmp_block_device_forward(&f.dev, a, &blk, X, n, T, NULL, 4, NULL), LMP_EUNSUPPORTED);
    unsetenv("LMPRESS_DEVICE_BLOCKS");
    ck_assert_int_eq(lmp_block_device_forward(&f.dev, a, &blk, X, n, T, NULL, 0, NULL), 0);

    lmp_block_free(&blk);
    free(X);
    lmp_model_free(m);
    close_fixture(&f);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc > 1) g_backend = argv[1];
    setvbuf(stdout, NULL, _IOLBF, 0);
    Suite *s = suite_create("backend_block");
    TCase *tc = tcase_create("block");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_block_stories260K);
    tcase_add_test(tc, test_block_qwen3);
    tcase_add_test(tc, test_block_gemma2);
    tcase_add_test(tc, test_block_gpt2);
    tcase_add_test(tc, test_block_rope_tables);
    tcase_add_test(tc, test_block_batched);
    tcase_add_test(tc, test_block_refusals);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
