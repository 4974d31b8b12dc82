/* imatrix_map.c — see imatrix_map.h. */
#include "compress/imatrix_map.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/tensor_names.h"

int lmp_imatrix_for_linear(const lmp_imatrix *im, lmp_family family, int64_t block, const lmp_linear *l,
                           const float **values)
{
    char name[128];
    *values = NULL;
    if (lmp_gguf_linear_name(family, block, l->role, "weight", name, sizeof name))
        return lmp_fail(LMP_EINVAL, "%s: llama.cpp has no tensor name for %s", im->path, l->name);
    const lmp_imatrix_entry *e = lmp_imatrix_find(im, name);
    /* each message says which way the file and the model disagree: the likeliest cause is an
     * importance matrix computed for another model */
    if (!e)
        return lmp_fail(LMP_EINVAL, "%s: no entry '%s' for %s (the file's %lld entries run from '%s' to '%s': an "
                        "importance matrix of another model?)", im->path, name, l->name, (long long)im->n_entries,
                        im->entries[0].name, im->entries[im->n_entries - 1].name);
    if (e->rows != 1)
        return lmp_fail(LMP_EINVAL, "%s: entry '%s' has %lld rows, a MoE weight's experts; %s is a dense linear",
                        im->path, name, (long long)e->rows, l->name);
    if (e->n != l->in)
        return lmp_fail(LMP_EINVAL, "%s: entry '%s' has %lld values, but %s has %lld inputs (an importance matrix of "
                        "another model?)", im->path, name, (long long)e->n, l->name, (long long)l->in);
    if (e->empty_rows)
        return lmp_fail(LMP_EINVAL, "%s: entry '%s' saw no token (its count is 0), so it says nothing of %s's inputs; "
                        "llama-quantize would weight them all 1, which importance = \"uniform\" does (an override "
                        "for that linear)", im->path, name, l->name);
    *values = e->values;
    return 0;
}

int lmp_imatrix_check_stages(const lmp_model *m, const lmp_variant *v, void *const *selves)
{
    int st = 0;
    for (int64_t b = 0; b < m->arch.n_layers && !st; b++) {
        lmp_block blk; /* names, roles and shapes: no weight is read */
        if ((st = lmp_block_init(&blk, (int)b, &m->arch))) {
            lmp_block_free_tables(&blk);
            break;
        }
        for (int s = 0; s < v->n_stages && !st; s++) {
            const lmp_stage *stage = &v->stages[s];
            const lmp_strategy_i *vt = stage->plugin->desc->vtable;
            for (int i = 0; i < blk.n_linears && !st; i++) {
                const lmp_linear *l = &blk.linears[i];
                const lmp_value *p = lmp_stage_params_for(stage, l->name);
                if (!p || !(vt->needs(selves[s], p) & LMP_STAT_IMATRIX)) continue;
                const float *values;
                if (!v->imatrix)
                    st = lmp_fail(LMP_EINVAL, "pipeline[%d] (%s) quantizes %s with an importance matrix "
                                  "(importance = \"imatrix\"), but none is set: add imatrix = \"FILE\"; to the "
                                  "variant or to the config's top level", s, stage->plugin->desc->name, l->name);
                else if ((st = lmp_imatrix_for_linear(v->imatrix, m->arch.family, b, l, &values)))
                    st = lmp_fail_prefix(st, "pipeline[%d] (%s)", s, stage->plugin->desc->name);
            }
        }
        lmp_block_free_tables(&blk);
    }
    return st;
}
