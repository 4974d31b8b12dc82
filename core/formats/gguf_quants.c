/* gguf_quants.c — see gguf_quants.h.
 *
 * Transcriptions of ggml-quants.c's dequantize_row_* (llama.cpp's ggml, MIT licence, Copyright
 * (c) 2023-2026 The ggml authors; the reference C, not the SIMD paths), keeping its operation
 * order so the results are bit-identical; the block layouts are ggml-common.h's.  Where ggml
 * copies bytes into a uint32_t or reads a grid entry through a uint8_t pointer (little-endian
 * hosts), the bytes are assembled by hand, so the host's byte order does not matter.
 * tests/test_gguf_quants.c holds every decoder to the PyPI gguf package's numpy dequantizers. */
#include "formats/gguf_quants.h"

#include "formats/gguf.h"
#include "formats/gguf_le.h"
#include "formats/gguf_quant_tables.h"

#include <math.h>

/* ggml's a*b + c (Q4_1, Q5_1, the K-quants' d*q - m) is rounded after the product and after the
 * sum, in its reference C and in numpy.  In these formats the products are exact anyway (an fp16
 * scale has 11 significant bits; times a quant, a 6-bit sub-scale or both, at most 24), so a fused
 * multiply-add would give the same bits; contraction is still turned off (GCC's ISO C mode has it
 * off already) so that this does not silently depend on that arithmetic fact. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* IEEE half -> single, exact for every input (subnormals, infinities, NaN payloads). */
static float fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | mant << 13);
    if (exp != 0) return bits_to_f32(sign | (exp + 112) << 23 | mant << 13); /* rebias 15->127 */
    /* zero or subnormal: mant * 2^-24, exact in single precision (mant < 2^10) */
    float v = (float)mant * 0x1p-24f;
    return sign ? -v : v;
}

static float half_at(const unsigned char *p) { return fp16_to_f32(ld16(p)); }

/* ---- plain floats (a "block" is one value) ---------------------------------------------------- */

static void deq_f32(const unsigned char *x, int64_t n, float *y)
{
    for (int64_t i = 0; i < n; i++) y[i] = bits_to_f32(ld32(x + 4 * i));
}

static void deq_f16(const unsigned char *x, int64_t n, float *y)
{
    for (int64_t i = 0; i < n; i++) y[i] = half_at(x + 2 * i);
}

static void deq_bf16(const unsigned char *x, int64_t n, float *y)
{
    for (int64_t i = 0; i < n; i++) y[i] = bits_to_f32((uint32_t)ld16(x + 2 * i) << 16);
}

/* ---- blocks of 32: fp16 d (and m), elements j and j + 16 in the low / high nibble of byte j ---- */

static void deq_q8_0(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 34, y += 32) {
        const float d = half_at(x);
        for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)x[2 + j] * d;
    }
}

static void deq_q4_0(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 18, y += 32) {
        const float d = half_at(x);
        const unsigned char *qs = x + 2;
        for (int j = 0; j < 16; j++) {
            const int x0 = (qs[j] & 0x0f) - 8, x1 = (qs[j] >> 4) - 8;
            y[j] = (float)x0 * d;
            y[j + 16] = (float)x1 * d;
        }
    }
}

static void deq_q4_1(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 20, y += 32) {
        const float d = half_at(x), m = half_at(x + 2);
        const unsigned char *qs = x + 4;
        for (int j = 0; j < 16; j++) {
            const int x0 = qs[j] & 0x0f, x1 = qs[j] >> 4;
            y[j] = (float)x0 * d + m;
            y[j + 16] = (float)x1 * d + m;
        }
    }
}

