/* smoothquant.c — SmoothQuant (docs/algorithms.md §3.2, §3.3, §3.6): per input channel j of the
 * linears a norm feeds, s_j = a_j^alpha / w_j^(1-alpha) is divided out of the norm and
 * multiplied into the linears' columns, moving activation outliers into the weights.  The
 * function is unchanged; a later stage (rtn) quantizes.  search = "piecewise" replaces the
 * formula with PaddleSlim's PieceWiseSearch. */
#include "lmpress/plugin.h"
#include "reparam.h"

static const char *const search_choices[] = {"none", "piecewise", NULL};

static const lmp_param_spec sq_params[] = {
    REPARAM_P_ALPHA,
    REPARAM_P_RULE,
    {"search", LMP_PARAM_ENUM,
     "none: the alpha formula; piecewise: PaddleSlim's PieceWiseSearch over alpha and constant "
     "scales per piece, minimising the W8A8 output error on a token sample",
     0, NULL, 0, 0, search_choices, 0},
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

static const lmp_plugin_desc sq_desc;

static uint32_t sq_needs(void *self, const lmp_value *p)
{
    (void)self;
    return reparam_needs_of(&sq_desc, p);
}

static int64_t sq_sample(void *self, const lmp_value *p)
{
    (void)self;
    return reparam_sample_tokens_of(&sq_desc, p);
}

static int sq_apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    (void)self;
    return reparam_apply(&sq_desc, host, hctx, blk);
}

static const lmp_strategy_i sq_vtable = {
    .struct_size = sizeof(lmp_strategy_i),
    .needs = sq_needs,
    .apply = sq_apply,
    .sample_tokens = sq_sample,
};

static const lmp_plugin_desc sq_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_STRATEGY,
    .name = "smoothquant",
    .version = "0.1.0",
    .summary = "SmoothQuant: migrate activation outliers into the weights (alpha formula or piecewise search)",
    .params = sq_params,
    .n_params = sizeof sq_params / sizeof *sq_params,
    .vtable = &sq_vtable,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &sq_desc; }
