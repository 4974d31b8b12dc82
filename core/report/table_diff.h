/* table_diff.h — do two compare tables (`lmpress compare --json`) of one config agree?  This is
 * the test of "switching backend.name gives the same results": the same config on two backends.
 *
 * Each number of table b may differ from table a's by the larger of two amounts:
 *  - the floor of the variant's class (lmp_class_tolerance), and
 *  - LMP_NOISE_FACTOR times the spread that rounding alone gives that very number: how far it
 *    moves in optional noise tables, the same config run on the cpu backend with its `jitter`
 *    parameter (every BLAS and attention result perturbed by about what another summation order
 *    changes).
 * Bits per weight must be equal.  The classes, floors and measurements behind them are in
 * docs/backends.md ("Tolerances"). */
#ifndef LMP_CORE_TABLE_DIFF_H
#define LMP_CORE_TABLE_DIFF_H

#include <stdio.h>

#include "formats/json.h"

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
    double lambada_se;      /* |acc_b - acc_a| within this many standard errors of the difference
                             * (or one passage) */
} lmp_tolerance;

#define LMP_NOISE_FACTOR 3.0

extern const lmp_tolerance lmp_class_tolerance[LMP_N_CLASSES];
const char *lmp_class_name(lmp_variant_class c);
/* "exact", "rounding" or "solver" -> its class; -1 for anything else. */
int lmp_class_by_name(const char *name);

/* The class of a variant of a compare table: the loosest of its stages' classes.  A strategy
 * this file does not know (a user's plugin) counts as LMP_CLASS_ROUNDING. */
lmp_variant_class lmp_variant_classify(const lmp_json *variant);

typedef struct lmp_table {
    const lmp_json *json; /* a parsed `compare --json` */
    const char *name;     /* for messages: the file */
} lmp_table;

typedef struct lmp_diff_summary {
    int variants, numbers, beyond;   /* numbers compared, and those beyond tolerance */
    double worst[LMP_N_CLASSES][4];  /* largest difference: ppl rel, kld, top1, lambada */
} lmp_diff_summary;

/* Compares table b with table a variant by variant (same names, same order, same evaluation
 * texts; the noise tables too), printing one line per variant to `out` (NULL: silent) with each
 * number, its difference and what was allowed, and filling *sum.  Returns 0, or LMP_EINVAL with a
 * message naming the table and the variant when the tables cannot be compared (different
 * variants or texts, a missing number). */
int lmp_table_diff(const lmp_table *a, const lmp_table *b, const lmp_table *noise, int n_noise, FILE *out,
                   lmp_diff_summary *sum);

/* The same, judging every variant by the floors of class as_class (lmp_variant_class) instead of
 * its own: `lmpress diff --class exact` holds a refactoring to the exact floors everywhere.
 * as_class < 0: each variant's own class. */
int lmp_table_diff_as(const lmp_table *a, const lmp_table *b, const lmp_table *noise, int n_noise, int as_class,
                      FILE *out, lmp_diff_summary *sum);

#endif
