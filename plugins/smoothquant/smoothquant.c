/* smoothquant.c — SmoothQuant (docs/algorithms.md §3.2, §3.3, §3.6): per input channel j of the
 * linears a norm feeds, s_j = a_j^alpha / w_j^(1-alpha) is divided out of the norm and
 * multiplied into the linears' columns, moving activation outliers into the weights.  The
 * function is unchanged; a later stage (rtn) quantizes.  search = "piecewise" replaces the
 * formula with PaddleSlim's PieceWiseSearch.  The work is plugins/common/reparam.c's: having
 * "alpha" and no "stat" in the schema is what makes it smooth without shifting. */
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
    REPARAM_P_SEARCH_GROUP,
    REPARAM_P_ALL_LINEARS,
    REPARAM_P_BITEXACT,
};

const lmp_plugin_desc reparam_plugin = REPARAM_DESC(
    "smoothquant", "SmoothQuant: migrate activation outliers into the weights (alpha formula or piecewise search)",
    sq_params);

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &reparam_plugin; }
