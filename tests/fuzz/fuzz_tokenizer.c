/* fuzz_tokenizer.c — libFuzzer entry for the tokenizer loaders (see README.md here).  The first
 * byte of the input picks the loader: even, llama2.c's tokenizer .bin (vocabulary 512, as
 * stories260K's); odd, a Hugging Face tokenizer.json.  The rest is the file.  A load must fail
 * with a message, or give a tokenizer that encodes a fixed text and the input's own bytes and
 * decodes every id it produced, never crash, leak or hang. */
#include <string.h>

#include "base/error.h"
#include "fuzz_file.h"
#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise(lmp_tokenizer *t, const char *text, size_t len)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    if (lmp_tokenize(t, text, len, 1, &ids, &n) != 0) return;
    int V = lmp_tokenizer_vocab_size(t);
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= V) __builtin_trap();
        size_t plen;
        const char *piece = lmp_tokenizer_decode(t, i ? ids[i - 1] : -1, ids[i], &plen);
        if (plen && !piece) __builtin_trap();
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int hf = data[0] & 1;
    const char *path = fuzz_file(data + 1, size - 1, hf ? ".json" : ".bin");
    lmp_tokenizer *t = NULL;
    int st = hf ? lmp_tokenizer_load_hf(path, &t) : lmp_tokenizer_load_llama2c(path, 512, &t);
    if (st != 0) {
        if (t != NULL || !lmp_last_error()[0]) __builtin_trap();
        return 0;
    }
    static const char fixed[] = "Once upon a time, there was a little girl named Lily. 123 héllo\n";
    exercise(t, fixed, sizeof fixed - 1);
    exercise(t, (const char *)data + 1, size - 1);
    lmp_tokenizer_free(t);
    return 0;
}
