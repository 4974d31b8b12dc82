/* fuzz_lambada.c — libFuzzer entry for the LAMBADA reader (core/eval/lambada.c, see README.md here):
 * each input is a JSONL file read with stories260K's tokenizer; it must fail with a message or
 * give passages whose ids are in the vocabulary and whose target lies inside them. */
#include <string.h>

#include "base/error.h"
#include "fuzz_file.h"
#include "eval/lambada.h"
#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static lmp_tokenizer *tok;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tok && lmp_tokenizer_load_llama2c(LMP_SOURCE_DIR "/models/stories260K/tok512.bin", 512, &tok) != 0) abort();
    const char *path = fuzz_file(data, size, ".jsonl");
    lmp_lambada l;
    if (lmp_lambada_load(path, tok, 0, &l) != 0) {
        if (!strstr(lmp_last_error(), "lmpress-fuzz-")) __builtin_trap();
        return 0;
    }
    for (int64_t i = 0; i < l.n; i++) {
        const lmp_lambada_item *it = &l.items[i];
        if (it->n_target < 1 || it->n_target >= it->n_ids) __builtin_trap();
        for (int64_t k = 0; k < it->n_ids; k++)
            if (it->ids[k] < 0 || it->ids[k] >= 512) __builtin_trap();
    }
    lmp_lambada_free(&l);
    return 0;
}
