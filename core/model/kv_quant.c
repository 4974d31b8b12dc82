/* kv_quant.c — see kv_quant.h.  The formulas are compressed-tensors 0.20.1's: calculate_qparams
 * (symmetric: scale = max(|min|, |max|) / (bit_range / 2), bit_range 896 for FP8 E4M3, 255 for
 * int8 and 15 for int4; a scale 0 becomes finfo(f32).eps) and _quantize / _dequantize (x / scale,
 * clamp to the type's range, round_to_quantized_type: torch.round for int, the float8_e4m3fn cast for
 * FP8; then times scale).  A dynamic scale comes with calculate_qparams' zero point 0, which
 * _quantize adds (a quotient -0 becomes +0); a static one has none (the attention module's
 * k_scale / v_scale without a zero point).  tools/ref/kv_quant_ref.py checks them against the library itself. */
#include "model/kv_quant.h"

#include <math.h>
#include <stdio.h>

#include "base/error.h"
#include "lmpress/plugin_fpquants.h"

const char *const lmp_kv_type_names[] = {"none", "fp8_e4m3", "int8", "int4", NULL};
const char *const lmp_kv_granularity_names[] = {"tensor", "head", "token", NULL};
_Static_assert(LMP_KV_PER_TOKEN_HEAD == 2, "lmp_kv_granularity_names is indexed by per_head");

float lmp_kv_fake_quant(lmp_kv_type t, float x, float s, int add_zero)
{
    if (x != x) return x;
    float q = x / s;
    if (add_zero) q += 0.0f; /* -0 becomes +0 */
    if (t == LMP_KV_FP8_E4M3) return lmp_minifloat_round(&LMP_MF_E4M3, q) * s;
    const float lo = t == LMP_KV_INT4 ? -8.0f : -128.0f, hi = t == LMP_KV_INT4 ? 7.0f : 127.0f;
    const float c = q < lo ? lo : q > hi ? hi : q;
    return rintf(c) * s; /* torch.round: to nearest, ties to even (the default rounding mode) */
}

float lmp_kv_scale_of(lmp_kv_type t, float amax)
{
    const float s = t == LMP_KV_FP8_E4M3 ? amax / 448.0f : t == LMP_KV_INT4 ? amax / 7.5f : amax / 127.5f;
    return s == 0.0f ? lmp_fp_scale_eps(LMP_SCALE_F32) : s;
}

void lmp_kv_absmax(const float *x, int64_t T, int64_t H, int64_t hd, int per_head, float *amax)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            float *m = &amax[per_head ? h : 0];
            const float *r = x + (t * H + h) * hd;
            for (int64_t j = 0; j < hd; j++)
                if (fabsf(r[j]) > *m) *m = fabsf(r[j]);
        }
}

/* x[T, H * hd] in place with the scales s[H] (per head) or s[0]; per token and head, each
 * slice's own abs-max (compute_dynamic_scales_and_zp over its head_dim). */
static void quantize_slices(const lmp_kvspec *kv, const float *s, float *x, int64_t T, int64_t H, int64_t hd)
{
    for (int64_t r = 0; r < T; r++)
        for (int64_t h = 0; h < H; h++) {
            float *y = x + (r * H + h) * hd, amax = 0.0f;
            if (kv->per_head == LMP_KV_PER_TOKEN_HEAD) lmp_kv_absmax(y, 1, 1, hd, 0, &amax);
            const float sc = kv->per_head == LMP_KV_PER_TOKEN_HEAD ? lmp_kv_scale_of(kv->type, amax)
                                                                   : s[kv->per_head ? h : 0];
            for (int64_t j = 0; j < hd; j++) y[j] = lmp_kv_fake_quant(kv->type, y[j], sc, kv->dynamic);
        }
}

int lmp_kv_quantize(const lmp_kvspec *kv, int64_t T, int64_t H, int64_t hd, float *k, float *v)
{
    if (!kv || kv->type == LMP_KV_NONE || T <= 0) return 0;
    if (kv->type != LMP_KV_FP8_E4M3 && kv->type != LMP_KV_INT8 && kv->type != LMP_KV_INT4)
        return lmp_fail(LMP_EINVAL, "KV cache: unknown quantization type %d", (int)kv->type);
    if (kv->per_head == LMP_KV_PER_TOKEN_HEAD) { /* no scales to keep: each slice's own */
        if (!kv->dynamic) return lmp_fail(LMP_EINVAL, "KV cache: scales per token are dynamic only");
        quantize_slices(kv, NULL, k, T, H, hd);
        quantize_slices(kv, NULL, v, T, H, hd);
        return 0;
    }
    if (kv->per_head && H > LMP_KV_MAX_HEADS)
        return lmp_fail(LMP_EINVAL, "KV cache: per-head scales for %lld KV heads, more than the %d lmpress keeps",
                        (long long)H, LMP_KV_MAX_HEADS);
    const int64_t n = kv->per_head ? H : 1;
    float ks[LMP_KV_MAX_HEADS], vs[LMP_KV_MAX_HEADS];
    for (int64_t h = 0; h < n; h++) {
        if (kv->dynamic) {
            ks[h] = vs[h] = 0.0f;
        } else if (!(kv->k_scale[h] > 0.0f && kv->k_scale[h] < INFINITY && kv->v_scale[h] > 0.0f &&
                     kv->v_scale[h] < INFINITY)) {
            return lmp_fail(LMP_EINVAL, "KV cache: static scale %lld is %g / %g (not calibrated?)", (long long)h,
                            (double)kv->k_scale[h], (double)kv->v_scale[h]);
        } else {
            ks[h] = kv->k_scale[h];
            vs[h] = kv->v_scale[h];
        }
    }
    if (kv->dynamic) { /* compute_dynamic_scales_and_zp: the window's own abs-max */
        lmp_kv_absmax(k, T, H, hd, kv->per_head, ks);
        lmp_kv_absmax(v, T, H, hd, kv->per_head, vs);
        for (int64_t h = 0; h < n; h++) {
            ks[h] = lmp_kv_scale_of(kv->type, ks[h]);
            vs[h] = lmp_kv_scale_of(kv->type, vs[h]);
        }
    }
    quantize_slices(kv, ks, k, T, H, hd);
    quantize_slices(kv, vs, v, T, H, hd);
    return 0;
}

const char *lmp_kv_describe(const lmp_kvspec *kv, char *buf, unsigned n)
{
    if (!kv || kv->type == LMP_KV_NONE) snprintf(buf, n, "none");
    else
        snprintf(buf, n, "%s %s %s", lmp_kv_type_names[kv->type],
                 kv->per_head == LMP_KV_PER_TOKEN_HEAD ? "per-token-head" : kv->per_head ? "per-head" : "per-tensor",
                 kv->dynamic ? "dynamic" : "static");
    return buf;
}
