/* fuzz_hf_config.c — libFuzzer entry for the Hugging Face config.json reader (core/model/model_hf.c,
 * and model_hf_quant.c's quantization_config when the input has one).  Each input is written as
 * config.json into a folder whose model.safetensors is tests/golden/gpt2-tiny's (a GPT-2) or,
 * with the env FUZZ_HF_WEIGHTS=DIR, DIR's; lmp_model_load must fail with a message or give a
 * model whose blocks all copy, never crash, leak or hang. */
#include <string.h>

#include "base/error.h"
#include "fuzz_folder.h"
#include "model/model.h"

#ifndef LMP_SOURCE_DIR
#define LMP_SOURCE_DIR "."
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char weights[512];
    if (!weights[0]) {
        const char *d = getenv("FUZZ_HF_WEIGHTS");
        snprintf(weights, sizeof weights, "%s/model.safetensors", d ? d : LMP_SOURCE_DIR "/tests/golden/gpt2-tiny");
    }
    const char *links[] = {weights};
    const char *dir = fuzz_folder(links, 1);
    fuzz_folder_file(dir, "config.json", data, size);
    lmp_model *m = NULL;
    if (lmp_model_load(dir, &m) != 0) {
        if (m != NULL || !lmp_last_error()[0]) __builtin_trap();
        return 0;
    }
    /* a model is promised readable: every block (the tiny fixture's are small) */
    for (int64_t b = 0; b < m->arch.n_layers && b < 64; b++) {
        lmp_block blk;
        if (lmp_model_block_copy(m, b, &blk) == 0) lmp_block_free(&blk);
        else if (!lmp_last_error()[0]) __builtin_trap();
    }
    lmp_model_free(m);
    return 0;
}
