/* kld_stats.c — see kld_stats.h.  The formulas are restated from llama.cpp's perplexity.cpp
 * (kl_divergence, mean_and_uncertainty, covariance, percentile); the per-position measures are
 * eval.h's. */
#include "eval/kld_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eval/eval.h"

const double lmp_kld_pct[LMP_KLD_N_PCT] = {1.0, 0.999, 0.99, 0.95, 0.90, 0.5, 0.10, 0.05, 0.01, 0.001, 0.0};
const double lmp_dp_pct[LMP_DP_N_PCT] = {1.0, 0.999, 0.99, 0.95, 0.90, 0.75, 0.5, 0.25, 0.10, 0.05, 0.01, 0.001, 0.0};

static int grow(lmp_kld_stats *s, int64_t more)
{
    if (s->count + more <= s->cap) return 0;
    int64_t cap = s->cap ? s->cap : 4096;
    while (cap < s->count + more) cap *= 2;
    float *k = realloc(s->kld, (size_t)cap * sizeof *k);
    if (k) s->kld = k;
    float *d = k ? realloc(s->dp, (size_t)cap * sizeof *d) : NULL;
    if (d) s->dp = d;
    if (!k || !d) return lmp_fail(LMP_ENOMEM, "out of memory for %lld positions' KL divergences", (long long)cap);
    s->cap = cap;
    return 0;
}

/* llama-perplexity's KL against its stored base: only the terms with log p_base > -16. */
static double kl_above_cut(const float *ref, const float *var, int64_t V)
{
    double kl = 0;
    for (int64_t v = 0; v < V; v++)
        if (ref[v] > -16.0f) kl += exp((double)ref[v]) * ((double)ref[v] - (double)var[v]);
    return kl;
}

int lmp_kld_stats_window(lmp_kld_stats *s, const float *ref, const float *var, const int32_t *tok, int64_t L,
                         int64_t V)
{
    int st = grow(s, L > 1 ? L - 1 : 0);
    for (int64_t t = 0; t + 1 < L && !st; t++) {
        const float *r = ref + t * V, *q = var + t * V;
        const double nll = -(double)q[tok[t + 1]], nll_base = -(double)r[tok[t + 1]];
        const double kl = r == q ? 0.0 : s->llama_cut ? kl_above_cut(r, q, V) : lmp_kl_position(r, q, V);
        const double dp = exp(-nll) - exp(-nll_base);
        s->sum_nll += nll;
        s->sum_nll2 += nll * nll;
        s->sum_nll_base += nll_base;
        s->sum_nll_base2 += nll_base * nll_base;
        s->sum_nll_nll_base += nll * nll_base;
        s->sum_kld += kl;
        s->sum_kld2 += kl * kl;
        s->sum_dp += dp;
        s->sum_dp2 += dp * dp;
        s->sum_dp4 += dp * dp * dp * dp;
        s->same_top += r == q || lmp_argmax(r, V) == lmp_argmax(q, V);
        s->kld[s->count] = (float)kl;
        s->dp[s->count] = (float)dp;
        s->count++;
    }
    return st;
}

void lmp_kld_stats_free(lmp_kld_stats *s)
{
    free(s->kld);
    free(s->dp);
    memset(s, 0, sizeof *s);
}

/* llama.cpp's mean_and_uncertainty: the mean, and the standard error sqrt(var / (n - 1)) once
 * there are more than 10 values. */
static lmp_mean_err mean_err(double sum, double sum2, int64_t n)
{
    if (n < 1) return (lmp_mean_err){NAN, NAN};
    const double f = sum / (double)n, var = sum2 / (double)n - f * f;
    return (lmp_mean_err){f, var > 0 && n > 10 ? sqrt(var / (double)(n - 1)) : 0.0};
}

/* llama.cpp's covariance of the two means (0 below 10 values). */
static double covariance(double suma, double sumb, double sumab, int64_t n)
{
    if (n < 10) return 0.0;
    const double c = sumab / (double)n - (suma / (double)n) * (sumb / (double)n);
    return c / (double)(n - 1);
}

static int by_value(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Linear interpolation between the sorted values at fraction * (n - 1). */
static double percentile(const float *sorted, int64_t n, double fraction)
{
    if (fraction <= 0) return sorted[0];
    if (fraction >= 1) return sorted[n - 1];
    const double p = fraction * (double)(n - 1);
    const int64_t ip = (int64_t)p;
    const double w = p - (double)ip;
    return (1 - w) * sorted[ip] + w * sorted[ip + 1 < n ? ip + 1 : n - 1];
}

void lmp_kld_summarize(lmp_kld_stats *s, lmp_kld_summary *o)
{
    const int64_t n = s->count;
    memset(o, 0, sizeof *o);
    o->count = n;
    const lmp_mean_err lp = mean_err(s->sum_nll, s->sum_nll2, n), lb = mean_err(s->sum_nll_base, s->sum_nll_base2, n);
    const double cov = covariance(s->sum_nll, s->sum_nll_base, s->sum_nll_nll_base, n);
    o->ppl = (lmp_mean_err){exp(lp.mean), exp(lp.mean) * lp.err};
    o->ppl_base = (lmp_mean_err){exp(lb.mean), exp(lb.mean) * lb.err};
    o->ln_ppl_cor = cov / (lp.err * lb.err);
    o->ln_ppl_ratio = (lmp_mean_err){lp.mean - lb.mean, sqrt(fmax(0.0, lp.err * lp.err + lb.err * lb.err - 2 * cov))};
    o->ppl_ratio = (lmp_mean_err){exp(o->ln_ppl_ratio.mean), exp(o->ln_ppl_ratio.mean) * o->ln_ppl_ratio.err};
    const double ppl_cov = o->ppl.mean * o->ppl_base.mean * cov;
    o->ppl_diff = (lmp_mean_err){o->ppl.mean - o->ppl_base.mean,
                                 sqrt(fmax(0.0, o->ppl.err * o->ppl.err + o->ppl_base.err * o->ppl_base.err - 2 * ppl_cov))};
    o->kld = mean_err(s->sum_kld, s->sum_kld2, n);
    o->dp = mean_err(s->sum_dp, s->sum_dp2, n);
    const lmp_mean_err mse = mean_err(s->sum_dp2, s->sum_dp4, n);
    const double rms = sqrt(mse.mean);
    o->dp_rms = (lmp_mean_err){rms, rms > 0 ? 0.5 / rms * mse.err : 0.0};
    const double top = n ? (double)s->same_top / (double)n : NAN;
    o->same_top = (lmp_mean_err){top, n > 1 ? sqrt(top * (1 - top) / (double)(n - 1)) : 0.0};
    if (n == 0) {
        for (int i = 0; i < LMP_KLD_N_PCT; i++) o->kld_pct[i] = NAN;
        for (int i = 0; i < LMP_DP_N_PCT; i++) o->dp_pct[i] = NAN;
        return;
    }
    qsort(s->kld, (size_t)n, sizeof *s->kld, by_value);
    qsort(s->dp, (size_t)n, sizeof *s->dp, by_value);
    for (int i = 0; i < LMP_KLD_N_PCT; i++) o->kld_pct[i] = percentile(s->kld, n, lmp_kld_pct[i]);
    for (int i = 0; i < LMP_DP_N_PCT; i++) o->dp_pct[i] = percentile(s->dp, n, lmp_dp_pct[i]);
}
