/* forward.h — the Llama-family forward pass on backend operations, a whole window at a time.
 *
 * Activations are x[T, dim] for one window of T tokens at positions 0..T-1.  A block applies
 * each linear's simulated activation quantization (lmp_linear.act) to its input before the GEMM,
 * so a variant's forward is exactly what the compressed model computes. */
#ifndef LMP_CORE_FORWARD_H
#define LMP_CORE_FORWARD_H

#include "model/block_steps.h"
#include "model/model.h"
#include "plugin/backend.h"

/* Called once per distinct linear input inside a block, before quantization: x[T, C] feeds the
 * linears lins[0..n_lins) (q,k,v share one input; gate,up share one).  Returns 0 to go on,
 * LMP_FORWARD_STOP to end the block there (x is then left half-computed), or an LMP_E* error. */
#define LMP_FORWARD_STOP 1
/* A mixture of experts first calls the observer with n_lins 0 (lins and x NULL, T and C 0): an
 * observer that answers LMP_OBSERVE_ALL_EXPERTS then sees every token at every expert's inputs
 * (calibration.experts = "all": statistics only, the block's output still follows the router);
 * any other answer, the tokens routed to each expert.  Every observer must accept such a call. */
#define LMP_OBSERVE_ALL_EXPERTS 2
typedef int (*lmp_observe_fn)(void *ud, const int *lins, int n_lins, const float *x, int64_t T,
                              int64_t C);

/* x[T, dim] <- block(x), residual stream in place. obs may be NULL.  Returns 0, an error, or
 * LMP_FORWARD_STOP when the observer stopped it. */
int lmp_block_forward(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, int64_t T,
                      float *x, lmp_observe_fn obs, void *ud);

/* The block in four segments, segment g starting where input group g (lmp_block_plan_input_group) is taken
 * and ending where the next one's input is made:
 *   0: mid = attention(rope(q), rope(k), v) of norm0(x)    [T, dim], before o's input affine
 *   1: x1 = x + o(mid)                                     [T, dim]
 *   2: mid = silu(gate(xn)) * up(xn), xn = norm1(x1)       [T, hidden], before down's affine
 *      (GPT-2: gelu(fc(xn)))
 *   3: x = x1 + down(mid)
 * The state between segments is kept in `state` so that a later pass can start at segment
 * `from` (> 0) from what an earlier one left there: x is always the block's input (segments 0,
 * 1), x1 what segment 1 made (read by 2, 3), mid what segment 0 or 2 made (read by 1 or 3).
 * The values are those of lmp_block_forward bit for bit, which is this with from = 0 and no
 * state.  When the observer stops it at group g's input, the state holds what segment g reads. */
typedef struct lmp_block_state {
    float *x1;  /* [T, dim] */
    float *mid; /* [T, max(dim, hidden)] */
} lmp_block_state;
int lmp_block_forward_from(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, int64_t T, int from,
                           float *x, const lmp_block_state *state, lmp_observe_fn obs, void *ud);

/* lmp_block_forward_from with the routed experts blk does not hold taken from pager
 * (model/expert_pager.h; NULL: none), bit for bit the block whole; obs must be NULL then. */
struct lmp_expert_pager;
int lmp_block_forward_paged(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk,
                            struct lmp_expert_pager *pager, int64_t T, int from, float *x,
                            const lmp_block_state *state, lmp_observe_fn obs, void *ud);

/* x[T, dim] <- block(x) by running plan p's steps (model/block_steps.h) of group `from` on: the
 * one function every block forward above is.  Each slot lives in given[slot] where that is not
 * NULL (given may be NULL), else in a buffer of the pass's own that it shares with slots whose
 * lives do not overlap; x is the block's input and gets its output.  A training forward
 * (train/backward.h) gives the slots its backward reads buffers of their own; the numbers are
 * the same bit for bit wherever the slots live. */
int lmp_block_run(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, const lmp_block_plan *p, int64_t T,
                  int from, float *x, float *const given[LMP_SLOT_COUNT], lmp_observe_fn obs, void *ud);
