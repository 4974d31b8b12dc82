/* shift_smoothquant.c — Shift-SmoothQuant (docs/algorithms.md §3.5, §3.6): shift as the `shift`
 * plugin does, then smooth with statistics of the shifted input (abs-max max(max - z, z - min),
 * the token sample minus z), folded as beta' = (beta - z)/s, gamma' = gamma/s, b' = b + W z,
 * W' = W diag(s).  adaptive = true is "adaptive Shift-SmoothQuant": the scales come from
 * PaddleSlim's PieceWiseSearch instead of the alpha formula. */
#include "lmpress/plugin.h"
#include "reparam.h"

static const lmp_param_spec ssq_params[] = {
    REPARAM_P_STAT,
    REPARAM_P_EMA_BETA,
    REPARAM_P_ALPHA,
    REPARAM_P_RULE,
    {"adaptive", LMP_PARAM_BOOL, "scales from the piecewise search instead of the alpha formula", 0,
     NULL, 0, 1, NULL, 0},
    REPARAM_P_K_PIECE,
    REPARAM_P_SEARCH_PIECE,
    REPARAM_P_ALPHA_MIN,
    REPARAM_P_ALPHA_MAX,
    REPARAM_P_SCALE_MIN,
    REPARAM_P_SCALE_MAX,
    REPARAM_P_SAMPLE,
    REPARAM_P_ALL_LINEARS,
    REPARAM_P_BITEXACT,
};

static const lmp_plugin_desc ssq_desc;

static uint32_t ssq_needs(void *self, const lmp_value *p)
{
    (void)self;
    return reparam_needs_of(&ssq_desc, p);
}

static int64_t ssq_sample(void *self, const lmp_value *p)
{
    (void)self;
    return reparam_sample_tokens_of(&ssq_desc, p);
}

static int ssq_apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    (void)self;
    return reparam_apply(&ssq_desc, host, hctx, blk);
}

static const lmp_strategy_i ssq_vtable = {
    .struct_size = sizeof(lmp_strategy_i),
    .needs = ssq_needs,
    .apply = ssq_apply,
    .sample_tokens = ssq_sample,
};

static const lmp_plugin_desc ssq_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_STRATEGY,
    .name = "shift_smoothquant",
    .version = "0.1.0",
    .summary = "Shift then SmoothQuant; adaptive = true searches the scales piecewise (adaptive Shift-SmoothQuant)",
    .params = ssq_params,
    .n_params = sizeof ssq_params / sizeof *ssq_params,
    .vtable = &ssq_vtable,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &ssq_desc; }
