/* lmpress/plugin_fpquants.h — the floating-point grids (ABI 4.5), included by plugin.h after the
 * lmp_wspec definitions; a plugin includes plugin.h, never this file alone.
 *
 * The formats the serving stacks of 2026 load, each as compressed-tensors 0.20.1 quantizes and
 * dequantizes it (quantization/utils/helpers.py calculate_qparams and generate_gparam,
 * lifecycle/forward.py fake_quantize, in f32), so that a strategy quantizing onto them produces
 * the weights a reader of the file gets:
 *
 *   fp8_e4m3  E4M3 (OCP "fn": no infinities, max 448) codes with one scale per slice: per tensor,
 *             per channel or per group of `group` inputs (spec->gran, like INT):
 *               scale = clip * amax / 448, rounded to spec->scale_type (the model's dtype, which
 *               is where llm-compressor's observer computes it); a scale 0 becomes that type's
 *               eps (f32 2^-23, f16 2^-10, bf16 2^-7), as calculate_qparams does;
 *               q = e4m3(clamp(w / scale + 0, -448, 448)) (round to nearest even, torch's cast;
 *               + 0 is compressed-tensors' zero point, which makes a -0 quotient +0);
 *               w' = f32(q) * scale.
 *   fp8_e5m2  the same with E5M2 codes (max 57344, scale = clip * amax / 57344).  compressed-
 *             tensors has no E5M2 weight scheme; the reference is torch's float8_e5m2 cast.
 *   nvfp4     E2M1 codes (0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6) in groups of 16 inputs of a row,
 *             each group an E4M3 scale s, the tensor one f32 global scale gs (spec->global_scale):
 *               gs = (1 / max(amax of the whole tensor, FLT_MIN)) * 2688 (1 when not finite), set
 *               by the plugin from W before any grid is chosen (lmp_nvfp4_global_scale);
 *               s = e4m3(clamp(gs * (clip * amax_group / 6), -448, 448)), 0.125 when 0;
 *               q = e2m1(clamp(w / (s / gs), -6, 6)); w' = f32(q) * (s / gs).
 *             scales[] hold s as the f32 it decodes to (exactly an E4M3 value).
 *   mxfp4     E2M1 codes in groups of 32 with an E8M0 scale 2^(e-127):
 *               e = clamp(127 + log2(p2(clip * amax)) - 2, 0, 255), p2 rounding the f32 to a power
 *               of two (its mantissa bits plus 2^21, then kept only sign and exponent:
 *               compressed-tensors' round_to_power_2; an amax 0 gives e = 0);
 *               q = e2m1(clamp(w / 2^(e-127), -6, 6)); w' = f32(q) * 2^(e-127).
 *   mxfp8     the same with E4M3 codes, clamp ±448 and the exponent offset 8 (p2 as for mxfp4:
 *               compressed-tensors uses FP4's mantissa width there for 8 bits too).
 *
 * Codes (lmp_wgrid_code) are the stored bit patterns: an E4M3 / E5M2 byte (0..255) or an E2M1
 * nibble (0..15: sign bit 3), as f32 integers; a NaN weight keeps a NaN code.  Every step below is
 * an f32 operation in torch's order (a division, not a multiplication by a reciprocal). */
#ifndef LMPRESS_PLUGIN_FPQUANTS_H
#define LMPRESS_PLUGIN_FPQUANTS_H

#ifndef LMPRESS_PLUGIN_H
#error "include lmpress/plugin.h, not lmpress/plugin_fpquants.h"
#endif

/* A minifloat's layout: mantissa bits, exponent bias, and the sign bit's position. */
typedef struct lmp_minifloat {
    int mbits, bias, sign_bit;
    float max;
} lmp_minifloat;

static const lmp_minifloat LMP_MF_E4M3 = {3, 7, 7, 448.0f};
static const lmp_minifloat LMP_MF_E5M2 = {2, 15, 7, 57344.0f};
static const lmp_minifloat LMP_MF_E2M1 = {1, 1, 3, 6.0f};

/* x (|x| <= max, not NaN) to the nearest value of the minifloat, ties to the even mantissa, as
 * the bit pattern: torch's float8 casts and compressed-tensors' cast_to_fp4 thresholds (0.25 -> 0,
 * 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4) are all this rounding.  A
 * negative x that rounds to 0 keeps its sign (-0), as the casts do.  Every step is exact but the
 * one rounding: x / step with step a power of two. */
