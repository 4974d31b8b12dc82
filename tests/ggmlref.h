/* ggmlref.h — ggml's own reference quantizers for the suites: runs the harness that
 * tools/ref/ggml_quant_ref.sh builds from the llama.cpp source on PyPI (tools/test.sh runs it)
 * on a matrix and hands back ggml's blocks and ggml's dequantization of them; and the block
 * layouts, to read ggml's per-block scales out of those blocks.
 *
 * Without the harness (no network when tools/test.sh ran, or a build folder it did not set up)
 * the calls print "SKIPPED <test>: ..." and return -1, and the caller's test passes. */
#ifndef LMP_GGMLREF_H
#define LMP_GGMLREF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "testutil.h"

#define GGML_REF_HARNESS LMP_BINARY_DIR "/ggml-ref/ggml_quant_ref"

/* One ggml block format, as ggml-common.h lays out its block struct (packed, little-endian):
 * `block_weights` weights in `block_bytes` bytes; the fp16 d at byte d_at (for the K types and
 * IQ4_XS the super-block's d, which scales the sub-block scales), the fp16 m (Q4_1, Q5_1) or dmin
 * (Q2_K, Q4_K, Q5_K) at m_at, -1 where there is none.  Blocks follow each other along a row and
 * rows follow each other: block b of row r is block r * cols / block_weights + b. */
typedef struct ggml_ref_type {
    const char *name;
    int block_weights, block_bytes, d_at, m_at;
} ggml_ref_type;

/* Every TYPE the harness takes.  The layouts of the rest of a block, for whoever parses codes:
 *   q8_0: int8 qs[32] at 2.  q4_0 / iq4_nl: qs[16] at 2, weight j in the low nibble of qs[j],
 *   j + 16 in the high one (iq4_nl's nibble indexes ggml's kvalues_iq4nl).  q4_1: qs[16] at 4.
 *   q5_0: qh[4] at 2 (bit j: the fifth bit of weight j), qs[16] at 6.  q5_1: qh[4] at 4, qs at 8.
 *   iq4_xs: u16 scales_h at 2, scales_l[4] at 4, qs[128] at 8.
 *   q2_K: scales[16] at 0 (low nibble scale, high nibble min), qs[64] at 16.
 *   q3_K: hmask[32] at 0, qs[64] at 32, scales[12] at 96 (6-bit, packed).
 *   q4_K: scales[12] at 4 (6-bit scales and mins, packed), qs[128] at 16.
 *   q5_K: scales[12] at 4, qh[32] at 16, qs[128] at 48.  q6_K: ql[128] at 0, qh[64] at 128,
 *   int8 scales[16] at 192.  q1_0: qs[16] at 2 (bit j of byte j/8).  q2_0: qs[16] at 2 (code j in
 *   bits 2(j%4) of byte j/4). */
static const ggml_ref_type GGML_REF_TYPES[] = {
    {"q8_0", 32, 34, 0, -1},    {"q4_0", 32, 18, 0, -1},    {"q4_1", 32, 20, 0, 2},
    {"q5_0", 32, 22, 0, -1},    {"q5_1", 32, 24, 0, 2},     {"iq4_nl", 32, 18, 0, -1},
    {"iq4_xs", 256, 136, 0, -1}, {"q2_k", 256, 84, 80, 82}, {"q3_k", 256, 110, 108, -1},
    {"q4_k", 256, 144, 0, 2},   {"q5_k", 256, 176, 0, 2},   {"q6_k", 256, 210, 208, -1},
    /* mxfp4: e (E8M0) at 0, qs[16] at 1; nvfp4: d[4] (UE4M3) at 0, qs[32] at 4: no fp16 d */
    {"mxfp4", 32, 17, -1, -1},  {"nvfp4", 64, 36, -1, -1},  {"q1_0", 128, 18, 0, -1},
    {"q2_0", 64, 18, 0, -1},
};

/* The layout of `type` (ggml's name, case ignored: "q4_K" and "q4_k" are one); NULL if the
 * harness does not take it. */
static inline const ggml_ref_type *ggml_ref_type_of(const char *type)
{
    for (size_t i = 0; i < sizeof GGML_REF_TYPES / sizeof *GGML_REF_TYPES; i++)
        if (strcasecmp(type, GGML_REF_TYPES[i].name) == 0) return &GGML_REF_TYPES[i];
    return NULL;
}