/* Q5_0 / Q5_1: the nibbles' 5th bits are the 32 bits of qh (element j: bit j). */
static void deq_q5_0(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 22, y += 32) {
        const float d = half_at(x);
        const uint32_t qh = ld32(x + 2);
        const unsigned char *qs = x + 6;
        for (int j = 0; j < 16; j++) {
            const unsigned xh_0 = ((qh >> j) << 4) & 0x10, xh_1 = (qh >> (j + 12)) & 0x10;
            const int x0 = (int)((qs[j] & 0x0fu) | xh_0) - 16, x1 = (int)((qs[j] >> 4) | xh_1) - 16;
            y[j] = (float)x0 * d;
            y[j + 16] = (float)x1 * d;
        }
    }
}

static void deq_q5_1(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 24, y += 32) {
        const float d = half_at(x), m = half_at(x + 2);
        const uint32_t qh = ld32(x + 4);
        const unsigned char *qs = x + 8;
        for (int j = 0; j < 16; j++) {
            const unsigned xh_0 = ((qh >> j) << 4) & 0x10, xh_1 = (qh >> (j + 12)) & 0x10;
            const int x0 = (int)((qs[j] & 0x0fu) | xh_0), x1 = (int)((qs[j] >> 4) | xh_1);
            y[j] = (float)x0 * d + m;
            y[j + 16] = (float)x1 * d + m;
        }
    }
}

/* IQ4_NL: Q4_0's layout, the nibble picking one of 16 non-linear levels. */
static void deq_iq4_nl(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 18, y += 32) {
        const float d = half_at(x);
        const unsigned char *qs = x + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)lmp_kvalues_iq4nl[qs[j] & 0xf];
            y[j + 16] = d * (float)lmp_kvalues_iq4nl[qs[j] >> 4];
        }
    }
}

/* MXFP4: an E8M0 exponent, then E2M1 nibbles.  ggml_e8m0_to_fp32_half: 2^(e-128), built from
 * its bits (the two smallest are subnormal). */
static void deq_mxfp4(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 17, y += 32) {
        const float d = bits_to_f32(x[0] < 2 ? 0x00200000u << x[0] : (uint32_t)(x[0] - 1) << 23);
        const unsigned char *qs = x + 1;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)lmp_kvalues_fp4[qs[j] & 0x0f] * d;
            y[j + 16] = (float)lmp_kvalues_fp4[qs[j] >> 4] * d;
        }
    }
}

/* ggml_ue4m3_to_fp32: unsigned E4M3 (bias 7; 0 and 0x7f are zero), halved as the doubled E2M1
 * levels want. */
static float ue4m3_half(unsigned char u)
{
    if (u == 0 || u == 0x7f) return 0.0f;
    const int exp = (u >> 3) & 0xf, man = u & 0x7;
    const float raw = exp == 0 ? ldexpf((float)man, -9) : ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return raw * 0.5f;
}

/* NVFP4: blocks of 64 in 4 sub-blocks of 16, each with its UE4M3 scale, then E2M1 nibbles. */
static void deq_nvfp4(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 36) {
        for (int s = 0; s < 4; s++, y += 16) {
            const float d = ue4m3_half(x[s]);
            const unsigned char *qs = x + 4 + 8 * s;
            for (int j = 0; j < 8; j++) {
                y[j] = (float)lmp_kvalues_fp4[qs[j] & 0x0f] * d;
                y[j + 8] = (float)lmp_kvalues_fp4[qs[j] >> 4] * d;
            }
        }
    }
}

/* Q1_0: an fp16 d, then 128 sign bits (bit j of byte j / 8: 1 is +d, 0 is -d); ggml's
 * dequantize_row_q1_0. */
static void deq_q1_0(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 18, y += 128) {
        const float d = half_at(x), neg_d = -d;
        for (int j = 0; j < 128; j++) y[j] = (x[2 + j / 8] >> (j % 8)) & 1 ? d : neg_d;
    }
}

/* Q2_0: an fp16 d, then 64 2-bit codes (four to a byte, low bits first) for -1, 0, 1, 2 times d;
 * ggml's dequantize_row_q2_0. */