static inline uint32_t lmp_minifloat_encode(const lmp_minifloat *f, float x)
{
    const uint32_t sign = x < 0.0f || (x == 0.0f && signbit(x)) ? 1u << f->sign_bit : 0u;
    const float a = fabsf(x);
    const int emin = 1 - f->bias;
    int e2 = 0;
    (void)frexpf(a, &e2); /* a = m 2^e2, m in [0.5, 1): the unbiased exponent is e2 - 1 */
    int E = a == 0.0f ? emin : e2 - 1;
    if (E < emin) E = emin;
    const float step = ldexpf(1.0f, E - f->mbits);
    uint32_t m = (uint32_t)nearbyintf(a / step); /* 0 .. 2^(mbits+1) */
    if (m >= (2u << f->mbits)) { /* rounded up into the next binade */
        E++;
        m >>= 1;
    }
    if (m < (1u << f->mbits)) return sign | m; /* subnormal (E is emin) or zero */
    return sign | ((uint32_t)(E + f->bias) << f->mbits) | (m - (1u << f->mbits));
}

/* The value of a bit pattern (an E4M3 0x7F / 0xFF is NaN; E5M2's exponent 31 is inf or NaN). */
static inline float lmp_minifloat_decode(const lmp_minifloat *f, uint32_t b)
{
    const int ebits = f->sign_bit - f->mbits;
    const uint32_t emax = (1u << ebits) - 1u, man = b & ((1u << f->mbits) - 1u);
    const uint32_t ex = (b >> f->mbits) & emax;
    const float sign = (b >> f->sign_bit) & 1u ? -1.0f : 1.0f;
    if (f->mbits == 3) { /* E4M3 "fn": only the all-ones pattern is NaN */
        if (ex == emax && man == (1u << f->mbits) - 1u) return NAN;
    } else if (f->mbits == 2 && ex == emax) { /* E5M2: IEEE-like */
        return man ? NAN : sign * INFINITY;
    }
    if (ex == 0) return sign * ldexpf((float)man, 1 - f->bias - f->mbits);
    return sign * ldexpf((float)((1u << f->mbits) | man), (int)ex - f->bias - f->mbits);
}

/* x rounded onto the minifloat (clamped to ±max first), as an f32. */
static inline float lmp_minifloat_round(const lmp_minifloat *f, float x)
{
    if (x != x) return x;
    return lmp_minifloat_decode(f, lmp_minifloat_encode(f, lmp_wgrid_clampf(x, -f->max, f->max)));
}

/* The element type of a floating-point format (E2M1, E4M3 or E5M2); NULL for the others. */
static inline const lmp_minifloat *lmp_wformat_minifloat(lmp_wformat fmt)
{
    switch (fmt) {
    case LMP_WFORMAT_FP8_E4M3:
    case LMP_WFORMAT_MXFP8: return &LMP_MF_E4M3;
    case LMP_WFORMAT_FP8_E5M2: return &LMP_MF_E5M2;
    case LMP_WFORMAT_NVFP4:
    case LMP_WFORMAT_MXFP4: return &LMP_MF_E2M1;
    default: return NULL;
    }
}

static inline int lmp_wformat_is_fp(lmp_wformat fmt) { return lmp_wformat_minifloat(fmt) != NULL; }

/* The eps compressed-tensors puts in place of a scale 0 (torch.finfo(scale dtype).eps). */
static inline float lmp_fp_scale_eps(lmp_scale_type t)
{
    return t == LMP_SCALE_BF16 ? 0.0078125f : t == LMP_SCALE_F16 ? 0.0009765625f : 1.1920928955078125e-07f;
}

/* compressed-tensors' round_to_power_2 of an f32 (mantissa width 1) and the E8M0 exponent
 * generate_mx_scales makes of it with the element type's offset (2 for E2M1, 8 for E4M3),
 * clamped to the byte as calculate_qparams' cast to uint8 does. */
static inline int lmp_mx_exponent(float amax, int offset)
{
    union { float f; uint32_t u; } v = {amax};
    v.u = (v.u + (1u << 21)) & 0xFF800000u;
    if (v.f == 0.0f) return 0; /* log2(0) = -inf, clamped */
    if (v.f != v.f || v.f == INFINITY) return 255;
    int e2 = 0;
    (void)frexpf(v.f, &e2); /* a power of two 2^(e2-1) */
    const int e = 127 + (e2 - 1) - offset;
    return e < 0 ? 0 : e > 255 ? 255 : e;
}

