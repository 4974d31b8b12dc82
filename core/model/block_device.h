/* block_device.h — a block's forward over a batch of windows as one call to a backend that keeps
 * the block on its device (plugin.h: lmp_block_job, lmp_backend_i.block_run).
 *
 * The job is made from the block's steps (model/block_steps.h), the same list the per-op forward
 * (model/forward.c) walks, so the two cannot describe different blocks: each step becomes one or
 * two device ops, each slot a device buffer, every weight a pointer into the block, and each
 * linear input the caller wants statistics of an OBSERVE op before its linears.  What the device
 * path does not carry is refused by name (LMP_EUNSUPPORTED, the reason in lmp_last_error()), and
 * the caller then runs the per-op forward, which computes everything:
 *   - a step kind it has no op for (a block from a later architecture: MoE routing, say);
 *   - simulated activation quantization, an explicit input shift or scale, the shift bias of a
 *     shifted linear (their exact-sum epilogue lives in forward.c);
 *   - the KV cache's simulated quantization (lmp_block.kv, model/kv_quant.h);
 *   - a backend without a block entry point, or one that declines the job (its own words).
 * LMPRESS_DEVICE_BLOCKS=0 in the environment turns the path off (the per-op path's numbers, for
 * benchmarks and for bisecting a difference). */
#ifndef LMP_CORE_MODEL_BLOCK_DEVICE_H
#define LMP_CORE_MODEL_BLOCK_DEVICE_H

#include "model/block_steps.h"
#include "plugin/backend.h"

/* Statistics wanted on the input of each input group (lmp_block_plan_input_group: 0 q,k,v;
 * 1 o; 2 gate,up; 3 down): want[g] NULL for none, else its arrays (plugin.h's lmp_bstat: cols
 * set, each array NULL or initialised) are folded into over every token of every window. */
typedef struct lmp_block_watch {
    lmp_bstat *want[4];
} lmp_block_watch;

/* Whether the device path may be tried at all: the backend has a block entry point and
 * LMPRESS_DEVICE_BLOCKS is not "0". */
int lmp_block_device_enabled(const lmp_backend *be);

/* Runs blk over the n windows X[n, T, dim] on be's device: up to where input group `stop` is
 * observed (4: the whole block), Y[n, T, dim] getting each window's output when Y is not NULL
 * (stop must then be 4; Y may be X), the statistics of watch (may be NULL) folded in.  0, or
 * LMP_EUNSUPPORTED with the reason (nothing was changed: the caller runs the per-op forward), or
 * another error. */
int lmp_block_device_forward(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, const float *X, int64_t n,
                             int64_t T, float *Y, int stop, const lmp_block_watch *watch);

#endif
