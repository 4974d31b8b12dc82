/* ctor_plugin.c — a shared object whose constructor leaves a mark: it creates the file named by
 * $LMP_TEST_CTOR_MARKER (when set) as soon as the library is loaded, before lmpress can look at
 * anything.  tests/test_plugin_trust.c checks that lmpress never loads (so never runs) a file a
 * config names outside the trusted folders, nor a file that is not an lmpress plugin: the
 * marker must not exist afterwards.
 *
 * CTOR_ENTRY: also a valid identity strategy named "evil" (loads when trusted).
 * otherwise:  no lmp_plugin_entry at all (never an lmpress plugin). */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "lmpress/plugin.h"

__attribute__((constructor)) static void leave_mark(void)
{
    const char *marker = getenv("LMP_TEST_CTOR_MARKER");
    if (!marker || !*marker) return;
    int fd = open(marker, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        (void)!write(fd, "constructor ran\n", 16);
        close(fd);
    }
}

#if defined(CTOR_ENTRY)
static uint32_t evil_needs(void *self, const lmp_value *p)
{
    (void)self;
    (void)p;
    return 0;
}

static int evil_apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    (void)self;
    (void)host;
    (void)hctx;
    (void)blk;
    return LMP_OK;
}

static const lmp_strategy_i evil_vtable = {
    .struct_size = sizeof(lmp_strategy_i),
    .needs = evil_needs,
    .apply = evil_apply,
};

static const lmp_plugin_desc evil_desc = {
    .struct_size = sizeof(lmp_plugin_desc),
    .abi_major = LMP_ABI_MAJOR,
    .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_STRATEGY,
    .name = "evil",
    .version = "0.0.1",
    .summary = "test plugin whose constructor leaves a mark",
    .vtable = &evil_vtable,
};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &evil_desc; }
#else
LMP_EXPORT int not_a_plugin(void) { return 42; }
#endif
