/* pipeline.h — compressing a model block by block, as docs/design.md describes.
 *
 * Calibration windows are embedded once; then for each block: clone its weights; for each stage
 * of the variant, run the block over the cached inputs with observers collecting what the stage
 * asked for, and call the stage's plugin to rewrite the block; finally run the rewritten block
 * over the cached inputs to give the next block its inputs (errors propagate), or, with the
 * variant's calib_inputs "original", the block as the model has it (lmp_calib_inputs). */
#ifndef LMP_CORE_PIPELINE_H
#define LMP_CORE_PIPELINE_H

#include "base/ctx.h"
#include "config/config.h"
#include "model/forward.h"
#include "model/model.h"
#include "plugin/backend.h"
#include "text/windows.h"


/* Cuts `samples` windows of T tokens from ids[n_ids] (sequentially from the start, or at random
 * offsets drawn from the context's seeded RNG).  Fewer windows than asked for is a warning; none
 * is an error naming `what`. */
int lmp_windows_cut(lmp_ctx *ctx, const int32_t *ids, int64_t n_ids, int64_t samples, int64_t T,
                    int random, const char *what, lmp_windows *out);
void lmp_windows_free(lmp_windows *w);

/* Runs the variant's pipeline on the run's context (its strategies get it as hctx, with the
 * backend the context hands out); *out receives n_layers owned blocks (lmp_block_free each).
 * A variant without stages gets plain clones.  A strategy's failure reads "variant 'v':
 * strategy 's' on block N: " and the text it gave host->set_error. */
int lmp_compress(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, const lmp_variant *v,
                 const lmp_windows *calib, lmp_block **out);
void lmp_blocks_free(lmp_block *blocks, int64_t n);

/* What a caller may watch while a variant is compressed, without changing what is computed
 * (core/analyze keeps each linear as it was before the stage that compressed it, and measures
 * each linear's output error on the calibration inputs).  Any member may be NULL; a non-zero
 * return stops the compression with that status. */
struct lmp_expert_pager;
typedef struct lmp_compress_watch {
    /* Just before and just after stage s (of v->stages) runs on blk (the variant's block). */
    int (*before_stage)(void *ud, int s, const lmp_block *blk);
    int (*after_stage)(void *ud, int s, const lmp_block *blk);
    /* The observer of the forward that gives block b+1 its calibration inputs, run after every
     * stage is done with block b (on the compressed block, or with calibration inputs
     * "original" on the block as the model has it).  When set and the run has calibration
     * windows, they are embedded and propagated even if no stage asks for statistics. */
    lmp_observe_fn observe;
    /* Block b is finished (compressed, and the next block's calibration inputs propagated): the
     * last look at it when lmp_compress_watched has no `out`, which frees it right after. */
    int (*block_done)(void *ud, int64_t b, const lmp_block *blk);
    /* Block b is finished and was handled a group of experts at a time (model/expert_pager.h;
     * memory.expert_group_mb): skel holds every linear that is no routed expert's and the
     * norms, `experts` hands out the compressed routed experts a group at a time.  Unset while
     * block_done is set: every block is handled whole (and a block above the budget said so). */
    int (*block_done_paged)(void *ud, int64_t b, const lmp_block *skel, struct lmp_expert_pager *experts);
    /* The run's cache of the unmodified model's calibration activations (NULL: none), used while
     * the variant's blocks so far are the model's (compress/calib_cache.h); not with observe. */
    struct lmp_calib_cache *calib_cache;
    void *ud;
} lmp_compress_watch;

/* What lmp_compress checks before its first block, for a check before any work (`lmpress check`,
 * compare's preparation): the stages can be created with their parameters, the importance
 * matrix fits every linear a stage quantizes with it, a whole-model stage is the last, and a
 * stage that needs calibration statistics has them (has_calibration: a calibration text). */
int lmp_compress_check_variant(lmp_ctx *ctx, const lmp_model *m, const lmp_variant *v, int has_calibration);

/* Which stages of v read calibration statistics (bit s: stage s, the first 32), asked of the
 * stages as lmp_compress asks them: what a run's time estimate (compare/eta.h) needs to know. */
int lmp_compress_observing_stages(lmp_ctx *ctx, const lmp_model *m, const lmp_variant *v, uint32_t *stages);

/* lmp_compress with a watch (NULL: none).  out NULL: nothing is kept; each block is read from
 * the model when its turn comes, handed to watch->block_done and freed, so memory holds one
 * block (the unmodified model's blocks are never all converted). */
int lmp_compress_watched(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, const lmp_variant *v,
                         const lmp_windows *calib, const lmp_compress_watch *watch, lmp_block **out);

/* Where lmp_compress spent its time on this context since the last reset (lmp_compress_times,
 * host.h). */
const lmp_compress_times *lmp_compress_times_get(const lmp_ctx *ctx);
void lmp_compress_times_reset(lmp_ctx *ctx);

/* Storage bits per weight over the blocks' linears (lmp_linear.weight_bits, weighted by size).
 * An N:M-sparse linear stores only its n kept values of every m, each with ceil(log2 m) index
 * bits (2:4: (b + 2)/2 bits per weight, the compressed layout of cuSPARSELt). */
double lmp_blocks_bits_per_weight(const lmp_block *blocks, int64_t n);
/* The same sums one block at a time, in the same order: bits/w = *bits / *count. */
void lmp_block_bits_accum(const lmp_block *blk, double *bits, double *count);

#endif
