/* compare.h — a whole run, in stages a reader can follow:
 *
 *   prepare   open the backend, load the model and tokenizer, tokenize every evaluation text and
 *             the LAMBADA passages, cut the calibration windows (so a bad input fails before any
 *             compression starts);
 *   reference the unmodified model streamed over every window once (eval/stream.h): its
 *             log-probabilities kept for every variant, its own numbers its row;
 *   variant   compress one variant and evaluate it block by block: each block is evaluated on
 *             every window as soon as compression has finished it, then freed; keep its numbers
 *             and what it did to each linear;
 *   report    after each variant the caller's hook sees the report so far (print the row, write
 *             the files), so an interrupted run keeps every finished variant.
 *
 * Memory holds one block's weights at a time, whatever the number of variants; for an export
 * (the `compressed` hook) a variant's blocks are kept as codes in a temporary file
 * (model/block_store.h) until its file is written. */
#ifndef LMP_CORE_COMPARE_H
#define LMP_CORE_COMPARE_H

#include "compress/calib_cache.h"
#include "compress/pipeline.h"
#include "model/block_source.h"
#include "config/config.h"
#include "distrib/distrib.h"
#include "eval/stream.h"
#include "eval/lambada.h"
#include "formats/json.h"
#include "base/ctx.h"
#include "report/report.h"

/* Hooks the caller gets during a run; any may be NULL.  A non-zero return stops the run with
 * that status (e.g. an output file could not be written). */
typedef struct lmp_compare_hooks {
    int (*prepared)(const lmp_report *r, void *ud);          /* texts known, nothing compressed */
    /* A pipeline variant (or the unmodified model) is compressed and evaluated: m's blocks
     * replaced by those `blocks` hands out one at a time are the variant (to export them). */
    int (*compressed)(const lmp_model *m, const lmp_variant_result *res, const lmp_block_source *blocks, void *ud);
    int (*finished)(const lmp_report *r, int i, void *ud);   /* results[i] is done */
    void *ud;
} lmp_compare_hooks;

typedef struct lmp_compare_opts {
    const int *which;          /* indices of the variants to run, in config order; NULL: all */
    int n_which;
    const lmp_json *resume;    /* an earlier JSON report of this run (same fingerprint): its
                                * finished variants are taken as they are, not run again */
    const char *resume_path;   /* its file, for messages */
    const uint8_t *rerun;      /* [n_which] or NULL: 1 where a variant the resumed report holds
                                * is run again all the same (its export is missing) */
    lmp_compare_hooks hooks;   /* an MPI run (lmp_host_dist(ctx), distrib.h) calls them on rank 0
                                * only, one call at a time but from either of its two threads */
} lmp_compare_opts;

/* Everything a run shares between its variants: what stage 1 (prepare) makes. */
typedef struct lmp_run_state {
    lmp_ctx *ctx;              /* the run's: backend, RNG, log, progress, interrupt flag */
    const lmp_run_config *c;
    lmp_backend be;
    lmp_backend be_compress;   /* views of be (backend.h): compression's forwards, at the */
    lmp_backend be_eval;       /* backend's compute; evaluation's, f32 unless eval.compute */
    lmp_model *m;              /* owned by the report */
    lmp_tokenizer *tok;
    lmp_block *shape;          /* the report's block tables (report.h) */
    int64_t *n_windows;        /* [n_texts]: evaluation windows of each text */
    lmp_windows calib;
    lmp_calib_cache calib_cache; /* the unmodified model's calibration activations, shared */
    int32_t **text_ids;        /* [n_texts] */
    lmp_ref_logprobs *ref;     /* [n_texts]: filled by the reference pass, before the first variant */
    lmp_score *ref_scores;     /* [n_texts]: the unmodified model's own numbers */
    lmp_lambada_score ref_lambada;
    int ref_done;
    double ref_seconds, ref_tail_seconds; /* the reference pass: all of it; its head and scores */
    struct run_eta *eta;       /* compare's estimate of the time left (compare.c); NULL: none */
    double peak_rss_mb;        /* the run's peak before the last reset */
    int have_lambada;
    lmp_lambada lambada;
    const lmp_compare_hooks *hooks;
} lmp_run_state;

