/* reparam.h — what the smoothquant, shift and shift_smoothquant plugins share: reading their
 * parameters, the statistics they need, the transform of each group of linears sharing an
 * input (docs/algorithms.md §2.2, §3.2-§3.6), and the strategy vtable itself.  Compiled into
 * each of them; it uses only plugin.h.
 *
 * A group is a norm and the linears it feeds (folded into the norm), or, with all_linears, one
 * linear no norm feeds (o, down), which gets an explicit input affine x -> (x - z)/s instead.
 * A norm's group is transformed when one of its linears is targeted, with that linear's
 * parameters (the first targeted one's, in block order). */
#ifndef LMP_PLUGIN_REPARAM_H
#define LMP_PLUGIN_REPARAM_H

#include "lmpress/plugin.h"
#include "piecewise.h"

typedef enum { SHIFT_NONE = -1, SHIFT_MIDPOINT = 0, SHIFT_PAIRWISE = 1, SHIFT_EMA = 2 } shift_stat;

typedef struct reparam_opts {
    int shift;               /* shift_stat */
    double ema_beta;
    int smooth;
    double alpha;
    int weight_last;         /* w_j from the last linear of the group (PaddleSlim), not the max */
    int search;              /* piecewise search instead of the alpha formula */
    piecewise_opts pw;
    int64_t sample_tokens;
    int all_linears;
    int bitexact;            /* PaddleSlim's quirks 4, 5 and 7 (docs/algorithms.md §6) */
} reparam_opts;

/* Options from a plugin's parameter values, looked up by name in its schema: a plugin without
 * "stat" does not shift, one without "alpha" does not smooth; "search" = "piecewise" or
 * "adaptive" = true turns the search on. */
void reparam_opts_read(const lmp_plugin_desc *d, const lmp_value *v, reparam_opts *o);
uint32_t reparam_needs(const reparam_opts *o);

/* The three plugins differ only in name, summary and parameter schema (the options are read
 * from the schema by name), so one vtable serves them all.  It reaches the plugin's schema
 * through reparam_plugin, which each plugin file defines, once per shared object, with
 * REPARAM_DESC; like everything but the entry symbol it stays hidden inside the object. */
extern const lmp_strategy_i reparam_strategy;
extern const lmp_plugin_desc reparam_plugin;

#define REPARAM_DESC(name_, summary_, params_)                                                     \
    {                                                                                              \
        .struct_size = sizeof(lmp_plugin_desc), .abi_major = LMP_ABI_MAJOR,                        \
        .abi_minor = LMP_ABI_MINOR, .kind = LMP_PLUGIN_STRATEGY, .name = name_,                    \
        .version = "0.1.0", .summary = summary_, .params = params_,                                \
        .n_params = sizeof params_ / sizeof *params_, .vtable = &reparam_strategy,                 \
    }

/* Parameter specs the plugins share (same names, same meaning). */
static const char *const reparam_stat_choices[] = {"midpoint", "midpoint_pairwise", "mean_ema", NULL};
static const char *const reparam_rule_choices[] = {"max", "last", NULL};

#define REPARAM_P_ALPHA                                                                            \
    {"alpha", LMP_PARAM_FLOAT, "migration strength: s_j = a_j^alpha / w_j^(1-alpha)", 0.5, NULL, 0, 1, NULL, 0}
#define REPARAM_P_RULE                                                                             \
    {"weight_rule", LMP_PARAM_ENUM,                                                               \
     "w_j over the linears a norm feeds: max over all of them (SmoothQuant), or the last one "   \
     "only (PaddleSlim: v of q/k/v, up of gate/up)", 0, NULL, 0, 0, reparam_rule_choices, 0}
/* The piecewise search's parameters, in schema order: smoothquant's search = "piecewise" and
 * shift_smoothquant's adaptive = true run it. */
#define REPARAM_P_SEARCH_GROUP                                                                     \
    {"k_piece", LMP_PARAM_INT, "search: pieces, by 1-D k-means of the channel abs-max", 3, NULL,   \
     1, 64, NULL, 0},                                                                              \
    {"search_piece", LMP_PARAM_BOOL,                                                               \
     "search: try 1..k_piece pieces and keep the best (so alpha = 0.5 is always a candidate); "    \
     "false: k_piece pieces only", 1, NULL, 0, 1, NULL, 0},                                        \
    {"alpha_min", LMP_PARAM_FLOAT, "search: alpha grid start (exclusive)", 0.2, NULL, 0, 1,        \
     NULL, 0},                                                                                     \
    {"alpha_max", LMP_PARAM_FLOAT, "search: alpha grid end (exclusive)", 0.8, NULL, 0, 1,          \
     NULL, 0},                                                                                     \
    {"scale_min", LMP_PARAM_FLOAT, "search: first constant scale (0: no constant scales)", 1.0,    \
     NULL, 0, 1000, NULL, 0},                                                                      \
    {"scale_max", LMP_PARAM_FLOAT,                                                                 \
     "search: constant scales up to this, step 0.5 (0: None, one constant)", 5.0, NULL, 0, 1000,   \
     NULL, 0},                                                                                     \
    {"sample_tokens", LMP_PARAM_INT,                                                               \
     "search: calibration tokens the loss is measured on, evenly spaced", 512, NULL, 16, 1 << 20,  \
     NULL, 0}
#define REPARAM_P_STAT                                                                             \
    {"stat", LMP_PARAM_ENUM,                                                                      \
     "shift z: midpoint (min+max)/2 over all calibration tokens (Outlier Suppression+); "        \
     "midpoint_pairwise: z <- (z + window midpoint)/2 per window (PaddleSlim); mean_ema: "        \
     "bias-corrected EMA of the window means (PaddleSlim's EMASampler)",                          \
     0, NULL, 0, 0, reparam_stat_choices, 0}
#define REPARAM_P_EMA_BETA {"ema_beta", LMP_PARAM_FLOAT, "stat = mean_ema: decay", 0.98, NULL, 0, 0.9999, NULL, 0}
#define REPARAM_P_ALL_LINEARS                                                                      \
    {"all_linears", LMP_PARAM_BOOL,                                                               \
     "also transform the linears no norm feeds (o, down) with an explicit input affine "          \
     "x -> (x - z)/s that runs before them (PaddleSlim's smooth_all_linears/shift_all_linears)",  \
     0, NULL, 0, 1, NULL, 0}
#define REPARAM_P_BITEXACT                                                                         \
    {"paddleslim_bitexact", LMP_PARAM_BOOL,                                                       \
     "reproduce PaddleSlim's quirks: the first calibration window is skipped and the shift "     \
     "statistic is updated once per fed linear; the EMA's off-by-one bias correction; the "       \
     "search's S_out not reset between piece counts", 0, NULL, 0, 1, NULL, 0}

#endif
