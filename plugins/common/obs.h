/* obs.h — the Optimal Brain Surgeon column solver shared by GPTQ and SparseGPT
 * (docs/algorithms.md §3.7, §3.9).
 *
 * Given a linear's W[rows, cols] and the Hessian H[cols, cols] of its input, it walks the
 * columns (in act-order if asked), replaces each by its quantized and/or pruned value q and
 * spreads the error over the columns not yet visited through U, the upper Cholesky factor of
 * H^-1 (lazy batches of `block` columns: rank-1 updates inside a batch, one GEMM after it).
 * Every BLAS/LAPACK-shaped step runs on the host's backend (cholesky, chol_inverse, gemm,
 * choose_weight_grid for the grids), so the same code runs on every backend; each column is
 * quantized on its grid with plugin.h's lmp_wgrid_code / lmp_wgrid_value, the formulas the
 * backends' apply_weight_grid uses, so a column lands where RTN would put it.
 *
 * Reference behaviour kept on purpose (IST-DASLab gptq.py / sparsegpt.py):
 *   - the per-channel grid comes from W before dead inputs are zeroed;
 *   - static groups come from W after that, in original column order;
 *   - a dynamic group's grid comes from the columns as they stood at the start of the lazy
 *     batch that reaches the group's first column (the reference reads W, not the batch copy
 *     W1); with group_size a multiple of block the two are the same;
 *   - a GGUF block format (spec.format != INT: groups of 32) takes each block's grid the same
 *     way, as the file stores it: the column is coded with the block's f32 d and dequantized with
 *     its fp16 d (plugin.h), so the weights are what a reader of the file gets provided the file
 *     is written from these codes and scales.  act_order needs static_groups then (a block is 32
 *     consecutive inputs, not 32 visited columns), and the width must be a multiple of 32.  With
 *     an importance, each block's grid is searched as llama-quantize does with an imatrix, on
 *     the block as it stands when GPTQ reaches it (σ² from its row as it stands then);
 *   - FP8 blocks (LMP_GRAN_BLOCK, group x group tiles) take their grid from W as given, before
 *     the solve, as llm-compressor's GPTQ does (its observer's qparams, column_scale_window): each
 *     column is quantized on its tiles' scales, in any visiting order;
 *   - SparseGPT chooses each N:M mask on the batch's current columns, every M columns counted
 *     from the batch start, by w^2 / U_jj^2, pruning the N smallest (ties: lower column first). */
#ifndef LMP_PLUGINS_OBS_H
#define LMP_PLUGINS_OBS_H

#include "lmpress/plugin.h"

typedef struct obs_opts {
    int quantize;              /* 0: no grid (GPTQ at 16 bits, SparseGPT without quantization) */
    lmp_wspec spec;            /* gran CHANNEL, GROUP or (FP8) BLOCK */
    int static_groups;         /* group grids from the original W, original column order */
    int act_order;             /* visit columns by decreasing H_jj (stable) */
    double damp;               /* lambda = damp * mean(diag H) */
    int64_t block;             /* lazy-batch width (128) */
    int prune_n, prune_m;      /* prune_n > 0: choose an N:M mask (SparseGPT), no act_order */
    const uint8_t *keep;       /* a fixed mask [rows, cols] (1 = kept) to respect, or NULL */
    const float *importance;   /* [cols] or NULL: a GGUF grid's blocks searched with this weight
                                * per input (wgrid.h's importance; plugin.h lmp_wgrid_fit_block_imp) */
    const char *name;          /* for messages */
} obs_opts;

typedef struct obs_result {
    /* Outputs the caller may ask for (each NULL or sized by the caller). */
    int32_t *codes;            /* [rows, cols] integer codes, original column order (0 if pruned) */
    float *scales, *zeros;     /* [rows, n_groups]: n_groups = 1 (channel) or ceil(cols/group);
                                * dynamic groups are numbered in visiting order */
    int32_t *perm;             /* [cols] visiting order: perm[p] = original column */
    uint8_t *mask;             /* [rows, cols] 1 = kept (needed when prune_n > 0) */
    float *U;                  /* [cols, cols] the factor used, visiting order (for tests) */
    /* Always filled. */
    double loss;               /* sum (w - q)^2 / U_jj^2 / 2 */
    int64_t n_dead;            /* inputs with H_jj == 0 (their weights are zeroed) */
    double damp_used;          /* the damping fraction that factorised (damp, or raised) */
    int retries;               /* failed factorisations before that */
    double t_factor, t_columns, t_update; /* seconds: U, the column loop, the batch GEMMs */
} obs_result;

/* W[rows, cols] is overwritten with the result; H is not modified.  Returns 0 or an LMP_E*
 * status with the message set through host->set_error. */
int obs_solve(const lmp_host *host, void *hctx, const obs_opts *o, int64_t rows, int64_t cols,
              float *W, const float *H, obs_result *res);

/* obs_solve on linear i of the block (its W and the Hessian its stats hold), then, when it
 * quantizes, the grid it chose recorded on the linear with host->set_weight_grid, so that an
 * export writes these scales: res's scales, zeros and perm are the function's own (leave them
 * NULL).  The Hessian missing is an error naming the linear. */
int obs_solve_linear(const lmp_host *host, void *hctx, const obs_opts *o, lmp_block *blk, int i, obs_result *res);

/* N:M selection shared by every pruning method: out[k * stride] = 1 for the `keep` largest of
 * score[0..m) (m <= 64), 0 for the others; equal scores prune the lower index first (a stable
 * ascending sort, as numpy's argsort in Paddle ASP's mask_1d).  keep >= m keeps all. */
void obs_keep_largest(const float *score, int m, int keep, uint8_t *out, int64_t stride);

/* Number of grid slices per row for this spec and width (1 for per-channel). */
int64_t obs_n_groups(const lmp_wspec *spec, int64_t cols);

#endif
