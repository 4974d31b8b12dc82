/* shift.c — Shift (Outlier Suppression+, PaddleSlim Shift; docs/algorithms.md §3.4): a per-channel
 * zero point z is subtracted from the norm's output (its bias; an RMSNorm gets one) and W z is
 * added to the bias of every linear it feeds, centring asymmetric activation channels.  The
 * function is unchanged; a later stage (rtn) quantizes. */
#include "lmpress/plugin.h"
#include "reparam.h"

static const lmp_param_spec sh_params[] = {
    REPARAM_P_STAT,
    REPARAM_P_EMA_BETA,
    REPARAM_P_ALL_LINEARS,
    REPARAM_P_BITEXACT,
};

static const lmp_plugin_desc sh_desc;

static uint32_t sh_needs(void *self, const lmp_value *p)
{
    (void)self;
    return reparam_needs_of(&sh_desc, p);
}

static int sh_apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    (void)self;
    return reparam_apply(&sh_desc, host, hctx, blk);
}

static const lmp_strategy_i sh_vtable = {
    .struct_size = sizeof(lmp_strategy_i),
    .needs = sh_needs,
    .apply = sh_apply,
};

static const lmp_plugin_desc sh_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_STRATEGY,
    .name = "shift",
    .version = "0.1.0",
    .summary = "Shift (Outlier Suppression+): centre each activation channel, folding the shift into biases",
    .params = sh_params,
    .n_params = sizeof sh_params / sizeof *sh_params,
    .vtable = &sh_vtable,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &sh_desc; }
