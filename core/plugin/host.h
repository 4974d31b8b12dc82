/* host.h — the services table the core hands to plugins (plugin.h: lmp_host).
 *
 * One process-wide context: verbosity, progress display, seeded RNG and the active backend.
 * That is all a CLI run needs; plugins only ever see it as an opaque pointer. */
#ifndef LMP_CORE_HOST_H
#define LMP_CORE_HOST_H

#include <signal.h>

#include "lmpress/plugin.h"

struct lmp_backend;

const lmp_host *lmp_host_services(void);
void *lmp_host_ctx(void);

void lmp_host_set_verbosity(int level);        /* LMP_LOG_*: messages above it are dropped */
int lmp_host_verbosity(void);
void lmp_host_set_backend(const struct lmp_backend *be);
void lmp_host_seed(uint64_t seed);
/* A flag a signal handler sets (the CLI's SIGINT/SIGTERM): long loops (compression per block,
 * evaluation per window, LAMBADA per passage) poll lmp_host_interrupted() and stop with
 * LMP_EABORTED, so finished work is kept.  NULL: never interrupted. */
void lmp_host_set_interrupt_flag(const volatile sig_atomic_t *flag);
int lmp_host_interrupted(void);

/* Logging and progress for the core itself, same rules as the plugins'. */
void lmp_log(int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void lmp_progress(const char *what, int64_t done, int64_t total);
/* Text shown before every progress line until changed (e.g. "[variant 2/9, run ~3 min left]");
 * NULL or "" for none. */
void lmp_progress_context(const char *text);
double lmp_now_s(void);                         /* monotonic seconds */

#endif