/* NVFP4's per-tensor global scale from the tensor's abs-max (generate_gparam, f32). */
static inline float lmp_nvfp4_global_scale_of(float amax)
{
    const float m = amax > 1.17549435e-38f ? amax : 1.17549435e-38f; /* clamp(min = finfo.tiny) */
    /* torch evaluates 2688.0 / tensor as tensor.reciprocal() * 2688.0 (Tensor.__rtruediv__) */
    const float gs = (1.0f / m) * (448.0f * 6.0f);
    return gs == gs && gs != INFINITY ? gs : 1.0f;
}

/* ... of W[n] (NaN weights skipped). */
static inline float lmp_nvfp4_global_scale(const float *W, int64_t n)
{
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (fabsf(W[i]) > amax) amax = fabsf(W[i]);
    return lmp_nvfp4_global_scale_of(amax);
}

/* The scale of one slice of a floating-point format from its abs-max (the other steps of the
 * header comment: clip, the type's scale, rounding, the eps for 0). */
static inline float lmp_wgrid_fit_fp(const lmp_wspec *s, float amax)
{
    const float a = lmp_wspec_clip(s) * amax;
    switch (s->format) {
    case LMP_WFORMAT_FP8_E4M3:
    case LMP_WFORMAT_FP8_E5M2: {
        float sc = a / lmp_wformat_minifloat(s->format)->max;
        if (s->scale_type == LMP_SCALE_F16) sc = lmp_fp16_round(lmp_wgrid_clampf(sc, -65504.0f, 65504.0f));
        else if (s->scale_type == LMP_SCALE_BF16) sc = lmp_bf16_round(sc);
        return sc == 0.0f ? lmp_fp_scale_eps(s->scale_type) : sc;
    }
    case LMP_WFORMAT_NVFP4: {
        const float sc = lmp_minifloat_round(&LMP_MF_E4M3, s->global_scale * (a / 6.0f));
        return sc == 0.0f ? 0.125f : sc;
    }
    case LMP_WFORMAT_MXFP4: return ldexpf(1.0f, lmp_mx_exponent(a, 2) - 127);
    case LMP_WFORMAT_MXFP8: return ldexpf(1.0f, lmp_mx_exponent(a, 8) - 127);
    default: return 0.0f;
    }
}

/* The scale the weights are divided by: NVFP4's s / gs, the slice's scale for the others. */
static inline float lmp_wgrid_fp_eff(const lmp_wspec *s, float scale)
{
    return s->format == LMP_WFORMAT_NVFP4 ? scale / s->global_scale : scale;
}

static inline float lmp_wgrid_code_fp(const lmp_wspec *s, float w, float scale)
{
    if (w != w) return w;
    const lmp_minifloat *f = lmp_wformat_minifloat(s->format);
    /* + 0: compressed-tensors adds the grid's zero point, 0, so a -0 quotient becomes +0 */
    const float x = w / lmp_wgrid_fp_eff(s, scale) + 0.0f;
    if (x != x) return x; /* 0 / 0 cannot happen (scales are never 0); inf / inf can */
    return (float)lmp_minifloat_encode(f, lmp_wgrid_clampf(x, -f->max, f->max));
}

static inline float lmp_wgrid_value_fp(const lmp_wspec *s, float code, float scale)
{
    if (code != code) return code;
    return lmp_minifloat_decode(lmp_wformat_minifloat(s->format), (uint32_t)code) * lmp_wgrid_fp_eff(s, scale);
}

/* ---- ggml's own MXFP4, NVFP4, Q1_0 and Q2_0 (GGUF types 39..42), as its reference quantizers
 * (ggml-quants.c quantize_row_*_ref, llama.cpp as the llama-cpp-python 0.3.36 sdist vendors it)
 * store them; a slice is one scale's inputs of a row:
 *   gguf_mxfp4  blocks of 32: e = floor(log2f(amax)) - 2 + 127 (0 for amax 0; an amax below
 *               2^-125, whose e ggml's uint8 cast leaves undefined, gets 0), d = 2^(e-128) (ggml's
 *               E8M0_TO_FP32_HALF); q = the first index of kvalues_mxfp4 (2 x E2M1: 0, 1, 2, 3, 4, 6,
 *               8, 12 and their negatives) minimising |kv[q] d - w|; w' = kv[q] d.
 *   gguf_nvfp4  blocks of 64 in 4 sub-blocks of 16 (the slice), each a UE4M3 scale and no global
 *               scale: u = ggml_fp32_to_ue4m3(amax / 6) (its own rounding: half up on the mantissa,
 *               saturating at 448), d = ue4m3_to_fp32(u) (the value / 2, 0 for 0 and 0x7F); q and
 *               w' as for gguf_mxfp4.
 *   q1_0        blocks of 128: d = (sum of |w|) / 128; q = w >= 0; w' = q ? fp16(d) : -fp16(d).
 *   q2_0        blocks of 64: d = amax, q = clamp((int)roundf(w * (1/d)) + 1, 0, 3) (1/d: 0 for d 0);
 *               w' = (q - 1) fp16(d) (ggml's quantizer never reaches q = 3: |w| <= d).
 * scales[] hold d (the f32 ggml computes, which the file rounds to fp16 for q1_0 and q2_0; the
 * exact value the byte stores for the FP4 two).  None takes a clip ratio or an importance. */
