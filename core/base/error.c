/* error.c — see error.h. One message per thread (errno-style, not per run); the newest failure wins. */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[2048];

int lmp_fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

int lmp_fail_prefix(int status, const char *fmt, ...)
{
    char prefix[512], old[sizeof last_error - sizeof prefix - 4];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Two layers that both name the same thing (the pipeline and the compare run both say
     * "variant 'x'") give it once: a message that already starts with the prefix keeps it. */
    size_t p = strlen(prefix);
    if (strncmp(last_error, prefix, p) == 0 && (last_error[p] == ':' || last_error[p] == ' ')) return status;
    size_t n = strlen(last_error);
    if (n >= sizeof old) n = sizeof old - 1; /* keep the head of a very long message */
    memcpy(old, last_error, n);
    old[n] = 0;
    snprintf(last_error, sizeof last_error, "%s: %s", prefix, old);
    return status;
}

const char *lmp_last_error(void) { return last_error[0] ? last_error : "unknown error"; }

void lmp_clear_error(void) { last_error[0] = 0; }
