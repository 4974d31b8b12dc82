/* rotation_learn.h — learned rotations (SpinQuant): R1 on the residual stream [dim, dim] and R2 per
 * layer on the values [head_dim, head_dim], trained by Cayley SGD on the Stiefel manifold against
 * the quantized model's loss (docs/algorithms.md §3.14).
 *
 * The model is the one lmp_model_rotate turned by the fixed (Hadamard) rotations; the learned
 * rotations start at the identity and compose after them, so the whole rotation starts at the
 * Hadamard, as SpinQuant's does (left-multiplied Cayley steps give the same iterates either way:
 * R = H R' gives A' = H^T A H).  The parametrization (x <- x R for both, as model/rotate.h):
 *   readers (q, k, v, gate, up, router):  W <- W R1;  writers (o, down):  W <- R1^T W, b <- b R1;
 *   v: each head's rows W_h <- R2^T W_h (bias b_h <- b_h R2);  o: each head's columns W_h <- W_h R2;
 *   embeddings E <- E R1, head H <- H R1.
 * The training forward fake-quantizes every block linear's weights after that (symmetric per
 * output channel, w_bits) and its input (dynamic per token, a_bits), with straight-through
 * gradients (train/backward.h).  The loss is the KL of the model's next-token distribution to the
 * unquantized model's (which the rotations do not change), or next-token cross-entropy.
 *
 * The Euclidean gradient G = dL/dR is gathered from the whole-model backward (train/model_grad.h:
 * every linear's dL/dW, the embeddings' gradient, the head's); a Cayley step turns it into the
 * skew matrix A = G R^T - R G^T and R <- (I + a/2 A)^{-1} (I - a/2 A) R, solved in double, which
 * keeps R orthogonal to rounding; a = min(lr·f(s), 1/||A||_F) (Li et al. 2020's cap; f the
 * cosine schedule SpinQuant uses).
 *
 * Why not host->learn_model: its optimizer steps parameters element-wise (signed SGD, Adam), a
 * Cayley step is not element-wise, and its problem has no gradient for the embeddings and the
 * head, which R1 turns as well.  The forward, backward and losses are the same functions. */
#ifndef LMP_CORE_TRAIN_ROTATION_LEARN_H
#define LMP_CORE_TRAIN_ROTATION_LEARN_H

#include "base/ctx.h"
#include "model/rotate.h"
#include "plugin/backend.h"
#include "text/windows.h"

typedef struct lmp_rotlearn lmp_rotlearn;

/* The training state for m (rotated by lmp_model_rotate; its f32 blocks are made with
 * lmp_model_blocks and stay until lmp_model_rotate_set_learned releases them) on windows of T
 * tokens: R1 when learn_r1, R2 per layer when learn_r2, both the identity. */
int lmp_rotlearn_init(const lmp_backend *be, lmp_model *m, int learn_r1, int learn_r2, int w_bits, int a_bits,
                      int64_t T, lmp_rotlearn **out);
void lmp_rotlearn_free(lmp_rotlearn *s);

/* The learned rotations, row-major (x <- x R): R1 [dim, dim], R2 [n_layers, head_dim, head_dim];
 * NULL when not learned.  Call lmp_rotlearn_touch after writing them. */
double *lmp_rotlearn_r1(lmp_rotlearn *s);
double *lmp_rotlearn_r2(lmp_rotlearn *s);
void lmp_rotlearn_touch(lmp_rotlearn *s);
/* Their Euclidean gradients, summed over the lmp_rotlearn_loss_grad calls since the last
 * lmp_rotlearn_zero_grad (same shapes; NULL when not learned). */
const float *lmp_rotlearn_grad_r1(const lmp_rotlearn *s);
const float *lmp_rotlearn_grad_r2(const lmp_rotlearn *s);
void lmp_rotlearn_zero_grad(lmp_rotlearn *s);

/* The quantized, rotated model's loss on tok[0..T): KL to ref_logp[T, vocab] (the unquantized
 * model's log-probabilities) or, ref_logp NULL, next-token cross-entropy; with want_grad its
 * gradients with respect to R1 and R2 are added. */
int lmp_rotlearn_loss_grad(lmp_rotlearn *s, const int32_t *tok, const float *ref_logp, int want_grad, double *loss);
/* The same loss by the production forward (no tape). */
int lmp_rotlearn_loss(lmp_rotlearn *s, const int32_t *tok, const float *ref_logp, double *loss);

/* A = G R^T - R G^T (n×n, skew); R <- (I + a/2 A)^{-1} (I - a/2 A) R.  work: 2 n² doubles. */
void lmp_cayley_skew(int64_t n, const double *G, const double *R, double *A);
void lmp_cayley_apply(int64_t n, const double *A, double a, double *R, double *work);

/* The whole learning (model.rotate with r1 or r2 "learned"): o->learn's steps over the windows,
 * then the rotations installed with lmp_model_rotate_set_learned.  out (may be NULL) gets the
 * loss over all windows before and after, the best batch loss and its step. */
int lmp_rotation_learn(lmp_ctx *ctx, const lmp_backend *be, lmp_model *m, const lmp_windows *w,
                       const lmp_rotate_opts *o, lmp_learn_result *out);

#endif
