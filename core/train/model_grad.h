/* model_grad.h — a loss on the whole model's output and its gradient through every block, for
 * fine-tuning a variant end to end (quantization-aware training, sparse fine-tuning).
 *
 * Per window of T tokens: embed (the embeddings are not learned), every block's training forward
 * (train/backward.h keeps each block's tape), the head's logits, the loss, then the head's and
 * every block's backward in reverse.  Memory: one tape per block, T·(2·dim + 2·q_dim + 2·kv_dim
 * + 3·hidden) floats each, and the logits' T·vocab twice. */
#ifndef LMP_CORE_TRAIN_MODEL_GRAD_H
#define LMP_CORE_TRAIN_MODEL_GRAD_H

#include "train/backward.h"

typedef struct lmp_model_tape {
    int64_t T;
    int n_blocks;
    lmp_block_tape *blocks; /* [n_blocks] */
    float *x, *dx;          /* [T, dim]: the last block's output, its gradient */
    float *z;               /* [T, vocab]: logits, then their gradient */
} lmp_model_tape;

int lmp_model_tape_init(lmp_model_tape *mt, const lmp_model *m, int64_t T);
void lmp_model_tape_free(lmp_model_tape *mt);

/* The model with `blocks` on tok[0..T): with ref_logp[T, vocab] (the unmodified model's
 * log-probabilities on the same tokens) the distillation loss, KL(ref || model) averaged over the
 * T positions; without it next-token cross-entropy averaged over positions 0..T-2.  *loss gets
 * it; g[b] (g NULL, or g[b] NULL: not wanted) gets block b's gradients added. */
int lmp_model_loss_grad(const lmp_backend *be, const lmp_model *m, const lmp_block *blocks, const int32_t *tok,
                        const float *ref_logp, lmp_model_tape *mt, lmp_block_grads *const *g, double *loss);

#endif
