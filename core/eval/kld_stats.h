/* kld_stats.h — llama-perplexity's --kl-divergence statistics of a model Q against a base model,
 * position by position, for `lmpress eval MODEL --kl-divergence-base BASE`.
 *
 * What is measured at each scored position is what eval.h's protocol measures (lmp_kl_position,
 * lmp_argmax: the same functions compare's KLD and top-1 columns come from), so the mean KLD here
 * is compare's KLD column for the same pair, text and windows, bit for bit.  On top of it the
 * statistics llama.cpp's tools/perplexity/perplexity.cpp (kl_divergence) reports, with its
 * definitions:
 *   - nll = -log p_Q(next token), nll_base the same under the base; PPL(Q) = exp(mean nll) with
 *     the uncertainty exp(mean) * sqrt(var(nll) / (n - 1)); the correlation and covariance of
 *     ln PPL(Q) and ln PPL(base), ln(PPL(Q)/PPL(base)), PPL(Q)/PPL(base), PPL(Q) - PPL(base);
 *   - KLD: mean ± sqrt(var / (n - 1)), and the percentiles of the per-position values
 *     (maximum, 99.9, 99, 95, 90, median, 10, 5, 1, 0.1 %, minimum), each by linear interpolation
 *     between the sorted values at fraction * (n - 1);
 *   - Δp = p_Q(next token) - p_base(next token): mean ± uncertainty, percentiles (also 75 and
 *     25 %), RMS Δp with its uncertainty;
 *   - same top p: the share of positions whose most likely token is the same, ± sqrt(p(1-p)/(n-1)).
 * Differences from llama.cpp's numbers on the same logits: llama-perplexity stores the base's
 * log-probabilities as 16-bit values (per-position scale and minimum) and leaves out the terms
 * with log p_base < -16; here the base's f32 log-probabilities are used as they are, over the
 * whole vocabulary.  Uncertainties are 0 below 11 positions, as llama.cpp makes them. */
#ifndef LMP_CORE_KLD_STATS_H
#define LMP_CORE_KLD_STATS_H

#include <stdint.h>

typedef struct lmp_kld_stats {
    /* 1: KL leaves out the terms whose base log-probability is at most -16, as llama-perplexity
     * does: for a base read from its logits file, whose stored values are clamped there (a
     * clamped value is no log-probability).  0: every term (the protocol's KL). */
    int llama_cut;
    int64_t count, same_top;
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base;
    double sum_kld, sum_kld2, sum_dp, sum_dp2, sum_dp4;
    float *kld, *dp; /* [count]: per position, for the percentiles */
    int64_t cap;
} lmp_kld_stats;

/* Adds one window: ref and var are [L, V] log-probabilities of the base and of Q (row t predicts
 * tok[t + 1]); its L - 1 positions are scored, as lmp_score_window scores them. */
int lmp_kld_stats_window(lmp_kld_stats *s, const float *ref, const float *var, const int32_t *tok, int64_t L,
                         int64_t V);
void lmp_kld_stats_free(lmp_kld_stats *s);

typedef struct lmp_mean_err {
    double mean, err;
} lmp_mean_err;

#define LMP_KLD_N_PCT 11
#define LMP_DP_N_PCT 13
typedef struct lmp_kld_summary {
    int64_t count;
    lmp_mean_err ppl, ppl_base, ln_ppl_ratio, ppl_ratio, ppl_diff, kld, dp, dp_rms, same_top;
    double ln_ppl_cor;
    /* percentiles, largest first: the fractions of lmp_kld_pct / lmp_dp_pct */
    double kld_pct[LMP_KLD_N_PCT], dp_pct[LMP_DP_N_PCT];
} lmp_kld_summary;

/* The fractions of the percentile rows (1 = maximum, 0.5 = median, 0 = minimum). */
extern const double lmp_kld_pct[LMP_KLD_N_PCT], lmp_dp_pct[LMP_DP_N_PCT];

/* The statistics of everything added so far (sorts s's per-position arrays).  count 0: NaNs. */
void lmp_kld_summarize(lmp_kld_stats *s, lmp_kld_summary *out);

#endif
