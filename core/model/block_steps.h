/* block_steps.h — the block as data: one list of steps made from the architecture, which the
 * forward runs top down (model/forward.c), the backward bottom up with a derivative per step kind
 * (train/backward.c), and the FLOP count adds up.  A feature of a new architecture is a step kind
 * (or a new use of one) here, and then has to be given both a forward and a derivative: neither
 * side restates the block, so they cannot drift apart.
 *
 * Values.  Every value the block makes is a slot, written once (SSA): the block's input x, the
 * norms' outputs, q and k as the linears make them and as attention reads them, and so on.  The
 * forward may store several slots in one buffer when their lives do not overlap (forward.c
 * lmp_block_run's homes), and a training forward keeps the slots the backward reads in buffers
 * of their own (train/backward.h's tape).  A step that works in place (RoPE, the q scale) reads
 * and writes the same slot; its derivative must not need the value it overwrote.
 *
 * Shapes: T tokens (rows), d = dim, qd = n_heads·head_dim, kv = n_kv_heads·head_dim,
 * f = hidden; every slot is [T, width[slot]].
 *
 * The Llama-family block (GPT-2: LayerNorm, no RoPE, one MLP input linear and GELU) is
 *   group 0:  xn_attn = norm_attn(x)                     NORM        [T,d] -> [T,d]
 *             q_lin, k_lin, v = q, k, v linears (xn_attn) LINEARS     [T,d] -> [T,qd], [T,kv], [T,kv]
 *             q, k = q_norm(q_lin), k_norm(k_lin)         HEAD_NORM   per head of head_dim (Qwen3, Gemma 3)
 *             q, k = rope(q), rope(k)                     ROPE        in place
 *             q *= q_scale                                SCALE       in place (Gemma 2/3)
 *             q, k = q H, k H per head                    ROTATE      online R3 (model.rotate)
 *             att = attention(q, k, v)                    ATTENTION   window, soft-cap, ALiBi -> [T,qd]
 *     (multi-head latent attention, DeepSeek-V2/V3, instead of the steps from q, k, v on:
 *             att = mla(xn_attn)                          MLA         [T,d] -> [T,heads*v_head_dim]:
 *             q = q(xn) or q_b(norm(q_a(xn))); [c, k_rot] = kv_a(xn); [k_nope, v] per head =
 *             kv_b(norm(c)); RoPE on q's rotary part and on k_rot (one head, shared); attention
 *             over [q_nope, q_rot] . [k_nope, k_rot]; it observes q (or q_a) and kv_a's input,
 *             then q_b's and kv_b's (all group 0) itself)
 *   group 1:  att_out = o(att)                            LINEARS     [T,qd] -> [T,d]
 *             att_post = norm_post_attn(att_out)          NORM        (GLM-4, Gemma 2/3)
 *             x1 = x + att_post (or att_out)              ADD
 *   group 2:  xn_mlp = norm_mlp(x1)                       NORM
 *             gate, up = gate, up linears (xn_mlp)        LINEARS     [T,d] -> [T,f], [T,f]
 *             h = silu(gate) * up, gelu(gate) * up        GLU         (GPT-2: h = gelu(up), GELU)
 *             h = h Q4                                    ROTATE      online R4 (model.rotate)
 *     (a sparse layer of a mixture of experts instead:
 *             mlp_out = moe(xn_mlp)                       MOE         [T,d] -> [T,d]: the router's
 *             logits, softmax, top k, each expert's SwiGLU MLP on the tokens routed to it weighted by
 *             their probability, plus the shared expert times sigmoid(shared gate); it observes the
 *             router's and every expert's gate/up input (group 2, an expert's the rows routed to it)
 *             and then every expert's down input (group 3) itself)
 *   group 3:  mlp_out = down(h)                           LINEARS     [T,f] -> [T,d]
 *             mlp_post = norm_post_mlp(mlp_out)           NORM        (GLM-4, Gemma 2/3)
 *             y = x1 + mlp_post (or mlp_out)              ADD
 * A parallel block (GPT-NeoX, Phi-2, GPT-J: arch.parallel) takes xn_mlp = norm_mlp(x) from the
 * block's input instead of x1, so y = x + attn(..) + mlp(..); with a shared norm (Phi-2, GPT-J)
 * norm_mlp is norm_attn, run again in group 2.  LayerNorms (arch.layer_norm) and a gate-less MLP
 * (arch.plain_mlp: up, GELU, down) are GPT-2's steps in the RoPE block.
 * A group is what lies between one linear input and the next (lmp_block_plan_input_group): a
 * pass may start at a group (lmp_block_forward_from) and an observer may stop it at one. */
