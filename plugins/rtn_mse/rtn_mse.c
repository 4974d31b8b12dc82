/* rtn_mse.c — round-to-nearest with an MSE range search (llm-compressor's "mse" observer, the
 * weight half of AWQ's clipping): each slice of W (tensor, row or group, as rtn) takes, of the
 * clip ratios clip, clip - step, clip - 2 step, ... down to min_clip (clip being the grid
 * schema's parameter, 1 by default), the one whose grid gives the least squared weight error
 * sum (w - w')^2 on that slice.  The first ratio is always tried, so no slice is worse than
 * rtn's with the same clip.  No calibration is needed.
 *
 * It is also the plugin guide's example (docs/plugin-guide.md): one file, built because its
 * folder exists, using the shared grid schema (wgrid.h) and the backend's two grid operations,
 * choose_weight_grid (scales from W and a clip ratio) and apply_weight_grid (W onto given
 * scales). */
#include <math.h>
#include <string.h>

#include "lmpress/plugin.h"
#include "wgrid.h"

enum { P_GRID, P_MIN_CLIP = P_GRID + WGRID_COUNT, P_STEP, P_COUNT };

static const lmp_param_spec rtn_mse_params[P_COUNT] = {
    WGRID_PARAMS(4, 8, "weight bits, 2..8"),
    [P_MIN_CLIP] = {"min_clip", LMP_PARAM_FLOAT, "smallest clip ratio tried (the search starts at clip)", 0.75,
                    NULL, 0.01, 1.0, NULL, 0},
    [P_STEP] = {"step", LMP_PARAM_FLOAT, "distance between the clip ratios tried", 0.05, NULL, 0.005, 0.5, NULL, 0},
};

static uint32_t rtn_mse_needs(void *self, const lmp_value *p) { return 0; } /* weights only */

/* Its search is over clip ratios; a GGUF importance search and the k-quants choose the scale
 * themselves. */
static int rtn_mse_create(const lmp_host *host, void *hctx, const lmp_value *p, void **self)
{
    *self = NULL;
    if (wgrid_importance(p + P_GRID) != WGRID_IMP_NONE)
        return host->set_error(hctx, LMP_EINVAL,
                               "rtn_mse: params: importance searches each block's scale itself, which is what rtn with "
                               "importance does: use rtn, or importance = \"none\" here");
    if (!lmp_wformat_takes_clip(wgrid_format(p + P_GRID)))
        return host->set_error(hctx, LMP_EINVAL,
                               "rtn_mse: params: format %s searches its scales itself and takes no clip ratio: use rtn",
                               lmp_wformat_name(wgrid_format(p + P_GRID)));
    return wgrid_check_options(host, hctx, p + P_GRID, "rtn_mse", "params");
}

/* Per-slice squared error of Wq against W, added to err[n_slices] (slices as lmp_wspec orders
 * them). */
static void slice_errors(const lmp_wspec *s, int64_t rows, int64_t cols, const float *W, const float *Wq,
                         double *err)
{
    const lmp_wgrid g = {.spec = *s}; /* consecutive groups (no g_idx): lmp_wgrid_slice's order */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            const int64_t k = lmp_wgrid_slice(&g, cols, r, c);
            const double d = (double)W[r * cols + c] - (double)Wq[r * cols + c];
            err[k] += d * d;
        }
}

/* Linear i's W[rows, cols] <- W on the best grid of each slice, that grid recorded on the linear
 * (host->set_weight_grid); scratch buffers from the host. */
static int quantize_best_clip(const lmp_host *host, void *hctx, const lmp_backend_i *be, void *bs,
                              lmp_wspec spec, double min_clip, double step, lmp_block *blk, int i)
{
    const int64_t rows = blk->linears[i].out, cols = blk->linears[i].in;
    float *W = blk->linears[i].w;
    const lmp_wspec given = spec;
    const int64_t n = lmp_wspec_n_scales(&spec, rows, cols);
    float *best_s = host->alloc(hctx, (size_t)n * sizeof(float)), *best_z = host->alloc(hctx, (size_t)n * sizeof(float));
    float *s = host->alloc(hctx, (size_t)n * sizeof(float)), *z = host->alloc(hctx, (size_t)n * sizeof(float));
    double *best_err = host->alloc(hctx, (size_t)n * sizeof(double)), *err = host->alloc(hctx, (size_t)n * sizeof(double));
    float *Wq = host->alloc(hctx, (size_t)(rows * cols) * sizeof(float));
    int st = LMP_OK;
    if (!best_s || !best_z || !s || !z || !best_err || !err || !Wq)
        st = host->set_error(hctx, LMP_ENOMEM, "rtn_mse: out of memory for a %lld x %lld weight", (long long)rows,
                             (long long)cols);
    /* k-th candidate first - k*step, computed from k so that the ratios do not drift */
    const double first = lmp_wspec_clip(&spec);
    for (int k = 0; !st && (k == 0 || first - k * step >= min_clip - 1e-12); k++) {
        spec.clip = (float)(first - k * step);
        memcpy(Wq, W, (size_t)(rows * cols) * sizeof(float));
        st = be->choose_weight_grid(bs, &spec, rows, cols, W, s, z);
        if (!st) st = be->apply_weight_grid(bs, &spec, rows, cols, Wq, s, z, NULL);
        if (st) break;
        memset(err, 0, (size_t)n * sizeof(double));
        slice_errors(&spec, rows, cols, W, Wq, err);
        for (int64_t i = 0; i < n; i++)
            if (k == 0 || err[i] < best_err[i]) { /* ties keep the wider range */
                best_err[i] = err[i];
                best_s[i] = s[i];
                best_z[i] = z[i];
            }
    }
    if (!st) st = be->apply_weight_grid(bs, &spec, rows, cols, W, best_s, best_z, NULL);
    if (!st) st = host->set_weight_grid(hctx, blk, i, &given, best_s, best_z, NULL);
    host->free(hctx, best_s);
    host->free(hctx, best_z);
    host->free(hctx, s);
    host->free(hctx, z);
    host->free(hctx, best_err);
    host->free(hctx, err);
    host->free(hctx, Wq);
    return st;
}

static int rtn_mse_apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    void *bs = NULL;
    const lmp_backend_i *be = host->backend(hctx, &bs);
    if (!be) return host->set_error(hctx, LMP_EUNSUPPORTED, "rtn_mse: no backend to quantize with");
    for (int i = 0; i < blk->n_linears; i++) {
        lmp_linear *l = &blk->linears[i];
        const lmp_value *p = l->params;
        if (!p) continue; /* not targeted by this stage */
        lmp_wspec spec;
        wgrid_spec_linear(p + P_GRID, l, &spec);
        int st = quantize_best_clip(host, hctx, be, bs, spec, p[P_MIN_CLIP].num, p[P_STEP].num, blk, i);
        if (st) return st;
        l->weight_bits = wgrid_weight_bits(&spec, l->out, l->in); /* the clip ratio is not stored */
    }
    return LMP_OK;
}

static const lmp_strategy_i rtn_mse_vtable = {
    .struct_size = sizeof(lmp_strategy_i),
    .create = rtn_mse_create,
    .needs = rtn_mse_needs,
    .apply = rtn_mse_apply,
};

static const lmp_plugin_desc rtn_mse_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_STRATEGY,
    .name = "rtn_mse",
    .version = "0.1.0",
    .summary = "round-to-nearest weights, each slice on the clip ratio with the least squared error",
    .params = rtn_mse_params,
    .n_params = P_COUNT,
    .vtable = &rtn_mse_vtable,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &rtn_mse_desc; }
