/* eta.h — how long a compare run has left, from what each variant is expected to cost.
 *
 * The plain estimate (time so far / variants done × variants left) jumps whenever a cheap variant
 * is followed by a dear one: fp32 and RTN cost seconds, a calibrated W8A8 or GPTQ minutes, so a
 * run that took 57 min was announced at 18, then 25, then 19 min.  Here each variant's cost is
 * built from parts that the run measures as it goes:
 *
 *   compression, per block:
 *     - each stage's seconds, learned per stage (its strategy and parameters: the same GPTQ in
 *       two variants costs what it cost), else per strategy (GPTQ at another bit width: the
 *       strategy's mean);
 *     - when the variant's stages read calibration statistics, the forward of the calibration
 *       windows through the block: learned; before any calibrated variant has run, the reference
 *       evaluation's seconds per block scaled by calibration tokens over evaluation tokens (the
 *       same forward on another number of tokens).  A variant calibrated on the original inputs
 *       reads the forwards an earlier such variant left in the run's cache (a cost of its own);
 *     - the rest: reading the block, checks, a whole-model stage's finish;
 *   evaluation: the blocks streamed over the evaluation windows, then the head and the scores
 *     (learned from the reference pass and every variant).
 *
 * A stage of a strategy that has not run yet is a guess: a calibration forward per block when it
 * reads statistics (its statistics pass is such a forward; its own work is not known), else
 * nothing.  Estimates that rest on a guess are flagged,
 * so the progress line can say so.  The variant running now is estimated from its expected cost,
 * blended towards its own pace as its blocks finish (fully once they all have).
 *
 * Pure arithmetic: no clock.  The caller passes the seconds it measured, so a test drives it
 * with synthetic timings. */
#ifndef LMP_CORE_ETA_H
#define LMP_CORE_ETA_H

#include <stddef.h>
#include <stdint.h>

enum { LMP_ETA_MAX_STAGES = 16, LMP_ETA_MAX_KEYS = 128 };

typedef enum {
    LMP_ETA_PIPELINE = 0,   /* compressed by its stages, then evaluated */
    LMP_ETA_UNMODIFIED = 1, /* the reference's own numbers: nothing beyond the reference pass */
    LMP_ETA_EXTERNAL = 2    /* another tool's file: its blocks read and evaluated */
} lmp_eta_kind;

typedef enum {
    LMP_ETA_CALIB_NONE = 0,       /* no stage reads calibration statistics */
    LMP_ETA_CALIB_COMPRESSED = 1, /* statistics on the compressed model's inputs: a forward per block */
    LMP_ETA_CALIB_ORIGINAL = 2    /* on the unmodified model's: shared through the run's cache */
} lmp_eta_calib;

/* What the estimator knows of a variant before it runs. */
typedef struct lmp_eta_job {
    lmp_eta_kind kind;
    lmp_eta_calib calib;
    int n_stages;                                /* at most LMP_ETA_MAX_STAGES are costed */
    uint64_t stage_key[LMP_ETA_MAX_STAGES];      /* strategy and parameters */
    /* the strategy alone, with whether the stage reads statistics (RTN with static activation
     * scales runs a statistics pass that weight-only RTN does not) */
    uint64_t strategy_key[LMP_ETA_MAX_STAGES];
    uint32_t observing;                          /* bit s: stage s reads calibration statistics */
} lmp_eta_job;

/* What a finished variant cost, in seconds, over `blocks` blocks. */
typedef struct lmp_eta_measured {
    int64_t blocks;
    double stage_s[LMP_ETA_MAX_STAGES]; /* each stage, all blocks (its statistics passes included) */
    double calib_s;                     /* the calibration forwards that give the next blocks their inputs */
    double other_s;                     /* the rest of the compression */
    double eval_blocks_s, eval_tail_s;  /* evaluation: the blocks, then head and scores */
} lmp_eta_measured;

typedef struct lmp_eta_mean {
    double seconds, count;
} lmp_eta_mean;

typedef struct lmp_eta_entry {
    uint64_t key;
    lmp_eta_mean per_block;
} lmp_eta_entry;

typedef struct lmp_eta {
    int64_t n_blocks;
    double calib_per_eval_token;        /* calibration tokens over evaluation tokens */
    int have_reference;                 /* the reference pass is timed: evaluation has a cost */
    lmp_eta_entry stages[LMP_ETA_MAX_KEYS], strategies[LMP_ETA_MAX_KEYS];
    int n_stage_keys, n_strategy_keys;
    lmp_eta_mean calib_fwd, calib_cached, other; /* seconds per block */
    lmp_eta_mean eval_blocks, eval_tail;         /* seconds per evaluation */
    int original_warm;                  /* a variant calibrated on the original inputs has run */
} lmp_eta;

void lmp_eta_init(lmp_eta *e, int64_t n_blocks, double calib_tokens, double eval_tokens);
/* The reference pass: its blocks and its head-and-scores part. */
void lmp_eta_reference(lmp_eta *e, double blocks_s, double tail_s);
/* A finished variant's costs, learned. */
void lmp_eta_learn(lmp_eta *e, const lmp_eta_job *job, const lmp_eta_measured *m);

/* The expected seconds of a job from its start; warm: the run's cache already holds the original
 * inputs' calibration forwards.  *guessed is set when a part is a guess (left alone otherwise).
 * NaN before the reference is timed. */
double lmp_eta_cost(const lmp_eta *e, const lmp_eta_job *job, int warm, int *guessed);

/* Seconds left in the run: jobs[cur] has run `elapsed` seconds and finished `blocks_done` of its
 * blocks (n_blocks when only its evaluation's head and scores are left); jobs[cur + 1 .. n) are
 * still to run.  NaN when unknown (before the reference is timed). */
double lmp_eta_left(const lmp_eta *e, const lmp_eta_job *jobs, int n, int cur, double elapsed, int64_t blocks_done,
                    int *guessed);

/* "run ~12 min left" / "run ~40 s left", with " (a guess until every strategy has run)" when
 * guessed; empty when seconds is NaN. */
void lmp_eta_format(double seconds, int guessed, char *out, size_t n);

#endif
