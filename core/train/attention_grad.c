/* attention_grad.c — see attention_grad.h.  The scores are made as the CPU backend's
 * attention_window makes them (double sums of f32 products, scaled, then capped), so the
 * probabilities are the forward's. */
#include "train/attention_grad.h"

#include <math.h>
#include <stdlib.h>

#include "base/error.h"

/* All three: slopes NULL, or ALiBi's per head (its bias is a constant: the derivative is the plain
 * one at the biased probabilities); sinks NULL, or gpt-oss's per head (a logit in the denominator
 * with no value: its dp is 0, so the keys' dc_j keep their form over p with the sink's share, and
 * the sink's own gradient is p_sink (0 - sum_j p_j dp_j), added to dsinks). */
static int attention_backward(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                              float softcap, const float *slopes, const float *sinks, const float *q, const float *k,
                              const float *v, const float *dout, float *dq, float *dk, float *dv, float *dsinks)
{
    if (T < 0 || n_heads <= 0 || n_kv_heads <= 0 || hd <= 0 || n_heads % n_kv_heads || window < 0 || softcap < 0)
        return lmp_fail(LMP_EINVAL, "attention backward: %lld heads on %lld kv heads of %lld, window %lld, soft-cap %g",
                        (long long)n_heads, (long long)n_kv_heads, (long long)hd, (long long)window, (double)softcap);
    const int64_t qdim = n_heads * hd, kvdim = n_kv_heads * hd, group = n_heads / n_kv_heads;
    const double scale = 1.0 / sqrt((double)hd);
    /* per query: capped scores then probabilities p, dp, the cap's derivative; dq of the query;
     * dk and dv summed over every query in double */
    double *p = malloc((size_t)T * sizeof *p), *dp = malloc((size_t)T * sizeof *dp);
    double *dcap = malloc((size_t)T * sizeof *dcap), *dq_t = malloc((size_t)hd * sizeof *dq_t);
    double *dkv = calloc((size_t)(2 * T * kvdim), sizeof *dkv);
    int st = 0;
    if ((T && (!p || !dp || !dcap || !dkv)) || !dq_t) {
        st = lmp_fail(LMP_ENOMEM, "out of memory in attention's backward (%lld tokens)", (long long)T);
        goto done;
    }
    for (int64_t h = 0; h < n_heads; h++) {
        const int64_t kh = h / group;
        double dsink = 0.0;
        for (int64_t t = 0; t < T; t++) {
            const float *qt = q + t * qdim + h * hd, *gt = dout + t * qdim + h * hd;
            const int64_t lo = window && t - window + 1 > 0 ? t - window + 1 : 0; /* keys lo..t */
            double mx = sinks ? (double)sinks[h] : -INFINITY, sum = 0.0, pdp = 0.0;
            for (int64_t j = lo; j <= t; j++) {
                const float *kj = k + j * kvdim + kh * hd, *vj = v + j * kvdim + kh * hd;
                double s = 0.0, g = 0.0;
                for (int64_t d = 0; d < hd; d++) {
                    s += (double)qt[d] * kj[d];
                    g += (double)gt[d] * vj[d];
                }
                s = s * scale + (slopes ? (double)slopes[h] * (double)(j - t) : 0.0);
                dcap[j] = 1.0;
                if (softcap > 0) {
                    const double th = tanh(s / softcap);
                    s = softcap * th;
                    dcap[j] = 1.0 - th * th;
                }
                p[j] = s;
                dp[j] = g;
                if (s > mx) mx = s;
            }
            const double sink_e = sinks ? exp((double)sinks[h] - mx) : 0.0;
            sum = sink_e;
            for (int64_t j = lo; j <= t; j++) {
                p[j] = exp(p[j] - mx);
                sum += p[j];
            }
            for (int64_t j = lo; j <= t; j++) {
                p[j] /= sum;
                pdp += p[j] * dp[j];
            }
            dsink -= sink_e / sum * pdp;
            for (int64_t d = 0; d < hd; d++) dq_t[d] = 0.0;
            for (int64_t j = lo; j <= t; j++) {
                const double ds = p[j] * (dp[j] - pdp) * dcap[j] * scale;
                const float *kj = k + j * kvdim + kh * hd;
                double *dkj = dkv + j * kvdim + kh * hd, *dvj = dkv + T * kvdim + j * kvdim + kh * hd;
                for (int64_t d = 0; d < hd; d++) {
                    dq_t[d] += ds * kj[d];
                    dkj[d] += ds * qt[d];
                    dvj[d] += p[j] * gt[d];
                }
            }
            for (int64_t d = 0; d < hd; d++) dq[t * qdim + h * hd + d] = (float)dq_t[d];
        }
        if (dsinks) dsinks[h] += (float)dsink;
    }
    for (int64_t i = 0; i < T * kvdim; i++) {
        dk[i] = (float)dkv[i];
        dv[i] = (float)dkv[T * kvdim + i];
    }
done:
    free(p);
    free(dp);
    free(dcap);
    free(dq_t);
    free(dkv);
    return st;
}

int lmp_attention_window_backward(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                                  float softcap, const float *q, const float *k, const float *v, const float *dout,
                                  float *dq, float *dk, float *dv)
{
    return attention_backward(T, n_heads, n_kv_heads, hd, window, softcap, NULL, NULL, q, k, v, dout, dq, dk, dv, NULL);
}

int lmp_attention_alibi_backward(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                                 const float *slopes, const float *q, const float *k, const float *v,
                                 const float *dout, float *dq, float *dk, float *dv)
{
    return attention_backward(T, n_heads, n_kv_heads, hd, window, 0.0f, slopes, NULL, q, k, v, dout, dq, dk, dv, NULL);
}

int lmp_attention_sinks_backward(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                                 const float *sinks, const float *q, const float *k, const float *v,
                                 const float *dout, float *dq, float *dk, float *dv, float *dsinks)
{
    return attention_backward(T, n_heads, n_kv_heads, hd, window, 0.0f, NULL, sinks, q, k, v, dout, dq, dk, dv, dsinks);
}
