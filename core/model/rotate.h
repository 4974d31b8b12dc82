/* rotate.h — fused rotations of a model (QuaRot's and SpinQuant's R1 and R2), exact in float.
 *
 * R1 turns the residual stream by an orthogonal Q[dim, dim]: every norm that feeds linears
 * becomes a plain RMSNorm (its weight folded into the columns of the linears it feeds, the final
 * norm's into the head), then the embeddings' rows, the columns... of the readers (q, k, v, gate,
 * up, head: W <- W Q) and the rows of the writers (o, down: W <- Q^T W, b <- Q^T b) are turned.
 * An RMSNorm without a weight commutes with Q (it keeps the norm of a row), so the logits are
 * unchanged.  R2 turns each attention head's values by an orthogonal Q2[hd, hd]: v's rows of
 * each head (and bias) by Q2^T, o's columns of each head by Q2; attention mixes values within a
 * head, so o's output is unchanged.
 *
 * R3 and R4 are online (steps of the forward, LMP_STEP_ROTATE, through the backend's hadamard
 * op): R3 turns q and k per head after RoPE by H/sqrt(head_dim) (q·k is unchanged: nothing is
 * fused; it is for a quantized KV cache: a variant's kv_cache, model/kv_quant.h); R4 turns down's
 * input by Q4, a randomized Hadamard of the hidden size, and down's weight by Q4 (fused).
 * Neither can be exported: GGUF has no online transform, and compressed-tensors 0.20.1's transform
 * config (what vLLM reads for QuIP/SpinQuant) rebuilds its Hadamards itself, from a torch seed and
 * Sylvester's or Sloane's known matrices, not lmpress's H_a ⊗ R_m with a random odd factor; so an
 * export of a model with online rotations is refused, naming them.
 *
 * Q is a randomized Hadamard matrix, diag(signs) (R_m ⊗ H_a/sqrt(a)) with dim = a·m, a the
 * largest power of 2 dividing dim and R_m a random orthogonal m×m matrix (m = 1: a plain
 * randomized Hadamard; SmolLM2's 576 = 64·9), or, with kind "orthogonal", a random orthogonal
 * matrix (Gram-Schmidt on a Gaussian one).  Both are made from the seed alone.
 *
 * How it is applied: the model's embeddings, final norm and head are replaced by rotated copies
 * (the head untied from the embeddings), and the model's block source is wrapped so that every
 * block copy (the unmodified model's and each variant's, before any stage) comes out rotated.
 * The whole run then works on the rotated model, the reference included (it is the same function
 * to float rounding: tests/test_rotate.c checks 1e-5).
 *
 * Learned R1/R2 (kind "learned", train/rotation_learn.h): lmp_model_rotate turns the model by the
 * "hadamard" ones; the learned orthogonal matrices then compose after them
 * (lmp_model_rotate_set_learned), fused the same way, so the model stays exact in float.
 *
 * Refused, naming the feature: LayerNorm (GPT-2: it subtracts the mean, which a rotation does not
 * commute with), post-norms (GLM-4, Gemma 2/3: a weighted norm on a branch's output cannot be
 * folded), a norm with a bias, learned positions, routed experts (mixtures of experts). */
#ifndef LMP_CORE_MODEL_ROTATE_H
#define LMP_CORE_MODEL_ROTATE_H

#include <stdint.h>

#include "model/block_steps.h"
#include "model/model.h"
#include "plugin/backend.h"

/* LMP_ROT_LEARNED: the "hadamard" rotation, then a learned orthogonal one composed after it
 * (SpinQuant; train/rotation_learn.h): lmp_model_rotate turns the model by the Hadamard, and
 * lmp_rotation_learn (which needs calibration windows and a backend) learns the rest and installs
 * it with lmp_model_rotate_set_learned. */
/* LMP_ROT_FULL_HADAMARD ("full_hadamard"): a randomized Hadamard matrix of the whole width, every
 * entry ±1/sqrt(n) (what compressed-tensors' "random-hadamard" is): diag(signs) (P_p/sqrt(p) ⊗
 * H_b/sqrt(b)) with n = p·b, b a power of 2 and P_p a Paley Hadamard matrix built from a prime q
 * (p = q + 1, q ≡ 3 mod 4; or p = 2(q + 1), q ≡ 1 mod 4): 576 = 36·16 (q = 17), 1536 = 12·128
 * (q = 11).  A width without such a p (e.g. 172) is refused by name.  "hadamard" instead mixes the
 * odd factor by a random orthogonal matrix, which spreads a row less evenly. */
