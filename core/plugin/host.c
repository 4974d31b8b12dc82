/* host.c — see host.h. */
#include "plugin/host.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "compress/block_edit.h"
#include "plugin/backend.h"
#include "train/learn.h"

void lmp_ctx_init(lmp_ctx *ctx)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->verbosity = LMP_LOG_INFO;
    lmp_host_seed(ctx, 0);
}

void lmp_ctx_clear(lmp_ctx *ctx)
{
    for (int i = 0; i < ctx->n_allowed; i++) free(ctx->allowed[i].dir);
    memset(ctx, 0, sizeof *ctx);
}

void lmp_host_set_verbosity(lmp_ctx *ctx, int level) { ctx->verbosity = level; }
int lmp_host_verbosity(const lmp_ctx *ctx) { return ctx->verbosity; }
void lmp_host_set_backend(lmp_ctx *ctx, const lmp_backend *be) { ctx->backend = be; }
void lmp_host_set_dist(lmp_ctx *ctx, struct lmp_dist *d) { ctx->dist = d; }
struct lmp_dist *lmp_host_dist(const lmp_ctx *ctx) { return ctx->dist; }
void lmp_host_seed(lmp_ctx *ctx, uint64_t seed) { ctx->rng = seed ^ 0x9E3779B97F4A7C15ull; }
void lmp_host_set_interrupt_flag(lmp_ctx *ctx, const volatile sig_atomic_t *flag) { ctx->interrupt = flag; }
int lmp_host_interrupted(const lmp_ctx *ctx) { return ctx->interrupt && *ctx->interrupt; }

int lmp_host_stop_if_interrupted(const lmp_ctx *ctx)
{
    return lmp_host_interrupted(ctx) ? lmp_fail(LMP_EABORTED, "interrupted") : 0;
}

const char *lmp_host_error(const lmp_ctx *ctx)
{
    return ctx->error[0] ? ctx->error : "the plugin gave no reason"; /* a status without set_error */
}
void lmp_host_clear_error(lmp_ctx *ctx) { ctx->error[0] = 0; }

void lmp_progress_context(lmp_ctx *ctx, const char *text)
{
    snprintf(ctx->progress.context, sizeof ctx->progress.context, "%s%s", text ? text : "",
             text && *text ? " " : "");
}

static void end_progress_line(lmp_ctx *ctx)
{
    if (ctx->progress.open) fputc('\n', stderr);
    ctx->progress.open = 0;
}

