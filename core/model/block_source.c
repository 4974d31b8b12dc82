/* block_source.c — see block_source.h. */
#include "model/block_source.h"

#include <string.h>

static int model_get(const void *self, int64_t b, lmp_block *out) { return lmp_model_block_copy(self, b, out); }

lmp_block_source lmp_block_source_model(const lmp_model *m)
{
    return (lmp_block_source){.n = m->arch.n_layers, .get = model_get, .self = m};
}

static int array_get(const void *self, int64_t b, lmp_block *out)
{
    return lmp_block_clone((const lmp_block *)self + b, out);
}

lmp_block_source lmp_block_source_array(const lmp_block *blocks, int64_t n)
{
    return (lmp_block_source){.n = n, .get = array_get, .self = blocks};
}

void lmp_block_cursor_init(lmp_block_cursor *c, const lmp_block_source *src)
{
    memset(c, 0, sizeof *c);
    c->src = src;
    c->at = -1;
}

const lmp_block *lmp_block_cursor_at(lmp_block_cursor *c, int64_t b)
{
    if (c->at == b) return &c->blk;
    lmp_block_cursor_free(c);
    if (c->src->get(c->src->self, b, &c->blk)) return NULL;
    c->at = b;
    return &c->blk;
}

void lmp_block_cursor_free(lmp_block_cursor *c)
{
    if (c->at >= 0) lmp_block_free(&c->blk);
    c->at = -1;
}
