/* bcache.h — evaluating many variants that differ from one baseline block set in a few blocks,
 * without recomputing what did not change.
 *
 * The baseline (a compressed variant, or the unmodified model) is run once over every
 * evaluation window and LAMBADA passage, and the hidden state at every block boundary is kept:
 * h[b] is block b's input.  A variant that equals the baseline in blocks 0..first-1 then starts
 * from h[first] and runs only blocks first..n-1 and the head: its log-probabilities are the
 * floats a full forward would give (same blocks, same inputs, same code), and they are scored by
 * eval.c's own lmp_ref_window / lmp_score_window and lambada.c's lmp_lambada_judge_from, so the
 * numbers are those `lmpress compare` prints for that variant.
 *
 * Memory: n_layers x (windows x L + passage tokens) x dim floats. */
#ifndef LMP_CORE_BCACHE_H
#define LMP_CORE_BCACHE_H

#include "eval/eval.h"
#include "eval/lambada.h"
#include "model/model.h"
#include "plugin/backend.h"
#include "plugin/host.h"

/* A variant's numbers: the texts pooled (sums over every scored position of every text: with
 * one text, exactly compare's), and LAMBADA when there is one. */
typedef struct lmp_bcache_result {
    lmp_score score;
    lmp_lambada_score lambada;
} lmp_bcache_result;

typedef struct lmp_bcache_text {
    const int32_t *ids;
    int64_t n_windows, L;
    lmp_ref_logprobs *ref;     /* the unmodified model's log-probabilities (eval.h), shared */
    float *h;                  /* [n_layers][n_windows][L * dim] */
} lmp_bcache_text;

typedef struct lmp_bcache {
    lmp_ctx *ctx;
    const lmp_backend *be;
    const lmp_model *m;
    const lmp_block *ref_blocks;   /* the unmodified model */
    int n_texts;
    lmp_bcache_text *texts;
    const lmp_lambada *lam;        /* NULL: no LAMBADA */
    float **lam_h;                 /* [passages] -> [n_layers][T * dim] */
    lmp_bcache_result base;        /* the baseline's numbers */
    /* Block forwards spent so far: the reference's (once per window), the baseline's, and every
     * lmp_bcache_eval's; `naive` is what the same evaluations would have cost as full ones. */
    int64_t forwards, naive_forwards, evals;
    float *x, *var, *refp, *logits;
} lmp_bcache;

/* Runs the baseline `base` (n_layers blocks of model m) over n_texts texts (ids[t][n_ids[t]],
 * windows of L, at most max_windows; refs[t] the reference caches) and LAMBADA (lam may be NULL),
 * keeping every block boundary; bc->base gets its numbers.  base == ref_blocks: the unmodified
 * model, scored without a second forward. */
int lmp_bcache_build(lmp_bcache *bc, lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m,
                     const lmp_block *ref_blocks, const lmp_block *base, int n_texts, int32_t *const *ids,
                     const int64_t *n_ids, int64_t L, int64_t max_windows, lmp_ref_logprobs *refs,
                     const lmp_lambada *lam);

/* The numbers of the block set `blocks`, which must equal the baseline's in blocks 0..first-1
 * (the caller's promise: those are not run).  what: the progress line's label. */
int lmp_bcache_eval(lmp_bcache *bc, const lmp_block *blocks, int64_t first, const char *what,
                    lmp_bcache_result *out);

void lmp_bcache_free(lmp_bcache *bc);

#endif
