/* bcache.h — evaluating many variants that differ from one baseline block set in a few blocks,
 * without recomputing what did not change.
 *
 * The baseline (a compressed variant, or the unmodified model) is streamed once over every
 * evaluation window and LAMBADA passage (eval/stream.h: all states through block b before
 * block b+1, one block's weights at a time), and the hidden states at every block boundary are
 * kept: boundary b is block b's input.  A variant that equals the baseline in blocks 0..first-1
 * starts from boundary `first` and runs only blocks first..n-1 and the head, its blocks read one
 * at a time from a block source: its log-probabilities are the floats a full forward would give
 * (same blocks, same inputs, same code), scored by the stream's own code against the reference
 * caches, so the numbers are those `lmpress compare` prints for that variant.
 *
 * Memory: the boundaries, n_layers x (windows x L + passage tokens) x dim floats, are a
 * base/spill.h store (an unlinked temporary file beyond LMP_STREAM_MEMORY_BUDGET); beside them
 * one block and one stream's states. */
#ifndef LMP_CORE_BCACHE_H
#define LMP_CORE_BCACHE_H

#include "base/ctx.h"
#include "base/spill.h"
#include "eval/eval.h"
#include "eval/lambada.h"
#include "eval/stream.h"
#include "model/block_source.h"
#include "plugin/backend.h"

/* A variant's numbers: the texts pooled (sums over every scored position of every text: with
 * one text, exactly compare's), and LAMBADA when there is one. */
typedef struct lmp_bcache_result {
    lmp_score score;
    lmp_lambada_score lambada;
} lmp_bcache_result;

typedef struct lmp_bcache {
    lmp_ctx *ctx;
    const lmp_backend *be;
    const lmp_model *m;
    int n_texts;
    int32_t *const *ids;           /* [n_texts] */
    const int64_t *n_windows;      /* [n_texts] */
    int64_t L;
    lmp_ref_logprobs *refs;        /* [n_texts]: the unmodified model's, every window filled */
    const lmp_lambada *lam;        /* NULL: no LAMBADA */
    lmp_spill h;                   /* [n_layers][per]: every text's windows, then the passages */
    int64_t per;                   /* floats of one boundary */
    lmp_bcache_result base;        /* the baseline's numbers */
    /* Block forwards spent so far (a window or a passage through one block): the reference's,
     * the baseline's, and every lmp_bcache_eval's; `naive` is what the same evaluations would
     * have cost as full ones. */
    int64_t forwards, naive_forwards, evals;
} lmp_bcache;

/* Streams the baseline `base` (m's architecture) over n_texts texts (ids[t], n_windows[t]
 * windows of L) and LAMBADA (lam may be NULL), keeping every block boundary; bc->base gets its
 * numbers, scored against refs (the reference pass's caches, every window filled: it counts
 * as one full forward of each window). */
int lmp_bcache_build(lmp_bcache *bc, lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m,
                     const lmp_block_source *base, int n_texts, int32_t *const *ids, const int64_t *n_windows,
                     int64_t L, lmp_ref_logprobs *refs, const lmp_lambada *lam);

/* The numbers of the block set `blocks`, which must equal the baseline's in blocks 0..first-1
 * (the caller's promise: those are not run or read).  what: the progress line's label. */
int lmp_bcache_eval(lmp_bcache *bc, const lmp_block_source *blocks, int64_t first, const char *what,
                    lmp_bcache_result *out);

void lmp_bcache_free(lmp_bcache *bc);

#endif
