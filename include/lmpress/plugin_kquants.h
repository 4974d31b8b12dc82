/* lmpress/plugin_kquants.h — the grids of GGUF's k-quant formats (ABI 4.2), part of plugin.h
 * (which includes it; a plugin never includes it alone).
 *
 * A k-quant row is cut into super-blocks of 256 inputs, and each super-block into sub-blocks of
 * 16 inputs (Q2_K, Q3_K, Q6_K) or 32 (Q4_K, Q5_K).  A sub-block's scale is a small integer times
 * the super-block's fp16 d, and for the formats with a min (Q2_K, Q4_K, Q5_K) its min a small
 * integer times the fp16 dmin:
 *
 *   format  bits  sub  scale integers   min integers   w' (q the stored code)
 *   Q2_K    2     16   0..15            0..15          d*sc * q - dmin*m,  q 0..3
 *   Q3_K    3     16   -32..31          -              d*sc * (q - 4),     q 0..7
 *   Q4_K    4     32   0..63            0..63          d*sc * q - dmin*m,  q 0..15
 *   Q5_K    5     32   0..63            0..63          d*sc * q - dmin*m,  q 0..31
 *   Q6_K    6     16   -128..127        -              d*sc * (q - 32),    q 0..63
 *
 * In lmpress's grid (lmp_wspec: gran GROUP, group = the sub-block) each sub-block is one slice,
 * its scale the product d*sc and its zero dmin*m, both exact in f32 (an fp16 has 11 significant
 * bits, the integers at most 8), so apply_weight_grid's lmp_wgrid_code/value are ggml's
 * quantize and dequantize steps, and a writer recovers d and the integers from the products
 * (core/export/gguf_kquants.c).  Choosing the grid needs the whole super-block, so a row's width
 * must be a multiple of 256 (lmp_wformat_span; llama-quantize's fallback for the others is
 * lmp_wformat_fallback).
 *
 * lmp_wgrid_fit_kblock follows ggml-quants.c step by step: without an importance its
 * quantize_row_q*_K_ref (what llama-quantize runs without --imatrix), with one its
 * quantize_row_q*_K_impl.  The helpers port make_q3_quants and make_qp_quants; make_qx_quants,
 * make_qkx2_quants and make_qkx3_quants are plugin.h's lmp_wgrid_search_qx and _qkx. */
#ifndef LMPRESS_PLUGIN_KQUANTS_H
#define LMPRESS_PLUGIN_KQUANTS_H

/* ggml's make_q3_quants(n, nmax, x, L, do_rmse true): the scale of the sign-aware symmetric grid
 * (levels -nmax..nmax-1) weighted by x^2, its codes refined one at a time (5 rounds at most)
 * while the least-squares error falls.  n <= 16. */
static inline float lmp_wgrid_search_q3(const float *x, int n, int nmax)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < 1e-15f) return 0.0f;
    const float iscale = -nmax / max;
    int8_t L[16];
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = lmp_wgrid_nearest_int(iscale * x[i]);
        l = l < -nmax ? -nmax : (l > nmax - 1 ? nmax - 1 : l);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = lmp_wgrid_nearest_int(x[i] * sl2 / slx);
                new_l = new_l < -nmax ? -nmax : (new_l > nmax - 1 ? nmax - 1 : new_l);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ggml's make_qp_quants(n, nmax, x, L, w): a scale for the non-negative x[0..n) (n <= 16) on the
 * levels 0..nmax, searched over 9 trial inverse scales by the w-weighted squared error, its
 * codes L then refined one at a time while the least-squares error falls; returns that scale,
 * L its codes. */
