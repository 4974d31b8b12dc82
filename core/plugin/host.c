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

static struct {
    int verbosity;
    const lmp_backend *backend;
    uint64_t rng;
    int progress_open;  /* a progress line without its newline is on the terminal */
    double progress_last;
    double progress_start;     /* when the current task's progress began */
    char progress_what[256];
    char progress_context[256];
    const volatile sig_atomic_t *interrupt;
} host_ctx = {.verbosity = LMP_LOG_INFO, .rng = 0x9E3779B97F4A7C15ull};

void *lmp_host_ctx(void) { return &host_ctx; }
void lmp_host_set_verbosity(int level) { host_ctx.verbosity = level; }
int lmp_host_verbosity(void) { return host_ctx.verbosity; }
void lmp_host_set_backend(const lmp_backend *be) { host_ctx.backend = be; }
void lmp_host_seed(uint64_t seed) { host_ctx.rng = seed ^ 0x9E3779B97F4A7C15ull; }
void lmp_host_set_interrupt_flag(const volatile sig_atomic_t *flag) { host_ctx.interrupt = flag; }
int lmp_host_interrupted(void) { return host_ctx.interrupt && *host_ctx.interrupt; }

void lmp_progress_context(const char *text)
{
    snprintf(host_ctx.progress_context, sizeof host_ctx.progress_context, "%s%s", text ? text : "",
             text && *text ? " " : "");
}

static void end_progress_line(void)
{
    if (host_ctx.progress_open) fputc('\n', stderr);
    host_ctx.progress_open = 0;
}

static void vlog(int level, const char *fmt, va_list ap)
{
    if (level > host_ctx.verbosity) return;
    static const char *const tag[] = {"error", "warning", "info", "debug"};
    end_progress_line();
    fprintf(stderr, "lmpress: %s: ", tag[level < 0 ? 0 : level > 3 ? 3 : level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void lmp_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

static void host_log(void *ctx, int level, const char *fmt, ...)
{
    (void)ctx;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

static int host_set_error(void *ctx, int status, const char *fmt, ...)
{
    (void)ctx;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lmp_fail(status, "%s", msg);
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

/* A single self-overwriting line on a terminal, at most ~10 updates a second; nothing when
 * stderr is not a terminal or the run is quiet. */
void lmp_progress(const char *what, int64_t done, int64_t total)
{
    if (host_ctx.verbosity < LMP_LOG_INFO || !isatty(STDERR_FILENO)) return;
    double t = lmp_now_s();
    if (done == 0 || strcmp(what, host_ctx.progress_what) != 0) { /* a new task starts its clock */
        snprintf(host_ctx.progress_what, sizeof host_ctx.progress_what, "%s", what);
        host_ctx.progress_start = t;
    }
    if (done < total && t - host_ctx.progress_last < 0.1) return;
    host_ctx.progress_last = t;
    double elapsed = t - host_ctx.progress_start;
    fprintf(stderr, "\r\033[K%s%s %lld/%lld  %.0f s", host_ctx.progress_context, what, (long long)done, (long long)total, elapsed);
    if (done > 0 && done < total)
        fprintf(stderr, ", ~%.0f s left", elapsed / (double)done * (double)(total - done));
    host_ctx.progress_open = 1;
    if (done >= total) end_progress_line();
    fflush(stderr);
}

static void host_progress(void *ctx, const char *what, int64_t done, int64_t total)
{
    (void)ctx;
    lmp_progress(what, done, total);
}

/* splitmix64: small, seedable, good enough for sampling calibration windows. */
static uint64_t host_rng(void *ctx)
{
    (void)ctx;
    uint64_t z = (host_ctx.rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const lmp_backend_i *host_backend(void *ctx, void **self)
{
    (void)ctx;
    if (!host_ctx.backend) return NULL;
    *self = (void *)host_ctx.backend;
    return lmp_backend_dispatch_vtable();
}

static int host_fold_norm_scale(void *ctx, lmp_block *blk, int norm, const float *s)
{
    (void)ctx;
    return lmp_fold_norm_scale(blk, norm, s);
}

static int host_fold_norm_shift(void *ctx, lmp_block *blk, int norm, const float *z)
{
    (void)ctx;
    return lmp_fold_norm_shift(blk, norm, z);
}

static int host_add_input_affine(void *ctx, lmp_block *blk, int linear, const float *z, const float *s)
{
    (void)ctx;
    return lmp_add_input_affine(blk, linear, z, s);
}

static int host_set_mask(void *ctx, lmp_block *blk, int linear, const uint8_t *mask, int n, int m)
{
    (void)ctx;
    return lmp_set_mask(blk, linear, mask, n, m);
}

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
};

const lmp_host *lmp_host_services(void) { return &host_services; }
