/* backend.c — see backend.h. */
#include "plugin/backend.h"

#include <stdlib.h>
#include <string.h>

#include "base/ctx.h"
#include "base/error.h"
#include "base/log.h"
#include "plugin/host_services.h"
#include "plugin/registry.h"

static int create_backend(lmp_ctx *ctx, lmp_registry *reg, const char *name, const lmp_value *params,
                          const lmp_backend_i **vt, void **self)
{
    const lmp_plugin *p = lmp_registry_find(reg, LMP_PLUGIN_BACKEND, name);
    if (!p) return lmp_fail(LMP_EINVAL, "backend '%s' is not loaded", name);
    lmp_value *defaults = NULL;
    if (!params) {
        int st = lmp_params_defaults(p->desc, &defaults);
        if (st) return st;
        params = defaults;
    }
    *vt = p->desc->vtable;
    *self = NULL;
    lmp_host_clear_error(ctx);
    int st = (*vt)->create ? (*vt)->create(lmp_host_services(), ctx, params, self) : 0;
    free(defaults);
    /* The plugin's own words, from the run's context (host->set_error). */
    if (st) return lmp_fail(st, "backend '%s': %s", name, lmp_host_error(ctx));
    return 0;
}

int lmp_backend_open(lmp_ctx *ctx, lmp_registry *reg, const char *name, const lmp_value *params,
                     lmp_backend *out)
{
    memset(out, 0, sizeof *out);
    out->name = name;
    out->ctx = ctx;
    int st = lmp_registry_require(reg, LMP_PLUGIN_BACKEND, "cpu", NULL);
    if (!st && strcmp(name, "cpu") != 0) st = lmp_registry_require(reg, LMP_PLUGIN_BACKEND, name, NULL);
    if (st) return st;
    out->counters = calloc(1, sizeof *out->counters);
    if (!out->counters) return lmp_fail(LMP_ENOMEM, "out of memory opening backend '%s'", name);
    st = create_backend(ctx, reg, "cpu", strcmp(name, "cpu") == 0 ? params : NULL, &out->cpu,
                        &out->cpu_self);
    if (st) {
        lmp_backend_close(out);
        return st;
    }
    if (strcmp(name, "cpu") == 0) {
        out->vt = out->cpu;
        out->self = out->cpu_self;
        return 0;
    }
    st = create_backend(ctx, reg, name, params, &out->vt, &out->self);
    if (st) lmp_backend_close(out);
    return st;
}

void lmp_backend_close(lmp_backend *be)
{
    if (be->vt && be->vt != be->cpu && be->vt->destroy) be->vt->destroy(be->self);
    if (be->cpu && be->cpu->destroy) be->cpu->destroy(be->cpu_self);
    free(be->counters);
    memset(be, 0, sizeof *be);
}

const lmp_be_counters *lmp_be_counters_get(const lmp_backend *be) { return be->counters; }
void lmp_be_counters_reset(const lmp_backend *be) { memset(be->counters, 0, sizeof *be->counters); }

const char *lmp_op_name(lmp_op op)
{
#define OP_NAME(name, params, args, n_flops) #name,
    static const char *const names[LMP_OP_COUNT] = {LMP_BACKEND_OPS(OP_NAME)};
#undef OP_NAME
    return op >= 0 && op < LMP_OP_COUNT ? names[op] : "?";
}

/* lmp_be_<op>: try the chosen backend, then the CPU one if the op is missing or unsupported
 * there; count the call, its time and its floating-point operations. */
#define OP_DISPATCH(name, params, args, n_flops)                                                \
    int lmp_be_##name(const lmp_backend *be, LMP_UNPAREN params)                                \
    {                                                                                           \
        double t0 = lmp_now_s();                                                                \
        int st = LMP_EUNSUPPORTED;                                                              \
        if (LMP_BACKEND_I_HAS(be->vt, name)) st = be->vt->name(be->self, LMP_UNPAREN args);     \
        if (st == LMP_EUNSUPPORTED) st = be->cpu->name(be->cpu_self, LMP_UNPAREN args);         \
        be->counters->seconds[LMP_OP_##name] += lmp_now_s() - t0;                               \
        be->counters->calls[LMP_OP_##name]++;                                                   \
        be->counters->flops[LMP_OP_##name] += (n_flops);                                        \
        return st;                                                                              \
    }
LMP_BACKEND_OPS(OP_DISPATCH)
#undef OP_DISPATCH

/* ---- the dispatching vtable handed to plugins: self is the lmp_backend ---------------- */
#define OP_TRAMPOLINE(name, params, args, n_flops)                                              \
    static int via_##name(void *self, LMP_UNPAREN params) { return lmp_be_##name(self, LMP_UNPAREN args); }
LMP_BACKEND_OPS(OP_TRAMPOLINE)
#undef OP_TRAMPOLINE

#define OP_ENTRY(name, params, args, n_flops) .name = via_##name,
static const lmp_backend_i dispatch_vtable = {
    .struct_size = sizeof(lmp_backend_i),
    LMP_BACKEND_OPS(OP_ENTRY)
};
#undef OP_ENTRY

const lmp_backend_i *lmp_backend_dispatch_vtable(void) { return &dispatch_vtable; }

int lmp_be_linear(const lmp_backend *be, int64_t T, int64_t in, int64_t out, const float *x,
                  const float *W, const float *b, float *y)
{
    int st = lmp_be_gemm(be, 0, 1, T, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
    if (st || !b) return st;
    for (int64_t t = 0; t < T; t++)
        for (int64_t o = 0; o < out; o++) y[t * out + o] += b[o];
    return 0;
}

int lmp_be_block_run(const lmp_backend *be, const lmp_block_job *job)
{
    if (!LMP_BACKEND_I_HAS(be->vt, block_run)) return LMP_EUNSUPPORTED;
    double t0 = lmp_now_s();
    if (be->ctx) lmp_host_clear_error(be->ctx);
    int st = be->vt->block_run(be->self, job);
    /* the backend's words (host->set_error) as the last error, for the caller's log line */
    const char *why = be->ctx ? lmp_host_error(be->ctx) : "";
    if (st) lmp_fail(st, "backend '%s': %s", be->name, *why ? why : "declined the block without a reason");
    be->counters->block_seconds += lmp_now_s() - t0;
    be->counters->block_calls++;
    return st;
}

void lmp_be_bytes_moved(const lmp_backend *be, uint64_t moved[2])
{
    moved[0] = moved[1] = 0;
    if (LMP_BACKEND_I_HAS(be->vt, bytes_moved)) be->vt->bytes_moved(be->self, moved);
}
