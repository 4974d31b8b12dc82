/* ctx.c — see ctx.h. */
#include "base/ctx.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

void lmp_ctx_init(lmp_ctx *ctx)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->verbosity = LMP_LOG_INFO;
    ctx->expert_group_bytes = (int64_t)LMP_EXPERT_GROUP_MB_DEFAULT << 20;
    lmp_host_seed(ctx, 0);
}

void lmp_ctx_clear(lmp_ctx *ctx)
{
    for (int i = 0; i < ctx->n_allowed; i++) free(ctx->allowed[i].dir);
    memset(ctx, 0, sizeof *ctx);
}

void lmp_host_set_verbosity(lmp_ctx *ctx, int level) { ctx->verbosity = level; }
int lmp_host_verbosity(const lmp_ctx *ctx) { return ctx->verbosity; }
void lmp_host_set_backend(lmp_ctx *ctx, const struct lmp_backend *be) { ctx->backend = be; }
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

/* splitmix64: small, seedable, good enough for sampling calibration windows. */
uint64_t lmp_ctx_rng_u64(lmp_ctx *ctx)
{
    lmp_ctx *c = ctx;
    uint64_t z = (c->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
