/* log.h — a run's messages and its progress line, on its context (base/ctx.h).
 *
 * The core and the plugins (host->log, host->progress) write through the same functions, so
 * one verbosity and one progress line hold for the whole run.  Messages go to stderr as
 * "lmpress: LEVEL: text"; a message ends an open progress line first. */
#ifndef LMP_CORE_LOG_H
#define LMP_CORE_LOG_H

#include <stdarg.h>
#include <stdint.h>

#include "base/ctx.h"

/* Logging and progress for the core itself, same rules as the plugins', on the run's context. */
void lmp_log(lmp_ctx *ctx, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* lmp_log with its arguments as a va_list (host->log is this on the plugin's hctx). */
void lmp_vlog(lmp_ctx *ctx, int level, const char *fmt, va_list ap);
void lmp_progress(lmp_ctx *ctx, const char *what, int64_t done, int64_t total);
/* Text shown before every progress line until changed (e.g. "[variant 2/9, run ~3 min left]");
 * NULL or "" for none. */
void lmp_progress_context(lmp_ctx *ctx, const char *text);
double lmp_now_s(void);                         /* monotonic seconds */

#endif
