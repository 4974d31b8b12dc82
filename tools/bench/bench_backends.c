/* bench_backends.c — GEMM throughput of every backend lmpress can run here, against a stated
 * peak.
 *
 *   bench_backends [--backends cpu,opencl,cuda] [--sizes 256,512,1024,2048] [--seconds S]
 *                  [--flops-per-cycle F] [--md] [--forward MODEL [--tokens T] [--windows N]]
 *
 * --forward MODEL adds a profile of the model's forward on each backend: N windows (default 4)
 * of T tokens (default 256) through lmp_forward, with the core's per-op counters (calls and
 * time, CPU fallbacks included), which shows where a backend spends its time.
 *
 * --block MODEL times what compression does to each block, on each backend and each path: the
 * statistics GPTQ asks for (X^T X of every linear's input) over N windows of T tokens, then the
 * block's outputs for the next block (lmp_block_stats_collect, lmp_calib_pass), for the first
 * --blocks B blocks (default 4), once op by op (LMPRESS_DEVICE_BLOCKS=0: every op stages its
 * operands) and once on the device block path where the backend has one.  Per block: the time
 * and the bytes moved host -> device and device -> host (the backend's counter, plugin.h's
 * bytes_moved), and the largest relative difference of the last block's outputs to the first
 * row's (the cpu backend's when it is listed).
 *
 * Each backend is opened through the core (lmp_backend_open, as a compare run does) and timed on
 * square single-precision GEMMs C[n,n] = A B (NN) and C = A B^T (NT, the forward's x W^T), with
 * operands in host memory: what the backend interface costs lmpress, staging to and from a device
 * included.  One warm-up call (kernel compilation, buffer growth), then calls until S seconds
 * (default 0.5) have passed; the best call gives GFLOP/s = 2 n^3 / t.
 *
 * Peak: the larger of this CPU's nominal single-precision peak, cores x clock x F FLOP per cycle
 * (F = 32 by default: two 256-bit FMA pipes per core, 2 x 8 lanes x 2 FLOP; Zen 2-4, Haswell to
 * Ice Lake client; AVX-512 on Zen 4 is double-pumped on the same pipes; use 64 for cores with two
 * 512-bit FMA units), and the best GFLOP/s the cpu backend (OpenBLAS) reached in this run.  The
 * clock is /proc/cpuinfo's "cpu MHz", the base clock in a virtual machine, which cannot see the
 * boost clock: OpenBLAS then beats the nominal figure, and its best is the honest ceiling.
 * A backend on another device (a GPU) gets no peak here: see its datasheet.  Unusable backends
 * are listed with their probe's reason. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/ctx.h"
#include "base/error.h"
#include "compress/calib_stats.h"
#include "model/block_device.h"
#include "model/forward.h"
#include "model/model.h"
#include "plugin/backend.h"
#include "plugin/registry.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Model name, clock (MHz) and online cores of this CPU. */
static void cpu_info(char *model, size_t n, double *mhz, long *cores)
{
    snprintf(model, n, "unknown CPU");
    *mhz = 0.0;
    *cores = sysconf(_SC_NPROCESSORS_ONLN);
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        v[strcspn(v, "\n")] = 0;
        if (strncmp(line, "model name", 10) == 0) snprintf(model, n, "%s", v);
        else if (strncmp(line, "cpu MHz", 7) == 0 && *mhz == 0.0) *mhz = atof(v);
    }
    if (f) fclose(f);
}

static int split(char *s, char **out, int max)
{
    int n = 0;
    for (char *t = strtok(s, ","); t && n < max; t = strtok(NULL, ",")) out[n++] = t;
    return n;
}

static void fill(float *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)((seed >> 8) & 0xFFFF) / 65536.0f - 0.5f;
    }
}

