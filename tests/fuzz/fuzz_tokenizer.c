/* fuzz_tokenizer.c — libFuzzer entry for the tokenizer loaders (see README.md here).  The first
 * byte of the input picks the loader: bit 0 clear, llama2.c's tokenizer .bin (vocabulary 512, as
 * stories260K's); set, a Hugging Face tokenizer.json; bit 2 set (over bit 0), a SentencePiece
 * tokenizer.model.  Bit 1 set: the file is opened for a model
 * whose vocabulary is only 64 tokens, as `--tokenizer FILE` opens it (lmp_open_tokenizer), so a
 * tokenizer with more tokens than the model must be refused there, or every id it gives must
 * still fit the model's 64 (an id past the embedding is an out-of-bounds read in lmp_embed).
 * The rest is the file.  A load must fail with a message, or give a tokenizer that encodes a
 * fixed text and the input's own bytes into ids below the vocabulary it is used with and
 * decodes every id it produced, never crash, leak or hang. */
#include <string.h>

#include "base/error.h"
#include "fuzz_file.h"
#include "model/model.h"
#include "text/tokenizer.h"
#include "text/tokenizer_open.h"

#define SMALL_MODEL_VOCAB 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise(lmp_tokenizer *t, int model_vocab, const char *text, size_t len)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    /* with BOS only where the tokenizer has one (asking a byte-level one for BOS fails at once,
     * which left its encoder unexercised) */
    if (lmp_tokenize(t, text, len, lmp_tokenizer_bos(t) >= 0, &ids, &n) != 0) return;
    int V = lmp_tokenizer_vocab_size(t);
    if (model_vocab && model_vocab < V) V = model_vocab; /* what the embedding has */
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
    int hf = data[0] & 1, small = data[0] & 2, spm = data[0] & 4;
    const char *path = fuzz_file(data + 1, size - 1, spm ? ".model" : hf ? ".json" : ".bin");
    lmp_tokenizer *t = NULL;
    int st;
    if (small) { /* a llama2.c-format model of 64 tokens: no tokenizer of its own, the file is given */
        lmp_model m;
        memset(&m, 0, sizeof m);
        m.path = "/nonexistent/fuzz-model.bin";
        m.format = "llama2.c v0";
        m.arch.vocab = SMALL_MODEL_VOCAB;
        st = lmp_open_tokenizer(&m, path, &t);
    } else {
        st = spm  ? lmp_tokenizer_load_spm(path, 1, &t)
             : hf ? lmp_tokenizer_load_hf(path, &t)
                  : lmp_tokenizer_load_llama2c(path, 512, &t);
    }
    if (st != 0) {
        if (t != NULL || !lmp_last_error()[0]) __builtin_trap();
        return 0;
    }
    static const char fixed[] = "Once upon a time, there was a little girl named Lily. 123 héllo\n";
    const int model_vocab = small ? SMALL_MODEL_VOCAB : 0;
    exercise(t, model_vocab, fixed, sizeof fixed - 1);
    exercise(t, model_vocab, (const char *)data + 1, size - 1);
    lmp_tokenizer_free(t);
    return 0;
}