#ifndef LMP_CORE_MODEL_BLOCK_STEPS_H
#define LMP_CORE_MODEL_BLOCK_STEPS_H

#include "model/model.h"

typedef enum {
    LMP_SLOT_X,        /* [T,d]  the block's input: the residual stream */
    LMP_SLOT_XN_ATTN,  /* [T,d]  the norm before attention: q, k, v read it */
    LMP_SLOT_Q_LIN,    /* [T,qd] q as its linear makes it, before the q norm (q/k norms only) */
    LMP_SLOT_K_LIN,    /* [T,kv] likewise k */
    LMP_SLOT_Q,        /* [T,qd] q as attention reads it (after the q norm, RoPE, the q scale) */
    LMP_SLOT_K,        /* [T,kv] likewise k */
    LMP_SLOT_V,        /* [T,kv] */
    LMP_SLOT_ATT,      /* [T,qd] attention's output: o's input */
    LMP_SLOT_ATT_OUT,  /* [T,d]  o's output */
    LMP_SLOT_ATT_POST, /* [T,d]  o's output through the post-attention norm (post norms only) */
    LMP_SLOT_X1,       /* [T,d]  the stream after the attention branch */
    LMP_SLOT_XN_MLP,   /* [T,d]  the norm before the MLP: its input linears read it */
    LMP_SLOT_GATE,     /* [T,f]  gate's output (none in GPT-2) */
    LMP_SLOT_UP,       /* [T,f]  up's output (GPT-2: c_fc's) */
    LMP_SLOT_H,        /* [T,f]  the activation: down's input */
    LMP_SLOT_MLP_OUT,  /* [T,d]  down's output */
    LMP_SLOT_MLP_POST, /* [T,d]  down's output through the post-MLP norm (post norms only) */
    LMP_SLOT_Y,        /* [T,d]  the block's output */
    LMP_SLOT_COUNT
} lmp_slot;

typedef enum {
    LMP_STEP_NORM,      /* out = norm(in) per row of d: RMSNorm (+ a shift's bias) or LayerNorm */
    LMP_STEP_LINEARS,   /* out[i] = linear roles[i] (in): one input group, observed before it runs */
    LMP_STEP_HEAD_NORM, /* out = RMSNorm(in) over each head_dim piece of a row (a q or k norm) */
    LMP_STEP_ROPE,      /* in[0] and in[1] (q, k) turned in place as the layer's rotation says */
    LMP_STEP_SCALE,     /* in[0] *= scale in place */
    LMP_STEP_ATTENTION, /* out = attention(q = in[0], k = in[1], v = in[2]) over window, soft-cap; k and v
                         * first through the KV cache's quantization when the block has one
                         * (lmp_block.kv, model/kv_quant.h: in place) */
    LMP_STEP_GLU,       /* out = act(in[0]) * in[1], act silu (SwiGLU) or gelu_tanh (GeGLU) */
    LMP_STEP_GELU,      /* out = gelu_tanh(in[0]), or the erf GELU (erf), or ReLU (relu): the gate-less
                         * MLP's activation */
    LMP_STEP_ADD,       /* out = in[0] + in[1]: a residual add */
    LMP_STEP_ROTATE,    /* in[0] (and in[1]) turned in place by an online rotation (model/rotate.h):
                         * R3, q and k per head (heads[0], heads[1]), or R4, down's input */
    LMP_STEP_MOE,       /* out = the mixture of experts on in[0] (see above; group 2) */
    LMP_STEP_MLA,       /* out = multi-head latent attention on in[0] (DeepSeek; see above; group 0) */
    LMP_STEP_KINDS
} lmp_step_kind;

