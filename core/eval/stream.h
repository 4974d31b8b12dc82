/* stream.h — evaluating a block set one block at a time.
 *
 * Every evaluation window's and LAMBADA passage's hidden state advances through block b before
 * block b+1, so a caller needs only one block's weights at a time: the unmodified model's block
 * read from the file and freed, or a variant's block the moment compression has finished it.
 * The states ([windows, L, dim] per text, [tokens, dim] for the passages) live in base/spill.h
 * stores: in memory up to LMP_STREAM_MEMORY_BUDGET bytes each, else in an unlinked file.
 *
 * Each window and passage runs the same operations on the same floats as lmp_forward /
 * lmp_lambada_eval (embedding, each block, the head), only in another order across windows, so
 * the scores are those of eval.h, bit for bit. */
#ifndef LMP_CORE_STREAM_H
#define LMP_CORE_STREAM_H

#include "base/spill.h"
#include "eval/eval.h"
#include "eval/lambada.h"
#include "model/forward.h"

#define LMP_STREAM_MEMORY_BUDGET ((int64_t)256 << 20)

typedef struct lmp_stream_text {
    const int32_t *ids;
    int64_t n_windows, L;
    lmp_spill h; /* [n_windows, L, dim]: the input of the next block */
} lmp_stream_text;

typedef struct lmp_stream {
    lmp_ctx *ctx;
    const lmp_backend *be;
    const lmp_model *m;         /* the block set's model: its embedding, final norm and head */
    int n_texts;
    lmp_stream_text *texts;
    const lmp_lambada *lam;     /* NULL: no LAMBADA */
    lmp_spill lam_h;            /* the passages' states, one after the other */
    int64_t *lam_off;           /* [passages]: where each starts in lam_h, in floats */
    int64_t blocks_done;
    /* 0: every window's L-1 predictions are scored.  F > 0 (eval --score-second-half): only
     * those from position F on, the head run on those rows alone, as llama-perplexity scores a
     * chunk (F = L/2); with a reference only when its cache holds those rows alone
     * (window_floats = (L - F) * vocab, filled by a stream with the same F).  Set after
     * lmp_stream_begin. */
    int64_t score_from;
    /* NULL, or llama-perplexity's per-position statistics (eval/kld_stats.h) of every scored
     * position of every text against the reference, beside the scores (not is_ref).  Set after
     * lmp_stream_begin. */
    struct lmp_kld_stats *kld_stats;
    /* NULL, or called on every distinct linear input of every window (and passage) as each
     * block runs (the block is blocks_done; model/forward.h's observer): `lmpress imatrix` sums
     * x^2 there.  Set after lmp_stream_begin. */
    lmp_observe_fn observe;
    void *observe_ud;
    float *x;                   /* one window's or passage's state when the stores are on disk */
    double finish_s;            /* seconds lmp_stream_finish took (the head and the scores) */
    char label[256];            /* the blocks' progress label, "<what>: block" */
    char what[256];             /* the caller's ("evaluate w4-g128") */
} lmp_stream;

/* Embeds every window of the n_texts texts (ids[t], n_windows[t] windows of L) and every passage
 * of lam (NULL: none) with m's embedding.  what: the progress label ("eval w4-g128"). */
int lmp_stream_begin(lmp_stream *s, lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, int n_texts,
                     int32_t *const *ids, const int64_t *n_windows, int64_t L, const lmp_lambada *lam,
                     const char *what);

/* Runs the next block (blocks_done of them so far) on every state.  Progress is the caller's
 * (compression's own line when the blocks come from it). */
int lmp_stream_block(lmp_stream *s, const lmp_block *blk);
/* The same with the routed experts blk does not hold read from pager a group at a time
 * (model/expert_pager.h; NULL: none): the same numbers as the block whole.  Not with observe. */
struct lmp_expert_pager;
int lmp_stream_block_paged(lmp_stream *s, const lmp_block *blk, struct lmp_expert_pager *pager);

/* After the last block: the head on every window and scoring as eval.h's lmp_score_window.
 * is_ref: this block set is the reference; its log-probabilities go into refs[t] (when
 * refs[t].have is set: a cache) and it is scored against itself.  Otherwise refs[t] must hold
 * every window.  scores[n_texts] and *lam_out (when there is LAMBADA) are overwritten. */
int lmp_stream_finish(lmp_stream *s, lmp_ref_logprobs *refs, int is_ref, lmp_score *scores,
                      lmp_lambada_score *lam_out);

void lmp_stream_free(lmp_stream *s);

/* The unmodified model (m, its blocks read from the file one at a time) through a stream: fills
 * the reference caches and gives its own scores.  For `lmpress eval` and compare's reference
 * row. */
int lmp_stream_model(lmp_stream *s, const lmp_model *m, lmp_ref_logprobs *refs, int is_ref, lmp_score *scores,
                     lmp_lambada_score *lam_out);

#endif