static void deq_q2_0(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 18, y += 64) {
        const float d = half_at(x);
        for (int j = 0; j < 64; j++) y[j] = (float)(((x[2 + j / 4] >> ((j % 4) * 2)) & 3) - 1) * d;
    }
}

/* ---- K-quants: super-blocks of 256 ------------------------------------------------------------ */

/* Q4_K / Q5_K's 12 scale bytes pack eight 6-bit scales and eight 6-bit mins. */
static void scale_min_k4(int j, const unsigned char *q, unsigned *d, unsigned *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* block_q2_K: scales[16] (4-bit scale, 4-bit min), qs[64] (2-bit quants), fp16 d, fp16 dmin. */
static void deq_q2_k(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 84) {
        const float d = half_at(x + 80), min = half_at(x + 82);
        const unsigned char *sc = x, *q = x + 16;
        for (int n = 0; n < 256; n += 128, q += 32)
            for (int shift = 0; shift < 8; shift += 2)
                for (int half = 0; half < 2; half++, sc++) { /* 16 values from q[0..16), then q[16..32) */
                    const float dl = d * (float)(*sc & 0xf), ml = min * (float)(*sc >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
                }
    }
}

/* block_q3_K: hmask[32] (3rd bits), qs[64] (low 2 bits, minus 4 where the hmask bit is clear),
 * scales[12] (sixteen 6-bit scales, biased by 32), fp16 d. */
static void deq_q3_k(const unsigned char *x, int64_t nb, float *y)
{
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    for (int64_t i = 0; i < nb; i++, x += 110) {
        const float d_all = half_at(x + 108);
        const unsigned char *hm = x, *q = x + 32;
        /* ggml's unpacking of the scales, on 32-bit words: scale k is byte k % 4 of aux[k / 4] */
        const uint32_t a0 = ld32(x + 96), a1 = ld32(x + 100), tmp = ld32(x + 104);
        const uint32_t aux[4] = {(a0 & kmask2) | (((tmp >> 0) & kmask1) << 4),
                                 (a1 & kmask2) | (((tmp >> 2) & kmask1) << 4),
                                 ((a0 >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4),
                                 ((a1 >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4)};
        int is = 0;
        unsigned m = 1;
        for (int n = 0; n < 256; n += 128, q += 32)
            for (int shift = 0; shift < 8; shift += 2, m <<= 1)
                for (int half = 0; half < 2; half++, is++) {
                    const int scale = (int)((aux[is / 4] >> 8 * (is % 4)) & 0xff);
                    const float dl = d_all * (float)(scale - 32);
                    const unsigned char *ql = q + 16 * half, *hl = hm + 16 * half;
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (float)((int)((ql[l] >> shift) & 3) - ((hl[l] & m) ? 0 : 4));
                }
    }
}

/* block_q4_K: fp16 d, fp16 dmin, scales[12], qs[128] — 256 elements in 8 groups of 32. */
static void deq_q4_k(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 144) {
        const float d = half_at(x), min = half_at(x + 2);
        const unsigned char *scales = x + 4, *q = x + 16;
        for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
            unsigned sc, m;
            scale_min_k4(is, scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* block_q5_K: Q4_K's fields with qh[32] (the 5th bits, two bit planes per 64 values) before qs. */
static void deq_q5_k(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 176) {
        const float d = half_at(x), min = half_at(x + 2);
        const unsigned char *scales = x + 4, *qh = x + 16, *ql = x + 48;
        unsigned u1 = 1, u2 = 2;
        for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
            unsigned sc, m;
            scale_min_k4(is, scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)((ql[l] & 0xf) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* block_q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], fp16 d. */
static void deq_q6_k(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 210) {
        const float d = half_at(x + 208);
        const unsigned char *ql = x, *qh = x + 128;
        const signed char *sc = (const signed char *)(x + 192);
        for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = (int)((ql[l] & 0xf) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = (int)((ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = (int)((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = (int)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l + 0] = d * (float)sc[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

/* block_iq4_xs: fp16 d, scales_h (2 high bits of 8 scales), scales_l[4] (their low nibbles),
 * qs[128]: 8 groups of 32 laid out as IQ4_NL, each with its 6-bit scale biased by 32. */
static void deq_iq4_xs(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 136) {
        const float d = half_at(x);
        const unsigned scales_h = ld16(x + 2);
        const unsigned char *scales_l = x + 4, *qs = x + 8;
        for (int ib = 0; ib < 8; ib++, y += 32, qs += 16) {
            const int ls = (int)(((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | ((scales_h >> 2 * ib) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)lmp_kvalues_iq4nl[qs[j] & 0xf];
                y[j + 16] = dl * (float)lmp_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* Byte j of a grid entry. */
static unsigned grid_byte(uint64_t grid, int j) { return (unsigned)(grid >> 8 * j) & 0xff; }

/* y[0..8) = db * grid value j, negated where bit j of signs is set: the inner loop of ggml's
 * IQ2 and IQ3 types (IQ3's two 4-value entries joined into one grid). */
static void signed_grid8(float *y, float db, uint64_t grid, unsigned signs)
{
    for (int j = 0; j < 8; j++) y[j] = db * (float)grid_byte(grid, j) * (signs >> j & 1 ? -1.f : 1.f);
}

/* block_iq2_xxs: fp16 d, then per 32 values two uint32: four 8-bit grid indices; four 7-bit sign
 * indices and a 4-bit scale. */
static void deq_iq2_xxs(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 66) {
        const float d = half_at(x);
        for (int ib32 = 0; ib32 < 8; ib32++) {
            const unsigned char *aux8 = x + 2 + 8 * ib32;
            const uint32_t aux1 = ld32(aux8 + 4);
            const float db = d * (0.5f + (float)(aux1 >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8)
                signed_grid8(y, db, lmp_iq2xxs_grid[aux8[l]], lmp_ksigns_iq2xs[(aux1 >> 7 * l) & 127]);
        }
    }
}

/* block_iq2_xs: fp16 d, qs[32] uint16 (9-bit grid index, 7-bit sign index), scales[8] (two
 * 4-bit scales per 32 values). */
static void deq_iq2_xs(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 74) {
        const float d = half_at(x);
        const unsigned char *scales = x + 66;
        for (int ib32 = 0; ib32 < 8; ib32++) {
            const float db[2] = {d * (0.5f + (float)(scales[ib32] & 0xf)) * 0.25f,
                                 d * (0.5f + (float)(scales[ib32] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, y += 8) {
                const unsigned q = ld16(x + 2 + 2 * (4 * ib32 + l));
                signed_grid8(y, db[l / 2], lmp_iq2xs_grid[q & 511], lmp_ksigns_iq2xs[q >> 9]);
            }
        }
    }
}

/* block_iq2_s: fp16 d, qs[64] (grid index low 8 bits, then 32 bytes of explicit signs), qh[8]
 * (2 high index bits each), scales[8]. */
static void deq_iq2_s(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 82) {
        const float d = half_at(x);
        const unsigned char *qs = x + 2, *signs = x + 34, *qh = x + 66, *scales = x + 74;
        for (int ib32 = 0; ib32 < 8; ib32++, qs += 4, signs += 4) {
            const float db[2] = {d * (0.5f + (float)(scales[ib32] & 0xf)) * 0.25f,
                                 d * (0.5f + (float)(scales[ib32] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, y += 8)
                signed_grid8(y, db[l / 2], lmp_iq2s_grid[qs[l] | ((qh[ib32] << (8 - 2 * l)) & 0x300)], signs[l]);
        }
    }
}

/* block_iq3_xxs: fp16 d, qs[64] (8-bit indices of 4-value grid entries), then per 32 values a
 * uint32 of four 7-bit sign indices and a 4-bit scale. */
static void deq_iq3_xxs(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 98) {
        const float d = half_at(x);
        const unsigned char *qs = x + 2, *scales_and_signs = x + 66;
        for (int ib32 = 0; ib32 < 8; ib32++, qs += 8) {
            const uint32_t aux32 = ld32(scales_and_signs + 4 * ib32);
            const float db = d * (0.5f + (float)(aux32 >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t grid = lmp_iq3xxs_grid[qs[2 * l]] | (uint64_t)lmp_iq3xxs_grid[qs[2 * l + 1]] << 32;
                signed_grid8(y, db, grid, lmp_ksigns_iq2xs[(aux32 >> 7 * l) & 127]);
            }
        }
    }
}

/* block_iq3_s: fp16 d, qs[64] (index low 8 bits), qh[8] (9th bits), signs[32], scales[4] (two
 * 4-bit scales per 64 values). */
static void deq_iq3_s(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 110) {
        const float d = half_at(x);
        const unsigned char *qs = x + 2, *qh = x + 66, *signs = x + 74, *scales = x + 106;
        for (int ib32 = 0; ib32 < 8; ib32++, qs += 8, signs += 4) {
            const unsigned sc = ib32 % 2 ? scales[ib32 / 2] >> 4 : scales[ib32 / 2] & 0xf;
            const float db = d * (float)(1 + 2 * sc);
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t grid = lmp_iq3s_grid[qs[2 * l] | ((qh[ib32] << (8 - 2 * l)) & 256)] |
                                      (uint64_t)lmp_iq3s_grid[qs[2 * l + 1] | ((qh[ib32] << (7 - 2 * l)) & 256)] << 32;
                signed_grid8(y, db, grid, signs[l]);
            }
        }
    }
}

/* y[0..8) = dl * (grid value j + delta): the inner loop of IQ1_S and IQ1_M (values -1, 0, 1). */
static void shifted_grid8(float *y, float dl, uint64_t grid, float delta)
{
    for (int j = 0; j < 8; j++) y[j] = dl * ((float)(int8_t)grid_byte(grid, j) + delta);
}

#define IQ1_DELTA 0.125f /* ggml's IQ1S_DELTA and IQ1M_DELTA */

/* block_iq1_s: fp16 d, qs[32] (index low 8 bits), qh[8] uint16 (per 32 values: four 3-bit
 * index tops, a 3-bit scale, the delta's sign). */
static void deq_iq1_s(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 50) {
        const float d = half_at(x);
        const unsigned char *qs = x + 2;
        for (int ib = 0; ib < 8; ib++, qs += 4) {
            const unsigned qh = ld16(x + 34 + 2 * ib);
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -IQ1_DELTA : IQ1_DELTA;
            for (int l = 0; l < 4; l++, y += 8)
                shifted_grid8(y, dl, lmp_iq1s_grid[qs[l] | (((qh >> 3 * l) & 7) << 8)], delta);
        }
    }
}

/* block_iq1_m: qs[32] (index low 8 bits), qh[16] (per 8 values a nibble: 3 index tops and the
 * delta's sign), scales[8]: four uint16 holding 3-bit scales, their top nibbles the fp16 d. */
static void deq_iq1_m(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 56) {
        const unsigned sc[4] = {ld16(x + 48), ld16(x + 50), ld16(x + 52), ld16(x + 54)};
        const float d = fp16_to_f32((uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                               ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000)));
        const unsigned char *qs = x, *qh = x + 32;
        for (int ib = 0; ib < 8; ib++, qs += 4, qh += 2) {
            const float dl1 = d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 0)) & 0x7) + 1);
            const float dl2 = d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 0x7) + 1);
            for (int l = 0; l < 4; l++, y += 8) {
                const unsigned h = (unsigned)qh[l / 2] >> 4 * (l % 2);
                shifted_grid8(y, l < 2 ? dl1 : dl2, lmp_iq1s_grid[qs[l] | ((h & 7) << 8)],
                              h & 0x08 ? -IQ1_DELTA : IQ1_DELTA);
            }
        }
    }
}

/* ---- ternary types ------------------------------------------------------------------------------ */

/* TQ1_0 packs base-3 digits ("trits", 0..2 for -1..1) as fixed-point fractions: byte b times 3^n
 * (mod 256) brings digit n to the top, where ((uint8)(b * 3^n) * 3) >> 8 reads it.  Writes digits
 * 0..ndig-1 of w bytes, digit by digit. */
static float *tq1_digits(const unsigned char *b, int w, int ndig, float d, float *y)
{
    static const unsigned pow3[5] = {1, 3, 9, 27, 81};
    for (int n = 0; n < ndig; n++)
        for (int m = 0; m < w; m++) {
            const uint8_t q = (uint8_t)(b[m] * pow3[n]);
            const int xi = ((unsigned)q * 3) >> 8;
            *y++ = (float)(xi - 1) * d;
        }
    return y;
}

/* block_tq1_0: qs[48] (5 trits a byte: 32 bytes, then 16), qh[4] (4 trits a byte), fp16 d. */
static void deq_tq1_0(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 54) {
        const float d = half_at(x + 52);
        y = tq1_digits(x, 32, 5, d, y);
        y = tq1_digits(x + 32, 16, 5, d, y);
        y = tq1_digits(x + 48, 4, 4, d, y);
    }
}

/* block_tq2_0: qs[64] (2-bit values biased by 1), fp16 d. */
static void deq_tq2_0(const unsigned char *x, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, x += 66) {
        const float d = half_at(x + 64);
        for (int j = 0; j < 64; j += 32)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++) *y++ = (float)(((x[j + m] >> (l * 2)) & 3) - 1) * d;
    }
}

lmp_ggml_decode_fn lmp_ggml_decoder(uint32_t t)
{
    static const lmp_ggml_decode_fn fn[] = {
        [LMP_GGML_F32] = deq_f32,         [LMP_GGML_F16] = deq_f16,         [LMP_GGML_BF16] = deq_bf16,
        [LMP_GGML_Q4_0] = deq_q4_0,       [LMP_GGML_Q4_1] = deq_q4_1,       [LMP_GGML_Q5_0] = deq_q5_0,
        [LMP_GGML_Q5_1] = deq_q5_1,       [LMP_GGML_Q8_0] = deq_q8_0,       [LMP_GGML_Q2_K] = deq_q2_k,
        [LMP_GGML_Q3_K] = deq_q3_k,       [LMP_GGML_Q4_K] = deq_q4_k,       [LMP_GGML_Q5_K] = deq_q5_k,
        [LMP_GGML_Q6_K] = deq_q6_k,       [LMP_GGML_IQ2_XXS] = deq_iq2_xxs, [LMP_GGML_IQ2_XS] = deq_iq2_xs,
        [LMP_GGML_IQ2_S] = deq_iq2_s,     [LMP_GGML_IQ3_XXS] = deq_iq3_xxs, [LMP_GGML_IQ3_S] = deq_iq3_s,
        [LMP_GGML_IQ1_S] = deq_iq1_s,     [LMP_GGML_IQ1_M] = deq_iq1_m,     [LMP_GGML_IQ4_NL] = deq_iq4_nl,
        [LMP_GGML_IQ4_XS] = deq_iq4_xs,   [LMP_GGML_TQ1_0] = deq_tq1_0,     [LMP_GGML_TQ2_0] = deq_tq2_0,
        [LMP_GGML_MXFP4] = deq_mxfp4,     [LMP_GGML_NVFP4] = deq_nvfp4,     [LMP_GGML_Q1_0] = deq_q1_0,
        [LMP_GGML_Q2_0] = deq_q2_0,
    };
    return t < sizeof fn / sizeof *fn ? fn[t] : NULL;
}
