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

/* A single self-overwriting line on a terminal, at most ~10 updates a second.  When stderr is
 * not a terminal (a log file, CI), a plain line every LMP_PROGRESS_LOG_S seconds of a long task,
 * so that a redirected run still shows where it is and how long it has left.  Nothing when the
 * run is quiet. */
#define LMP_PROGRESS_LOG_S 30.0
void lmp_progress(lmp_ctx *ctx, const char *what, int64_t done, int64_t total)
{
    if (ctx->verbosity < LMP_LOG_INFO) return;
    double t = lmp_now_s();
    if (done == 0 || strcmp(what, ctx->progress.what) != 0) { /* a new task starts its clock */
        snprintf(ctx->progress.what, sizeof ctx->progress.what, "%s", what);
        ctx->progress.start = ctx->progress.logged = t;
    }
    if (!isatty(STDERR_FILENO)) {
        if (done <= 0 || done >= total || t - ctx->progress.logged < LMP_PROGRESS_LOG_S) return;
        ctx->progress.logged = t;
        double elapsed = t - ctx->progress.start;
        fprintf(stderr, "lmpress: progress: %s%s %lld/%lld, %.0f s, ~%.0f s left\n", ctx->progress.context, what,
                (long long)done, (long long)total, elapsed, elapsed / (double)done * (double)(total - done));
        fflush(stderr);
        return;
    }
    if (done < total && t - ctx->progress.last < 0.1) return;
    ctx->progress.last = t;
    double elapsed = t - ctx->progress.start;
    fprintf(stderr, "\r\033[K%s%s %lld/%lld  %.0f s", ctx->progress.context, what, (long long)done,
            (long long)total, elapsed);
    if (done > 0 && done < total)
        fprintf(stderr, ", ~%.0f s left", elapsed / (double)done * (double)(total - done));
    ctx->progress.open = 1;
    if (done >= total) end_progress_line(ctx);
    fflush(stderr);
}