/* The bytes of a [rows, cols] matrix in `type`; cols must be whole blocks. */
static inline size_t ggml_ref_nbytes(const char *type, int64_t rows, int64_t cols)
{
    const ggml_ref_type *t = ggml_ref_type_of(type);
    ck_assert_msg(t != NULL, "ggmlref: unknown type %s", type);
    ck_assert_msg(cols % t->block_weights == 0, "ggmlref: %s needs columns in blocks of %d, not %lld", type,
                  t->block_weights, (long long)cols);
    return (size_t)rows * (size_t)(cols / t->block_weights) * (size_t)t->block_bytes;
}

/* An IEEE half (little-endian) as a float, decoded here rather than with the plugin.h helper
 * the suites test. */
static inline float ggml_ref_half(const unsigned char *p)
{
    const unsigned h = (unsigned)p[0] | (unsigned)p[1] << 8, e = (h >> 10) & 31, m = h & 1023;
    const float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), (int)e - 25);
    return (h & 0x8000) ? -v : v;
}

/* Block `block`'s d (and m / dmin: ggml_ref_block_m) in the blocks `bytes` of `type`. */
static inline float ggml_ref_block_d(const char *type, const unsigned char *bytes, size_t block)
{
    const ggml_ref_type *t = ggml_ref_type_of(type);
    ck_assert_msg(t != NULL && t->d_at >= 0, "ggmlref: %s has no fp16 d", type);
    return ggml_ref_half(bytes + block * (size_t)t->block_bytes + (size_t)t->d_at);
}

static inline float ggml_ref_block_m(const char *type, const unsigned char *bytes, size_t block)
{
    const ggml_ref_type *t = ggml_ref_type_of(type);
    ck_assert_msg(t != NULL && t->m_at >= 0, "ggmlref: %s has no m / dmin", type);
    return ggml_ref_half(bytes + block * (size_t)t->block_bytes + (size_t)t->m_at);
}

/* 1 when the harness is there; otherwise prints why `test` skips and returns 0. */
static inline int ggml_ref_available(const char *test)
{
    if (access(GGML_REF_HARNESS, X_OK) == 0) return 1;
    lmp_test_skip("SKIPPED %s: %s is missing (tools/ref/ggml_quant_ref.sh builds it)\n", test, GGML_REF_HARNESS);
    return 0;
}

/* ggml's `type` of the row-major [rows, cols] matrix w, quantized as llama-quantize would
 * (ggml_quantize_chunk) with imatrix[cols] (one weight per input column, as llama.cpp's imatrix)
 * or NULL for none: its dequantization into deq[rows * cols] and its blocks into bytes[nbytes]
 * (nbytes = ggml_ref_nbytes(type, rows, cols)); either output may be NULL.  Returns 0, or -1
 * after printing SKIPPED for `test` when the harness is missing; anything else fails the test. */
static inline int ggml_ref_run(const char *test, const char *type, int64_t rows, int64_t cols, const float *w,
                               const float *imatrix, float *deq, unsigned char *bytes, size_t nbytes)
{
    if (!ggml_ref_available(test)) return -1;
    const size_t n = (size_t)rows * (size_t)cols, want = ggml_ref_nbytes(type, rows, cols);
    ck_assert_msg(!bytes || nbytes == want, "ggmlref: %s of %lld x %lld takes %zu bytes, not %zu", type, (long long)rows,
                  (long long)cols, want, nbytes);
    char dir[64], cmd[1024];
    lmp_test_tmpdir(dir, sizeof dir, "ggmlref");
    lmp_test_spit(lmp_test_path(dir, "in.f32"), w, n * sizeof *w);
    if (imatrix) lmp_test_spit(lmp_test_path(dir, "imatrix.f32"), imatrix, (size_t)cols * sizeof *imatrix);
    snprintf(cmd, sizeof cmd, "'%s' %s %lld %lld '%s/in.f32' '%s/out.bin' '%s/deq.f32'%s%s%s", GGML_REF_HARNESS, type,
             (long long)rows, (long long)cols, dir, dir, dir, imatrix ? " '" : "", imatrix ? lmp_test_path(dir, "imatrix.f32") : "",
             imatrix ? "'" : "");
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
    size_t got;
    unsigned char *b = lmp_test_slurp(lmp_test_path(dir, "out.bin"), &got);
    ck_assert_msg(got == want, "ggmlref: ggml wrote %zu bytes of %s, expected %zu", got, type, want);
    if (bytes) memcpy(bytes, b, want);
    free(b);
    b = lmp_test_slurp(lmp_test_path(dir, "deq.f32"), &got);
    ck_assert_msg(got == n * sizeof(float), "ggmlref: %zu bytes of dequantized %s, expected %zu", got, type, n * sizeof(float));
    if (deq) memcpy(deq, b, got); /* little-endian floats: the hosts lmpress runs on */
    free(b);
    lmp_test_rmtree(dir);
    return 0;
}

#endif
