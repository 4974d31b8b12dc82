/* shift_smoothquant.c — Shift-SmoothQuant (docs/algorithms.md §3.5, §3.6): shift as the `shift`
 * plugin does, then smooth with statistics of the shifted input (abs-max max(max - z, z - min),
 * the token sample minus z), folded as beta' = (beta - z)/s, gamma' = gamma/s, b' = b + W z,
 * W' = W diag(s).  adaptive = true is "adaptive Shift-SmoothQuant": the scales come from
 * PaddleSlim's PieceWiseSearch instead of the alpha formula.  The work is
 * plugins/common/reparam.c's: having both "stat" and "alpha" in the schema is what makes it
 * shift and then smooth. */
#include "lmpress/plugin.h"
#include "reparam.h"

static const lmp_param_spec ssq_params[] = {
    REPARAM_P_STAT,
    REPARAM_P_EMA_BETA,
    REPARAM_P_ALPHA,
    REPARAM_P_RULE,
    {"adaptive", LMP_PARAM_BOOL, "scales from the piecewise search instead of the alpha formula", 0,
     NULL, 0, 1, NULL, 0},
    REPARAM_P_SEARCH_GROUP,
    REPARAM_P_ALL_LINEARS,
    REPARAM_P_BITEXACT,
};

const lmp_plugin_desc reparam_plugin = REPARAM_DESC(
    "shift_smoothquant",
    "Shift then SmoothQuant; adaptive = true searches the scales piecewise (adaptive Shift-SmoothQuant)",
    ssq_params);

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &reparam_plugin; }
