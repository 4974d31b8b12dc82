/* expert_pager.c — see expert_pager.h. */
#include "model/expert_pager.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

void lmp_expert_pager_init(lmp_expert_pager *p, int64_t n_experts, int64_t per_group,
                           int (*load)(void *self, int64_t g, lmp_block *out), void *self)
{
    memset(p, 0, sizeof *p);
    p->n_experts = n_experts;
    p->per_group = per_group > 0 ? per_group : 1;
    p->load = load;
    p->self = self;
    p->held = -1;
}

void lmp_expert_pager_drop(lmp_expert_pager *p)
{
    if (p->held >= 0) lmp_block_free(&p->part);
    p->held = -1;
}

int lmp_expert_pager_expert(lmp_expert_pager *p, int64_t e, const lmp_linear *gud[3])
{
    if (e < 0 || e >= p->n_experts) return lmp_fail(LMP_EINVAL, "expert %lld of %lld asked of a pager", (long long)e,
                                                    (long long)p->n_experts);
    const int64_t g = e / p->per_group;
    if (p->held != g) {
        lmp_expert_pager_drop(p); /* one group at a time: the old one goes before the new one comes */
        int st = p->load(p->self, g, &p->part);
        if (st) return st;
        p->held = g;
        p->loads++;
    }
    static const lmp_role roles[3] = {LMP_ROLE_GATE, LMP_ROLE_UP, LMP_ROLE_DOWN};
    for (int r = 0; r < 3; r++) {
        const int i = lmp_block_find_expert(&p->part, roles[r], LMP_EXPERT_ROUTED, (int)e);
        if (i < 0) return lmp_fail(LMP_EINVAL, "block %d: expert %lld is missing from its group %lld", p->part.index,
                                   (long long)e, (long long)g);
        gud[r] = &p->part.linears[i];
    }
    return 0;
}

int64_t lmp_expert_f32_bytes(const lmp_arch *a)
{
    return 3 * a->expert_hidden * a->dim * (int64_t)sizeof(float);
}

int64_t lmp_expert_group_size(const lmp_arch *a, int64_t layer, int64_t budget_bytes)
{
    if (a->n_experts <= 0 || !lmp_arch_moe_layer(a, layer) || budget_bytes <= 0) return 0;
    const int64_t one = lmp_expert_f32_bytes(a);
    if (one * a->n_experts <= budget_bytes) return 0;
    const int64_t per = budget_bytes / one;
    return per > 0 ? per : 1;
}

int lmp_block_keep_experts(lmp_block *b, int others, int64_t e0, int64_t e1)
{
    int *to = malloc((size_t)(b->n_linears + 1) * sizeof *to); /* old index -> new, -1: dropped */
    if (!to) return lmp_fail(LMP_ENOMEM, "out of memory");
    int n = 0;
    for (int i = 0; i < b->n_linears; i++) {
        lmp_linear *l = &b->linears[i];
        const int keep = l->expert_kind == LMP_EXPERT_ROUTED ? l->expert >= e0 && l->expert < e1 : others;
        if (!keep) {
            free((char *)l->name);
            free(l->w);
            free(l->b);
            free(l->in_shift);
            free(l->in_scale);
            free(l->mask);
            free(l->shift_bias);
            lmp_wgrid_free(l->grid);
            to[i] = -1;
            continue;
        }
        to[i] = n;
        if (n != i) b->linears[n] = *l;
        n++;
    }
    b->n_linears = n;
    for (int k = 0; k < b->n_norms; k++) {
        lmp_norm *nm = &b->norms[k];
        int m = 0;
        for (int j = 0; j < nm->n_fed; j++)
            if (to[nm->fed[j]] >= 0) nm->fed[m++] = to[nm->fed[j]];
        nm->n_fed = m;
        if (!m) {
            free(nm->fed);
            nm->fed = NULL;
        }
    }
    free(to);
    return 0;
}

int lmp_model_copies_experts(const lmp_model *m)
{
    return m->src && m->src->block_copy_experts != NULL;
}

int lmp_model_block_copy_experts(const lmp_model *m, int64_t b, int others, int64_t e0, int64_t e1,
                                 lmp_block *out)
{
    if (!lmp_model_copies_experts(m))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: this format's blocks are read whole, not a group of experts at a time",
                        m->path ? m->path : "the model");
    int st = m->src->block_copy_experts(m, b, others, e0, e1, out);
    if (m->src->release_pages) m->src->release_pages(m);
    char name[512];
    int64_t at;
    float value;
    if (!st && lmp_block_find_nonfinite(out, name, sizeof name, &at, &value)) {
        lmp_block_free(out);
        st = lmp_fail(LMP_EINVAL, "%s: tensor %s holds a non-finite value (%g at element %lld): the model's weights "
                      "must be finite numbers", m->path ? m->path : "the model", name, (double)value, (long long)at);
    }
    return st;
}

int lmp_model_experts_load(void *self, int64_t g, lmp_block *out)
{
    const lmp_model_experts *x = self;
    const int64_t e0 = g * x->per_group, e1 = e0 + x->per_group;
    return lmp_model_block_copy_experts(x->m, x->block, 0, e0, e1 < x->m->arch.n_experts ? e1 : x->m->arch.n_experts,
                                        out);
}
