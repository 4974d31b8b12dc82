/* gguf_kquants.c — see gguf_kquants.h. */
#include "export/gguf_kquants.h"

#include <math.h>
#include <string.h>

#include "base/error.h"
#include "export/st_write.h"
#include "model/grid_codes.h"

int lmp_gguf_kblock_bytes(lmp_wformat f)
{
    switch (f) {
    case LMP_WFORMAT_GGUF_Q2_K: return 84;
    case LMP_WFORMAT_GGUF_Q3_K: return 110;
    case LMP_WFORMAT_GGUF_Q4_K: return 144;
    case LMP_WFORMAT_GGUF_Q5_K: return 176;
    case LMP_WFORMAT_GGUF_Q6_K: return 210;
    default: return 0;
    }
}

/* *d (an fp16 value) and k[n] in lo..hi with d * k[j] == e[j] for every j; 0, or -1 when there
 * is none. */
static int split_scales(const float *e, int n, int lo, int hi, float *d, int *k)
{
    int top = 0;
    for (int j = 1; j < n; j++)
        if (fabsf(e[j]) > fabsf(e[top])) top = j;
    if (!(fabsf(e[top]) > 0.0f)) { /* all zero (or NaN, refused below): d keeps their sign */
        *d = e[top];
        memset(k, 0, (size_t)n * sizeof *k);
        return e[top] == e[top] ? 0 : -1;
    }
    for (int m = hi > -lo ? hi : -lo; m >= 1; m--)
        for (int sign = 1; sign >= -1; sign -= 2) {
            const int kt = sign * m;
            if (kt < lo || kt > hi) continue;
            const float dt = e[top] / (float)kt;
            if (!isfinite(dt) || lmp_fp16_round(dt) != dt) continue;
            int ok = 1;
            for (int j = 0; j < n && ok; j++) {
                const float q = nearbyintf(e[j] / dt);
                k[j] = (int)q;
                ok = q >= (float)lo && q <= (float)hi && dt * q == e[j];
            }
            if (ok) {
                *d = dt;
                return 0;
            }
        }
    return -1;
}

static void put_half(unsigned char *p, float v)
{
    const uint16_t h = lmp_stw_f16(v, NULL);
    p[0] = (unsigned char)h;
    p[1] = (unsigned char)(h >> 8);
}

/* Q4_K's and Q5_K's 12 bytes of eight 6-bit scales and mins (ggml's get_scale_min_k4 layout). */
static void pack_scale_min_k4(const int *sc, const int *mn, unsigned char *q)
{
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            q[j] = (unsigned char)sc[j];
            q[j + 4] = (unsigned char)mn[j];
        } else {
            q[j + 4] = (unsigned char)((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
            q[j - 4] |= (unsigned char)((sc[j] >> 4) << 6);
            q[j] |= (unsigned char)((mn[j] >> 4) << 6);
        }
    }
}

