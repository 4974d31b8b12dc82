/* bench_bf16_gemm.c — GFLOP/s of the candidate bf16 GEMMs for the CPU backend's compute = "bf16"
 * (issue 42) against the f32 GEMM it replaces, on the shapes that matter:
 *   up   512 x 4096 -> 11008   a 7B up_proj on one window of 512 tokens (C = A W^T)
 *   sq   2048^3                 a square product
 *   smollm2 512 x 576 -> 1536   SmolLM2-135M's up_proj on one window (the tests' model)
 * Candidates:
 *   openblas sgemm        what the backend runs today (f32);
 *   openblas sbgemm       cblas_sbgemm, looked up at run time: Debian's OpenBLAS is built
 *                         without BUILD_BFLOAT16 and does not export it (the tool says so);
 *   onednn sgemm          dnnl_sgemm (f32), for reference;
 *   onednn matmul bf16    a bf16 x bf16 -> f32 matmul primitive (what cpu_bf16.c runs), with and
 *                         without the f32 -> bf16 conversion of both operands in the timing.
 * The threads: OPENBLAS_NUM_THREADS / OMP_NUM_THREADS as set by the caller (run it with both 2).
 * A benchmark, not a test: it prints a table and the processor; no assertion.
 *
 *   build/tools/bench/bench_bf16_gemm [reps]            (default 5; the best of reps is shown) */

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "cpu_bf16.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(seed >> 40) / (double)(1ull << 24) - 0.5);
    }
}

typedef void (*sbgemm_fn)(int, int, int, int, int, int, float, const uint16_t *, int,
                          const uint16_t *, int, float, float *, int);

static void print_cpu(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096];
    int got_model = 0, got_flags = 0;
    if (!f) return;
    while (fgets(line, sizeof line, f) && !(got_model && got_flags)) {
        if (!got_model && !strncmp(line, "model name", 10)) { printf("cpu: %s", strchr(line, ':') + 2); got_model = 1; }
        if (!got_flags && !strncmp(line, "flags", 5)) {
            printf("bf16 flags:");
            const char *want[] = {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"};
            for (int i = 0; i < 4; i++) {
                char pat[32];
                snprintf(pat, sizeof pat, " %s", want[i]);
                const char *hit = strstr(line, pat);
                int ok = hit && (hit[strlen(pat)] == ' ' || hit[strlen(pat)] == '\n');
                printf(" %s=%s", want[i], ok ? "yes" : "no");
            }
            printf("\n");
            got_flags = 1;
        }
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 5;
    const struct { const char *name; int M, N, K, tb; } shapes[] = {
        {"up 512x4096->11008", 512, 11008, 4096, 1},
        {"sq 2048^3", 2048, 2048, 2048, 0},
        {"smollm2 512x576->1536", 512, 1536, 576, 1}, /* SmolLM2-135M's up_proj on one window */
    };
    print_cpu();
    printf("openblas %s, core %s, threads %d\n", openblas_get_config(), openblas_get_corename(),
           openblas_get_num_threads());
    char why[256] = "";
    const int have = lmp_bf16_available(why, sizeof why);
    char what[128];
    lmp_bf16_describe(what, sizeof what);
    printf("onednn: %s%s%s\n", what, have ? "" : ": ", have ? "" : why);
    sbgemm_fn sbgemm = (sbgemm_fn)dlsym(RTLD_DEFAULT, "cblas_sbgemm");
    printf("openblas cblas_sbgemm: %s\n", sbgemm ? "exported" : "NOT exported by this OpenBLAS build");

    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int M = shapes[s].M, N = shapes[s].N, K = shapes[s].K, tb = shapes[s].tb;
        float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N);
        float *C = malloc(sizeof(float) * (size_t)M * N), *R = malloc(sizeof(float) * (size_t)M * N);
        uint16_t *Ab = malloc(2 * (size_t)M * K), *Bb = malloc(2 * (size_t)K * N);
        if (!A || !B || !C || !R || !Ab || !Bb) return 1;
        fill(A, (size_t)M * K, 1);
        fill(B, (size_t)K * N, 2);
        const int ldb = tb ? K : N;
        const double flops = 2.0 * M * N * K;
        double best;
#define TIME(label, call)                                                                        \
    do {                                                                                         \
        best = 1e30;                                                                             \
        for (int r = 0; r < reps + 1; r++) { /* +1: the first is a warm-up */                    \
            double t0 = now_s();                                                                 \
            call;                                                                                \
            double t = now_s() - t0;                                                             \
            if (r > 0 && t < best) best = t;                                                     \
        }                                                                                        \
        printf("%-22s %-26s %8.1f GFLOP/s  (%.1f ms)\n", shapes[s].name, label,                 \
               flops / best * 1e-9, best * 1e3);                                                 \
    } while (0)
        TIME("openblas sgemm f32", cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                                               M, N, K, 1.0f, A, K, B, ldb, 0.0f, R, N));
        lmp_bf16_from_f32(A, Ab, (int64_t)M * K); /* the operands in bf16, for the timings below */
        lmp_bf16_from_f32(B, Bb, (int64_t)K * N);
        if (sbgemm) {
            TIME("openblas sbgemm bf16", sbgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                                                M, N, K, 1.0f, Ab, K, Bb, ldb, 0.0f, C, N));
        }
        if (have) {
            lmp_bf16_gemm *g = lmp_bf16_gemm_new();
            TIME("onednn sgemm f32", lmp_bf16_dnnl_sgemm(0, tb, M, N, K, A, K, B, ldb, C, N));
            TIME("onednn matmul bf16", lmp_bf16_gemm_run_bf16(g, 0, tb, M, N, K, Ab, K, Bb, ldb, C, N));
            TIME("  + f32->bf16 of A, B", lmp_bf16_gemm_f32(g, 0, tb, M, N, K, 1.0f, A, K, B, ldb, 0.0f, C, N));
            double e2 = 0, r2 = 0;
            for (size_t i = 0; i < (size_t)M * N; i++) {
                e2 += ((double)C[i] - R[i]) * ((double)C[i] - R[i]);
                r2 += (double)R[i] * R[i];
            }
            printf("%-22s ||bf16 - f32|| / ||f32|| = %.3g (2^-8 = %.3g)\n", shapes[s].name, sqrt(e2 / r2), 0x1p-8);
            double t0 = now_s();
            lmp_bf16_from_f32(B, Bb, (int64_t)K * N);
            printf("%-22s f32->bf16 of the weight alone: %.1f ms\n", shapes[s].name, (now_s() - t0) * 1e3);
            lmp_bf16_gemm_free(g);
        }
        free(A), free(B), free(C), free(R), free(Ab), free(Bb);
    }
    return 0;
}
