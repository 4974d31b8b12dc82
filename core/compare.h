/* compare.h — a whole run: load the model, compress every chosen variant, evaluate them all
 * against the unmodified model on every evaluation text, and hand back a report. */
#ifndef LMP_CORE_COMPARE_H
#define LMP_CORE_COMPARE_H

#include <stdio.h>

#include "config.h"
#include "eval.h"
#include "lambada.h"
#include "model.h"
#include "tokenizer.h"

typedef struct lmp_variant_result {
    const lmp_variant *v;
    double bits_per_weight;
    double seconds;        /* compression time */
    double peak_rss_mb;    /* process peak RSS after this variant was compressed */
    lmp_score *scores;     /* [n_texts] */
    lmp_lambada_score lambada; /* when the config names a LAMBADA file */
} lmp_variant_result;

typedef struct lmp_report {
    const lmp_run_config *cfg;
    lmp_model *model;          /* owned: freed with the report */
    int n_texts;
    int64_t *text_tokens;  /* [n_texts], BOS included */
    int n_results;
    lmp_variant_result *results;
    double eval_seconds;
} lmp_report;

/* Runs the variants whose indices are in which[0..n_which) (NULL: all). */
int lmp_run_compare(const lmp_run_config *c, const int *which, int n_which, lmp_report **out);
void lmp_report_free(lmp_report *r);

/* Report writers. */
void lmp_report_table(const lmp_report *r, FILE *f);
void lmp_report_json(const lmp_report *r, FILE *f);
void lmp_report_markdown(const lmp_report *r, FILE *f);
void lmp_report_csv(const lmp_report *r, FILE *f);

/* Helpers shared with the CLI. */
int lmp_open_tokenizer(const lmp_model *m, const char *path, lmp_tokenizer **out);
int lmp_tokenize_file(const lmp_tokenizer *t, const char *path, int32_t **ids, int64_t *n);
double lmp_peak_rss_mb(void);

#endif
