/* alibi.c — see alibi.h. */
#include "model/alibi.h"

#include <math.h>
#include <stdlib.h>

#include "base/error.h"

void lmp_alibi_slopes(int64_t n_heads, double *slopes)
{
    int64_t p2 = 1; /* the largest power of 2 not above n_heads */
    while (p2 * 2 <= n_heads) p2 *= 2;
    /* base = 2^(-2^-(log2(p2) - 3)) = 2^(-8 / p2); slope_i = base^(i + 1), in f32 (torch.pow) */
    const float base = (float)pow(2.0, -8.0 / (double)p2), extra = (float)pow(2.0, -8.0 / (double)(2 * p2));
    for (int64_t h = 0; h < n_heads; h++) {
        if (h < p2) slopes[h] = (double)(float)pow((double)base, (double)(h + 1));
        else slopes[h] = (double)(float)pow((double)extra, (double)(2 * (h - p2) + 1)); /* 1, 3, 5, ... */
    }
}

int lmp_attention_biased(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                         const double *slopes, const float *q, const float *k, const float *v, float *out)
{
    const int64_t qdim = n_heads * hd, kvdim = n_kv_heads * hd, group = n_heads / n_kv_heads;
    const double scale = 1.0 / sqrt((double)hd);
    double *p = malloc((size_t)(T + hd) * sizeof *p), *acc = p ? p + T : NULL;
    if (!p) return lmp_fail(LMP_ENOMEM, "out of memory in attention with linear biases (%lld tokens)", (long long)T);
    for (int64_t h = 0; h < n_heads; h++) {
        const int64_t kh = h / group;
        const double slope = slopes ? slopes[h] : 0.0;
        for (int64_t t = 0; t < T; t++) {
            const float *qt = q + t * qdim + h * hd;
            const int64_t lo = window && t - window + 1 > 0 ? t - window + 1 : 0; /* keys lo..t */
            double mx = -INFINITY, sum = 0.0;
            for (int64_t j = lo; j <= t; j++) {
                const float *kj = k + j * kvdim + kh * hd;
                double sc = 0.0;
                for (int64_t c = 0; c < hd; c++) sc += (double)qt[c] * kj[c];
                p[j] = sc * scale + slope * (double)(j - t);
                if (p[j] > mx) mx = p[j];
            }
            for (int64_t j = lo; j <= t; j++) sum += p[j] = exp(p[j] - mx);
            for (int64_t c = 0; c < hd; c++) acc[c] = 0.0;
            for (int64_t j = lo; j <= t; j++) {
                const float *vj = v + j * kvdim + kh * hd;
                for (int64_t c = 0; c < hd; c++) acc[c] += p[j] * vj[c];
            }
            float *ot = out + t * qdim + h * hd;
            for (int64_t c = 0; c < hd; c++) ot[c] = (float)(acc[c] / sum);
        }
    }
    free(p);
    return 0;
}
