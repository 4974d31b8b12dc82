/* cpu_bf16.h — the CPU backend's bf16 GEMM (compute = "bf16", issue 42): both operands rounded to
 * bf16 (round to nearest even), multiplied with f32 accumulation by oneDNN's matmul primitive,
 * which runs AMX tiles where the CPU has them and AVX-512-BF16 elsewhere.
 *
 * Why oneDNN and not OpenBLAS's sbgemm: Debian's OpenBLAS (0.3.21) is built without
 * BUILD_BFLOAT16 and exports no cblas_sbgemm, and where OpenBLAS has one it has no AMX kernel in
 * that version; Debian's oneDNN (libdnnl-dev 2.6) has both (tools/bench/bench_bf16_gemm.c,
 * docs/backends.md "bf16 compute").
 *
 * Built without oneDNN (no libdnnl-dev at configure time) every entry still exists:
 * lmp_bf16_available() says why it is not, and the backend stays f32. */
#ifndef LMP_CPU_BF16_H
#define LMP_CPU_BF16_H

#include <stddef.h>
#include <stdint.h>

/* 1 when this build has oneDNN and the processor has bf16 instructions (oneDNN's own ISA query,
 * which honours DNNL_MAX_CPU_ISA: DNNL_MAX_CPU_ISA=AVX512_CORE makes a bf16 CPU look like one
 * without, which is how the fallback is tested on such a CPU).  Else 0 with the reason in why. */
int lmp_bf16_available(char *why, size_t why_size);

/* What runs the bf16 GEMM here, for messages: "oneDNN 2.6.3, ISA avx512_core_amx". */
void lmp_bf16_describe(char *out, size_t size);

/* dst[i] = src[i] rounded to bf16, to nearest even (NaN stays NaN). */
void lmp_bf16_from_f32(const float *src, uint16_t *dst, int64_t n);

/* The bf16 GEMM's state: oneDNN's engine and stream, and the operands' bf16 copies (grown as
 * needed, kept between calls).  Not shared between threads. */
typedef struct lmp_bf16_gemm lmp_bf16_gemm;
lmp_bf16_gemm *lmp_bf16_gemm_new(void); /* NULL: out of memory or oneDNN failed */
void lmp_bf16_gemm_free(lmp_bf16_gemm *g);

/* Threads of oneDNN's OpenMP regions started from this thread; 0 keeps OpenMP's default. */
void lmp_bf16_set_threads(int threads);

/* C[M,N] = alpha op(A) op(B) + beta C, row-major as cblas_sgemm, the products in bf16 and the
 * sums in f32.  Arguments are assumed checked (cpu_backend.c does).  0, or a negative LMP_E*
 * status (out of memory, oneDNN refused the shape). */
int lmp_bf16_gemm_f32(lmp_bf16_gemm *g, int ta, int tb, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc);

/* The same on operands already in bf16, alpha 1, beta 0 (the benchmark's timing without the
 * conversion). */
int lmp_bf16_gemm_run_bf16(lmp_bf16_gemm *g, int ta, int tb, int64_t M, int64_t N, int64_t K,
                           const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float *C,
                           int64_t ldc);

/* oneDNN's f32 sgemm, for the benchmark only. */
int lmp_bf16_dnnl_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                        int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc);

#endif
