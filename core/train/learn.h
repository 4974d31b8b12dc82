/* learn.h — host->learn_block and host->learn_model: the loops that learn a strategy's parameters
 * within one block, or end to end over the whole model (plugin.h, lmp_learn_*), on the
 * calibration data the pipeline lends the stage.
 *
 * Per step: the plugin writes the block's weights from its parameters (materialize), the host
 * runs a mini-batch of calibration windows forward and backward (train/backward.h) against the
 * unmodified block's outputs with block-output MSE, the plugin turns dL/dW into dL/dparameters
 * (pullback), and the host steps them (signed SGD or Adam) at the schedule's rate.  The
 * unmodified outputs are computed once, from the model's own block. */
#ifndef LMP_CORE_TRAIN_LEARN_H
#define LMP_CORE_TRAIN_LEARN_H

#include "base/ctx.h"
#include "model/model.h"
#include "plugin/backend.h"

/* What the pipeline lends the learning service while a stage that asked for
 * LMP_NEED_CALIB_INPUTS runs on a block (lmp_ctx.learn). */
typedef struct lmp_learn_inputs {
    const lmp_backend *be;
    const lmp_model *m;
    const float *X;         /* [n, T, dim]: the block's calibration inputs (learn_block) */
    const int32_t *tokens;  /* [n, T]: the calibration windows (learn_model) */
    int64_t n, T;
} lmp_learn_inputs;

int lmp_learn_block(lmp_ctx *ctx, lmp_block *blk, const lmp_learn_spec *spec, const lmp_learn_problem *p,
                    lmp_learn_result *out);

/* host->learn_model: the same loop over the whole model (train/model_grad.h), the unmodified
 * model's log-probabilities computed for each window as it is drawn. */
int lmp_learn_model(lmp_ctx *ctx, lmp_block *blocks, int n_blocks, const lmp_learn_spec *spec,
                    const lmp_learn_problem *p, lmp_learn_result *out);

#endif