static inline float lmp_wgrid_search_qp(const float *x, int n, int nmax, uint8_t *L, const float *w)
{
    float max = 0;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
    if (max < 1e-15f) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.0f;
    }
    float iscale = nmax / max, best_mse = 0;
    const float scale = 1 / iscale;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * lmp_wgrid_nearest_int(iscale * x[i]);
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * is + nmax) / max, scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            int l = lmp_wgrid_nearest_int(iscale_is * x[i]);
            l = l < nmax ? l : nmax;
            const float diff = x[i] - scale_is * l;
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    int Li[16];
    for (int i = 0; i < n; ++i) {
        int l = lmp_wgrid_nearest_int(iscale * x[i]);
        Li[i] = l < nmax ? l : nmax;
        sumlx += w[i] * x[i] * Li[i];
        suml2 += w[i] * Li[i] * Li[i];
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float slx = sumlx - w[i] * x[i] * Li[i], sl2 = suml2 - w[i] * Li[i] * Li[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = lmp_wgrid_nearest_int(x[i] * sl2 / slx);
                new_l = new_l < nmax ? new_l : nmax;
                if (new_l != Li[i]) {
                    slx += w[i] * x[i] * new_l;
                    sl2 += w[i] * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        Li[i] = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    /* ggml keeps L in uint8_t: a negative code (only from a negative x) wraps as it does there */
    for (int i = 0; i < n; ++i) L[i] = (uint8_t)Li[i];
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* The integers of ggml's "nearest_int(iscale * v) into a uint8_t, at most 63" (Q4_K's and
 * Q5_K's reference scales and mins). */
static inline uint8_t lmp_wgrid_k6(float iscale, float v)
{
    const uint8_t l = (uint8_t)lmp_wgrid_nearest_int(iscale * v);
    return l < 63 ? l : 63;
}

/* The grid of the super-block x[0..256) of a k-quant format (s->format), as ggml chooses it:
 * imp[0..256) the importance of its input columns (an imatrix; any positive multiple gives the
 * same grid), or NULL for ggml's reference quantizer.  scales[nsub] receive each sub-block's
 * d*sc and, for the formats with a min, zeros[nsub] its dmin*m (nsub = 256 / s->group). */
static inline void lmp_wgrid_fit_kblock(const lmp_wspec *s, const float *x, const float *imp, float *scales,
                                        float *zeros)
{
    const int K = LMP_WFORMAT_KBLOCK, sub = (int)s->group, nsub = K / sub;
    float sc[16], mn[16], sw[16], w[32], d = 0, dmin = 0;
    int isc[16], imn[16];
    float sum_x2 = 0;
    for (int j = 0; j < K; ++j) sum_x2 += x[j] * x[j];
    for (int j = 0; j < nsub; ++j) imn[j] = 0;

    if (s->format == LMP_WFORMAT_GGUF_Q4_K || s->format == LMP_WFORMAT_GGUF_Q5_K || s->format == LMP_WFORMAT_GGUF_Q2_K) {
        const int nmax = s->format == LMP_WFORMAT_GGUF_Q2_K ? 3 : (1 << s->bits) - 1;
        /* ggml's Q2_K weighs by sum_x2 / 256, Q4_K and Q5_K by twice that */
        const float sigma2 = (s->format == LMP_WFORMAT_GGUF_Q2_K ? 1.0f : 2.0f) * sum_x2 / K;
        for (int j = 0; j < nsub; ++j) {
            const float *xs = x + j * sub;
            float mn_neg;
            if (imp) {
                for (int l = 0; l < sub; ++l) w[l] = imp[j * sub + l] * sqrtf(sigma2 + xs[l] * xs[l]);
                sw[j] = 0;
                for (int l = 0; l < sub; ++l) sw[j] += w[l];
                lmp_wgrid_search_qkx(xs, sub, nmax, w, -0.9f, 0.05f, 36, 0, &sc[j], &mn_neg);
            } else if (s->format == LMP_WFORMAT_GGUF_Q2_K) {
                for (int l = 0; l < sub; ++l) w[l] = fabsf(xs[l]);
                lmp_wgrid_search_qkx(xs, sub, nmax, w, -0.5f, 0.1f, 15, 1, &sc[j], &mn_neg);
            } else {
                float sx2 = 0;
                for (int l = 0; l < sub; ++l) sx2 += xs[l] * xs[l];
                const float av_x = sqrtf(sx2 / sub);
                for (int l = 0; l < sub; ++l) w[l] = av_x + fabsf(xs[l]);
                if (s->format == LMP_WFORMAT_GGUF_Q4_K)
                    lmp_wgrid_search_qkx(xs, sub, nmax, w, -1.0f, 0.1f, 20, 0, &sc[j], &mn_neg);
                else lmp_wgrid_search_qkx(xs, sub, nmax, w, -0.5f, 0.1f, 15, 0, &sc[j], &mn_neg);
            }
            mn[j] = -mn_neg;
        }
        const int top = s->format == LMP_WFORMAT_GGUF_Q2_K ? 15 : 63;
        if (imp) {
            uint8_t Ls[16], Lm[16];
            d = lmp_fp16_round(lmp_wgrid_search_qp(sc, nsub, top, Ls, sw));
            dmin = lmp_fp16_round(lmp_wgrid_search_qp(mn, nsub, top, Lm, sw));
            for (int j = 0; j < nsub; ++j) {
                isc[j] = Ls[j] < top ? Ls[j] : top; /* ggml's MIN(63, ...) / the 4 bits Q2_K keeps */
                imn[j] = Lm[j] < top ? Lm[j] : top;
            }
        } else {
            float max_scale = 0, max_min = 0;
            for (int j = 0; j < nsub; ++j) {
                if (sc[j] > max_scale) max_scale = sc[j];
                if (mn[j] > max_min) max_min = mn[j];
            }
            if (s->format == LMP_WFORMAT_GGUF_Q2_K) { /* 4-bit integers, no clamp */
                const float q4scale = 15.f;
                for (int j = 0; j < nsub; ++j) {
                    isc[j] = max_scale > 0 ? lmp_wgrid_nearest_int(q4scale / max_scale * sc[j]) & 15 : 0;
                    imn[j] = max_min > 0 ? lmp_wgrid_nearest_int(q4scale / max_min * mn[j]) & 15 : 0;
                }
                d = max_scale > 0 ? lmp_fp16_round(max_scale / q4scale) : 0.0f;
                dmin = max_min > 0 ? lmp_fp16_round(max_min / q4scale) : 0.0f;
            } else {
                const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
                const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
                for (int j = 0; j < nsub; ++j) {
                    isc[j] = lmp_wgrid_k6(inv_scale, sc[j]);
                    imn[j] = lmp_wgrid_k6(inv_min, mn[j]);
                }
                d = lmp_fp16_round(max_scale / 63.f);
                dmin = lmp_fp16_round(max_min / 63.f);
            }
        }
    } else if (s->format == LMP_WFORMAT_GGUF_Q3_K) {
        if (imp) {
            const float sigma2 = 2 * sum_x2 / K;
            for (int j = 0; j < nsub; ++j) {
                const float *xs = x + j * sub;
                sw[j] = 0;
                for (int l = 0; l < sub; ++l) {
                    w[l] = imp[j * sub + l] * sqrtf(sigma2 + xs[l] * xs[l]);
                    sw[j] += w[l];
                }
                sc[j] = lmp_wgrid_search_qx(xs, sub, 4, w, NULL);
            }
            int8_t Ls[16];
            d = lmp_fp16_round(lmp_wgrid_search_qx(sc, nsub, 32, sw, Ls));
            for (int j = 0; j < nsub; ++j) isc[j] = Ls[j] - 32;
        } else {
            float max_scale = 0, amax = 0;
            for (int j = 0; j < nsub; ++j) {
                sc[j] = lmp_wgrid_search_q3(x + j * sub, sub, 4);
                if (fabsf(sc[j]) > amax) {
                    amax = fabsf(sc[j]);
                    max_scale = sc[j];
                }
            }
            const float iscale = max_scale != 0 ? -32.f / max_scale : 0.f;
            for (int j = 0; j < nsub; ++j) {
                const int l = max_scale != 0 ? (int8_t)lmp_wgrid_nearest_int(iscale * sc[j]) : 0;
                isc[j] = l < -32 ? -32 : (l > 31 ? 31 : l);
            }
            d = max_scale != 0 ? lmp_fp16_round(1 / iscale) : 0.0f;
        }
    } else { /* Q6_K */
        float max_scale = 0, max_abs_scale = 0;
        for (int j = 0; j < nsub; ++j) {
            const float *xs = x + j * sub;
            if (!imp)
                for (int l = 0; l < sub; ++l) w[l] = xs[l] * xs[l];
            sc[j] = lmp_wgrid_search_qx(xs, sub, 32, imp ? imp + j * sub : w, NULL);
            if (fabsf(sc[j]) > max_abs_scale) {
                max_abs_scale = fabsf(sc[j]);
                max_scale = sc[j];
            }
        }
        if (max_abs_scale < 1e-15f) {
            for (int j = 0; j < nsub; ++j) isc[j] = 0;
        } else {
            const float iscale = -128.f / max_scale;
            d = lmp_fp16_round(1 / iscale);
            for (int j = 0; j < nsub; ++j) {
                const int l = lmp_wgrid_nearest_int(iscale * sc[j]);
                isc[j] = l < 127 ? l : 127;
            }
        }
    }
    for (int j = 0; j < nsub; ++j) {
        scales[j] = d * (float)isc[j];
        if (!s->sym) zeros[j] = dmin * (float)imn[j];
    }
}

#endif
