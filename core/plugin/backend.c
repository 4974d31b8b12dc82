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

static int open_instances(lmp_ctx *ctx, lmp_registry *reg, const char *name, const lmp_value *params,
                          lmp_backend *out);

/* The index of backend `name`'s enum parameter `compute` when params set it to other than its
 * first choice, else -1. */
static int lowp_param(lmp_registry *reg, const char *name, const lmp_value *params)
{
    const lmp_plugin *p = lmp_registry_find(reg, LMP_PLUGIN_BACKEND, name);
    if (!p || !params) return -1;
    for (uint32_t k = 0; k < p->desc->n_params; k++) {
        const lmp_param_spec *ps = &p->desc->params[k];
        if (strcmp(ps->name, "compute") == 0 && ps->type == LMP_PARAM_ENUM && ps->choices && ps->choices[0])
            return params[k].num != 0.0 ? (int)k : -1;
    }
    return -1;
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
    const int k = lowp_param(reg, name, params);
    if (k < 0) return open_instances(ctx, reg, name, params, out);
    /* Everything on an f32 instance; the config's compute on a second one, for the linears. */
    const lmp_plugin *p = lmp_registry_find(reg, LMP_PLUGIN_BACKEND, name);
    lmp_value *f32 = malloc(p->desc->n_params * sizeof *f32);
    if (!f32) return lmp_fail(LMP_ENOMEM, "out of memory opening backend '%s'", name);
    memcpy(f32, params, p->desc->n_params * sizeof *f32);
    f32[k].num = 0;
    f32[k].str = p->desc->params[k].choices[0];
    st = open_instances(ctx, reg, name, f32, out);
    free(f32);
    if (!st && (st = create_backend(ctx, reg, name, params, &out->lowp_vt, &out->lowp_self))) lmp_backend_close(out);
    return st;
}

lmp_backend lmp_backend_view(const lmp_backend *be, int lowp)
{
    lmp_backend v = *be;
    v.lowp_linears = lowp && be->lowp_vt != NULL;
    return v;
}

/* The chosen backend and the CPU one it falls back to (the same when name is "cpu"). */
static int open_instances(lmp_ctx *ctx, lmp_registry *reg, const char *name, const lmp_value *params,
                          lmp_backend *out)
{
    out->name = name;
    out->counters = calloc(1, sizeof *out->counters);
    if (!out->counters) return lmp_fail(LMP_ENOMEM, "out of memory opening backend '%s'", name);
    int st = create_backend(ctx, reg, "cpu", strcmp(name, "cpu") == 0 ? params : NULL, &out->cpu,
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
    if (be->lowp_vt && be->lowp_vt->destroy) be->lowp_vt->destroy(be->lowp_self);
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
    static const char *const names[LMP_OP_COUNT] = {LMP_BACKEND_ALL_OPS(OP_NAME)};
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
LMP_BACKEND_ALL_OPS(OP_DISPATCH)
#undef OP_DISPATCH

/* ---- the dispatching vtable handed to plugins: self is the lmp_backend ---------------- */
#define OP_TRAMPOLINE(name, params, args, n_flops)                                              \
    static int via_##name(void *self, LMP_UNPAREN params) { return lmp_be_##name(self, LMP_UNPAREN args); }
LMP_BACKEND_ALL_OPS(OP_TRAMPOLINE)
#undef OP_TRAMPOLINE

#define OP_ENTRY(name, params, args, n_flops) .name = via_##name,
static const lmp_backend_i dispatch_vtable = {
    .struct_size = sizeof(lmp_backend_i),
    LMP_BACKEND_ALL_OPS(OP_ENTRY)
};
#undef OP_ENTRY

const lmp_backend_i *lmp_backend_dispatch_vtable(void) { return &dispatch_vtable; }

int lmp_be_linear(const lmp_backend *be, int64_t T, int64_t in, int64_t out, const float *x,
                  const float *W, const float *b, float *y)
{
    int st = LMP_EUNSUPPORTED;
    if (be->lowp_linears && LMP_BACKEND_I_HAS(be->lowp_vt, gemm)) {
        /* counted as the gemm it is */
        const double t0 = lmp_now_s();
        st = be->lowp_vt->gemm(be->lowp_self, 0, 1, T, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
        if (st != LMP_EUNSUPPORTED) {
            be->counters->seconds[LMP_OP_gemm] += lmp_now_s() - t0;
            be->counters->calls[LMP_OP_gemm]++;
            be->counters->flops[LMP_OP_gemm] += 2.0 * (double)T * (double)out * (double)in;
        }
    }
    if (st == LMP_EUNSUPPORTED) st = lmp_be_gemm(be, 0, 1, T, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
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
