/* ctx.h — a run's context (lmp_ctx): the state a run changes as it goes.
 *
 * Everything a run changes as it goes lives in its context: verbosity, the progress line, the
 * seeded RNG, the active backend, the interrupt flag it polls, where compression spent its time,
 * the text of the last error a plugin reported (host->set_error), and the plugin folders the
 * user trusted for it (--allow-plugin, registry.h).  Two runs in one process (a test, an MPI
 * rank running two jobs) each have their own, so neither sees the other's state.  A context is
 * used by one thread at a time.
 *
 * Plugins see the context only as the opaque hctx passed with every call; every service of the
 * table works on the context it is given.  The table itself is code (function pointers), shared
 * by every run.  The core's own last-error text stays per thread (base/error.h). */
#ifndef LMP_CORE_HOST_H
#define LMP_CORE_HOST_H

#include <signal.h>

#include "lmpress/plugin.h"

struct lmp_backend;

/* Where lmp_compress spent its time since the last reset, summed over variants: running blocks
 * over the calibration windows to collect statistics (forward passes plus the statistics, e.g.
 * Hessians), the strategies' apply(), and propagating the windows through compressed blocks. */
typedef struct lmp_compress_times {
    double collect, apply, propagate;
    /* Block-forward equivalents of the calibration forwards: their FLOPs over those of one block
     * forward over the calibration windows (lmp_block_flops), statistics passes and propagation
     * summed over the blocks.  A strategy's own forwards (an adaptive search) are not in it. */
    double forwards;
} lmp_compress_times;

/* Folders lmp_registry_allow_dir trusted for this run (real paths); search: also searched. */
enum { LMP_MAX_ALLOWED_DIRS = 64 };
typedef struct lmp_allowed_dir {
    char *dir;
    int search;
} lmp_allowed_dir;

/* The fields are the core's; callers use the functions below.  Made by lmp_ctx_init, released
 * by lmp_ctx_clear; whatever was given a pointer to it (a registry, a backend or a strategy
 * instance that keeps hctx) must be gone before it is cleared. */
/* memory.expert_group_mb's default (MiB of f32 expert weights per group) */
#define LMP_EXPERT_GROUP_MB_DEFAULT 1024

typedef struct lmp_ctx {
    int verbosity;                          /* LMP_LOG_*: messages above it are dropped */
    const struct lmp_backend *backend;      /* what host->backend() hands out; NULL: none */
    struct lmp_dist *dist;                  /* the MPI ranks the run spans (distrib.h); NULL: one process */
    uint64_t rng;                           /* splitmix64 state */
    const volatile sig_atomic_t *interrupt; /* NULL: never interrupted */
    struct {
        int open;                           /* a progress line without its newline is on the terminal */
        double last;                        /* when it was last drawn */
        double logged;                      /* when a plain (not a terminal) line was last written */
        /* The clocks of the last few tasks, so that tasks that take turns (a variant's blocks
         * compressed, then evaluated; a stage's own steps inside a block) each keep their pace
         * instead of restarting each other's clock.  A task is its label and its total. */
        struct lmp_progress_clock {
            char what[256];
            int64_t total, first_done, last_done;
            double start, used;             /* started at first_done; used: last call, for reuse */
        } clocks[4];
        char context[256];                  /* shown before every line (lmp_progress_context) */
    } progress;
    lmp_compress_times times;               /* lmp_compress_times_get (pipeline.h) */
    const struct lmp_learn_inputs *learn;   /* while a stage that learns runs: its calibration
                                             * inputs (train/learn.h); NULL otherwise */
    /* A mixture of experts' block whose routed experts take more f32 bytes than this is handled
     * a group of experts at a time (model/expert_pager.h); config memory.expert_group_mb;
     * <= 0: every block whole */
    int64_t expert_group_bytes;
    char error[2048];                       /* the last text given to host->set_error */
    lmp_allowed_dir allowed[LMP_MAX_ALLOWED_DIRS];
    int n_allowed;
} lmp_ctx;

/* A fresh context: verbosity LMP_LOG_INFO, expert groups of LMP_EXPERT_GROUP_MB_DEFAULT, no backend, RNG seeded with 0, not interruptible,
 * no error text, no trusted folders. */
void lmp_ctx_init(lmp_ctx *ctx);
/* Frees what the context owns (the trusted folders); init it again to reuse it. */
void lmp_ctx_clear(lmp_ctx *ctx);

void lmp_host_set_verbosity(lmp_ctx *ctx, int level);
int lmp_host_verbosity(const lmp_ctx *ctx);
/* The backend host->backend() hands to plugins (the run's; NULL: none). */
void lmp_host_set_backend(lmp_ctx *ctx, const struct lmp_backend *be);
void lmp_host_set_dist(lmp_ctx *ctx, struct lmp_dist *d);
struct lmp_dist *lmp_host_dist(const lmp_ctx *ctx);
/* RNG state = seed ^ 0x9E3779B97F4A7C15 (splitmix64); host->rng_u64 draws from it. */
void lmp_host_seed(lmp_ctx *ctx, uint64_t seed);
/* The next draw of the run's RNG (what host->rng_u64 returns). */
uint64_t lmp_ctx_rng_u64(lmp_ctx *ctx);
/* A flag a signal handler sets (the CLI's SIGINT/SIGTERM): long loops (compression per block,
 * evaluation per window, LAMBADA per passage) poll lmp_host_interrupted() and stop with
 * LMP_EABORTED, so finished work is kept.  NULL: never interrupted. */
void lmp_host_set_interrupt_flag(lmp_ctx *ctx, const volatile sig_atomic_t *flag);
int lmp_host_interrupted(const lmp_ctx *ctx);
/* LMP_EABORTED with the message "interrupted" when the flag is set, else 0. */
int lmp_host_stop_if_interrupted(const lmp_ctx *ctx);

/* The text of the last host->set_error on this context ("the plugin gave no reason" when none
 * since the last clear): what
 * the core quotes when a plugin call fails ("strategy 'x' on block 3: <text>").  host->set_error
 * also records the text as the thread's last error (base/error.h), so a failure that the core
 * only passes up (a backend op deep in a forward pass) still carries the plugin's words. */
const char *lmp_host_error(const lmp_ctx *ctx);
void lmp_host_clear_error(lmp_ctx *ctx);

#endif
