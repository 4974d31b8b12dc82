/* teststage.h — what the strategy suites share: a fixture with a run context, the plugin
 * registry and the CPU backend (ctx, reg, be; setup/teardown), a one-stage variant built from a plugin's defaults plus
 * "name=value" settings, and deterministic synthetic calibration windows. */
#ifndef LMP_TESTSTAGE_H
#define LMP_TESTSTAGE_H

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "plugin/backend.h"
#include "config/config.h"
#include "base/ctx.h"
#include "compress/pipeline.h"
#include "model/block_store.h"
#include "plugin/registry.h"

/* The fixture's run (check's fixtures take no arguments, so it lives here; each test runs in
 * its own forked process). */
static lmp_ctx ctx;
static lmp_registry reg;
static lmp_backend be;

static inline void setup(void)
{
    lmp_ctx_init(&ctx);
    lmp_host_set_verbosity(&ctx, LMP_LOG_ERROR);
    ck_assert_int_eq(lmp_registry_init(&reg, &ctx, NULL, 0), 0);
    ck_assert_int_eq(lmp_backend_open(&ctx, &reg, "cpu", NULL, &be), 0);
    lmp_host_set_backend(&ctx, &be);
}

static inline void teardown(void)
{
    lmp_host_set_backend(&ctx, NULL);
    lmp_backend_close(&be);
    lmp_registry_free(&reg);
    lmp_ctx_clear(&ctx);
}


/* A one-stage variant of `plugin` with its defaults and "name=value" settings, e.g.
 * "stat=mean_ema", "alpha=0.5", "all_linears=true".  targets: NULL for every linear. */
typedef struct one_stage {
    lmp_stage stage;
    lmp_variant v;
    const char *target;
} one_stage;

static inline void make_stage(lmp_registry *reg, one_stage *os, const char *plugin, const char *const *settings, const char *target)
{
    const lmp_plugin *p;
    memset(os, 0, sizeof *os);
    os->target = target;
    ck_assert_int_eq(lmp_registry_require(reg, LMP_PLUGIN_STRATEGY, plugin, &p), 0);
    ck_assert_int_eq(lmp_params_defaults(p->desc, &os->stage.params), 0);
    for (int i = 0; settings && settings[i]; i++) {
        char name[64];
        const char *eq = strchr(settings[i], '=');
        ck_assert_ptr_nonnull(eq);
        snprintf(name, sizeof name, "%.*s", (int)(eq - settings[i]), settings[i]);
        uint32_t k = 0;
        while (k < p->desc->n_params && strcmp(p->desc->params[k].name, name) != 0) k++;
        ck_assert_msg(k < p->desc->n_params, "%s has no parameter %s", plugin, name);
        const lmp_param_spec *ps = &p->desc->params[k];
        lmp_value *v = &os->stage.params[k];
        if (ps->type == LMP_PARAM_ENUM) {
            int c = 0;
            while (ps->choices[c] && strcmp(ps->choices[c], eq + 1) != 0) c++;
            ck_assert_ptr_nonnull(ps->choices[c]);
            v->num = c;
            v->str = ps->choices[c];
        } else if (ps->type == LMP_PARAM_BOOL) {
            v->num = strcmp(eq + 1, "true") == 0;
        } else {
            v->num = atof(eq + 1);
        }
    }
    os->stage.plugin = p;
    if (os->target) {
        os->stage.targets = &os->target;
        os->stage.n_targets = 1;
    }
    os->v = (lmp_variant){.name = plugin, .stages = &os->stage, .n_stages = 1};
}

static inline lmp_windows windows(int n, int T, int64_t vocab, int salt)
{
    lmp_windows w = {.n = n, .T = T, .tokens = malloc((size_t)(n * T) * sizeof(int32_t))};
    for (int i = 0; i < n * T; i++)
        w.tokens[i] = i % T == 0 ? 1 : (int32_t)(((int64_t)(i + salt) * 7919 + 13) % (vocab - 3) + 2);
    return w;
}

/* lmp_compress of m with one stage of `plugin` ("name=value" settings) on the linears `target`
 * matches (NULL: all); calibrate: on 8 synthetic windows of 64 tokens, else none.  Its status;
 * *out the blocks on success. */
static inline int try_compress_stage(const lmp_model *m, const char *plugin, const char *const *settings,
                                     const char *target, int calibrate, lmp_block **out)
{
    one_stage os;
    make_stage(&reg, &os, plugin, settings, target);
    lmp_windows w = calibrate ? windows(8, 64, m->arch.vocab, 3) : (lmp_windows){0};
    *out = NULL;
    const int st = lmp_compress(&ctx, &be, m, &os.v, &w, out);
    free(os.stage.params);
    free(w.tokens);
    return st;
}

/* try_compress_stage that must succeed. */
static inline lmp_block *compress_stage(const lmp_model *m, const char *plugin, const char *const *settings,
                                        const char *target, int calibrate)
{
    lmp_block *out;
    ck_assert_msg(try_compress_stage(m, plugin, settings, target, calibrate, &out) == 0, "%s", lmp_last_error());
    return out;
}

/* blocks[0..n) put in a block store, as compare keeps a variant's blocks for its export: a
 * writer given this source reads each block back from the store's codes.  Free *store with
 * lmp_block_store_free. */
static inline lmp_block_source stored_blocks(const lmp_block *blocks, int64_t n, lmp_block_store **store)
{
    ck_assert_msg(lmp_block_store_open(&ctx, n, "test blocks", store) == 0, "%s", lmp_last_error());
    for (int64_t b = 0; b < n; b++) ck_assert_msg(lmp_block_store_put(*store, &blocks[b]) == 0, "%s", lmp_last_error());
    return lmp_block_store_source(*store);
}

#endif
