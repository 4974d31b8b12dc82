/* eval.h — evaluation of variants against the unmodified model on one text.
 *
 * Protocol (docs/evaluation.md states it too): the text's token ids (BOS once at the start) are cut into
 * floor(n/L) non-overlapping windows of L tokens, the tail dropped (max_windows > 0 caps the
 * count); each window runs on its own from position 0 and its L-1 next-token predictions are
 * scored.  ppl = exp(mean NLL); kld = mean over scored positions of
 * sum_v p_ref(v) (log p_ref(v) - log p_var(v)); top1 = share of positions where both argmax agree. */
#ifndef LMP_CORE_EVAL_H
#define LMP_CORE_EVAL_H

#include <math.h>

#include "base/ctx.h"
#include "base/spill.h"
#include "model/model.h"
#include "plugin/backend.h"

typedef struct lmp_score {
    int64_t windows, scored;
    double nll_sum, kld_sum;
    int64_t top1_hits;
} lmp_score;

static inline double lmp_score_ppl(const lmp_score *s) { return s->scored ? exp(s->nll_sum / (double)s->scored) : NAN; }
static inline double lmp_score_kld(const lmp_score *s) { return s->scored ? s->kld_sum / (double)s->scored : NAN; }
static inline double lmp_score_top1(const lmp_score *s) { return s->scored ? (double)s->top1_hits / (double)s->scored : NAN; }

/* The unmodified model's log-probabilities of every window of one text, computed once and kept
 * so that each variant is scored without running the reference again: in memory up to
 * LMP_REF_MEMORY_BUDGET bytes, beyond that in an unlinked temporary file (base/spill.h), read
 * back window by window.  Precision: the f32 floats the reference forward produced, stored as
 * they are, so a variant scores exactly as it would against a fresh reference forward. */
#define LMP_REF_MEMORY_BUDGET ((int64_t)256 << 20)
typedef struct lmp_ref_logprobs {
    int64_t n_windows, window_floats; /* window_floats = L * vocab */
    uint8_t *have;                    /* [n_windows]: window w is stored; NULL: no cache */
    lmp_spill store;                  /* [n_windows * window_floats] */
} lmp_ref_logprobs;

/* ctx: the run's, for its debug line about where the cache lives. */
int lmp_ref_logprobs_init(lmp_ctx *ctx, lmp_ref_logprobs *c, int64_t n_windows, int64_t window_floats);
void lmp_ref_logprobs_free(lmp_ref_logprobs *c);
/* Stores window w's log-probabilities ref[window_floats]. */
int lmp_ref_logprobs_put(lmp_ref_logprobs *c, int64_t w, const float *ref);

/* ref[L, V] <- the reference's (model m, blocks ref_blocks) log-probabilities of window w, whose
 * ids are tok[L]: from the cache c, or computed (and stored when there is a cache; c may be
 * NULL).  What lmp_eval_text scores against; core/analyze reuses it. */
int lmp_ref_window(const lmp_backend *be, const lmp_model *m, const lmp_block *ref_blocks, lmp_ref_logprobs *c,
                   int64_t w, const int32_t *tok, int64_t L, float *ref);

/* The protocol's two per-position measures, one definition for every caller (lmp_score_window,
 * eval/kld_stats.h): KL(ref || var) = sum_v exp(ref[v]) (ref[v] - var[v]) over log-probabilities
 * ref[V] and var[V], summed in double in id order; and the first id of the largest value. */
double lmp_kl_position(const float *ref, const float *var, int64_t V);
int64_t lmp_argmax(const float *x, int64_t n);

/* Adds one window's scores to *s: ref and var are [L, V] log-probabilities (var == ref: the
 * reference itself, no KL sum), tok the window's ids.  The one scoring rule of the protocol
 * above, shared by lmp_eval_text and core/analyze's cached evaluation. */
void lmp_score_window(const float *ref, const float *var, const int32_t *tok, int64_t L, int64_t V,
                      lmp_score *s);

/* The number of windows the protocol takes from n_ids tokens. */
int64_t lmp_eval_windows(int64_t n_ids, int64_t L, int64_t max_windows);

/* Scores the variant (model vm with the block set `var`) against the reference (model m with the
 * blocks `ref`) on ids[n_ids] with windows of L.  Each runs as its own model: its embedding,
 * final norm, head and hyper-parameters are its model's (a compressed variant's vm is m; an
 * external variant's is its own file); both must have the same vocabulary size, as the scores
 * compare log-probabilities by token id.  vm == m and var == ref: the unmodified model, scored
 * without a second forward.  cache (NULL: none) holds the reference's log-probabilities across
 * calls.  *out is overwritten; what names the text in messages and progress (on ctx's progress
 * line).  Stops with LMP_EABORTED when lmp_host_interrupted(ctx). */
int lmp_eval_text(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, const lmp_block *ref,
                  const lmp_model *vm, const lmp_block *var, lmp_ref_logprobs *cache, const int32_t *ids,
                  int64_t n_ids, int64_t L, int64_t max_windows, const char *what, lmp_score *out);

#endif
