/* block_edit.c — see block_edit.h. */
#include "compress/block_edit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/model.h"

static int check_positive(const char *what, const char *name, int64_t n, const float *s)
{
    for (int64_t j = 0; j < n; j++)
        if (!(s[j] > 0.0f) || isinf(s[j]))
            return lmp_fail(LMP_EINVAL, "%s: %s: scale[%lld] = %g is not a positive finite number",
                            what, name, (long long)j, (double)s[j]);
    return 0;
}

static int check_finite(const char *what, const char *name, int64_t n, const float *z)
{
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(z[j]))
            return lmp_fail(LMP_EINVAL, "%s: %s: shift[%lld] = %g is not finite", what, name,
                            (long long)j, (double)z[j]);
    return 0;
}

/* *p, or a fresh zeroed [n] array stored there; NULL when out of memory. */
static float *zeros_if_null(float **p, int64_t n)
{
    if (!*p) *p = calloc((size_t)n, sizeof **p);
    return *p;
}

/* (W z)[o] in double, so a large shift does not cost the sum its precision. */
static double wz_row(const lmp_linear *l, int64_t o, const float *z)
{
    const float *row = l->w + o * l->in;
    double acc = 0;
    for (int64_t j = 0; j < l->in; j++) acc += (double)row[j] * (double)z[j];
    return acc;
}

/* b += W z for W[out, in]. */
static void add_wz(lmp_linear *l, const float *z)
{
    for (int64_t o = 0; o < l->out; o++) l->b[o] = (float)((double)l->b[o] + wz_row(l, o, z));
}

int lmp_set_weight_grid(lmp_block *blk, int linear, const lmp_wspec *spec, const float *scales,
                        const float *zeros, const int32_t *g_idx)
{
    if (linear < 0 || linear >= blk->n_linears)
        return lmp_fail(LMP_EINVAL, "set_weight_grid: block %d has no linear %d", blk->index, linear);
    lmp_linear *l = &blk->linears[linear];
    if (!spec || !scales || (!spec->sym && !zeros) || !lmp_wspec_format_ok(spec) ||
        (spec->gran == LMP_GRAN_GROUP && spec->group < 1) || (spec->gran == LMP_GRAN_BLOCK && g_idx))
        return lmp_fail(LMP_EINVAL, "set_weight_grid: %s: not a grid (spec, scales, and zeros when asymmetric)", l->name);
    if (g_idx) {
        const int64_t n_groups = lmp_wspec_n_scales(spec, 1, l->in);
        for (int64_t j = 0; j < l->in; j++)
            if (g_idx[j] < 0 || g_idx[j] >= n_groups)
                return lmp_fail(LMP_EINVAL, "set_weight_grid: %s: g_idx[%lld] = %d is not a group of 0..%lld", l->name,
                                (long long)j, g_idx[j], (long long)(n_groups - 1));
    }
    lmp_wgrid *g = lmp_wgrid_new(spec, l->out, l->in, scales, zeros, g_idx);
    if (!g) return lmp_fail(LMP_ENOMEM, "set_weight_grid: %s: out of memory", l->name);
    lmp_wgrid_free(l->grid);
    l->grid = g;
    return 0;
}

/* W changes: the grid recorded for it no longer describes it. */
static void scale_columns(lmp_linear *l, const float *s)
{
    lmp_wgrid_free(l->grid);
    l->grid = NULL;
    for (int64_t o = 0; o < l->out; o++)
        for (int64_t j = 0; j < l->in; j++) l->w[o * l->in + j] *= s[j];
}

static lmp_norm *find_norm(lmp_block *blk, int norm, const char *what)
{
    if (norm >= 0 && norm < blk->n_norms) return &blk->norms[norm];
    lmp_fail(LMP_EINVAL, "%s: block %d has no norm %d", what, blk->index, norm);
    return NULL;
}

int lmp_fold_norm_scale(lmp_block *blk, int norm, const float *s)
{
    lmp_norm *nm = find_norm(blk, norm, "fold_norm_scale");
    if (!nm) return LMP_EINVAL;
    int st = check_positive("fold_norm_scale", nm->name, nm->dim, s);
    if (st) return st;
    for (int64_t j = 0; j < nm->dim; j++) {
        nm->w[j] /= s[j];
        if (nm->b) nm->b[j] /= s[j];
    }
    for (int f = 0; f < nm->n_fed; f++) scale_columns(&blk->linears[nm->fed[f]], s);
    return 0;
}