#define LMP_STEP_MAX_IO 3
typedef struct lmp_block_step {
    lmp_step_kind kind;
    int group;                          /* the input group it belongs to, 0..3 */
    int n_in, n_out;
    lmp_slot in[LMP_STEP_MAX_IO], out[LMP_STEP_MAX_IO];
    int norm;                           /* NORM, HEAD_NORM: index in lmp_block.norms; ATTENTION: the
                                         * sinks' entry there (LMP_NORM_SINKS), -1: none */
    int layer_norm;                     /* NORM: LayerNorm (GPT-2) rather than RMSNorm */
    lmp_role roles[LMP_STEP_MAX_IO];    /* LINEARS: the linear writing out[i] */
    int affine;                         /* LINEARS: the input goes through the first linear's
                                         * explicit input affine (no norm feeds the group) */
    int64_t heads[2];                   /* HEAD_NORM: heads of in[0]; ROPE: of in[0], in[1] */
    float scale;                        /* SCALE */
    int64_t window;                     /* ATTENTION: keys after t - window (0: all earlier) */
    float softcap;                      /* ATTENTION: scores through c tanh(s / c) (0: none) */
    int gelu;                           /* GLU: gelu_tanh(gate) * up (GeGLU) rather than silu */
    int erf;                            /* GELU: the exact 0.5 x (1 + erf(x / sqrt 2)) rather than the
                                         * tanh approximation (GPT-NeoX's "gelu") */
    int relu;                           /* GELU: max(x, 0) instead (OPT's "relu") */
    int alibi;                          /* ATTENTION: ALiBi's slope_h * (j - t) on the scores (Bloom) */
    /* MOE: routed experts of width expert_hidden, top_k per token, renormalized when norm_topk;
     * a shared expert of shared_hidden (0: none), gated when shared_gate */
    int64_t n_experts, top_k, expert_hidden, shared_hidden;
    int norm_topk, shared_gate;
    /* MOE: how the router's logits choose and weigh (lmp_arch's route, n_group, topk_group,
     * routed_scale) */
    lmp_route_kind route;
    int64_t n_group, topk_group;
    float routed_scale;
    float swiglu_alpha, swiglu_limit;   /* MOE: gpt-oss's clamped SwiGLU (limit 0: silu(gate) * up) */
    /* MLA: the latents' norms (q_a's, -1 without q_lora_rank; kv_a's) */
    int mla_norm[2];
} lmp_block_step;

#define LMP_BLOCK_MAX_STEPS 20
typedef struct lmp_block_plan {
    int64_t layer;                      /* the block's index: its window and rotation */
    int n_steps;
    lmp_block_step step[LMP_BLOCK_MAX_STEPS];
    int64_t width[LMP_SLOT_COUNT];      /* columns of each slot; 0 for one this block does not make */
    int producer[LMP_SLOT_COUNT];       /* the step that first writes the slot; -1 for x and unmade */
    /* MLA's inner widths, for the FLOP count (0 without MLA) */
    double mla_qd, mla_q_lora, mla_q_in, mla_kv_a, mla_kv_lora, mla_kv_b;
    /* MOE: where the routed experts the block does not hold come from (model/expert_pager.h);
     * NULL: an expert the block lacks adds nothing (a part of a block, for its statistics) */
    struct lmp_expert_pager *pager;
} lmp_block_plan;

/* The steps of block `layer` of architecture a (no weights are needed: the norms are named by
 * their index lmp_norm_index gives, the linears by role). */
void lmp_block_plan_make(lmp_block_plan *p, const lmp_arch *a, int64_t layer);

/* Whether block blk has everything the plan uses (each role's linear, each norm, of the widths
 * the plan says) and nothing it does not (a norm no step takes is refused by name, rather than
 * silently left out).  0, or an LMP_E* error naming the tensor. */
int lmp_block_plan_check(const lmp_block_plan *p, const lmp_block *blk);

/* The input group (0..3) of the step whose linears include role r: where a pass observing r's
 * input may stop, and which of a sequential stage's rounds treats it; -1 when the plan has none.
 * In a sparse layer (LMP_STEP_MOE): the router, the shared gate and every expert's gate and up
 * read the MoE's input (its group, 2), every expert's down the next (3). */
int lmp_block_plan_input_group(const lmp_block_plan *p, lmp_role r);

/* The FLOPs of the plan's steps in groups [0, group) over T tokens: each linear as 2·T·in·out,
 * attention's two products as 2·T²·qd each (the causal half not taken off); norms, RoPE and
 * activations are left out (O(T·d)). */
double lmp_block_plan_flops(const lmp_block_plan *p, int64_t T, int group);

/* The step kind's name, for messages. */
const char *lmp_step_kind_name(lmp_step_kind k);

#endif
