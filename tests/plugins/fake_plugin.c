/* fake_plugin.c — one small strategy plugin, built many times with one FAKE_* define each, to
 * exercise every check of the plugin loader (tests/test_loader.c).  FAKE_GOOD is a valid,
 * identity strategy named "fake"; every other variant breaks exactly one rule. */
#include <stddef.h>

#include "lmpress/plugin.h"

static const lmp_param_spec fake_params[] = {
    {"strength", LMP_PARAM_FLOAT, "unused", 0.5, NULL, 0.0, 1.0, NULL, 0},
};

static uint32_t fake_needs(void *self, const lmp_value *p)
{
    (void)self;
    (void)p;
    return 0;
}

static int fake_apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    (void)self;
    (void)host;
    (void)hctx;
    (void)blk;
    return LMP_OK; /* leaves the block as it is */
}

static const lmp_strategy_i fake_vtable = {
#if defined(FAKE_SMALL_VTABLE)
    .struct_size = offsetof(lmp_strategy_i, apply),
#else
    .struct_size = sizeof(lmp_strategy_i),
#endif
    .needs = fake_needs,
    .apply = fake_apply,
};

#if defined(FAKE_PROBE_NO)
static int fake_probe(const lmp_host *host, void *hctx)
{
    host->set_error(hctx, LMP_EUNSUPPORTED, "no fake accelerator on this machine");
    return 0;
}
#endif

static const lmp_plugin_desc fake_desc = {
#if defined(FAKE_SMALL_STRUCT)
    .struct_size = offsetof(lmp_plugin_desc, vtable),
#else
    .struct_size = sizeof(lmp_plugin_desc),
#endif
#if defined(FAKE_WRONG_MAJOR)
    .abi_major = LMP_ABI_MAJOR + 1,
#else
    .abi_major = LMP_ABI_MAJOR,
#endif
#if defined(FAKE_NEWER_MINOR)
    .abi_minor = LMP_ABI_MINOR + 1,
#else
    .abi_minor = LMP_ABI_MINOR,
#endif
#if defined(FAKE_WRONG_KIND)
    .kind = LMP_PLUGIN_BACKEND,
    .name = "fake-backend",
#elif defined(FAKE_DUP_NAME) || defined(FAKE_GOOD)
    .kind = LMP_PLUGIN_STRATEGY,
    .name = "fake",
#else
    .kind = LMP_PLUGIN_STRATEGY,
    .name = "fake-broken",
#endif
    .version = "0.0.1",
    .summary = "test plugin",
    .params = fake_params,
    .n_params = 1,
    .vtable = &fake_vtable,
#if defined(FAKE_PROBE_NO)
    .probe = fake_probe,
#endif
};

#if defined(FAKE_NO_ENTRY)
LMP_EXPORT const lmp_plugin_desc *some_other_symbol(void) { return &fake_desc; }
#elif defined(FAKE_NULL_DESC)
LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return (void)fake_desc, NULL; }
#else
LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &fake_desc; }
#endif
