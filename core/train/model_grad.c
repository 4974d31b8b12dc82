/* model_grad.c — see model_grad.h. */
#include "train/model_grad.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "train/loss.h"

int lmp_model_tape_init(lmp_model_tape *mt, const lmp_model *m, int64_t T)
{
    const int64_t d = m->arch.dim, V = m->arch.vocab;
    memset(mt, 0, sizeof *mt);
    mt->T = T;
    mt->blocks = calloc((size_t)m->arch.n_layers, sizeof *mt->blocks);
    mt->x = malloc((size_t)(2 * T * d) * sizeof *mt->x);
    mt->z = malloc((size_t)(T * V) * sizeof *mt->z);
    int st = mt->blocks && mt->x && mt->z ? 0 : lmp_fail(LMP_ENOMEM, "out of memory for the model's training tape");
    if (!st) mt->dx = mt->x + T * d;
    for (int64_t b = 0; b < m->arch.n_layers && !st; b++, mt->n_blocks++)
        st = lmp_block_tape_init(&mt->blocks[b], &m->arch, T);
    if (st) lmp_model_tape_free(mt);
    return st;
}

void lmp_model_tape_free(lmp_model_tape *mt)
{
    for (int b = 0; mt->blocks && b < mt->n_blocks; b++) lmp_block_tape_free(&mt->blocks[b]);
    free(mt->blocks);
    free(mt->x);
    free(mt->z);
    memset(mt, 0, sizeof *mt);
}

int lmp_model_loss_grad(const lmp_backend *be, const lmp_model *m, const lmp_block *blocks, const int32_t *tok,
                        const float *ref_logp, lmp_model_tape *mt, lmp_block_grads *const *g, double *loss)
{
    const int64_t T = mt->T, V = m->arch.vocab;
    if (!ref_logp && T < 2) return lmp_fail(LMP_EINVAL, "next-token cross-entropy needs windows of 2 tokens or more");
    lmp_embed(m, tok, T, mt->x);
    int st = 0;
    for (int b = 0; b < mt->n_blocks && !st; b++) st = lmp_block_forward_train(be, &m->arch, &blocks[b], mt->x, &mt->blocks[b]);
    if (!st) st = lmp_head(be, m, T, mt->x, 0, mt->z);
    if (st) return st;
    if (ref_logp) {
        st = lmp_loss_kl(T, V, mt->z, ref_logp, loss, mt->z);
    } else { /* position t predicts token t+1; the last position predicts nothing */
        st = lmp_loss_ce(T - 1, V, mt->z, tok + 1, loss, mt->z);
        memset(mt->z + (T - 1) * V, 0, (size_t)V * sizeof *mt->z);
    }
    if (!st) st = lmp_head_backward(be, m, T, mt->x, mt->z, mt->dx, NULL, NULL);
    for (int b = mt->n_blocks - 1; b >= 0 && !st; b--) /* dx: the gradient of block b's output, then its input */
        st = lmp_block_backward(be, &m->arch, &blocks[b], &mt->blocks[b], mt->dx, mt->dx, g ? g[b] : NULL);
    return st;
}
