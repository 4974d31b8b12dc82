/* rtn.c — round-to-nearest quantization (docs/algorithms.md §1, §3.1).
 *
 * Weights: each targeted linear's W[out, in] is fake-quantized in place on the grid of
 * lmp_wspec (symmetric abs-max or asymmetric min-max with zero-point; per tensor, per output
 * channel or per group of input columns; the schema of plugins/common/wgrid.h), by the active
 * backend: choose_weight_grid, then apply_weight_grid.  No calibration is needed.
 * Activations: the linear's input is marked for simulated quantization in the forward pass;
 * the static per-tensor scale is the calibration abs-max of that input / qmax. */
#include <math.h>
#include <string.h>

#include "lmpress/plugin.h"
#include "wgrid.h"

enum { P_GRID = 0, P_WEIGHTS = WGRID_COUNT, P_ACT, P_ACT_BITS, P_COUNT };

static const char *const act_choices[] = {"none", "static_tensor", "dynamic_tensor", "dynamic_token", NULL};

static const lmp_param_spec rtn_params[P_COUNT] = {
    WGRID_PARAMS(4, 8, "weight bits, 2..8"),
    [P_WEIGHTS] = {"weights", LMP_PARAM_BOOL, "quantize the weights (false: activations only)", 1,
                   NULL, 0, 1, NULL, 0},
    [P_ACT] = {"act", LMP_PARAM_ENUM,
               "simulated activation quantization of each targeted linear's input: none; "
               "static_tensor (scale = calibration abs-max / qmax); dynamic_tensor (abs-max of the "
               "whole input); dynamic_token (abs-max of each token)",
               0, NULL, 0, 0, act_choices, 0},
    [P_ACT_BITS] = {"act_bits", LMP_PARAM_INT, "activation bits (symmetric, levels -qmax..qmax)", 8,
                    NULL, 2, 8, NULL, 0},
};

static int rtn_create(const lmp_host *host, void *hctx, const lmp_value *p, void **self)
{
    *self = NULL;
    return p[P_WEIGHTS].num ? wgrid_check_options(host, hctx, p + P_GRID, "rtn", "params") : 0;
}

static uint32_t rtn_needs(void *self, const lmp_value *p)
{
    (void)self;
    return ((int)p[P_ACT].num == 1 ? LMP_STAT_ABSMAX : 0) | (p[P_WEIGHTS].num ? wgrid_needs(p + P_GRID) : 0);
}

static int rtn_apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    (void)self;
    void *be_self = NULL;
    const lmp_backend_i *be = host->backend(hctx, &be_self);
    if (!be) return host->set_error(hctx, LMP_EUNSUPPORTED, "rtn: no backend to quantize with");
    for (int i = 0; i < blk->n_linears; i++) {
        lmp_linear *l = &blk->linears[i];
        const lmp_value *p = l->params;
        if (!p) continue;
        if (p[P_WEIGHTS].num) {
            lmp_wspec spec;
            wgrid_spec_linear(p + P_GRID, l, &spec);
            float *imp = NULL;
            int st = wgrid_check_options(host, hctx, p + P_GRID, "rtn", l->name); /* overrides */
            if (!st) st = wgrid_importance_new(host, hctx, p + P_GRID, l, &imp);
            if (!st) st = wgrid_quantize_linear(host, hctx, be, be_self, &spec, imp, blk, i);
            host->free(hctx, imp);
            if (st) return st;
            l->weight_bits = wgrid_weight_bits(&spec, l->out, l->in);
        }
        int mode = (int)p[P_ACT].num;
        if (mode == LMP_ACT_NONE) continue;
        l->act = (lmp_aspec){.mode = (lmp_act_mode)mode, .bits = (int)p[P_ACT_BITS].num,
                             .rounding = (lmp_rounding)(int)p[P_GRID + WGRID_ROUND].num};
        if (mode == LMP_ACT_STATIC_TENSOR) {
            if (!l->stats || !l->stats->absmax)
                return host->set_error(hctx, LMP_EINVAL, "rtn: %s: no calibration abs-max for a static scale", l->name);
            float amax = 0.0f;
            for (int64_t j = 0; j < l->in; j++) amax = fmaxf(amax, l->stats->absmax[j]);
            int qmax = (1 << (l->act.bits - 1)) - 1;
            l->act.scale = fmaxf(amax, 1e-5f) / (float)qmax;
        }
    }
    return LMP_OK;
}

static const lmp_strategy_i rtn_vtable = {
    .struct_size = sizeof(lmp_strategy_i),
    .create = rtn_create,
    .needs = rtn_needs,
    .apply = rtn_apply,
};

static const lmp_plugin_desc rtn_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_STRATEGY,
    .name = "rtn",
    .version = "0.1.0",
    .summary = "round-to-nearest weight quantization (2-8 bits) and simulated activation quantization",
    .params = rtn_params,
    .n_params = P_COUNT,
    .vtable = &rtn_vtable,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &rtn_desc; }
