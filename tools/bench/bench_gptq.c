/* bench_gptq.c — where GPTQ's time goes on a real model, and how fast the Hessian is built.
 *
 *   build/tools/bench/bench_gptq [MODEL] [--text FILE] [--windows N] [--seq-len T]
 *                                [--backend NAME] [--bits B] [--group G] [--act-order]
 *                                [--no-true-sequential] [--original-inputs]
 *
 * Defaults: SmolLM2-135M-Instruct (models/cache), 128 windows of 512 tokens of WikiText-2
 * validation, cpu backend, 4 bits per channel on the asymmetric grid (sym = false).  It runs the real pipeline (lmp_compress with
 * the gptq plugin) once and splits its time with the core's counters:
 *   forward        block forwards over the calibration windows (statistics passes minus the
 *                  Hessian accumulation, plus propagation through the quantized blocks);
 *   hessian        the backend's xtx_accum calls (H += 2/n X^T X);
 *   factorisation  cholesky + chol_inverse (H^-1 and its Cholesky factor U);
 *   columns        the rest of the plugin's apply(): grids, the column loop and batch GEMMs.
 * It prints the calibration forwards as block-forward equivalents (lmp_compress_times.forwards)
 * in all and per block; $LMPRESS_FULL_PASSES=1 starts every pass at the block's input instead of
 * where the last one stopped (compress/calib_states.h), to compare.  --original-inputs calibrates
 * every block on the unmodified model's inputs (calibration.inputs = "original").  It then times the backend's GEMM (best of 10) on the Hessian's own shapes (X^T X as a GEMM on
 * the stacked rows, weighted as GPTQ's Hessians are) and on a 1024-cube, so the Hessian's
 * GFLOP/s (SYRK's count n*c*(c+1)) can be read against them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/ctx.h"
#include "base/error.h"
#include "base/log.h"
#include "compare/compare.h"
#include "compress/calib_stats.h"
#include "compress/pipeline.h"
#include "config/config.h"
#include "model/forward.h"
#include "plugin/backend.h"
#include "plugin/registry.h"
#include "text/tokenizer_open.h"

#define DEFAULT_MODEL LMP_SOURCE_DIR "/models/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
#define DEFAULT_TEXT LMP_SOURCE_DIR "/data/wikitext-2/wiki.valid.tokens"

static int set_param(const lmp_plugin *p, lmp_value *v, const char *name, double num)
{
    for (uint32_t k = 0; k < p->desc->n_params; k++)
        if (strcmp(p->desc->params[k].name, name) == 0) {
            v[k].num = num;
            if (p->desc->params[k].type == LMP_PARAM_ENUM) v[k].str = p->desc->params[k].choices[(int)num];
            return 0;
        }
    return lmp_fail(LMP_EINVAL, "gptq has no parameter %s", name);
}

/* An enum parameter by the name of its choice, so the bench does not depend on their order. */
static int set_choice(const lmp_plugin *p, lmp_value *v, const char *name, const char *choice)
{
    for (uint32_t k = 0; k < p->desc->n_params; k++)
        if (strcmp(p->desc->params[k].name, name) == 0 && p->desc->params[k].choices)
            for (int c = 0; p->desc->params[k].choices[c]; c++)
                if (strcmp(p->desc->params[k].choices[c], choice) == 0) return set_param(p, v, name, c);
    return lmp_fail(LMP_EINVAL, "gptq has no parameter %s with the choice %s", name, choice);
}

/* GFLOP/s of backend GEMM C[M,N] = op(A) B, best of `reps`. */
static double gemm_gflops(const lmp_backend *be, int ta, int64_t M, int64_t N, int64_t K, int reps)
{
    float *A = malloc((size_t)(M * K) * sizeof *A), *B = malloc((size_t)(K * N) * sizeof *B),
          *C = malloc((size_t)(M * N) * sizeof *C);
    if (!A || !B || !C) return 0;
    for (int64_t i = 0; i < M * K; i++) A[i] = (float)((i * 7 % 13) - 6) / 7.0f;
    for (int64_t i = 0; i < K * N; i++) B[i] = (float)((i * 5 % 11) - 5) / 5.0f;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = lmp_now_s();
        if (lmp_be_gemm(be, ta, 0, M, N, K, 1.0f, A, ta ? M : K, B, N, 0.0f, C, N)) break;
        double t = lmp_now_s() - t0;
        if (t < best) best = t;
    }
    free(A);
    free(B);
    free(C);
    return 2.0 * (double)M * (double)N * (double)K / best / 1e9;
}

