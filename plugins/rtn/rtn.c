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

/* In lmp_act_mode's order. */
static const char *const act_choices[] = {"none",  "static_tensor", "dynamic_tensor", "dynamic_token", "fp8_static_tensor",
                                          "fp8_dynamic_token", "nvfp4", "mxfp4", NULL};

static const lmp_param_spec rtn_params[P_COUNT] = {
    WGRID_PARAMS(4, 8, "weight bits, 2..8"),
    [P_WEIGHTS] = {"weights", LMP_PARAM_BOOL, "quantize the weights (false: activations only)", 1,
                   NULL, 0, 1, NULL, 0},
    [P_ACT] = {"act", LMP_PARAM_ENUM,
               "simulated activation quantization of each targeted linear's input: none; "
               "static_tensor (scale = calibration abs-max / qmax); dynamic_tensor (abs-max of the "
               "whole input); dynamic_token (abs-max of each token); fp8_static_tensor (E4M3, scale = "
               "calibration abs-max / 448); fp8_dynamic_token (E4M3, abs-max of each token / 448); nvfp4 (E2M1 "
               "in groups of 16 with E4M3 scales, the global scale 2688 / calibration abs-max); mxfp4 (E2M1 in "
               "groups of 32 with E8M0 scales): the floating-point ones as compressed-tensors simulates them",
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
    const int mode = (int)p[P_ACT].num;
    return (mode == LMP_ACT_STATIC_TENSOR || mode == LMP_ACT_FP8_STATIC_TENSOR || mode == LMP_ACT_NVFP4 ? LMP_STAT_ABSMAX : 0) |
           (p[P_WEIGHTS].num ? wgrid_needs(p + P_GRID) : 0);
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
        if ((mode == LMP_ACT_NVFP4 && l->in % 16) || (mode == LMP_ACT_MXFP4 && l->in % 32))
            return host->set_error(hctx, LMP_EINVAL, "rtn: %s: %s activations take groups of %d inputs; it has %lld",
                                   l->name, act_choices[mode], mode == LMP_ACT_NVFP4 ? 16 : 32, (long long)l->in);
        if (mode == LMP_ACT_STATIC_TENSOR || mode == LMP_ACT_FP8_STATIC_TENSOR || mode == LMP_ACT_NVFP4) {
            if (!l->stats || !l->stats->absmax)
                return host->set_error(hctx, LMP_EINVAL, "rtn: %s: no calibration abs-max for a static scale", l->name);
            float amax = 0.0f;
            for (int64_t j = 0; j < l->in; j++) amax = fmaxf(amax, l->stats->absmax[j]);
            if (mode == LMP_ACT_FP8_STATIC_TENSOR) { /* compressed-tensors' calculate_qparams; 0 -> f32's eps */
                l->act.scale = amax / 448.0f;
                if (l->act.scale == 0.0f) l->act.scale = lmp_fp_scale_eps(LMP_SCALE_F32);
            } else if (mode == LMP_ACT_NVFP4) { /* generate_gparam: the input's global scale */
                l->act.scale = lmp_nvfp4_global_scale_of(amax);
            } else {
                int qmax = (1 << (l->act.bits - 1)) - 1;
                l->act.scale = fmaxf(amax, 1e-5f) / (float)qmax;
            }
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
