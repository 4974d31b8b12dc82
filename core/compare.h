/* compare.h — a whole run, in stages a reader can follow:
 *
 *   prepare   open the backend, load the model and tokenizer, tokenize every evaluation text and
 *             the LAMBADA passages, cut the calibration windows (so a bad input fails before any
 *             compression starts);
 *   variant   compress one variant, evaluate it against the unmodified model on every text, keep
 *             its numbers and what it did to each linear, free its blocks;
 *   report    after each variant the caller's hook sees the report so far (print the row, write
 *             the files), so an interrupted run keeps every finished variant.
 *
 * Only one variant's blocks are alive at a time.  The unmodified model's log-probabilities are
 * computed once per evaluation window and reused by every later variant (eval.h). */
#ifndef LMP_CORE_COMPARE_H
#define LMP_CORE_COMPARE_H

#include <stdio.h>

#include "config.h"
#include "eval.h"
#include "json.h"
#include "lambada.h"
#include "model.h"
#include "tokenizer.h"

/* What a variant did to one block linear (after its whole pipeline). */
typedef struct lmp_linear_outcome {
    const char *name;          /* the model's linear name (owned by the report's model) */
    double weight_bits;        /* storage bits per weight; 32 = unquantized */
    lmp_aspec act;             /* simulated activation quantization */
    int sparse_n, sparse_m;    /* N:M pattern, 0 = dense */
} lmp_linear_outcome;

typedef struct lmp_variant_result {
    const lmp_variant *v;
    int done;                  /* finished: evaluated in this run, or taken from --resume */
    double bits_per_weight;
    double seconds;            /* compression time */
    double eval_seconds;       /* evaluation time (all texts and LAMBADA) */
    double peak_rss_mb;        /* process peak RSS after this variant was compressed */
    lmp_score *scores;         /* [n_texts] */
    lmp_lambada_score lambada; /* when the config names a LAMBADA file */
    lmp_linear_outcome *linears; /* [n_linears] over all blocks; NULL when resumed */
    int n_linears;
    const lmp_json *prior;     /* resumed: the earlier report's entry, written back unchanged */
} lmp_variant_result;

/* One evaluation text: its key in the reports (the basename, or the path where two texts share
 * a basename), and the windows the protocol takes from it. */
typedef struct lmp_text_info {
    const char *path;
    char *key;
    int64_t tokens, windows, scored;
} lmp_text_info;

typedef struct lmp_report {
    const lmp_run_config *cfg;
    lmp_model *model;          /* owned: freed with the report */
    int n_texts;
    lmp_text_info *texts;      /* [n_texts] */
    int n_results;
    lmp_variant_result *results; /* in config order; results[i].done says which are finished */
    char config_hash[17];      /* FNV-1a 64 of the config file's bytes */
    char fingerprint[17];      /* lmp_run_fingerprint of the run */
    double started;            /* lmp_now_s() when the run began */
} lmp_report;

/* Hooks the caller gets during a run; either may be NULL.  A non-zero return stops the run with
 * that status (e.g. an output file could not be written). */
typedef struct lmp_compare_hooks {
    int (*prepared)(const lmp_report *r, void *ud);          /* texts known, nothing compressed */
    int (*finished)(const lmp_report *r, int i, void *ud);   /* results[i] is done */
    void *ud;
} lmp_compare_hooks;

typedef struct lmp_compare_opts {
    const int *which;          /* indices of the variants to run, in config order; NULL: all */
    int n_which;
    const lmp_json *resume;    /* an earlier JSON report of this run (same fingerprint): its
                                * finished variants are taken as they are, not run again */
    const char *resume_path;   /* its file, for messages */
    lmp_compare_hooks hooks;
} lmp_compare_opts;

/* Runs the chosen variants.  On success *out holds every result.  On failure (or when
 * lmp_host_interrupted() turns true) the run stops after cleaning up and returns the status;
 * what the hooks were shown is all that is kept. */
int lmp_run_compare(const lmp_run_config *c, const lmp_compare_opts *o, lmp_report **out);
void lmp_report_free(lmp_report *r);

/* config_hash: FNV-1a 64 of the config file's bytes as loaded; fingerprint: of those bytes, the backend's
 * name and the lmpress version.  Both as 16 hex digits.  A report written by one run can be
 * resumed only by a run with the same fingerprint. */
void lmp_run_fingerprint(const lmp_run_config *c, char config_hash[17], char fingerprint[17]);

/* Takes the finished variants of an earlier report (the "variants" of `doc`) whose names are in
 * r->results: their numbers are read back exactly (sums, not ratios).  Fails, naming `path`, on
 * a fingerprint that differs or an entry that lacks a number. */
int lmp_report_resume(lmp_report *r, const lmp_json *doc, const char *path);

/* Report writers: only finished variants are written.  The table is printed in pieces so that
 * each row can appear as soon as its variant is done. */
void lmp_report_table_head(const lmp_report *r, FILE *f);
void lmp_report_table_row(const lmp_report *r, int i, FILE *f);
void lmp_report_json(const lmp_report *r, FILE *f);
void lmp_report_markdown(const lmp_report *r, FILE *f);
void lmp_report_csv(const lmp_report *r, FILE *f);

/* Helpers shared with the CLI. */
int lmp_open_tokenizer(const lmp_model *m, const char *path, lmp_tokenizer **out);
int lmp_tokenize_file(const lmp_tokenizer *t, const char *path, int32_t **ids, int64_t *n);
double lmp_peak_rss_mb(void);

#endif
