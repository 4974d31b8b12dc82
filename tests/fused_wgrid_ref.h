/* fused_wgrid_ref.h — the fused weight quantization of ABI 2 (cpu_ref.c's lmp_ref_quantize_weight
 * before the grid was split into choose + apply), kept verbatim as a plain reference: the suites
 * check that choose_weight_grid then apply_weight_grid gives these bits, so the split changed no
 * number.  It knows nothing of clip (the old grid is clip = 1); it writes scales/zeros when
 * given, zeros only for asym, as the old op did. */
#ifndef LMP_TEST_FUSED_WGRID_REF_H
#define LMP_TEST_FUSED_WGRID_REF_H

#include <math.h>
#include <stdint.h>

#include "lmpress/plugin.h"

static float fused_round(float x, lmp_rounding r) { return r == LMP_ROUND_HALF_AWAY ? roundf(x) : nearbyintf(x); }

static float fused_clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* One slice [nr, nc] at p (row stride ld): its grid, then the slice quantized on it. */
static void fused_slice(const lmp_wspec *s, float *p, int64_t nr, int64_t nc, int64_t ld, float *scale_out,
                        float *zero_out)
{
    float mn = 0.0f, mx = 0.0f, amax = 0.0f;
    for (int64_t i = 0; i < nr; i++)
        for (int64_t j = 0; j < nc; j++) {
            float w = p[i * ld + j];
            if (w < mn) mn = w;
            if (w > mx) mx = w;
            if (fabsf(w) > amax) amax = fabsf(w);
        }
    float scale, zero = 0.0f;
    if (s->sym) {
        float qmax = (float)((1 << (s->bits - 1)) - 1);
        float t = amax == 0.0f ? 1e-8f : amax;
        scale = t / qmax;
        for (int64_t i = 0; i < nr; i++)
            for (int64_t j = 0; j < nc; j++) {
                float *w = &p[i * ld + j];
                float q = fused_clampf(fused_round(*w / scale, s->rounding), -qmax - 1.0f, qmax);
                *w = q * scale;
            }
    } else {
        float maxq = (float)((1 << s->bits) - 1);
        float lo = mn, hi = mx;
        if (lo == 0.0f && hi == 0.0f) {
            lo = -1.0f;
            hi = 1.0f;
        }
        scale = (hi - lo) / maxq;
        zero = fused_round(-lo / scale, s->rounding);
        for (int64_t i = 0; i < nr; i++)
            for (int64_t j = 0; j < nc; j++) {
                float *w = &p[i * ld + j];
                float q = fused_clampf(fused_round(*w / scale, s->rounding) + zero, 0.0f, maxq);
                *w = scale * (q - zero);
            }
    }
    *scale_out = scale;
    *zero_out = zero;
}

/* W[rows, cols] fake-quantized in place; scales/zeros (each may be NULL) as the old op wrote them. */
static void fused_quantize_weight(const lmp_wspec *s, int64_t rows, int64_t cols, float *W, float *scales,
                                  float *zeros)
{
    int64_t nr = s->gran == LMP_GRAN_TENSOR ? rows : 1, nc = s->gran == LMP_GRAN_GROUP ? s->group : cols;
    int64_t idx = 0;
    for (int64_t r = 0; r < rows; r += nr)
        for (int64_t c = 0; c < cols; c += nc) {
            float sc, z;
            fused_slice(s, W + r * cols + c, nr, c + nc <= cols ? nc : cols - c, cols, &sc, &z);
            if (scales) scales[idx] = sc;
            if (zeros && !s->sym) zeros[idx] = z;
            idx++;
        }
}

#endif