/* Q2_K's and Q3_K's low two bits of 256 codes: four codes 32 apart per byte, per half. */
static void pack_2bit(const int *L, unsigned char *qs)
{
    for (int j = 0; j < 256; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (unsigned char)((L[j + l] & 3) | (L[j + l + 32] & 3) << 2 | (L[j + l + 64] & 3) << 4 |
                                            (L[j + l + 96] & 3) << 6);
}

/* One super-block: codes L[256], sub-block integers sc[nsub] (and mn), d (and dmin). */
static void pack_block(lmp_wformat f, const int *L, const int *sc, const int *mn, float d, float dmin,
                       unsigned char *p)
{
    memset(p, 0, (size_t)lmp_gguf_kblock_bytes(f));
    switch (f) {
    case LMP_WFORMAT_GGUF_Q2_K:
        for (int j = 0; j < 16; j++) p[j] = (unsigned char)(sc[j] | mn[j] << 4);
        pack_2bit(L, p + 16);
        put_half(p + 80, d);
        put_half(p + 82, dmin);
        break;
    case LMP_WFORMAT_GGUF_Q3_K: { /* hmask[32] qs[64] scales[12] d */
        unsigned char *scales = p + 96;
        for (int j = 0; j < 16; j++) {
            const int l = sc[j] + 32;
            if (j < 8) scales[j] = (unsigned char)(l & 0xF);
            else scales[j - 8] |= (unsigned char)((l & 0xF) << 4);
            scales[j % 4 + 8] |= (unsigned char)((l >> 4) << (2 * (j / 4)));
        }
        int low[256];
        for (int j = 0; j < 256; j++) {
            if (L[j] > 3) p[j % 32] |= (unsigned char)(1 << (j / 32)); /* the high bit */
            low[j] = L[j] & 3;
        }
        pack_2bit(low, p + 32);
        put_half(p + 108, d);
        break;
    }
    case LMP_WFORMAT_GGUF_Q4_K: /* d dmin scales[12] qs[128] */
        put_half(p, d);
        put_half(p + 2, dmin);
        pack_scale_min_k4(sc, mn, p + 4);
        for (int j = 0, o = 16; j < 256; j += 64, o += 32)
            for (int l = 0; l < 32; l++) p[o + l] = (unsigned char)(L[j + l] | L[j + l + 32] << 4);
        break;
    case LMP_WFORMAT_GGUF_Q5_K: { /* d dmin scales[12] qh[32] qs[128] */
        put_half(p, d);
        put_half(p + 2, dmin);
        pack_scale_min_k4(sc, mn, p + 4);
        unsigned char *qh = p + 16, *ql = p + 48;
        for (int n = 0, m1 = 1, m2 = 2; n < 256; n += 64, m1 <<= 2, m2 <<= 2, ql += 32)
            for (int j = 0; j < 32; j++) {
                const int l1 = L[n + j], l2 = L[n + j + 32];
                if (l1 > 15) qh[j] |= (unsigned char)m1;
                if (l2 > 15) qh[j] |= (unsigned char)m2;
                ql[j] = (unsigned char)((l1 & 15) | (l2 & 15) << 4);
            }
        break;
    }
    default: { /* Q6_K: ql[128] qh[64] scales[16] d */
        unsigned char *ql = p, *qh = p + 128;
        for (int j = 0; j < 256; j += 128, ql += 64, qh += 32)
            for (int l = 0; l < 32; l++) {
                const int *q = L + j + l;
                ql[l] = (unsigned char)((q[0] & 0xF) | (q[64] & 0xF) << 4);
                ql[l + 32] = (unsigned char)((q[32] & 0xF) | (q[96] & 0xF) << 4);
                qh[l] = (unsigned char)((q[0] >> 4) | (q[32] >> 4) << 2 | (q[64] >> 4) << 4 | (q[96] >> 4) << 6);
            }
        for (int j = 0; j < 16; j++) p[192 + j] = (unsigned char)(int8_t)sc[j];
        put_half(p + 208, d);
    }
    }
}

int lmp_gguf_pack_k_row(const lmp_linear *l, int64_t r, const int32_t *codes, unsigned char *out)
{
    const lmp_wgrid *g = l->grid;
    const lmp_wformat f = g->spec.format;
    const int sub = (int)g->spec.group, nsub = LMP_WFORMAT_KBLOCK / sub, bb = lmp_gguf_kblock_bytes(f);
    /* the integers' ranges: sub-block scales, then mins (plugin_kquants.h's table) */
    const int lo = f == LMP_WFORMAT_GGUF_Q3_K ? -32 : f == LMP_WFORMAT_GGUF_Q6_K ? -128 : 0;
    const int hi = f == LMP_WFORMAT_GGUF_Q3_K ? 31 : f == LMP_WFORMAT_GGUF_Q6_K ? 127 : f == LMP_WFORMAT_GGUF_Q2_K ? 15 : 63;
    for (int64_t b = 0; b < l->in / LMP_WFORMAT_KBLOCK; b++) {
        float e[16] = {0}, m[16] = {0}, d, dmin = 0.0f;
        int sc[16], mn[16] = {0}, L[256];
        const int64_t s0 = lmp_wgrid_slice(g, l->in, r, b * LMP_WFORMAT_KBLOCK);
        for (int j = 0; j < nsub; j++) {
            e[j] = g->scales[s0 + j];
            m[j] = g->spec.sym ? 0.0f : g->zeros[s0 + j];
        }
        if (split_scales(e, nsub, lo, hi, &d, sc) || (!g->spec.sym && split_scales(m, nsub, 0, hi, &dmin, mn)))
            return lmp_fail(LMP_EINVAL,
                            "%s: row %lld, super-block %lld: its %s sub-block scales are not one fp16 d times "
                            "integers %d..%d, so no %s block holds them",
                            l->name, (long long)r, (long long)b, lmp_wformat_name(f), lo, hi, lmp_wformat_name(f));
        for (int j = 0; j < 256; j++) L[j] = codes[b * LMP_WFORMAT_KBLOCK + j];
        pack_block(f, L, sc, mn, d, dmin, out + b * bb);
    }
    return 0;
}
