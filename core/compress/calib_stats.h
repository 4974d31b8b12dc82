/* calib_stats.h — the statistics a stage asks for (plugin.h: LMP_STAT_*), collected by running
 * one block over the cached calibration inputs with an observer on every distinct linear input.
 *
 * Linears sharing an input (q,k,v; gate,up) share one set of numbers: the first linear of the
 * group owns the arrays, the others alias them. */
#ifndef LMP_CORE_CALIB_STATS_H
#define LMP_CORE_CALIB_STATS_H

#include "compress/calib_states.h"
#include "model/model.h"
#include "plugin/backend.h"

/* Per linear of the block (n_linears of each array, lmp_block_stats_init).  A routed expert's
 * statistics are those of the calibration tokens the router sent to it: stats[i].n_tokens of
 * them, fewer than the windows' (all_experts: every token, for the statistics only). */
typedef struct lmp_block_stats {
    int n_linears;
    uint32_t *needs;   /* LMP_STAT_* per linear (0: none) */
    int64_t *n_sample; /* sample rows asked for, with LMP_STAT_SAMPLE */
    lmp_stats *stats;
    uint8_t *owner;
    /* Rows waiting for the Hessian: windows are stacked up to ~LMP_HESSIAN_ROWS rows per
     * xtx_accum call (SYRK on 512 rows runs at ~60 % of GEMM speed, on 2048 at 70-87 %). */
    float **h_stage;
    int64_t *h_rows;
    /* calibration.experts = "all": every calibration token through every expert of a mixture of
     * experts, for the statistics only (the block's output still follows the router). */
    int all_experts;
    /* Set by lmp_block_stats_collect: the share of a whole block forward its forwards computed
     * (each stops once the last input asked for is observed, and starts at the first segment
     * not already computed; lmp_block_flops). */
    double forward_share;
} lmp_block_stats;

/* Zeroed arrays for a block of n_linears linears. */
int lmp_block_stats_init(lmp_block_stats *bs, int n_linears);

#define LMP_HESSIAN_ROWS 2048

/* Rows per xtx_accum call for windows of T tokens: whole windows, about LMP_HESSIAN_ROWS. */
static inline int64_t lmp_hessian_stack_rows(int64_t T)
{
    return T * (LMP_HESSIAN_ROWS > T ? LMP_HESSIAN_ROWS / T : 1);
}

/* Runs blk over X[n_windows, T, dim] (left unchanged) and fills bs->stats from bs->needs and
 * bs->n_sample.  Means are divided by the token counts before it returns.  cs (may be NULL):
 * the states of the block's last pass over X, to start from where they still apply
 * (calib_states.h); this pass leaves its own there.  ctx (may be NULL): its interrupt flag is
 * polled at every window. */
int lmp_block_stats_collect(const lmp_ctx *ctx, const lmp_backend *be, const lmp_arch *a, const lmp_block *blk,
                            const float *X, int64_t n_windows, int64_t T, lmp_calib_states *cs,
                            lmp_block_stats *bs);
/* Frees the statistics and the arrays (n_linears: bs->n_linears's, kept for the callers). */
void lmp_block_stats_free(lmp_block_stats *bs, int n_linears);

#endif