static const char *cpu_model(char *buf, size_t n)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    snprintf(buf, n, "unknown CPU");
    if (!f) return buf;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) snprintf(buf, n, "%s", c + 2);
            buf[strcspn(buf, "\n")] = 0;
            break;
        }
    fclose(f);
    return buf;
}

int main(int argc, char **argv)
{
    const char *model = DEFAULT_MODEL, *text = DEFAULT_TEXT, *backend = "cpu";
    long windows = 128, T = 512, bits = 4, group = 0;
    int act_order = 0, true_sequential = 1, original = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--act-order") == 0) act_order = 1;
        else if (strcmp(a, "--no-true-sequential") == 0) true_sequential = 0;
        else if (strcmp(a, "--original-inputs") == 0) original = 1;
        else if (!v && a[0] == '-') { fprintf(stderr, "bench_gptq: %s needs a value\n", a); return 2; }
        else if (strcmp(a, "--text") == 0) text = argv[++i];
        else if (strcmp(a, "--backend") == 0) backend = argv[++i];
        else if (strcmp(a, "--windows") == 0) windows = atol(argv[++i]);
        else if (strcmp(a, "--seq-len") == 0) T = atol(argv[++i]);
        else if (strcmp(a, "--bits") == 0) bits = atol(argv[++i]);
        else if (strcmp(a, "--group") == 0) group = atol(argv[++i]);
        else if (a[0] == '-') { fprintf(stderr, "bench_gptq: unknown option %s (see the comment at the top of tools/bench/bench_gptq.c)\n", a); return 2; }
        else model = a;
    }
    if (windows < 1 || T < 2) { fprintf(stderr, "bench_gptq: bad --windows or --seq-len\n"); return 2; }
    lmp_registry reg;
    lmp_backend be;
    lmp_model *m = NULL;
    lmp_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    lmp_windows calib = {0};
    lmp_block *out = NULL;
    const lmp_plugin *p;
    lmp_value *params = NULL;
    lmp_ctx ctx; /* this benchmark's run */
    lmp_ctx_init(&ctx);
    int st = lmp_registry_init(&reg, &ctx, NULL, 0);
    if (!st) st = lmp_backend_open(&ctx, &reg, backend, NULL, &be);
    if (st) {
        fprintf(stderr, "bench_gptq: %s\n", lmp_last_error());
        return 1;
    }
    lmp_host_set_backend(&ctx, &be);
    lmp_host_set_verbosity(&ctx, LMP_LOG_WARN);
    if (!st) st = lmp_model_load(model, &m);
    if (!st) st = lmp_open_tokenizer(m, NULL, &tok);
    if (!st) st = lmp_tokenize_file(tok, text, &ids, &n_ids);
    if (!st) st = lmp_windows_cut(&ctx, ids, n_ids, windows, T, 0, text, &calib);
    if (!st) st = lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, "gptq", &p);
    if (!st) st = lmp_params_defaults(p->desc, &params);
    if (!st) st = set_param(p, params, "bits", (double)bits);
    /* the GPTQ reference's grid (asymmetric), as docs/results.md's timings were taken on */
    if (!st) st = set_param(p, params, "sym", 0);
    if (!st && group) st = set_choice(p, params, "granularity", "group") || set_param(p, params, "group_size", (double)group);
    if (!st && act_order) st = set_param(p, params, "act_order", 1);
    if (!st) st = set_param(p, params, "true_sequential", true_sequential);
    double total = 0;
    if (!st) {
        lmp_stage stage = {.plugin = p, .params = params};
        lmp_variant v = {.name = "gptq", .stages = &stage, .n_stages = 1,
                         .calib_inputs = original ? LMP_CALIB_INPUTS_ORIGINAL : LMP_CALIB_INPUTS_COMPRESSED};
        lmp_be_counters_reset(&be);
        lmp_compress_times_reset(&ctx);
        double t0 = lmp_now_s();
        st = lmp_compress(&ctx, &be, m, &v, &calib, &out);
        total = lmp_now_s() - t0;
    }
    if (st) {
        fprintf(stderr, "bench_gptq: %s\n", lmp_last_error());
    } else {
        const lmp_be_counters *c = lmp_be_counters_get(&be);
        const lmp_compress_times *t = lmp_compress_times_get(&ctx);
        double hess = c->seconds[LMP_OP_xtx_accum];
        double fact = c->seconds[LMP_OP_cholesky] + c->seconds[LMP_OP_chol_inverse];
        double fwd = t->collect - hess + t->propagate, cols = t->apply - fact;
        double hess_gf = c->flops[LMP_OP_xtx_accum] / hess / 1e9;
        /* The Hessian's calls: X^T X on LMP_HESSIAN_ROWS stacked rows, c = dim (q,k,v; o;
         * gate,up) three times for every hidden (down) once.  The same products as GEMMs: */
        const int64_t d = m->arch.dim, f = m->arch.hidden, n = lmp_hessian_stack_rows(T);
        double gd = gemm_gflops(&be, 1, d, d, n, 10), gf = gemm_gflops(&be, 1, f, f, n, 10);
        double wd = 3.0 * d * d, wf = (double)f * f; /* flop weights of the two shapes */
        double g_same = (wd + wf) / (wd / gd + wf / gf), g_cube = gemm_gflops(&be, 0, 1024, 1024, 1024, 10);
        char cpu[256];
        printf("bench_gptq: %s, %ld windows x %ld tokens, %ld-bit asym %s%s, backend %s\n", model, windows, T, bits,
               group ? "groups" : "per channel", act_order ? ", act-order" : "", backend);
        printf("machine: %s, %ld online CPUs\n", cpu_model(cpu, sizeof cpu), sysconf(_SC_NPROCESSORS_ONLN));
        printf("%-14s %10s %7s\n", "phase", "seconds", "share");
        const char *names[] = {"forward", "hessian", "factorisation", "columns"};
        double secs[] = {fwd, hess, fact, cols};
        for (int i = 0; i < 4; i++) printf("%-14s %10.2f %6.1f%%\n", names[i], secs[i], 100 * secs[i] / total);
        printf("%-14s %10.2f\n", "total", total);
        const char *passes = getenv("LMPRESS_FULL_PASSES");
        printf("calibration forwards (%s, %s inputs%s): %.2f block-forward equivalents, %.2f per block (FLOPs over "
               "one block forward over the windows: model/forward.h lmp_block_flops)\n",
               true_sequential ? "true_sequential" : "all linears at once", original ? "original" : "compressed",
               passes && *passes && strcmp(passes, "0") ? ", every pass from the block's input" : "", t->forwards,
               t->forwards / (double)m->arch.n_layers);
        printf("backend operations over 1%% of the time (seconds, calls, GFLOP/s where counted):\n");
        for (int op = 0; op < LMP_OP_COUNT; op++)
            if (c->seconds[op] > 0.01 * total)
                printf("  %-14s %9.2f s %9lld calls %8.1f GFLOP/s\n", lmp_op_name((lmp_op)op), c->seconds[op],
                       (long long)c->calls[op], c->flops[op] > 0 ? c->flops[op] / c->seconds[op] / 1e9 : 0.0);
        printf("hessian: %.1f GFLOP in %lld xtx_accum calls, %.1f GFLOP/s\n", c->flops[LMP_OP_xtx_accum] / 1e9,
               (long long)c->calls[LMP_OP_xtx_accum], hess_gf);
        printf("gemm on the Hessian's shapes (X^T X, X[%lld, %lld] and X[%lld, %lld], weighted): %.1f GFLOP/s "
               "-> hessian at %.0f%% of it\n", (long long)n, (long long)d, (long long)n, (long long)f, g_same,
               100 * hess_gf / g_same);
        printf("gemm 1024^3: %.1f GFLOP/s -> hessian at %.0f%% of it\n", g_cube, 100 * hess_gf / g_cube);
    }
    if (out) lmp_blocks_free(out, m->arch.n_layers);
    free(params);
    lmp_windows_free(&calib);
    free(ids);
    if (tok) lmp_tokenizer_free(tok);
    if (m) lmp_model_free(m);
    lmp_host_set_backend(&ctx, NULL);
    lmp_backend_close(&be);
    lmp_registry_free(&reg);
    lmp_ctx_clear(&ctx);
    return st ? 1 : 0;
}