/* Stage 1 on its own, for commands that run a config another way (core/analyze): run->ctx and
 * run->c set, text_ids and ref allocated [n_eval_texts] (ref[t].store.fd = -1), r->texts
 * [n_eval_texts] and r->results (n_results of them, for external variants' checks) set.
 * Opens the backend, loads the model (r owns it), tokenizer, texts, LAMBADA and calibration
 * windows.  lmp_run_release frees what it made and the text_ids and ref arrays (not the
 * model, which r owns). */
int lmp_run_prepare(lmp_run_state *run, lmp_report *r);
/* Everything about the config that m's header can refute, for every variant of the config, so
 * that `lmpress check` refuses what compare would refuse: the patterns, the context lengths
 * (eval and calibration seq_len), each variant's stages (lmp_compress_check_variant: importance
 * matrix, whole-model stage, calibration statistics without a text), a block format (q4_0 ...)
 * on a linear whose rows are not whole blocks, a learning stage's seq_len longer than the
 * calibration windows.  r: the variants of its results (lmp_run_prepare's part); NULL: all of the
 * config's. */
int lmp_run_check_model(lmp_ctx *ctx, const lmp_run_config *c, const lmp_model *m, const lmp_report *r);
void lmp_run_release(lmp_run_state *run);
/* The same vocabulary, token by token, in the model at `path` (tokenizer x) as in the base's
 * (base): the scores compare log-probabilities by token id, so a model whose ids mean other
 * strings cannot be scored against the base at all.  Used for compare's external variants and
 * `eval --kl-divergence-base`. */
int lmp_check_same_vocab(const char *path, lmp_tokenizer *base, lmp_tokenizer *x);
/* The reference pass, once per run (later calls do nothing): the unmodified model streamed with
 * its blocks read from the file one at a time, its log-probabilities kept in run->ref for every
 * later variant, its own numbers in run->ref_scores and run->ref_lambada. */
int lmp_run_reference(lmp_run_state *run, const lmp_report *r);
/* The same in an MPI run (lmp_host_dist(run->ctx)), called by every rank: rank 0 runs the pass
 * and broadcasts its log-probabilities and numbers, which every other rank stores; then every
 * rank's run->ref holds the same floats.  One process: lmp_run_reference. */
int lmp_run_share_reference(lmp_run_state *run, const lmp_report *r);

/* Runs the chosen variants on the run's context ctx: it is seeded from the config, holds the
 * backend while the run lasts, and its verbosity, progress line and interrupt flag are the
 * run's.  On success *out holds every result.  On failure (or when lmp_host_interrupted(ctx)
 * turns true) the run stops after cleaning up and returns the status; what the hooks were shown
 * is all that is kept. */
int lmp_run_compare(lmp_ctx *ctx, const lmp_run_config *c, const lmp_compare_opts *o, lmp_report **out);

/* config_hash: FNV-1a 64 of the config file's bytes as loaded; fingerprint: of those bytes, the backend's
 * name and the lmpress version.  Both as 16 hex digits.  A compare run's report folds in the
 * content of every input file as well (the model, tokenizer, texts, importance matrices:
 * base/file_hash.h), and can be resumed only by a run with the same fingerprint. */
void lmp_run_fingerprint(const lmp_run_config *c, char config_hash[17], char fingerprint[17]);

/* Peak resident memory, in MB: since the last lmp_peak_rss_reset (Linux's /proc/self/clear_refs;
 * where that cannot be written, since the process started). */
double lmp_peak_rss_mb(void);
void lmp_peak_rss_reset(void);

#endif