typedef enum {
    LMP_ROT_NONE = 0,
    LMP_ROT_HADAMARD = 1,
    LMP_ROT_ORTHOGONAL = 2,
    LMP_ROT_LEARNED = 3,
    LMP_ROT_FULL_HADAMARD = 4
} lmp_rot_kind;

/* How learned rotations are trained (model.rotate.learn, docs/config.md): Cayley SGD on the
 * quantized model's loss, fake-quantizing every block linear's weights (symmetric per output
 * channel, w_bits; 0: not) and inputs (dynamic per token, a_bits; 0: not) with straight-through
 * gradients. */
typedef struct lmp_rotate_learn_opts {
    int64_t steps;   /* Cayley SGD steps */
    int64_t batch;   /* calibration windows per step (0: all) */
    double lr;       /* the step size before the cap 1/||A|| and the cosine schedule */
    int w_bits, a_bits;
    int loss;        /* LMP_LOSS_KL (to the unquantized model) or LMP_LOSS_CE (next token) */
    int keep_best;   /* end with the rotations of the step whose batch loss was least */
} lmp_rotate_learn_opts;

typedef struct lmp_rotate_opts {
    lmp_rot_kind r1; /* the residual stream's */
    lmp_rot_kind r2; /* each head's values' */
    int r3;          /* online: q and k per head after RoPE, by H/sqrt(head_dim) */
    int r4;          /* online: down_proj's input, by a randomized Hadamard of the hidden size */
    uint64_t seed;
    lmp_rotate_learn_opts learn; /* when r1 or r2 is LMP_ROT_LEARNED */
} lmp_rotate_opts;

/* The name of a kind as configs spell it ("none", "hadamard", "orthogonal", "learned",
 * "full_hadamard"); its kind
 * from a name (-1: unknown). */
const char *lmp_rot_kind_name(lmp_rot_kind k);
int lmp_rot_kind_parse(const char *name);

/* Rotates m in place as above (nothing when both kinds are NONE).  Call it once, right after
 * lmp_model_load and before lmp_model_blocks.  0, or an LMP_E* error naming what is refused. */
int lmp_model_rotate(lmp_model *m, const lmp_rotate_opts *o);

/* The source the model was read from, under the rotation's wrapper if it has one (what decides
 * "a Hugging Face folder": its tokenizer.json beside it, its export). */
const lmp_model_source *lmp_model_unrotated_source(const lmp_model *m);

/* Step s (LMP_STEP_ROTATE) on the slots: x <- x Q in place (transpose: x <- x Q^T, the step's
 * derivative).  R3 is H/sqrt(head_dim) on each head of q and k through the backend's hadamard op;
 * R4 is a->online_r4 on down's input: signs, the odd factor's mixing, then hadamard per segment. */
int lmp_rotate_online(const lmp_backend *be, const lmp_arch *a, const lmp_block_step *s, int64_t T, float *const *slot,
                      int transpose);

/* The row map x <- x Q of an n-wide rotation (for tests): made from kind and seed as above. */
typedef struct lmp_rotation lmp_rotation;
int lmp_rotation_make(lmp_rot_kind kind, int64_t n, uint64_t seed, lmp_rotation **out);
void lmp_rotation_apply(const lmp_rotation *r, float *x, int64_t stride);
void lmp_rotation_free(lmp_rotation *r);
/* x <- x R for a dense n×n R (row-major, copied): the learned rotations. */
int lmp_rotation_from_matrix(int64_t n, const double *R, lmp_rotation **out);

/* After lmp_model_rotate: compose the learned rotations after the fixed ones, R1[dim, dim] (NULL:
 * none) on the residual stream and R2[n_layers][head_dim, head_dim] (NULL: none) per layer on
 * the values (both x <- x R, orthogonal).  The embeddings and the head are turned now, every
 * block copy from then on; f32 blocks lmp_model_blocks made before are released.  Once. */
int lmp_model_rotate_set_learned(lmp_model *m, const double *R1, const double *R2);
/* The learned rotations lmp_model_rotate_set_learned installed: *r1 (NULL: none) and layer
 * `layer`'s R2 (NULL: none), for tests and reports. */
void lmp_model_rotation_learned(const lmp_model *m, int64_t layer, const lmp_rotation **r1, const lmp_rotation **r2);

#endif
