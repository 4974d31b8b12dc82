/* host.h — the services table the core hands to plugins (plugin.h: lmp_host).
 *
 * One process-wide context: verbosity, progress display, seeded RNG and the active backend.
 * That is all a CLI run needs; plugins only ever see it as an opaque pointer. */
#ifndef LMP_CORE_HOST_H
#define LMP_CORE_HOST_H

#include "lmpress/plugin.h"

struct lmp_backend;

const lmp_host *lmp_host_services(void);
void *lmp_host_ctx(void);

void lmp_host_set_verbosity(int level);        /* LMP_LOG_*: messages above it are dropped */
void lmp_host_set_backend(const struct lmp_backend *be);
void lmp_host_seed(uint64_t seed);

/* Logging and progress for the core itself, same rules as the plugins'. */
void lmp_log(int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void lmp_progress(const char *what, int64_t done, int64_t total);
double lmp_now_s(void);                         /* monotonic seconds */

#endif
