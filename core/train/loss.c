/* loss.c — see loss.h.  The softmax is taken in double with its max subtracted, so neither a
 * large logit nor a long vocabulary loses the gradient's small entries:
 *   CE: dz = (softmax(z) - onehot(target)) / T;   KL: dz = (softmax(z) - p_ref) / T. */
#include "train/loss.h"

#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "lmpress/plugin.h"

int lmp_loss_mse(int64_t n, const float *y, const float *target, double *loss, float *dy)
{
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = (double)y[i] - target[i];
        sum += e * e;
        if (dy) dy[i] = (float)(2.0 * e / (double)n);
    }
    *loss = n > 0 ? sum / (double)n : 0.0;
    return 0;
}

/* log-sum-exp of one row, in double. */
static double row_lse(int64_t V, const float *z)
{
    double mx = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; v++)
        if (z[v] > mx) mx = z[v];
    for (int64_t v = 0; v < V; v++) s += exp((double)z[v] - mx);
    return mx + log(s);
}

int lmp_loss_ce(int64_t T, int64_t V, const float *z, const int32_t *targets, double *loss, float *dz)
{
    double sum = 0;
    for (int64_t t = 0; t < T; t++) {
        if (targets[t] < 0 || targets[t] >= V)
            return lmp_fail(LMP_EINVAL, "cross-entropy: target %d of row %lld is outside the vocabulary (%lld)",
                            (int)targets[t], (long long)t, (long long)V);
        const float *zr = z + t * V;
        const double lse = row_lse(V, zr), zt = zr[targets[t]];
        sum += lse - zt;
        if (dz)
            for (int64_t v = 0; v < V; v++)
                dz[t * V + v] = (float)((exp((double)zr[v] - lse) - (v == targets[t])) / (double)T);
    }
    *loss = T > 0 ? sum / (double)T : 0.0;
    return 0;
}

int lmp_loss_kl(int64_t T, int64_t V, const float *z, const float *ref_logp, double *loss, float *dz)
{
    double sum = 0;
    for (int64_t t = 0; t < T; t++) {
        const float *zr = z + t * V, *lr = ref_logp + t * V;
        const double lse = row_lse(V, zr);
        for (int64_t v = 0; v < V; v++) {
            const double pr = exp((double)lr[v]), lp = (double)zr[v] - lse;
            if (pr > 0) sum += pr * ((double)lr[v] - lp);
            if (dz) dz[t * V + v] = (float)((exp(lp) - pr) / (double)T);
        }
    }
    *loss = T > 0 ? sum / (double)T : 0.0;
    return 0;
}
