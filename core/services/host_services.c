/* host_services.c — the services table handed to plugins (plugin/host_services.h).
 *
 * The top of the core: the table's entries run compression's block edits (compress/block_edit.h)
 * and training's learning loops (train/learn.h), besides the context's logging, progress and
 * RNG (base/), so it sits above everything it wires together, and nothing below includes it. */
#include "plugin/host_services.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ctx.h"
#include "base/error.h"
#include "base/log.h"
#include "compress/block_edit.h"
#include "plugin/backend.h"
#include "train/learn.h"

static void host_log(void *ctx, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lmp_vlog(ctx, level, fmt, ap);
    va_end(ap);
}

/* Into the run's error buffer, where the core reads it back when the plugin call fails; and as
 * the thread's last error, for the core paths that only pass a status up (base/ctx.h). */
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

static void host_progress(void *ctx, const char *what, int64_t done, int64_t total)
{
    lmp_progress(ctx, what, done, total);
}

/* The run's RNG (base/ctx.h: splitmix64, seeded by lmp_host_seed). */
static uint64_t host_rng(void *ctx)
{
    return lmp_ctx_rng_u64(ctx);
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
