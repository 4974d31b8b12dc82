/* block_edit.h — function-preserving rewrites of a block (docs/algorithms.md §2.2), the host services
 * smoothing and shifting strategies are built on.  Each checks its arguments and leaves the block
 * untouched when it fails. */
#ifndef LMP_CORE_BLOCK_EDIT_H
#define LMP_CORE_BLOCK_EDIT_H

#include "lmpress/plugin.h"

/* Norm channel j divided by s[j] (weight and bias), input column j of every fed linear times
 * s[j].  s > 0. */
int lmp_fold_norm_scale(lmp_block *blk, int norm, const float *s);

/* Norm bias -= z (a zero bias is created first for an RMSNorm), every fed linear's bias += W z
 * (created as zeros where missing). */
int lmp_fold_norm_shift(lmp_block *blk, int norm, const float *z);

/* For a linear no norm feeds: shift_bias += W z (double), W <- W diag(s), and the input affine
 * x -> (x - z)/s composed after the linear's existing one.  z or s may be NULL. */
int lmp_add_input_affine(lmp_block *blk, int linear, const float *z, const float *s);

/* The linear keeps mask[out, in] (copied; nonzero = kept) and its pruned weights become 0.
 * Every group of m consecutive inputs of a row (the last may be shorter) must keep at most n. */
int lmp_set_mask(lmp_block *blk, int linear, const uint8_t *mask, int n, int m);

/* The linear's weights lie on this grid (copied into an owned lmp_wgrid; see plugin.h): the
 * spec must be a valid one, zeros given when asymmetric, every g_idx a group of the row.
 * Replaces an earlier grid.  The edits above that change W (a column scale) drop it. */
int lmp_set_weight_grid(lmp_block *blk, int linear, const lmp_wspec *spec, const float *scales,
                        const float *zeros, const int32_t *g_idx);

#endif
