/* error.h — the core's last-error message.
 *
 * Core functions return 0 or a negative LMP_E* status; the function that detects a problem
 * records one human-readable message with lmp_fail(), naming the file, line or key at fault.
 * Callers that add context use lmp_fail_prefix().  The CLI prints lmp_last_error() once.
 *
 * The message is per thread (errno-style), not per run: it is written by the failing call and
 * read right after by its caller, on the same thread, so two runs on two threads never see each
 * other's, and the hundreds of lmp_fail() calls need no context argument.  What a plugin reports
 * (host->set_error) goes into its run's context (base/ctx.h: lmp_host_error), where the core
 * reads it when that plugin's call fails. */
#ifndef LMP_CORE_ERROR_H
#define LMP_CORE_ERROR_H

#include "lmpress/plugin.h"

#if defined(__GNUC__)
#define LMP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define LMP_PRINTF(a, b)
#endif

/* Records the message and returns status (so: return lmp_fail(LMP_EINVAL, "...")). */
int lmp_fail(int status, const char *fmt, ...) LMP_PRINTF(2, 3);
/* Prepends "prefix: " to the recorded message (unless it already starts so) and returns status. */
int lmp_fail_prefix(int status, const char *fmt, ...) LMP_PRINTF(2, 3);
const char *lmp_last_error(void);
void lmp_clear_error(void);

#endif