/* Best seconds of one n x n x n GEMM on be (tb: B transposed). */
static double time_gemm(const lmp_backend *be, int n, int tb, double min_seconds, int *reps,
                        int *status)
{
    size_t nn = (size_t)n * (size_t)n;
    float *A = malloc(nn * sizeof *A), *B = malloc(nn * sizeof *B), *C = malloc(nn * sizeof *C);
    if (!A || !B || !C) {
        free(A), free(B), free(C);
        *status = LMP_ENOMEM;
        return 0.0;
    }
    fill(A, nn, 1);
    fill(B, nn, 2);
    *status = lmp_be_gemm(be, 0, tb, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n); /* warm-up */
    double best = 1e30, start = now_s();
    *reps = 0;
    while (!*status && (*reps < 2 || now_s() - start < min_seconds)) {
        double t0 = now_s();
        *status = lmp_be_gemm(be, 0, tb, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        double t = now_s() - t0;
        if (t < best) best = t;
        ++*reps;
    }
    free(A), free(B), free(C);
    return best;
}

/* N windows of T pseudo-random tokens through the whole model; per-op counters printed. */
static int profile_forward(const lmp_backend *be, const char *name, lmp_model *m, int64_t T,
                           int windows, int md)
{
    lmp_block *blocks = lmp_model_blocks(m);
    if (!blocks) return -1;
    if (T > m->arch.seq_len && m->arch.seq_len > 0) T = m->arch.seq_len;
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    float *out = malloc((size_t)T * (size_t)m->arch.vocab * sizeof *out);
    if (!tok || !out) {
        free(tok), free(out);
        return -1;
    }
    unsigned seed = 7;
    for (int64_t t = 0; t < T; t++) {
        seed = seed * 1664525u + 1013904223u;
        tok[t] = (int32_t)((seed >> 8) % (unsigned)m->arch.vocab);
    }
    int st = lmp_forward(be, m, blocks, tok, T, 1, out); /* warm-up */
    lmp_be_counters_reset(be);
    double t0 = now_s();
    for (int w = 0; w < windows && !st; w++) st = lmp_forward(be, m, blocks, tok, T, 1, out);
    double total = now_s() - t0;
    free(tok), free(out);
    if (st) return st;
    const lmp_be_counters *c = lmp_be_counters_get(be);
    double in_ops = 0.0;
    for (int op = 0; op < LMP_OP_COUNT; op++) in_ops += c->seconds[op];
    printf("\n%s forward: %d windows x %lld tokens in %.3f s (%.1f ms per window; %.0f %% inside backend ops)\n",
           name, windows, (long long)T, total, 1e3 * total / windows, 100.0 * in_ops / total);
    if (md) printf("\n| op | calls | s | ms per call | %% of forward |\n|---|---:|---:|---:|---:|\n");
    for (int op = 0; op < LMP_OP_COUNT; op++) {
        if (!c->calls[op]) continue;
        printf(md ? "| %s | %lld | %.3f | %.3f | %.0f %% |\n" : "  %-16s %8lld calls %8.3f s %8.3f ms/call %4.0f%%\n",
               lmp_op_name((lmp_op)op), (long long)c->calls[op], c->seconds[op],
               1e3 * c->seconds[op] / (double)c->calls[op], 100.0 * c->seconds[op] / total);
    }
    return 0;
}

/* One row of the --block table: the first n_blocks blocks of m over `windows` windows of T
 * random tokens, the statistics then the outputs of each; *out_x (owned) gets the last outputs. */
static int profile_blocks(const lmp_backend *be, const char *name, const char *path, lmp_model *m, int64_t T,
                          int windows, int n_blocks, float **out_x, int md)
{
    const lmp_arch *a = &m->arch;
    if (T > a->seq_len && a->seq_len > 0) T = a->seq_len;
    if (n_blocks > a->n_layers) n_blocks = (int)a->n_layers;
    const int64_t per = T * a->dim;
    float *X = malloc((size_t)(windows * per) * sizeof *X);
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    if (!X || !tok) {
        free(X), free(tok);
        return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    unsigned seed = 11;
    for (int w = 0; w < windows; w++) {
        for (int64_t t = 0; t < T; t++) {
            seed = seed * 1664525u + 1013904223u;
            tok[t] = (int32_t)((seed >> 8) % (unsigned)a->vocab);
        }
        lmp_embed(m, tok, T, X + w * per);
    }
    free(tok);
    uint64_t m0[2], m1[2];
    int st = 0;
    { /* warm-up on a copy of the first windows (kernel compilation, first-touch allocations) */
        lmp_block blk;
        float *W = malloc((size_t)per * sizeof *W);
        double share;
        if (!W || (st = lmp_model_block_copy(m, 0, &blk))) {
            free(W), free(X);
            return st ? st : lmp_fail(LMP_ENOMEM, "out of memory");
        }
        memcpy(W, X, (size_t)per * sizeof *W);
        lmp_block_stats bs;
        memset(&bs, 0, sizeof bs);
        for (int i = 0; i < blk.n_linears && i < LMP_MAX_LINEARS; i++) bs.needs[i] = LMP_STAT_HESSIAN;
        st = lmp_block_stats_collect(NULL, be, a, &blk, W, 1, T, NULL, &bs);
        if (!st) st = lmp_calib_pass(NULL, NULL, be, a, &blk, W, W, 4, 4, NULL, NULL, 1, T, &share);
        lmp_block_stats_free(&bs, blk.n_linears);
        lmp_block_free(&blk);
        free(W);
    }
    lmp_be_bytes_moved(be, m0);
    double seconds = 0;
    for (int b = 0; b < n_blocks && !st; b++) {
        lmp_block blk;
        if ((st = lmp_model_block_copy(m, b, &blk))) break;
        lmp_block_stats bs;
        memset(&bs, 0, sizeof bs);
        for (int i = 0; i < blk.n_linears && i < LMP_MAX_LINEARS; i++) bs.needs[i] = LMP_STAT_HESSIAN;
        double share = 0, t0 = now_s();
        st = lmp_block_stats_collect(NULL, be, a, &blk, X, windows, T, NULL, &bs);
        if (!st) st = lmp_calib_pass(NULL, NULL, be, a, &blk, X, X, 4, 4, NULL, NULL, windows, T, &share);
        seconds += now_s() - t0;
        lmp_block_stats_free(&bs, blk.n_linears);
        lmp_block_free(&blk);
    }
    lmp_be_bytes_moved(be, m1);
    if (st) {
        free(X);
        return st;
    }
    const double mb = 1.0 / (1024.0 * 1024.0) / n_blocks;
    double diff = -1;
    if (*out_x) { /* against the first row's outputs */
        double md_ = 0, mr = 0;
        for (int64_t i = 0; i < windows * per; i++) {
            const double dd = fabs((double)X[i] - (double)(*out_x)[i]);
            if (!(dd <= md_)) md_ = dd;
            if (fabs((double)(*out_x)[i]) > mr) mr = fabs((double)(*out_x)[i]);
        }
        diff = md_ / mr;
        free(X);
    } else {
        *out_x = X;
    }
    char d[32] = "(reference)";
    if (diff >= 0) snprintf(d, sizeof d, "%.1e", diff);
    printf(md ? "| %s | %s | %d x %lld | %d | %.1f | %.2f | %.2f | %s |\n"
              : "%-7s %-7s %d x %lld tokens, %d blocks: %.1f ms per block, %.2f MB to the device, %.2f MB back, "
                "max rel diff %s\n",
           name, path, windows, (long long)T, n_blocks, 1e3 * seconds / n_blocks, (double)(m1[0] - m0[0]) * mb,
           (double)(m1[1] - m0[1]) * mb, d);
    return 0;
}

int main(int argc, char **argv)
{
    char backends_arg[256] = "cpu,opencl,cuda", sizes_arg[256] = "256,512,1024,2048";
    double min_seconds = 0.5, fpc = 32.0;
    int md = 0, windows = 4;
    const char *forward_model = NULL, *block_model = NULL;
    int n_blocks = 4;
    int64_t tokens = 256;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--backends") == 0 && i + 1 < argc) snprintf(backends_arg, sizeof backends_arg, "%s", argv[++i]);
        else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) snprintf(sizes_arg, sizeof sizes_arg, "%s", argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) min_seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--flops-per-cycle") == 0 && i + 1 < argc) fpc = atof(argv[++i]);
        else if (strcmp(argv[i], "--md") == 0) md = 1;
        else if (strcmp(argv[i], "--forward") == 0 && i + 1 < argc) forward_model = argv[++i];
        else if (strcmp(argv[i], "--block") == 0 && i + 1 < argc) block_model = argv[++i];
        else if (strcmp(argv[i], "--blocks") == 0 && i + 1 < argc) n_blocks = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) tokens = atoll(argv[++i]);
        else if (strcmp(argv[i], "--windows") == 0 && i + 1 < argc) windows = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_backends [--backends a,b] [--sizes n,m] [--seconds S] "
                            "[--flops-per-cycle F] [--md] [--forward MODEL | --block MODEL [--blocks B]] [--tokens T] "
                            "[--windows N]\n");
            return 2;
        }
    }
    char *names[16], *size_s[16];
    int nb = split(backends_arg, names, 16), ns = split(sizes_arg, size_s, 16);
    char model[256];
    double mhz;
    long cores;
    cpu_info(model, sizeof model, &mhz, &cores);
    double peak = (double)cores * mhz * 1e-3 * fpc;
    printf("# bench_backends: %s, %ld cores at %.0f MHz (/proc/cpuinfo)\n", model, cores, mhz);
    printf("# CPU f32 nominal peak %.1f GFLOP/s = %ld cores x %.2f GHz x %.0f FLOP/cycle\n", peak, cores,
           mhz * 1e-3, fpc);
    printf("# square GEMM, operands in host memory (staging included), best of >= %.1f s\n",
           min_seconds);
    lmp_ctx ctx; /* this benchmark's run */
    lmp_ctx_init(&ctx);
    lmp_host_set_verbosity(&ctx, LMP_LOG_ERROR);
    lmp_registry reg;
    if (lmp_registry_init(&reg, &ctx, NULL, 0)) {
        fprintf(stderr, "bench_backends: %s\n", lmp_last_error());
        return 1;
    }
    struct row {
        const char *name;
        int n, on_cpu, reps[2];
        double gf[2];
    } rows[64];
    int n_rows = 0, failures = 0;
    double best_cpu = 0.0;
    for (int b = 0; b < nb; b++) {
        lmp_backend be;
        if (lmp_backend_open(&ctx, &reg, names[b], NULL, &be)) {
            printf("%s%s: not usable here: %s\n", md ? "\n" : "", names[b], lmp_last_error());
            continue;
        }
        /* PoCL's OpenCL device is this CPU; any other device has no peak here */
        int on_cpu = strcmp(names[b], "cpu") == 0 || strcmp(names[b], "opencl") == 0;
        for (int s = 0; s < ns; s++) {
            int n = atoi(size_s[s]), reps[2], st[2];
            double t[2], gf[2];
            for (int tb = 0; tb < 2; tb++) {
                t[tb] = time_gemm(&be, n, tb, min_seconds, &reps[tb], &st[tb]);
                gf[tb] = st[tb] ? 0.0 : 2.0 * (double)n * n * n / t[tb] * 1e-9;
            }
            if (st[0] || st[1]) {
                printf("%s n=%d: gemm failed: %s\n", names[b], n, lmp_last_error());
                failures++;
                continue;
            }
            if (n_rows < 64) rows[n_rows++] = (struct row){names[b], n, on_cpu, {reps[0], reps[1]}, {gf[0], gf[1]}};
            if (strcmp(names[b], "cpu") == 0)
                for (int k = 0; k < 2; k++) best_cpu = gf[k] > best_cpu ? gf[k] : best_cpu;
            fprintf(stderr, "bench_backends: %s n=%d done\n", names[b], n);
        }
        lmp_backend_close(&be);
    }
    int measured = best_cpu > peak;
    if (measured) peak = best_cpu;
    printf("# CPU peak used: %.1f GFLOP/s (%s)\n", peak,
           measured ? "the cpu backend's best here, above the nominal figure at the base clock"
                    : "nominal");
    if (md) printf("\n| backend | n | NN GFLOP/s | NN %% of CPU peak | NT GFLOP/s | NT %% of CPU peak |\n|---|---:|---:|---:|---:|---:|\n");
    for (int r = 0; r < n_rows; r++) {
        const struct row *w = &rows[r];
        if (md && w->on_cpu)
            printf("| %s | %d | %.1f | %.0f %% | %.1f | %.0f %% |\n", w->name, w->n, w->gf[0],
                   100.0 * w->gf[0] / peak, w->gf[1], 100.0 * w->gf[1] / peak);
        else if (md)
            printf("| %s | %d | %.1f | n/a | %.1f | n/a |\n", w->name, w->n, w->gf[0], w->gf[1]);
        else
            printf("%-7s n=%5d  NN %8.1f GFLOP/s (%3.0f%% of CPU peak, %d calls)  NT %8.1f GFLOP/s (%3.0f%%, %d calls)\n",
                   w->name, w->n, w->gf[0], w->on_cpu ? 100.0 * w->gf[0] / peak : 0.0, w->reps[0],
                   w->gf[1], w->on_cpu ? 100.0 * w->gf[1] / peak : 0.0, w->reps[1]);
    }
    if (forward_model) {
        lmp_model *m;
        if (lmp_model_load(forward_model, &m)) {
            fprintf(stderr, "bench_backends: %s\n", lmp_last_error());
            lmp_registry_free(&reg);
            return 1;
        }
        for (int b = 0; b < nb; b++) {
            lmp_backend be;
            if (lmp_backend_open(&ctx, &reg, names[b], NULL, &be)) continue;
            if (profile_forward(&be, names[b], m, tokens, windows, md)) {
                printf("%s forward failed: %s\n", names[b], lmp_last_error());
                failures++;
            }
            lmp_backend_close(&be);
        }
        lmp_model_free(m);
    }
    if (block_model) {
        lmp_model *m;
        if (lmp_model_load(block_model, &m)) {
            fprintf(stderr, "bench_backends: %s\n", lmp_last_error());
            lmp_registry_free(&reg);
            return 1;
        }
        printf("\n# per block: GPTQ's statistics (X^T X of every linear input) and the block's outputs, %s\n",
               block_model);
        if (md) printf("\n| backend | path | windows x tokens | blocks | ms per block | MB to device per block | "
                       "MB to host per block | max rel diff of the outputs |\n|---|---|---:|---:|---:|---:|---:|---|\n");
        float *ref = NULL;
        for (int b = 0; b < nb; b++) {
            lmp_backend be;
            if (lmp_backend_open(&ctx, &reg, names[b], NULL, &be)) continue;
            for (int path = 0; path < 2; path++) {
                const int device = LMP_BACKEND_I_HAS(be.vt, block_run);
                if (path == 1 && !device) break; /* no block path: the op-by-op row is all there is */
                setenv("LMPRESS_DEVICE_BLOCKS", path ? "1" : "0", 1);
                if (profile_blocks(&be, names[b], path ? "block" : "per-op", m, tokens, windows, n_blocks, &ref, md)) {
                    printf("%s block profile failed: %s\n", names[b], lmp_last_error());
                    failures++;
                }
            }
            unsetenv("LMPRESS_DEVICE_BLOCKS");
            lmp_backend_close(&be);
        }
        free(ref);
        lmp_model_free(m);
    }
    lmp_registry_free(&reg);
    lmp_ctx_clear(&ctx);
    return failures ? 1 : 0;
}
