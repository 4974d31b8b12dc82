/* fail_plugin.c — strategy "fail-on-request": leaves the block as it is, or fails when the
 * environment has LMP_TEST_FAIL_HERE.  tests/test_mpi.c sets it for one rank of an MPI run only,
 * to see that rank's failure reported, the other ranks' finished variants kept, and a non-zero
 * exit.  With LMP_TEST_STOP_HERE it stops its own process (SIGSTOP): a rank that goes silent. */
#include <signal.h>
#include <stdlib.h>

#include "lmpress/plugin.h"

/* A stage applies to the linears it has parameters for: one parameter, so it has some. */
static const lmp_param_spec fail_params[] = {
    {"unused", LMP_PARAM_FLOAT, "unused", 0.0, NULL, 0.0, 1.0, NULL, 0},
};

static uint32_t fail_needs(void *self, const lmp_value *p)
{
    (void)self;
    (void)p;
    return 0;
}

static int fail_apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    (void)self;
    if (getenv("LMP_TEST_STOP_HERE")) raise(SIGSTOP); /* a rank that stops answering (test_mpi) */
    if (getenv("LMP_TEST_FAIL_HERE"))
        return host->set_error(hctx, LMP_EINVAL, "fail-on-request: block %d: LMP_TEST_FAIL_HERE is set", blk->index);
    return LMP_OK;
}

static const lmp_strategy_i fail_vtable = {
    .struct_size = sizeof(lmp_strategy_i),
    .needs = fail_needs,
    .apply = fail_apply,
};

static const lmp_plugin_desc fail_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_STRATEGY,
    .name = "fail-on-request",
    .version = "0.0.1",
    .summary = "test plugin: fails when LMP_TEST_FAIL_HERE is set",
    .params = fail_params,
    .n_params = 1,
    .vtable = &fail_vtable,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &fail_desc; }
