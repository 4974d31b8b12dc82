/* fuzz_config.c — libFuzzer entry for the config loader with schema validation (core/config/config.c,
 * see README.md here): each input is a config file; lmp_config_load must either give a config
 * whose every stage passed its plugin's schema, or fail with one message naming the file, never
 * crash, leak or hang.  The plugins are the build's (LMP_PLUGIN_DIR), so the schemas are real. */
#include <string.h>

#include "config/config.h"
#include "base/error.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".cfg");
    lmp_run_config *c = NULL;
    lmp_ctx ctx; /* one run per input */
    lmp_ctx_init(&ctx);
    if (lmp_config_load(&ctx, path, &c) != 0) {
        lmp_ctx_clear(&ctx);
        if (c != NULL || !strstr(lmp_last_error(), "lmpress-fuzz-")) __builtin_trap();
        return 0;
    }
    /* what a run reads next: every variant's stages and their patterns */
    for (int v = 0; v < c->n_variants; v++)
        for (int s = 0; s < c->variants[v].n_stages; s++) {
            const lmp_stage *st = &c->variants[v].stages[s];
            if (!st->plugin || !st->params) __builtin_trap();
            (void)lmp_stage_params_for(st, "model.layers.0.self_attn.q_proj");
        }
    lmp_config_free(c);
    lmp_ctx_clear(&ctx);
    return 0;
}
