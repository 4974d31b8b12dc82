/* gptq.c — GPTQ (Frantar et al. 2023; docs/algorithms.md §3.7): each targeted linear is quantized
 * column by column on rtn's grid (the schema of plugins/common/wgrid.h), the rounding error of
 * each column spread over the columns not yet quantized through the Hessian H = 2/n sum x x^T of
 * its calibration input.
 *
 * The host collects H per distinct input (q, k, v share one; gate and up share one) on the
 * block as the earlier blocks left it (error propagation).  With true_sequential the host runs
 * the stage once per input in forward order, so o's H comes from the block with q, k, v already
 * quantized and down's with gate, up quantized.  The solver is plugins/common/obs.c.
 * A linear an earlier stage pruned keeps its mask: pruned weights stay 0 and the survivors
 * absorb the error (SparseGPT's joint update). */
#include <string.h>

#include "lmpress/plugin.h"
#include "obs.h"
#include "wgrid.h"

enum { P_GRID = 0, P_DAMP = WGRID_COUNT, P_ACT_ORDER, P_STATIC, P_BLOCK, P_TRUE_SEQ, P_COUNT };

static const lmp_param_spec gptq_params[P_COUNT] = {
    WGRID_PARAMS(4, 16, "weight bits, 2..8; 16 = leave the weights as they are"),
    [P_DAMP] = {"damp", LMP_PARAM_FLOAT, "dampening: H += damp * mean(diag H) * I (raised tenfold, logged, "
                "while H is not positive definite)", 0.01, NULL, 0, 100, NULL, 0},
    [P_ACT_ORDER] = {"act_order", LMP_PARAM_BOOL, "quantize columns in order of decreasing H_jj", 0, NULL, 0, 1, NULL, 0},
    [P_STATIC] = {"static_groups", LMP_PARAM_BOOL,
                  "with groups: every group's grid from the original weights, before any update", 0, NULL, 0, 1, NULL, 0},
    [P_BLOCK] = {"block_size", LMP_PARAM_INT, "lazy-batch width in columns", 128, NULL, 1, 1 << 16, NULL, 0},
    [P_TRUE_SEQ] = {"true_sequential", LMP_PARAM_BOOL,
                    "quantize o after q,k,v and down after gate,up, each from a Hessian of the partly "
                    "quantized block (false: every Hessian from the block before this stage)",
                    1, NULL, 0, 1, NULL, 0},
};

static int check_params(const lmp_host *host, void *hctx, const lmp_value *p, const char *where)
{
    return wgrid_check_solver(host, hctx, p + P_GRID, "gptq", where);
}

static int gptq_create(const lmp_host *host, void *hctx, const lmp_value *params, void **self)
{
    *self = NULL;
    return check_params(host, hctx, params, "params");
}

static uint32_t gptq_needs(void *self, const lmp_value *p)
{
    (void)self;
    lmp_wspec spec;
    if (!wgrid_spec(p + P_GRID, &spec) || spec.bits < 2 || spec.bits > 8)
        return 0; /* 16 (or refused): nothing to do, nothing to observe */
    /* importance = calibration takes the Hessian's diagonal; imatrix is the file's */
    return LMP_STAT_HESSIAN | (wgrid_needs(p + P_GRID) & LMP_STAT_IMATRIX) | (p[P_TRUE_SEQ].num ? LMP_NEED_SEQUENTIAL : 0);
}

static int gptq_apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    (void)self;
    for (int i = 0; i < blk->n_linears; i++) {
        lmp_linear *l = &blk->linears[i];
        const lmp_value *p = l->params;
        if (!p) continue;
        int st = check_params(host, hctx, p, l->name);
        if (st) return st;
        obs_opts o = {.damp = p[P_DAMP].num,
                      .act_order = p[P_ACT_ORDER].num != 0,
                      .static_groups = p[P_STATIC].num != 0,
                      .block = (int64_t)p[P_BLOCK].num,
                      .keep = l->mask,
                      .name = l->name};
        o.quantize = wgrid_spec_linear(p + P_GRID, l, &o.spec);
        if (!o.quantize) continue; /* 16 bits: the weights stay as they are */
        obs_result r = {0};
        float *imp;
        if ((st = wgrid_importance_new(host, hctx, p + P_GRID, l, &imp))) return st;
        o.importance = imp;
        st = obs_solve_linear(host, hctx, &o, blk, i, &r);
        host->free(hctx, imp);
        if (st) return st;
        l->weight_bits = wgrid_weight_bits(&o.spec, l->out, l->in);
        host->log(hctx, LMP_LOG_DEBUG,
                  "gptq: %s: loss %.6g, damp %g%s, %lld dead inputs; factor %.3f s, columns %.3f s, updates %.3f s",
                  l->name, r.loss, r.damp_used, r.retries ? " (raised)" : "", (long long)r.n_dead, r.t_factor,
                  r.t_columns, r.t_update);
    }
    return LMP_OK;
}

static const lmp_strategy_i gptq_vtable = {
    .struct_size = sizeof(lmp_strategy_i),
    .create = gptq_create,
    .needs = gptq_needs,
    .apply = gptq_apply,
};

static const lmp_plugin_desc gptq_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_STRATEGY,
    .name = "gptq",
    .version = "0.1.0",
    .summary = "GPTQ: column-wise quantization with Hessian-based error compensation (2-8 bits)",
    .params = gptq_params,
    .n_params = P_COUNT,
    .vtable = &gptq_vtable,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &gptq_desc; }