/* Step i of plan p alone, on the buffers slot[] names (a backward recomputing a value its tape
 * does not keep); qbuf and work are [T, lmp_arch_mid_width] scratch. */
int lmp_block_step_forward(const lmp_backend *be, const lmp_arch *a, const lmp_block *blk, const lmp_block_plan *p,
                           int i, int64_t T, float *const slot[LMP_SLOT_COUNT], float *qbuf, float *work);

/* The FLOPs of a block forward over T tokens up to where input group `group` (lmp_block_plan_input_group:
 * 0 q,k,v; 1 o; 2 gate,up; 3 down) is observed, 4: the whole block.  Counted: each GEMM as
 * 2·T·in·out, attention's two products as 2·T²·(heads·head_dim) each (the causal half not
 * taken off); norms, RoPE and activations are left out (they are O(T·dim)).  For counting
 * block-forward equivalents (lmp_compress_times.forwards).  Summed over the block's steps
 * (lmp_block_plan_flops). */
double lmp_block_flops(const lmp_arch *a, int64_t T, int group);

/* RoPE on x[T, n_heads*head_dim] at positions 0..T-1 as the architecture says for `layer`: the
 * classic `rope` op, or `rope_table` for a scaled or partial rotation. */
int lmp_rope_heads(const lmp_backend *be, const lmp_arch *a, int64_t layer, int64_t T, int64_t n_heads, float *x);

/* x[T, n_heads * a->mla_rope] turned in place by layer's rotation over heads of MLA's rotary
 * width (lmp_rope_heads with mla_rope for head_dim): DeepSeek's q_rot and k_rot. */
int lmp_mla_rope(const lmp_backend *be, const lmp_arch *a, int64_t layer, int64_t T, int64_t n_heads, float *x);

/* A mixture of experts' routing (LMP_STEP_MOE) from the router's logits[T, E]: sel[t * k + j] the
 * j-th expert token t goes to, wt its weight: softmax over the E logits (in double), the k largest
 * (ties to the lower index, as torch.topk on distinct values), renormalized to sum to 1 when
 * norm_topk.  The forward and the backward (train/backward.c) route with this one function. */
void lmp_moe_route(const float *logits, int64_t T, int64_t E, int64_t k, int norm_topk, int *sel, float *wt);
/* gpt-oss's (LMP_ROUTE_TOPK_SOFTMAX): the k largest logits (bias included), largest first, their
 * weights the softmax over those k alone. */
void lmp_moe_route_topk_softmax(const float *logits, int64_t T, int64_t E, int64_t k, int *sel, float *wt);

/* The routing step s names (its route: the two above, or DeepSeek's, forward.c route_deepseek)
 * from the router's logits[T, E] (for LMP_ROUTE_SIGMOID_BIAS without the router's bias, which is
 * router_bias here: it moves the choice, not the weights).  The forward and the backward
 * (train/backward.c) route with this one function.  0, or LMP_ENOMEM. */
int lmp_moe_route_step(const lmp_block_step *s, const float *logits, const float *router_bias, int64_t T, int *sel,
                       float *wt);

/* x[T, dim] <- token embeddings of tok[0..T). */
void lmp_embed(const lmp_model *m, const int32_t *tok, int64_t T, float *x);

/* out[i] = 0.5 in[i] (1 + erf(in[i] / sqrt 2)) for i < n, in double (may be in place): the exact
 * GELU (transformers' "gelu", GPT-NeoX), which no backend has as an op. */
void lmp_gelu_erf(int64_t n, const float *in, float *out);

/* out[T, vocab] <- lm_head(final_norm(x)), then log_softmax when normalize != 0.
 * x is left unchanged. */
int lmp_head(const lmp_backend *be, const lmp_model *m, int64_t T, const float *x, int normalize,
             float *out);

/* The whole model on one window: out[T, vocab] log-probabilities (normalize != 0) or logits,
 * using `blocks` (the model's own, or a variant's). */
int lmp_forward(const lmp_backend *be, const lmp_model *m, const lmp_block *blocks,
                const int32_t *tok, int64_t T, int normalize, float *out);

#endif
