/* table_diff.h — do two compare tables (`lmpress compare --json`) of one config agree within
 * the tolerance of each variant's class?  This is the test of "switching backend.name gives the
 * same results": the same config on two backends (or two runs of anything that should only
 * change the rounding).  The classes, their tolerances and the measurements behind them are in
 * docs/backends.md ("Tolerances"). */
#ifndef LMP_CORE_TABLE_DIFF_H
#define LMP_CORE_TABLE_DIFF_H

#include <stdio.h>

#include "json.h"

/* How far rounding-level differences of the forward can move a variant's numbers. */
typedef enum {
    LMP_CLASS_EXACT,    /* no stage, or weight-only stages whose decisions never see an activation */
    LMP_CLASS_ROUNDING, /* activation quantization, activation-driven scales or masks */
    LMP_CLASS_SOLVER,   /* GPTQ / SparseGPT: codes chosen by sequential solves on H */
    LMP_N_CLASSES
} lmp_variant_class;

typedef struct lmp_tolerance {
    double ppl_rel;         /* |ppl_b - ppl_a| / ppl_a */
    double kld_abs, kld_rel; /* |kld_b - kld_a| within either */
    double top1_abs;        /* |top1_b - top1_a| */
    double lambada_se;      /* |acc_b - acc_a| within this many standard errors (or one passage) */
} lmp_tolerance;

extern const lmp_tolerance lmp_class_tolerance[LMP_N_CLASSES];
const char *lmp_class_name(lmp_variant_class c);

/* The class of a variant of a compare table: the loosest of its stages' classes.  A strategy
 * this file does not know (a user's plugin) counts as LMP_CLASS_ROUNDING. */
lmp_variant_class lmp_variant_classify(const lmp_json *variant);

typedef struct lmp_diff_summary {
    int variants, numbers, beyond;            /* numbers compared, and those beyond tolerance */
    double worst[LMP_N_CLASSES][4];          /* ppl rel, kld abs, top1 abs, lambada abs */
} lmp_diff_summary;

/* Compares table b with table a variant by variant (same names, same order, same evaluation
 * texts), printing one line per variant and text to `out` (NULL: silent) and filling *sum.
 * Bits per weight must be equal.  Returns 0, or LMP_EINVAL with a message naming `name_b` and
 * the variant when the two tables cannot be compared (different variants or texts, a missing
 * number). */
int lmp_table_diff(const lmp_json *a, const lmp_json *b, const char *name_a, const char *name_b, FILE *out,
                   lmp_diff_summary *sum);

#endif