static void vlog(lmp_ctx *ctx, int level, const char *fmt, va_list ap)
{
    if (level > ctx->verbosity) return;
    static const char *const tag[] = {"error", "warning", "info", "debug"};
    end_progress_line(ctx);
    fprintf(stderr, "lmpress: %s: ", tag[level < 0 ? 0 : level > 3 ? 3 : level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void lmp_log(lmp_ctx *ctx, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(ctx, level, fmt, ap);
    va_end(ap);
}

static void host_log(void *ctx, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(ctx, level, fmt, ap);
    va_end(ap);
}

/* Into the run's error buffer, where the core reads it back when the plugin call fails; and as
 * the thread's last error, for the core paths that only pass a status up (host.h). */
static int host_set_error(void *ctx, int status, const char *fmt, ...)
{
    lmp_ctx *c = ctx;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    return lmp_fail(status, "%s", c->error);
}

/* A service that runs core code reports that code's failure (lmp_fail, thread-local) through the
 * context too, as if the plugin had been told it with set_error. */
static int note_core_error(lmp_ctx *ctx, int st)
{
    if (st) snprintf(ctx->error, sizeof ctx->error, "%s", lmp_last_error());
    return st;
}

static void *host_alloc(void *ctx, size_t n)
{
    (void)ctx;
    size_t rounded = (n + 63) / 64 * 64;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p) memset(p, 0, rounded);
    return p;
}

static void host_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

double lmp_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The clock of task (what, total): the one that has it, unless done went back (the same task run
 * again); else the least recently used one, restarted at done. */
static struct lmp_progress_clock *progress_clock(lmp_ctx *ctx, const char *what, int64_t done, int64_t total, double t)
{
    const int n = (int)(sizeof ctx->progress.clocks / sizeof ctx->progress.clocks[0]);
    struct lmp_progress_clock *c = NULL, *oldest = &ctx->progress.clocks[0];
    for (int i = 0; i < n && !c; i++) {
        struct lmp_progress_clock *k = &ctx->progress.clocks[i];
        if (k->total == total && k->used > 0 && strcmp(k->what, what) == 0) c = k;
        if (k->used < oldest->used) oldest = k;
    }
    if (c && (done < c->last_done || done == 0)) { /* the same task started over */
        c->start = t;
        c->first_done = done;
    } else if (!c) {
        c = oldest;
        snprintf(c->what, sizeof c->what, "%s", what);
        c->total = total;
        c->start = t;
        c->first_done = done;
    }
    c->last_done = done;
    c->used = t;
    return c;
}

/* A single self-overwriting line on a terminal, at most ~10 updates a second.  When stderr is
 * not a terminal (a log file, CI), a plain line every LMP_PROGRESS_LOG_S seconds of a long task,
 * so that a redirected run still shows where it is and how long it has left.  Nothing when the
 * run is quiet.  Each task's time left is its own pace since its clock started. */
#define LMP_PROGRESS_LOG_S 30.0
void lmp_progress(lmp_ctx *ctx, const char *what, int64_t done, int64_t total)
{
    if (ctx->verbosity < LMP_LOG_INFO) return;
    double t = lmp_now_s();
    const struct lmp_progress_clock *c = progress_clock(ctx, what, done, total, t);
    if (done == c->first_done) ctx->progress.logged = t;
    const double elapsed = t - c->start;
    const int64_t paced = done - c->first_done;
    const double left = paced > 0 ? elapsed / (double)paced * (double)(total - done) : -1;
    if (!isatty(STDERR_FILENO)) {
        if (done <= 0 || done >= total || t - ctx->progress.logged < LMP_PROGRESS_LOG_S) return;
        ctx->progress.logged = t;
        fprintf(stderr, "lmpress: progress: %s%s %lld/%lld, %.0f s", ctx->progress.context, what, (long long)done,
                (long long)total, elapsed);
        if (left >= 0) fprintf(stderr, ", ~%.0f s left", left);
        fputc('\n', stderr);
        fflush(stderr);
        return;
    }
    if (done < total && t - ctx->progress.last < 0.1) return;
    ctx->progress.last = t;
    fprintf(stderr, "\r\033[K%s%s %lld/%lld  %.0f s", ctx->progress.context, what, (long long)done,
            (long long)total, elapsed);
    if (done > 0 && done < total && left >= 0) fprintf(stderr, ", ~%.0f s left", left);
    ctx->progress.open = 1;
    if (done >= total) end_progress_line(ctx);
    fflush(stderr);
}

static void host_progress(void *ctx, const char *what, int64_t done, int64_t total)
{
    lmp_progress(ctx, what, done, total);
}

/* splitmix64: small, seedable, good enough for sampling calibration windows. */
static uint64_t host_rng(void *ctx)
{
    lmp_ctx *c = ctx;
    uint64_t z = (c->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const lmp_backend_i *host_backend(void *ctx, void **self)
{
    const lmp_ctx *c = ctx;
    if (!c->backend) return NULL;
    *self = (void *)c->backend;
    return lmp_backend_dispatch_vtable();
}

static int host_fold_norm_scale(void *ctx, lmp_block *blk, int norm, const float *s)
{
    return note_core_error(ctx, lmp_fold_norm_scale(blk, norm, s));
}

static int host_fold_norm_shift(void *ctx, lmp_block *blk, int norm, const float *z)
{
    return note_core_error(ctx, lmp_fold_norm_shift(blk, norm, z));
}

static int host_add_input_affine(void *ctx, lmp_block *blk, int linear, const float *z, const float *s)
{
    return note_core_error(ctx, lmp_add_input_affine(blk, linear, z, s));
}

static int host_set_mask(void *ctx, lmp_block *blk, int linear, const uint8_t *mask, int n, int m)
{
    return note_core_error(ctx, lmp_set_mask(blk, linear, mask, n, m));
}

static int host_set_weight_grid(void *ctx, lmp_block *blk, int linear, const lmp_wspec *spec, const float *scales,
                                const float *zeros, const int32_t *g_idx)
{
    return note_core_error(ctx, lmp_set_weight_grid(blk, linear, spec, scales, zeros, g_idx));
}

static int host_learn_block(void *ctx, lmp_block *blk, const lmp_learn_spec *spec, const lmp_learn_problem *p,
                            lmp_learn_result *out)
{
    return note_core_error(ctx, lmp_learn_block(ctx, blk, spec, p, out));
}

static int host_learn_model(void *ctx, lmp_block *blocks, int n_blocks, const lmp_learn_spec *spec,
                            const lmp_learn_problem *p, lmp_learn_result *out)
{
    return note_core_error(ctx, lmp_learn_model(ctx, blocks, n_blocks, spec, p, out));
}

/* Code, not state: the same table serves every context. */
static const lmp_host host_services = {
    .struct_size = sizeof(lmp_host),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .log = host_log,
    .set_error = host_set_error,
    .alloc = host_alloc,
    .free = host_free,
    .progress = host_progress,
    .rng_u64 = host_rng,
    .backend = host_backend,
    .fold_norm_scale = host_fold_norm_scale,
    .fold_norm_shift = host_fold_norm_shift,
    .add_input_affine = host_add_input_affine,
    .set_mask = host_set_mask,
    .set_weight_grid = host_set_weight_grid,
    .learn_block = host_learn_block,
    .learn_model = host_learn_model,
};

const lmp_host *lmp_host_services(void) { return &host_services; }
