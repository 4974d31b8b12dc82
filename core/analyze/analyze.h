/* analyze.h — per-layer sensitivity of one variant, and skip lists (`lmpress analyze`).
 *
 * The variant is compressed once.  While it is, each linear is kept as it was just before the
 * first stage that compressed it (lowered its weight bits, quantized its input or pruned it):
 * its "float" state, which is what the variant gives that linear when every compressing stage
 * skips it (an override { match = ...; skip = true; }).  Two block sets follow: Q, the variant,
 * and F, the variant with every linear in its float state (the unmodified model when the
 * pipeline only quantizes).
 *
 *   restore-one   baseline Q; unit u evaluated with u's linears taken from F (PaddleSlim's QAT
 *                 analysis); sensitivity = how much the metric improves.
 *   quantize-one  baseline F; unit u evaluated with u's linears taken from Q (PaddleSlim's PTQ
 *                 analysis); sensitivity = how much the metric worsens.
 *
 * A unit is one linear, one block's linears, or one role's linears across blocks.  Every
 * evaluation goes through the block-boundary cache (bcache.h): a unit whose first linear is in
 * block b runs blocks b..n-1 only.  The numbers are exactly those of the plain way (the restore
 * config through `lmpress compare`) whenever the other linears' compression does not depend on
 * the unit's: weight-only quantizers, or calibration.inputs = "original" (each block's
 * statistics are then the unmodified model's).  With "compressed" inputs a re-compression would
 * let later blocks re-adapt to the restored linear; the analysis keeps every other linear as the
 * variant has it, as PaddleSlim's restore-one analysis does.
 *
 * Proxy (no evaluation): each linear's relative output error on the calibration tokens,
 * ||X Wf^T - Q(X) Wq^T||^2 / ||X Wf^T||^2, X its input in the calibration forward that feeds
 * the next block, Wf its float state, Wq and Q() its compressed weight and input quantization
 * (biases left out: they cancel in the difference). */
#ifndef LMP_CORE_ANALYZE_H
#define LMP_CORE_ANALYZE_H

#include "analyze/bcache.h"
#include "base/ctx.h"
#include "config/config.h"
#include "formats/json.h"

typedef enum { LMP_AN_RESTORE_ONE = 0, LMP_AN_QUANTIZE_ONE = 1 } lmp_an_mode;
typedef enum { LMP_AN_LINEAR = 0, LMP_AN_BLOCK = 1, LMP_AN_ROLE = 2 } lmp_an_gran;
typedef enum { LMP_AN_KLD = 0, LMP_AN_PPL = 1, LMP_AN_TOP1 = 2, LMP_AN_LAMBADA = 3 } lmp_an_metric;

const char *lmp_an_mode_name(lmp_an_mode m);
const char *lmp_an_gran_name(lmp_an_gran g);
const char *lmp_an_metric_name(lmp_an_metric m);
/* -1 when the name is none of them. */
int lmp_an_mode_by_name(const char *s);
int lmp_an_gran_by_name(const char *s);
int lmp_an_metric_by_name(const char *s);

/* The metric's value of a result (kld, ppl; top1 and LAMBADA as fractions). */
double lmp_an_value(lmp_an_metric m, const lmp_bcache_result *r);
/* 1 when lower is better (kld, ppl). */
int lmp_an_lower_better(lmp_an_metric m);

struct lmp_analysis;

typedef struct lmp_analyze_opts {
    int variant;               /* index into the config's variants */
    lmp_an_mode mode;
    lmp_an_gran gran;
    lmp_an_metric metric;
    int skip_top;              /* > 0: evaluate the variant with its K most sensitive units skipped */
    int have_target;           /* search the smallest skip list that reaches target */
    lmp_an_metric target_metric;
    double target;             /* kld/ppl: at most; top1/lambada: at least (fractions) */
    /* NULL: skipped linears stay in their float state.  Else the text of a libconfig params
     * group's body ("bits = 8;") given to the skipped linears in every compressing stage: the
     * variant is compressed a second time with it on every linear, and a skipped linear takes
     * that compression's weights (mixed precision). */
    const char *keep_params;
    /* 1: rank units by the proxy alone (no evaluation per unit: the cheap mode, `--rank proxy`);
     * needs calibration windows.  The skip answer and curves then follow the proxy order. */
    int rank_proxy;
    /* 1: a config of the skip answer will be written (`--write-config`): find out whether
     * `lmpress compare` gives the skip variant analyze's number, and when it cannot (the
     * variant calibrates on compressed inputs, so re-compressing lets later blocks re-adapt to
     * the skipped linears), compress and evaluate the written variant as compare will, so the
     * difference is printed and written into the config. */
    int check_config;
    const int *curve;          /* skip counts for the curves (measured, proxy, random order) */
    int n_curve;
    int curve_seeds;           /* random orders in the curve */
    /* Keeping finished units (lmpress analyze --json FILE, --resume).  unit_done, when set, is
     * called on rank 0 after each unit's numbers are in (a->unit_finished says which): the CLI
     * rewrites FILE with them (lmp_analysis_progress_json), so an interrupted scan keeps them.
     * resume: such a file (or a complete --json) of the same config, backend, lmpress version,
     * variant, mode, granularity and metric (else refused, naming what differs): its units'
     * numbers are taken as they are and only the others are evaluated. */
    int (*unit_done)(const struct lmp_analysis *a, void *ud);
    void *ud;
    const lmp_json *resume;
    const char *resume_path;
} lmp_analyze_opts;

