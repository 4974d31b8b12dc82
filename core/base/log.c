/* log.c — see log.h. */
#include "base/log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

void lmp_vlog(lmp_ctx *ctx, int level, const char *fmt, va_list ap)
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
    lmp_vlog(ctx, level, fmt, ap);
    va_end(ap);
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
