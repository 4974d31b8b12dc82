/* loss.h — the training losses and their gradients.
 *
 * Each returns LMP_OK and the loss in *loss (double), and writes the gradient with respect to its
 * first array into d (NULL: not wanted; d may alias that array).  Means are taken over every
 * element (MSE) or every scored row (cross-entropy, KL), so a loss over a batch does not grow
 * with its size. */
#ifndef LMP_CORE_TRAIN_LOSS_H
#define LMP_CORE_TRAIN_LOSS_H

#include <stdint.h>

/* L = mean over n of (y - target)^2 (a block's output against the unmodified block's). */
int lmp_loss_mse(int64_t n, const float *y, const float *target, double *loss, float *dy);

/* L = mean over rows t of -log_softmax(z[t])[targets[t]], z[T, V] logits; targets in 0..V-1. */
int lmp_loss_ce(int64_t T, int64_t V, const float *z, const int32_t *targets, double *loss, float *dz);

/* L = mean over rows t of KL(p_ref || softmax(z[t])) = sum_v p_ref (log p_ref - log_softmax(z[t])),
 * ref_logp[T, V] the unmodified model's log-probabilities (distillation). */
int lmp_loss_kl(int64_t T, int64_t V, const float *z, const float *ref_logp, double *loss, float *dz);

#endif
