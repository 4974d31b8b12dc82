/* expert_pager.h — a mixture-of-experts block's routed experts held a group at a time (issue 37,
 * item 4: memory bounded by a group of experts, not a block).
 *
 * A sparse layer of DeepSeek-V3 holds 256 routed experts of 7168 x 2048 x 3: about 45 GB in f32.
 * When a block's routed experts take more than the run's budget (ctx->expert_group_bytes,
 * config `memory.expert_group_mb`), the block is handled as a skeleton (every linear that is
 * no routed expert's, and the norms) plus groups of experts [g per, (g + 1) per): the forward
 * asks the pager for expert e's linears when the block it runs does not hold them, and the pager
 * keeps one group in memory, loading the group e lies in (from the model's file, or from the
 * variant's compressed groups kept as codes in a temporary file, model/block_store.h) when e is
 * not in the group it holds.  The forward runs the experts in the same order on the same floats
 * whether they are held or paged (forward.c run_moe), so the numbers are the same bit for bit. */
#ifndef LMP_CORE_EXPERT_PAGER_H
#define LMP_CORE_EXPERT_PAGER_H

#include <stdint.h>

#include "model/model.h"

typedef struct lmp_expert_pager {
    int64_t n_experts, per_group;
    /* *out <- group g: a block holding routed experts [g per, min((g + 1) per, E)) (and maybe
     * other linears, which the pager ignores); the pager frees it with lmp_block_free. */
    int (*load)(void *self, int64_t g, lmp_block *out);
    void *self;
    int64_t held;        /* the group held, -1: none */
    lmp_block part;
    int64_t loads;       /* groups loaded so far (the log, the tests) */
} lmp_expert_pager;

void lmp_expert_pager_init(lmp_expert_pager *p, int64_t n_experts, int64_t per_group,
                           int (*load)(void *self, int64_t g, lmp_block *out), void *self);
/* gud[0..3) <- expert e's gate, up and down (pointers into the held group, valid until the next
 * call that loads another group). */
int lmp_expert_pager_expert(lmp_expert_pager *p, int64_t e, const lmp_linear *gud[3]);
/* Frees the group held (the pager stays usable). */
void lmp_expert_pager_drop(lmp_expert_pager *p);

/* Routed experts per group for layer `layer` under a budget of `budget_bytes` of f32 weights:
 * 0 when the layer is dense or all of its routed experts fit in the budget (the block is then
 * handled whole), else at least 1. */
int64_t lmp_expert_group_size(const lmp_arch *a, int64_t layer, int64_t budget_bytes);
/* Bytes of one routed expert's weights in f32. */
int64_t lmp_expert_f32_bytes(const lmp_arch *a);

/* Keeps in b (made by lmp_block_init or a block copy) the linears that are no routed expert's
 * when `others`, and the routed experts e in [e0, e1); the others' weights and names are freed
 * and the norms' fed lists renumbered (a dropped linear leaves them).  The order is kept. */
int lmp_block_keep_experts(lmp_block *b, int others, int64_t e0, int64_t e1);

/* Block b of m with only what lmp_block_keep_experts keeps, read from its file (only those
 * tensors are converted); LMP_EUNSUPPORTED when m's format cannot (lmp_model_copies_experts). */
int lmp_model_block_copy_experts(const lmp_model *m, int64_t b, int others, int64_t e0, int64_t e1,
                                 lmp_block *out);
int lmp_model_copies_experts(const lmp_model *m);

/* A pager's load over m's file: self is an lmp_model_experts naming the block. */
typedef struct lmp_model_experts {
    const lmp_model *m;
    int64_t block, per_group;
} lmp_model_experts;
int lmp_model_experts_load(void *self, int64_t g, lmp_block *out);

#endif
