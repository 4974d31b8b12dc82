/* calib_cache.c — see calib_cache.h. */
#include "compress/calib_cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

int lmp_calib_cache_init(lmp_calib_cache *cc, lmp_ctx *ctx, int64_t n_layers)
{
    memset(cc, 0, sizeof *cc);
    cc->ctx = ctx;
    cc->n_layers = n_layers;
    cc->boundary = calloc((size_t)n_layers + 1, sizeof *cc->boundary);
    if (!cc->boundary) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int64_t b = 0; b < n_layers; b++) cc->boundary[b].fd = -1;
    return 0;
}

void lmp_calib_cache_free(lmp_calib_cache *cc)
{
    for (int64_t b = 0; cc->boundary && b < cc->n_layers; b++) lmp_spill_free(&cc->boundary[b]);
    free(cc->boundary);
    memset(cc, 0, sizeof *cc);
}

int lmp_calib_cache_has(const lmp_calib_cache *cc, int64_t b, int64_t floats)
{
    return cc && b < cc->n_layers && cc->boundary[b].n == floats && floats > 0;
}

int lmp_calib_cache_get(lmp_calib_cache *cc, int64_t b, float *X, int64_t floats)
{
    cc->saved++;
    return lmp_spill_read(&cc->boundary[b], 0, floats, X);
}

int lmp_calib_cache_put(lmp_calib_cache *cc, int64_t b, const float *X, int64_t floats)
{
    if (b >= cc->n_layers || cc->boundary[b].n) return 0;
    int st = lmp_spill_init(cc->ctx, &cc->boundary[b], floats, LMP_CALIB_CACHE_BUDGET,
                            "the unmodified model's calibration activations");
    if (!st) st = lmp_spill_write(&cc->boundary[b], 0, floats, X);
    if (st) lmp_spill_free(&cc->boundary[b]); /* leaves .n == 0: not computed */
    return st;
}

static int same_floats(const float *a, const float *b, int64_t n)
{
    if (!a || !b) return a == b;
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

int lmp_block_same(const lmp_block *a, const lmp_block *b)
{
    if (a->n_linears != b->n_linears || a->n_norms != b->n_norms) return 0;
    for (int i = 0; i < a->n_linears; i++) {
        const lmp_linear *x = &a->linears[i], *y = &b->linears[i];
        if (x->out != y->out || x->in != y->in || !same_floats(x->w, y->w, x->out * x->in) ||
            !same_floats(x->b, y->b, x->out) || !same_floats(x->in_shift, y->in_shift, x->in) ||
            !same_floats(x->in_scale, y->in_scale, x->in) || memcmp(&x->act, &y->act, sizeof x->act) != 0 ||
            (x->shift_bias || y->shift_bias) || (x->mask || y->mask))
            return 0;
    }
    for (int i = 0; i < a->n_norms; i++)
        if (!same_floats(a->norms[i].w, b->norms[i].w, a->norms[i].dim) ||
            !same_floats(a->norms[i].b, b->norms[i].b, a->norms[i].dim))
            return 0;
    return 1;
}