static inline int lmp_wformat_is_ggml_new(lmp_wformat f) { return f >= LMP_WFORMAT_GGUF_MXFP4 && f <= LMP_WFORMAT_GGUF_Q2_0; }

static const int8_t lmp_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ggml_e8m0_to_fp32_half */
static inline float lmp_e8m0_half(int e)
{
    union { uint32_t u; float f; } v;
    v.u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return v.f;
}

/* ggml_fp32_to_ue4m3 and ggml_ue4m3_to_fp32, in ggml's steps. */
static inline uint8_t lmp_ue4m3_encode(float x)
{
    if (!(x > 0.0f)) return 0;
    if (x > 448.0f) x = 448.0f;
    union { float f; uint32_t u; } v = {x};
    const int e = (int)((v.u >> 23) & 0xFF) - 127 + 7;
    int man = (int)((v.u >> 20) & 0x7);
    if (e <= 0) {
        int m = (int)(x * 512.0f + 0.5f);
        if (m > 7) m = 7;
        return m < 1 ? 0 : (uint8_t)m;
    }
    if (e >= 15) return 0x7E;
    int ex = e;
    man += (int)((v.u >> 19) & 1);
    if (man > 7) {
        man = 0;
        if (++ex >= 15) return 0x7E;
    }
    return (uint8_t)((ex << 3) | man);
}

static inline float lmp_ue4m3_half(uint8_t x)
{
    if (x == 0 || x == 0x7F) return 0.0f;
    const int e = (x >> 3) & 0xF, m = x & 0x7;
    const float raw = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return raw * 0.5f;
}

static inline float lmp_wgrid_fit_ggml_block(const lmp_wspec *s, const float *x, int64_t n)
{
    float amax = 0.0f, sum_abs = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        sum_abs += fabsf(x[j]);
    }
    switch (s->format) {
    case LMP_WFORMAT_GGUF_MXFP4: {
        if (!(amax > 0.0f)) return lmp_e8m0_half(0);
        const float e = floorf(log2f(amax)) - 2 + 127;
        return lmp_e8m0_half(e < 0.0f ? 0 : (int)e);
    }
    case LMP_WFORMAT_GGUF_NVFP4: return lmp_ue4m3_half(lmp_ue4m3_encode(amax / 6.0f));
    case LMP_WFORMAT_GGUF_Q1_0: return sum_abs / (float)n;
    case LMP_WFORMAT_GGUF_Q2_0: return amax;
    default: return 0.0f;
    }
}

static inline float lmp_wgrid_code_ggml(const lmp_wspec *s, float w, float d)
{
    if (w != w) return w;
    if (s->format == LMP_WFORMAT_GGUF_Q1_0) return w >= 0.0f ? 1.0f : 0.0f;
    if (s->format == LMP_WFORMAT_GGUF_Q2_0) {
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        const float t = roundf(w * id);
        int q = (t - t == 0.0f ? (int)lmp_wgrid_clampf(t, -2.0f, 3.0f) : 0) + 1; /* an inf t: d subnormal */
        return (float)(q < 0 ? 0 : q > 3 ? 3 : q);
    }
    int best = 0; /* best_index_mxfp4 */
    float best_err = fabsf(lmp_kvalues_mxfp4[0] * d - w);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf(lmp_kvalues_mxfp4[i] * d - w);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return (float)best;
}

static inline float lmp_wgrid_value_ggml(const lmp_wspec *s, float code, float d)
{
    if (code != code) return code;
    if (s->format == LMP_WFORMAT_GGUF_Q1_0) return code != 0.0f ? lmp_fp16_round(d) : -lmp_fp16_round(d);
    if (s->format == LMP_WFORMAT_GGUF_Q2_0) return (float)((int)code - 1) * lmp_fp16_round(d);
    return lmp_kvalues_mxfp4[(int)code] * d;
}

#endif
