/* shift.c — Shift (Outlier Suppression+, PaddleSlim Shift; docs/algorithms.md §3.4): a per-channel
 * zero point z is subtracted from the norm's output (its bias; an RMSNorm gets one) and W z is
 * added to the bias of every linear it feeds, centring asymmetric activation channels.  The
 * function is unchanged; a later stage (rtn) quantizes.  The work is plugins/common/reparam.c's:
 * having "stat" and no "alpha" in the schema is what makes it shift without smoothing. */
#include "lmpress/plugin.h"
#include "reparam.h"

static const lmp_param_spec sh_params[] = {
    REPARAM_P_STAT,
    REPARAM_P_EMA_BETA,
    REPARAM_P_ALL_LINEARS,
    REPARAM_P_BITEXACT,
};

const lmp_plugin_desc reparam_plugin = REPARAM_DESC(
    "shift", "Shift (Outlier Suppression+): centre each activation channel, folding the shift into biases",
    sh_params);

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &reparam_plugin; }
