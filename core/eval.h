/* eval.h — evaluation of variants against the unmodified model on one text.
 *
 * Protocol (the README states it too): the text's token ids (BOS once at the start) are cut into
 * floor(n/L) non-overlapping windows of L tokens, the tail dropped (max_windows > 0 caps the
 * count); each window runs on its own from position 0 and its L-1 next-token predictions are
 * scored.  ppl = exp(mean NLL); kld = mean over scored positions of
 * sum_v p_ref(v) (log p_ref(v) - log p_var(v)); top1 = share of positions where both argmax agree. */
#ifndef LMP_CORE_EVAL_H
#define LMP_CORE_EVAL_H

#include <math.h>

#include "backend.h"
#include "model.h"

typedef struct lmp_score {
    int64_t windows, scored;
    double nll_sum, kld_sum;
    int64_t top1_hits;
} lmp_score;

static inline double lmp_score_ppl(const lmp_score *s) { return s->scored ? exp(s->nll_sum / (double)s->scored) : NAN; }
static inline double lmp_score_kld(const lmp_score *s) { return s->scored ? s->kld_sum / (double)s->scored : NAN; }
static inline double lmp_score_top1(const lmp_score *s) { return s->scored ? (double)s->top1_hits / (double)s->scored : NAN; }

/* Scores n_var block sets against the reference blocks `ref` (variants[i] == ref is scored
 * without a second forward) on ids[n_ids] with windows of L.  out[n_var] is overwritten.
 * what names the text in messages and progress. */
int lmp_eval_text(const lmp_backend *be, const lmp_model *m, const lmp_block *ref,
                  lmp_block *const *variants, int n_var,
                  const int32_t *ids, int64_t n_ids, int64_t L, int64_t max_windows,
                  const char *what, lmp_score *out);

#endif