typedef struct lmp_an_unit {
    char name[192];            /* the linear's name, "block N" or the role */
    const char *role;          /* "q".."down", or "mixed" for a block */
    int block;                 /* -1 for a role across blocks */
    int first;                 /* first block it touches */
    int *lins;                 /* global linear indices, block * n_lin + i */
    int n_lins;
    lmp_bcache_result res;
    double value, gain, proxy; /* metric with the unit perturbed; sensitivity; summed proxy */
    int rank, proxy_rank;      /* 1 = most sensitive */
} lmp_an_unit;

/* A point of a skip curve, or the skip-top / target result. */
typedef struct lmp_an_point {
    const char *order;         /* "measured", "proxy", "random-<seed>" */
    int k;                     /* units skipped */
    lmp_bcache_result res;
    double value;
} lmp_an_point;

typedef struct lmp_analysis {
    const lmp_run_config *c;
    char fingerprint[17];      /* lmp_run_fingerprint: config, backend, lmpress version */
    uint8_t *unit_finished;    /* [n_units]: 1 once the unit's numbers are in */
    int n_finished, n_resumed; /* units finished (in this run or taken from --resume); of them resumed */
    const lmp_variant *v;
    lmp_analyze_opts o;
    int64_t n_layers;
    int n_lin;                 /* linears per block */
    int n_units;
    lmp_an_unit *units;        /* in model order; rank gives the order */
    int *order;                /* [n_units] units by rank */
    int *proxy_order;          /* [n_units] units by proxy */
    lmp_bcache_result base;    /* the baseline (Q for restore-one, F for quantize-one) */
    lmp_bcache_result variant_res, float_res; /* Q's and F's numbers */
    double spearman;           /* proxy vs measured sensitivity, over units with a proxy */
    lmp_an_point skip;         /* --skip-top or --target's answer (k = 0: none asked) */
    /* check_config: whether compare reproduces the skip answer's numbers; when it does not,
     * what compare gives the written skip variant (re-compressed) */
    int config_checked, config_reproduces, have_written;
    lmp_bcache_result written;
    double written_value;
    int skip_reached;          /* --target: reached */
    int target_evals;          /* evaluations the target search spent */
    lmp_an_point *curve;
    int n_curve;
    char **curve_names;        /* the orders' names the points point to */
    int n_curve_names;
    /* what it cost */
    double compress_s, build_s, units_s, search_s, total_s;
    int64_t forwards, naive_forwards, evals;
    /* the same up to the end of the ranking (baseline, reference, both ends, every unit) */
    int64_t rank_forwards, rank_naive_forwards;
    /* the stages that compressed each linear (bit s: stage s), for skip overrides */
    uint32_t *stage_mask;      /* [n_layers * n_lin] */
    const char **lin_names;    /* [n_layers * n_lin], owned */
    int *skip_list;            /* units of the skip answer, k of them (rank order) */
} lmp_analysis;

/* An analysis read back from its --json (analyze_doc.c): enough of it for its charts
 * (lmp_analysis_charts_html), e.g. on compare's HTML page.  Its strings point into doc, which must
 * outlive it.  Fails, naming path, on a document that is not a finished analysis. */
typedef struct lmp_analysis_doc {
    lmp_analysis a;
    lmp_variant v;             /* a.v: only the name */
} lmp_analysis_doc;
int lmp_analysis_doc_read(const lmp_json *doc, const char *path, lmp_analysis_doc **out);
void lmp_analysis_doc_free(lmp_analysis_doc *d);

/* Checks that `doc` (an earlier --json of this analysis, path for messages) was written by the
 * same analysis, and takes its units' numbers: a->unit_finished set for each (analyze_resume.c). */
int lmp_analysis_resume(lmp_analysis *a, const lmp_json *doc, const char *path);

/* The finished units so far as a JSON document lmp_analysis_resume reads ("partial": true). */
void lmp_analysis_progress_json(const lmp_analysis *a, FILE *f);

/* A target that no result can reach (kld < 0, ppl < 1, top1 or lambada outside [0, 1]): an
 * error naming it, else 0. */
int lmp_an_check_target(lmp_an_metric m, double target);

/* Runs the analysis of opts->variant of c on ctx (whose progress line and interrupt flag it
 * uses).  *out is the caller's (lmp_analysis_free). */
int lmp_analyze(lmp_ctx *ctx, const lmp_run_config *c, const lmp_analyze_opts *opts, lmp_analysis **out);
void lmp_analysis_free(lmp_analysis *a);

/* Writers (analyze_report.c): the ranked table, JSON, CSV, an SVG bar chart, and the ready
 * config of the skip answer (the variant, then the variant with its skip list as overrides). */
void lmp_analysis_table(const lmp_analysis *a, FILE *f, int top);
void lmp_analysis_json(const lmp_analysis *a, FILE *f);
void lmp_analysis_csv(const lmp_analysis *a, FILE *f);
void lmp_analysis_svg(const lmp_analysis *a, FILE *f);
/* The same chart for an HTML page (no XML namespace declaration). */
void lmp_analysis_svg_inline(const lmp_analysis *a, FILE *f);
/* One self-contained HTML page (analyze_html.c): the numbers, the bar chart, the block x role
 * heat map (per-linear analyses), the skip curves and the sortable table of units. */
void lmp_analysis_html(const lmp_analysis *a, FILE *f);
/* The page's charts alone (a title, the bar chart, the block x role map for per-linear
 * analyses, the skip curves), for another page to hold (compare --html --analysis). */
void lmp_analysis_charts_html(const lmp_analysis *a, FILE *f);
void lmp_analysis_config(const lmp_analysis *a, FILE *f);
/* The override text that gives units[0..k) of `units` the skip (keep_params NULL) or the
 * keep_params in stage s; NULL when none of them is compressed by stage s.  Owned by the caller. */
char *lmp_analysis_override(const lmp_analysis *a, const int *units, int k, int s);

#endif
