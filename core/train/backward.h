/* backward.h — the gradients of a block and of the model's head, for strategies that learn.
 *
 * A block's training forward keeps what its backward reads (lmp_block_tape); the backward turns
 * the gradient of the block's output into the gradients of its input and of every weight, bias
 * and norm parameter asked for.  Both walk the block's one list of steps (model/block_steps.h):
 * the training forward is lmp_block_run with the kept slots in the tape, the backward runs the
 * steps bottom up with one derivative per step kind, so every feature the forward has (q/k norms,
 * post norms, GeGLU, RoPE tables, the q scale, sliding windows, soft-capped scores) is one the
 * backward follows, mixtures of experts (every routing lmpress runs), DeepSeek's latent attention
 * and gpt-oss's sinks included.  Heavy work goes through the backend (the GEMMs, plain causal
 * attention's backward); the rest (norms, RoPE, the activations, and attention's backward over a
 * window shorter than the sequence, with soft-capped scores, ALiBi or sinks:
 * train/attention_grad.h) is computed here in double per element.
 *
 * Simulated activation quantization (lmp_linear.act) is taken through the straight-through
 * estimator: the forward quantizes a linear's input as the variant does, the backward passes the
 * input's gradient through unchanged and takes dW from the quantized input.  A linear with an
 * explicit input affine (SmoothQuant's all_linears, Shift on o/down) is refused for now: its
 * shift_bias W z would have to follow W.
 *
 * Shapes: T tokens, d = dim, f = hidden, qd = n_heads·head_dim, kv = n_kv_heads·head_dim. */
#ifndef LMP_CORE_TRAIN_BACKWARD_H
#define LMP_CORE_TRAIN_BACKWARD_H

#include "model/forward.h"

typedef struct lmp_block_tape {
    int64_t T;
    /* The values the steps' derivatives read, each [T, width] (block_steps.h): the block's input,
     * q/k before their norms, q, k, v as attention reads them, attention's output, the outputs
     * post norms take, x1, the MLP's linears' outputs and down's input.  NULL: not kept (a norm's
     * output, recomputed from its kept input; a value no derivative reads). */
    float *slot[LMP_SLOT_COUNT];
    float *buf;          /* owns all of them */
} lmp_block_tape;

int lmp_block_tape_init(lmp_block_tape *tp, const lmp_arch *a, int64_t T);
void lmp_block_tape_free(lmp_block_tape *tp);

/* x[T, d] <- block(x), bit for bit lmp_block_forward's, keeping the tape.  Refuses (naming the
 * tensor) a block the backward cannot take: a linear with an input affine, a norm no step uses. */
int lmp_block_forward_train(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, float *x,
                            lmp_block_tape *tp);

/* Gradients, added to (a caller sums over windows, and zeroes them itself).  Every array may be
 * NULL: not wanted.  dw[i] [out, in] and db[i] [out] belong to blk->linears[i] (db only where the
 * linear has a bias); dnorm_w[n], dnorm_b[n] [norms[n].dim] to blk->norms[n] (dnorm_b where it has
 * a bias), in lmp_norm_index's order: norms 0 and 1 [d], with q/k norms (Qwen3) 2 and 3
 * [head_dim], then with post norms (GLM-4, Gemma 2/3) the two after attention and the MLP [d];
 * MLA's latent norms (DeepSeek: q_a's [q_lora_rank] if any, kv_a's [kv_lora_rank]) after 0 and 1;
 * gpt-oss's sinks [n_heads] last.  DeepSeek-V3's router bias (its selection bias) gets no
 * gradient: it moves the choice only. */
#define LMP_BLOCK_GRAD_NORMS 6
typedef struct lmp_block_grads {
    int n_linears;
    float **dw, **db;
    float *dnorm_w[LMP_BLOCK_GRAD_NORMS], *dnorm_b[LMP_BLOCK_GRAD_NORMS];
} lmp_block_grads;

/* Zeroed arrays for the weight and bias of every linear i of blk with linears[i] nonzero
 * (linears LMP_ALL_LINEARS, NULL: all), and for every norm parameter when norms != 0. */
#define LMP_ALL_LINEARS NULL
int lmp_block_grads_alloc(lmp_block_grads *g, const lmp_block *blk, const uint8_t *linears, int norms);
void lmp_block_grads_zero(lmp_block_grads *g, const lmp_block *blk);
void lmp_block_grads_free(lmp_block_grads *g);

/* dy[T, d] = dL/d(block output) -> dx[T, d] = dL/d(block input) (overwritten; NULL: not
 * wanted), and the gradients g asks for (g may be NULL). */
int lmp_block_backward(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, const lmp_block_tape *tp,
                       const float *dy, float *dx, lmp_block_grads *g);

/* The head z[T, V] = final_norm(x) lm_head^T, soft-capped as c tanh(z / c) when the architecture
 * says (Gemma 2): dz -> dx[T, d] (overwritten, NULL: not wanted), dnorm_w[d] and dlm_head[V, d]
 * added to (NULL: not wanted).  LLaMA family (RMSNorm) only. */
int lmp_head_backward(const lmp_backend *be, const lmp_model *m, int64_t T, const float *x, const float *dz,
                      float *dx, float *dnorm_w, float *dlm_head);

#endif
