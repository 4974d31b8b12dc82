/* calib_states.h — what a block's calibration pass leaves between its segments, so that the
 * next pass over the same windows runs only the segments whose weights changed.
 *
 * GPTQ with true_sequential takes q,k,v's input, quantizes them, takes o's input, quantizes it,
 * then gate,up's, then down's, and finally propagates the windows through the finished block.
 * Started from the block's input each time, a pass recomputes every segment before the one it
 * needs (model/forward.h lmp_block_forward_from), although only the group just quantized
 * changed: about 3.4 block forwards per block instead of 1.  Here a pass keeps the state where
 * it stopped (x1 and mid of every window) with a hash of the segments before that point (every
 * array a forward reads there: norms, weights, biases, input affines, activation settings).
 * The next pass starts at that segment when the block it runs hashes the same there and it
 * observes nothing earlier; otherwise from the input.  The values are the same bit for bit
 * either way: only where the arithmetic starts changes.
 *
 * The hash is a 64-bit multiply-xor over the arrays' words: any single changed word changes it
 * (each step is a bijection), so an edit is missed only by a 2^-64 accident, never by design.
 *
 * Memory: n * T * (dim + max(dim, hidden)) floats, each of the two stores in memory up to
 * LMP_CALIB_STATES_BUDGET bytes, else in an unlinked temporary file (base/spill.h; the
 * $LMPRESS_SPILL_MB budget applies).  SmolLM2 on 128 windows of 512: 151 MB + 403 MB, on disk.
 * $LMPRESS_FULL_PASSES=1 turns the reuse off (every pass from the block's input), to compare. */
#ifndef LMP_CORE_CALIB_STATES_H
#define LMP_CORE_CALIB_STATES_H

#include "base/spill.h"
#include "model/forward.h"

#define LMP_CALIB_STATES_BUDGET ((int64_t)128 << 20)

typedef struct lmp_calib_states {
    lmp_ctx *ctx;        /* for the warning when a store cannot be written */
    lmp_spill x1, mid;   /* [n, T, dim], [n, T, wide] */
    int64_t n, T, dim, wide;
    int at;              /* the segment a pass may start at (0: nothing kept) */
    uint64_t key;        /* the hash of segments 0..at-1 of the block that left them */
    int full_passes;     /* $LMPRESS_FULL_PASSES: never start past segment 0 */
    float *buf;          /* one window's x1 and mid while the stores are files */
} lmp_calib_states;

int lmp_calib_states_init(lmp_ctx *ctx, lmp_calib_states *cs, const lmp_arch *a, int64_t n, int64_t T);
void lmp_calib_states_free(lmp_calib_states *cs);

/* The windows' block inputs changed (the next block's turn): nothing kept applies. */
static inline void lmp_calib_states_forget(lmp_calib_states *cs)
{
    if (cs) cs->at = 0;
}

/* One pass of blk over the windows X[n, T, dim], observed by obs (may be NULL), which stops
 * every window at input group `stop` (lmp_block_plan_input_group; 4: runs the whole block), observing
 * nothing before group `first` (4: nothing).  With out, the block's outputs go to
 * out[n, T, dim] (may be X), else X is left as it is.  cs may be NULL: every window from the
 * input.  *share: the block-forward equivalents it computed (lmp_block_flops).  ctx (may be
 * NULL): its interrupt flag is polled at every window (LMP_EABORTED). */
int lmp_calib_pass(const lmp_ctx *ctx, lmp_calib_states *cs, const lmp_backend *be, const lmp_arch *a, const lmp_block *blk,
                   const float *X, float *out, int first, int stop, lmp_observe_fn obs, void *ud,
                   int64_t n, int64_t T, double *share);
/* The same with the routed experts blk does not hold read from pager a group at a time
 * (model/expert_pager.h), the numbers those of the block whole; obs must be NULL then. */
struct lmp_expert_pager;
int lmp_calib_pass_paged(const lmp_ctx *ctx, lmp_calib_states *cs, const lmp_backend *be, const lmp_arch *a,
                         const lmp_block *blk, struct lmp_expert_pager *pager, const float *X, float *out, int first,
                         int stop, lmp_observe_fn obs, void *ud, int64_t n, int64_t T, double *share);

#endif
