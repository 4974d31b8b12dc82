/* report.h — what a compare run found, and the writers of its table (terminal, JSON, Markdown,
 * CSV).  compare/compare.c fills an lmp_report variant by variant; the CLI's hooks print each
 * finished row and rewrite the output files. */
#ifndef LMP_CORE_REPORT_H
#define LMP_CORE_REPORT_H

#include <stdio.h>

#include "config/config.h"
#include "eval/eval.h"
#include "eval/lambada.h"
#include "formats/json.h"
#include "model/model.h"

/* What a variant did to one block linear (after its whole pipeline). */
typedef struct lmp_linear_outcome {
    const char *name;          /* the model's linear name (owned by the report's model) */
    double weight_bits;        /* storage bits per weight; 32 = unquantized */
    /* ||W' - W||^2 / ||W||^2: W' the variant's weights as its input sees them (divided by an
     * input affine's scale), W the unmodified model's; 0 when untouched.  NaN when not
     * comparable: a stage changed the block's norms (smoothing folded into them), or a shape
     * differs. */
    double weight_err;
    lmp_aspec act;             /* simulated activation quantization */
    int sparse_n, sparse_m;    /* N:M pattern, 0 = dense */
    /* A mixture of experts (issue 37): the linear's role (a router is reported untouched unless a
     * target names it) and expert; a routed expert's calibration tokens (-1: none observed) and
     * whether it got the declared fallback (calibration.expert_min_tokens). */
    lmp_role role;
    lmp_expert_kind expert_kind;
    int expert;
    int64_t calib_tokens;
    int calib_fallback;
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
    char format[96];           /* an external variant's file format ("GGUF v3 Q8_0/F32 mix"); "" otherwise */
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
    lmp_block *shape;          /* owned: [model's n_layers] block tables (names, roles, shapes; no
                                * weights), which the linears' outcomes name */
    int64_t n_shape;
    int n_texts;
    lmp_text_info *texts;      /* [n_texts] */
    int n_results;
    lmp_variant_result *results; /* in config order; results[i].done says which are finished */
    char config_hash[17];      /* FNV-1a 64 of the config file's bytes */
    char fingerprint[17];      /* lmp_run_fingerprint of the run */
    double started;            /* lmp_now_s() when the run began */
    int64_t calib_windows;     /* calibration windows cut (calibration.samples, or fewer when
                                * the text is shorter) */
    int n_failed;              /* variants that failed in this run: each reported as it failed,
                                * left out of the report; the others ran */
} lmp_report;

void lmp_report_free(lmp_report *r);

/* Takes the finished variants of an earlier report (the "variants" of `doc`) whose names are in
 * r->results: their numbers are read back exactly (sums, not ratios).  Fails, naming `path`, on
 * a fingerprint that differs or an entry that lacks a number. */
int lmp_report_resume(lmp_report *r, const lmp_json *doc, const char *path);

/* Report writers: only finished variants are written.  The table is printed in pieces so that
 * each row can appear as soon as its variant is done. */
void lmp_report_table_head(const lmp_report *r, FILE *f);
void lmp_report_table_row(const lmp_report *r, int i, FILE *f);
void lmp_report_json(const lmp_report *r, FILE *f);
/* The variant's stages as the JSON report writes them ([{"strategy", "params", "targets",
 * "ignore", "overrides"}, ...]): what an exported file records as its pipeline. */
void lmp_report_json_stages(const lmp_variant *v, FILE *f);
void lmp_report_markdown(const lmp_report *r, FILE *f);
void lmp_report_csv(const lmp_report *r, FILE *f);
/* One self-contained HTML page (report_html.c): the sortable table, bits per weight against KL
 * divergence with the Pareto front, per-linear bits and weight-error heat maps; inline SVG and
 * script, nothing fetched. */
void lmp_report_html(const lmp_report *r, FILE *f);
/* The same page with more(arg, f)'s sections before its end: compare --html FILE --analysis
 * A.json appends the charts of analyses read back from `analyze --json` files that way. */
void lmp_report_html_with(const lmp_report *r, void (*more)(const void *arg, FILE *f), const void *arg, FILE *f);

#endif
