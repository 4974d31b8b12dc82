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
 * fused; it is for a quantized KV cache, which lmpress does not simulate yet); R4 turns down's
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
 * Refused, naming the feature: LayerNorm (GPT-2: it subtracts the mean, which a rotation does not
 * commute with), post-norms (GLM-4, Gemma 2/3: a weighted norm on a branch's output cannot be
 * folded), a norm with a bias, learned positions. */
#ifndef LMP_CORE_MODEL_ROTATE_H
#define LMP_CORE_MODEL_ROTATE_H

#include <stdint.h>

#include "model/block_steps.h"
#include "model/model.h"
#include "plugin/backend.h"

typedef enum { LMP_ROT_NONE = 0, LMP_ROT_HADAMARD = 1, LMP_ROT_ORTHOGONAL = 2 } lmp_rot_kind;

typedef struct lmp_rotate_opts {
    lmp_rot_kind r1; /* the residual stream's */
    lmp_rot_kind r2; /* each head's values' */
    int r3;          /* online: q and k per head after RoPE, by H/sqrt(head_dim) */
    int r4;          /* online: down_proj's input, by a randomized Hadamard of the hidden size */
    uint64_t seed;
} lmp_rotate_opts;

/* The name of a kind as configs spell it ("none", "hadamard", "orthogonal"); its kind from a
 * name (-1: unknown). */
const char *lmp_rot_kind_name(lmp_rot_kind k);
int lmp_rot_kind_parse(const char *name);

/* Rotates m in place as above (nothing when both kinds are NONE).  Call it once, right after
 * lmp_model_load and before lmp_model_blocks.  0, or an LMP_E* error naming what is refused. */
int lmp_model_rotate(lmp_model *m, const lmp_rotate_opts *o);

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

#endif
