/* grid_codes.c — see grid_codes.h. */
#include "model/grid_codes.h"

#include <math.h>
#include <string.h>

#include "base/error.h"

/* Whether the code's value v is the weight w: bitwise equal, so a NaN never matches, with one
 * exception.  A symmetric INT grid's code of a small negative weight is round(w/scale) = -0, so
 * the backends leave the weight -0 * scale = -0; a file's integer code 0 reads +0.  The two are
 * the same number (x + -0 = x + +0 = x in every dot product), so a -0 weight is taken as code 0;
 * a +0 weight must still give +0 (a GGUF Q4_0 block with a negative d gives -0 for its code 8,
 * as ggml does, and that stays exact). */
static int same_bits(float v, float w)
{
    if (v == 0.0f && w == 0.0f && signbit(w) && !signbit(v)) return 1;
    return v == w && memcmp(&v, &w, sizeof v) == 0;
}

void lmp_grid_code_range(const lmp_wspec *s, float *lo, float *hi)
{
    switch (s->format) {
    case LMP_WFORMAT_GGUF_Q8_0: *lo = -127.0f; *hi = 127.0f; return;
    case LMP_WFORMAT_GGUF_Q4_0:
    case LMP_WFORMAT_GGUF_Q4_1:
    case LMP_WFORMAT_GGUF_IQ4_NL:
    case LMP_WFORMAT_NF4: *lo = 0.0f; *hi = 15.0f; return;
    case LMP_WFORMAT_GGUF_Q5_0:
    case LMP_WFORMAT_GGUF_Q5_1: *lo = 0.0f; *hi = 31.0f; return;
    case LMP_WFORMAT_GGUF_Q2_K: /* the k-quants' codes as stored, offset to start at 0 */
    case LMP_WFORMAT_GGUF_Q3_K:
    case LMP_WFORMAT_GGUF_Q4_K:
    case LMP_WFORMAT_GGUF_Q5_K:
    case LMP_WFORMAT_GGUF_Q6_K: *lo = 0.0f; *hi = (float)((1 << s->bits) - 1); return;
    case LMP_WFORMAT_FP8_E4M3: /* the bit patterns */
    case LMP_WFORMAT_FP8_E5M2:
    case LMP_WFORMAT_MXFP8: *lo = 0.0f; *hi = 255.0f; return;
    case LMP_WFORMAT_NVFP4:
    case LMP_WFORMAT_MXFP4:
    case LMP_WFORMAT_GGUF_MXFP4: /* indexes of kvalues_mxfp4 */
    case LMP_WFORMAT_GGUF_NVFP4: *lo = 0.0f; *hi = 15.0f; return;
    case LMP_WFORMAT_GGUF_Q1_0: *lo = 0.0f; *hi = 1.0f; return;
    case LMP_WFORMAT_GGUF_Q2_0: *lo = 0.0f; *hi = 3.0f; return;
    case LMP_WFORMAT_INT: break;
    }
    *lo = s->sym ? -(float)(1 << (s->bits - 1)) : 0.0f;
    *hi = s->sym ? (float)((1 << (s->bits - 1)) - 1) : (float)((1 << s->bits) - 1);
}

int lmp_grid_codes_row(const lmp_linear *l, int64_t r, int32_t *codes)
{
    const lmp_wgrid *g = l->grid;
    if (!g) return lmp_fail(LMP_EINVAL, "%s: no grid was recorded for its weights", l->name);
    const lmp_wspec *s = &g->spec;
    float lo, hi;
    lmp_grid_code_range(s, &lo, &hi);
    for (int64_t c = 0; c < l->in; c++) {
        const int64_t k = lmp_wgrid_slice(g, l->in, r, c);
        const float w = l->w[r * l->in + c], scale = g->scales[k], zero = g->zeros ? g->zeros[k] : 0.0f;
        const float q = lmp_wgrid_code(s, w, scale, zero);
        float v = 0.0f;
        int found = 0;
        /* the code itself first, then its neighbours within the range */
        for (int d = 0; !found && d < 3 && q == q; d++) {
            const float t = d == 0 ? q : q + (d == 1 ? -1.0f : 1.0f); /* q itself: -0 + 0 would be +0 */
            if (t < lo || t > hi) continue;
            v = lmp_wgrid_value(s, t, scale, zero);
            if (same_bits(v, w)) {
                codes[c] = (int32_t)t;
                found = 1;
            }
        }
        if (!found)
            return lmp_fail(LMP_EINVAL,
                            "%s: weight [%lld, %lld] = %.9g is not on the grid recorded for it (code %g gives %.9g); "
                            "a stage changed the weights after quantizing them",
                            l->name, (long long)r, (long long)c, (double)w, (double)q,
                            (double)(q == q ? lmp_wgrid_value(s, q, scale, zero) : q));
    }
    return 0;
}