int lmp_fold_norm_shift(lmp_block *blk, int norm, const float *z)
{
    lmp_norm *nm = find_norm(blk, norm, "fold_norm_shift");
    if (!nm) return LMP_EINVAL;
    int st = check_finite("fold_norm_shift", nm->name, nm->dim, z);
    if (st) return st;
    /* Allocate everything first so a failure leaves the block as it was. */
    if (!zeros_if_null(&nm->b, nm->dim)) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int f = 0; f < nm->n_fed; f++) {
        lmp_linear *l = &blk->linears[nm->fed[f]];
        if (!zeros_if_null(&l->b, l->out)) return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    for (int64_t j = 0; j < nm->dim; j++) nm->b[j] -= z[j];
    for (int f = 0; f < nm->n_fed; f++) add_wz(&blk->linears[nm->fed[f]], z);
    return 0;
}

int lmp_add_input_affine(lmp_block *blk, int linear, const float *z, const float *s)
{
    if (linear < 0 || linear >= blk->n_linears)
        return lmp_fail(LMP_EINVAL, "add_input_affine: block %d has no linear %d", blk->index, linear);
    lmp_linear *l = &blk->linears[linear];
    for (int n = 0; n < blk->n_norms; n++)
        for (int f = 0; f < blk->norms[n].n_fed; f++)
            if (blk->norms[n].fed[f] == linear)
                return lmp_fail(LMP_EINVAL, "add_input_affine: %s is fed by %s: fold into the norm instead",
                                l->name, blk->norms[n].name);
    int st = 0;
    if ((z && (st = check_finite("add_input_affine", l->name, l->in, z))) ||
        (s && (st = check_positive("add_input_affine", l->name, l->in, s))))
        return st;
    int new_scale = s && !l->in_scale;
    if (z && !l->shift_bias) l->shift_bias = calloc((size_t)l->out, sizeof *l->shift_bias);
    if ((z && (!l->shift_bias || !zeros_if_null(&l->in_shift, l->in))) ||
        (new_scale && !(l->in_scale = malloc((size_t)l->in * sizeof *l->in_scale))))
        return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int64_t j = 0; new_scale && j < l->in; j++) l->in_scale[j] = 1.0f;
    /* The earlier affine (z0, s0) feeds x1 = (x - z0)/s0 to the linear; the new one runs on x1:
     * (x1 - z)/s = (x - (z0 + s0 z)) / (s0 s).  W z uses W before the new scale, and stays in
     * double (lmp_linear.shift_bias). */
    if (z) {
        for (int64_t o = 0; o < l->out; o++) l->shift_bias[o] += wz_row(l, o, z);
        for (int64_t j = 0; j < l->in; j++) l->in_shift[j] += (l->in_scale ? l->in_scale[j] : 1.0f) * z[j];
    }
    if (s) {
        scale_columns(l, s);
        for (int64_t j = 0; j < l->in; j++) l->in_scale[j] *= s[j];
    }
    return 0;
}

int lmp_set_mask(lmp_block *blk, int linear, const uint8_t *mask, int n, int m)
{
    if (linear < 0 || linear >= blk->n_linears)
        return lmp_fail(LMP_EINVAL, "set_mask: block %d has no linear %d", blk->index, linear);
    lmp_linear *l = &blk->linears[linear];
    if (!mask || m < 1 || n < 0 || n > m)
        return lmp_fail(LMP_EINVAL, "set_mask: %s: %d:%d is not a pattern", l->name, n, m);
    for (int64_t o = 0; o < l->out; o++)
        for (int64_t j = 0; j < l->in; j += m) {
            int kept = 0;
            for (int k = 0; k < m && j + k < l->in; k++) kept += mask[o * l->in + j + k] != 0;
            if (kept > n)
                return lmp_fail(LMP_EINVAL, "set_mask: %s: row %lld keeps %d of inputs %lld..%lld, more than %d:%d allows",
                                l->name, (long long)o, kept, (long long)j, (long long)(j + m - 1), n, m);
        }
    const int64_t N = l->out * l->in;
    if (!l->mask && !(l->mask = malloc((size_t)N))) return lmp_fail(LMP_ENOMEM, "out of memory");
    for (int64_t i = 0; i < N; i++) {
        l->mask[i] = mask[i] != 0;
        if (!l->mask[i]) l->w[i] = 0.0f;
    }
    l->sparse_n = n;
    l->sparse_m = m;
    return 0;
}
